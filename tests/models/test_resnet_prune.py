#!/usr/bin/env python3
"""`kiln prune --flops 0.5` on torchvision's ResNet-18 (seeded random weights,
export_models.py): the residual channel groups are tied (one group holds the
stem and every block of a stage, and the 1x1 downsample), at most half the
FLOPs remain, the pruned model passes onnx.checker, runs in onnxruntime, and
kiln's ref and cpu runs of it match onnxruntime's.

  test_resnet_prune.py --kiln BUILD/kiln --models DIR --out DIR

Exit status 0 when every check passed.
"""

import argparse
import os
import re
import subprocess
import sys

import numpy as np

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    model = os.path.join(args.models, "resnet18.onnx")
    out = os.path.join(args.out, "resnet18_flops05.onnx")
    r = subprocess.run([args.kiln, "prune", model, "-o", out, "--flops", "0.5", "--no-round"],
                       capture_output=True, text=True, timeout=1200)
    log = r.stdout + r.stderr
    print(log)
    check(r.returncode == 0, "kiln prune resnet18 --flops 0.5")
    if r.returncode:
        return 1
    m = re.search(r"FLOPs (\d+) -> (\d+)", log)
    check(m and int(m.group(2)) <= 0.5 * int(m.group(1)), "at most half the FLOPs")
    # Residual stages: groups with the stem/first conv tied to the blocks'
    # second convs (stage 1: 3 sources; stages 2-4: downsample + 2 convs).
    tied = [int(n) for n in re.findall(r"^\S+\s+(\d+)\s+\d+\s+\d+\s+tied:", log, re.M)]
    check(sorted(tied) == [3, 3, 3, 3], f"four residual groups of three layers each (got {sorted(tied)})")
    check(re.search(r"unpruned: its channels are graph output 'logits'", log) is not None,
          "the classifier's outputs left whole")

    import onnx
    import onnxruntime as ort
    try:
        onnx.checker.check_model(onnx.load(out), full_check=True)
        check(True, "onnx.checker accepts the pruned model")
    except Exception as e:  # noqa: BLE001 - any checker failure is a test failure
        check(False, f"onnx.checker: {e}")
    x = np.load(os.path.join(args.models, "resnet18_input.npy"))
    s = ort.InferenceSession(out, providers=["CPUExecutionProvider"])
    want = s.run(None, {"input": x})[0]
    wpath = os.path.join(args.out, "want.npy")
    np.save(wpath, want)
    for t in ("ref", "cpu"):
        r = subprocess.run([args.kiln, "run", out, "-t", t, "--input", "input=" + os.path.join(args.models, "resnet18_input.npy"),
                            "--compare", "logits=" + wpath, "--rtol", "1e-3", "--atol", "1e-4"],
                           capture_output=True, text=True, timeout=1200)
        check(r.returncode == 0, f"kiln -t {t} of the pruned model matches onnxruntime")
        if r.returncode:
            print(r.stdout[-2000:] + r.stderr[-2000:])
    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
