#!/usr/bin/env python3
"""`kiln prune --sparsity` on the digits CNN (train_digits.py): block sparsity
at several levels. Each sparse model passes onnx.checker, loads in
onnxruntime (top-1 printed next to the dense model's), keeps the original's
shapes, has the zero blocks the report claims, and kiln's ref and cpu runs
match onnxruntime's output of the same model -- the cpu one running the conv
on the block-sparse kernel (its compile report says so). Also --keep and the
bad inputs: --sparsity outside [0, 1) or not a number, combined with channel
pruning, without -o, and a --keep layer that does not exist.

  test_digits_sparse.py --kiln BUILD/kiln --out DIR [--data DIGITS_DIR]

--data: where train_digits.py exports the digits models (default DIR; the
ctest shares prune_digits' folder, so the training runs once).

Exit status 0 when every check passed.
"""

import argparse
import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# the digits prune test's helpers: check() records into its failures list
from test_digits_prune import check, failures, kiln, ort_run  # noqa: E402


def weights(path):
    import onnx
    from onnx import numpy_helper
    return {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--data")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    data = args.data or args.out
    if subprocess.run([sys.executable, os.path.join(HERE, "train_digits.py"), "--out", data]).returncode:
        print("FAIL  train_digits.py")
        return 1
    d = args.out
    x = np.load(os.path.join(data, "test_images.npy"))
    y = np.load(os.path.join(data, "test_labels.npy"))
    cnn = os.path.join(data, "digits_cnn.onnx")
    import onnx
    base = weights(cnn)
    acc0 = float((ort_run(cnn, x).argmax(1) == y).mean())
    print(f"      dense: top-1 in onnxruntime {100 * acc0:.2f}%")
    one, want = os.path.join(d, "x1.npy"), os.path.join(d, "want1.npy")
    np.save(one, x[:1])
    accs = {}
    for s in ("0.5", "0.8", "0.9"):
        out = os.path.join(d, f"cnn_sparse_{s}.onnx")
        rc, log = kiln(args, "prune", cnn, "--sparsity", s, "-o", out)
        check(rc == 0, f"--sparsity {s}: kiln prune")
        if rc:
            print(log)
            continue
        m = re.search(r"^/2/Conv\s+(\S+)\s+4x9\s+(\d+)/(\d+)\s+([0-9.]+)%", log, re.M)
        check(m is not None and int(m.group(2)) == round(float(s) * int(m.group(3))),
              f"--sparsity {s}: the 3x3 conv's 4x9 blocks, round(S x blocks) zeroed")
        check("left as it was: one input channel per group" in log, f"--sparsity {s}: the 1-channel conv left dense")
        try:
            onnx.checker.check_model(onnx.load(out), full_check=True)
            check(True, f"--sparsity {s}: onnx.checker")
        except Exception as e:  # noqa: BLE001 - report any checker failure
            check(False, f"--sparsity {s}: onnx.checker: {e}")
        w = weights(out)
        same_shapes = all(w[k].shape == v.shape for k, v in base.items())
        check(same_shapes, f"--sparsity {s}: every initializer keeps its shape")
        if m:
            wc = w[m.group(1)]
            # blocks of 4 output channels x 1 input channel x 3x3 taps: all zero or untouched
            blocks = wc.reshape(wc.shape[0] // 4, 4, wc.shape[1], -1)
            zero = (blocks == 0).all(axis=(1, 3))
            kept = (blocks == base[m.group(1)].reshape(blocks.shape)).all(axis=(1, 3))
            check(bool((zero | kept).all()) and abs(zero.mean() - float(s)) < 0.05,
                  f"--sparsity {s}: whole blocks zero ({100 * zero.mean():.1f}%), the others unchanged")
        acc = float((ort_run(out, x).argmax(1) == y).mean())
        accs[s] = acc
        print(f"      --sparsity {s}: top-1 in onnxruntime {100 * acc:.2f}%")
        np.save(want, ort_run(out, x[:1]))
        for t in ("ref", "cpu"):
            rc, log = kiln(args, "run", out, "-t", t, "--input", f"input={one}", "--compare", want,
                           "--rtol", "1e-3", "--atol", "1e-4")
            check(rc == 0 and " 0 of " in log, f"--sparsity {s}: kiln -t {t} matches onnxruntime")
            if t == "cpu":
                check(re.search(r"sparse: /2/Conv: [0-9.]+% of its 4x9 weight blocks zero: block-sparse kernel", log)
                      is not None, f"--sparsity {s}: the cpu compile report says /2/Conv runs block-sparse")
            if rc:
                print(log[-2000:])
    check(accs.get("0.5", 0) >= accs.get("0.9", 1) - 0.02, "more sparsity does not help accuracy (0.5 vs 0.9)")

    # --keep: that layer's weights untouched
    out = os.path.join(d, "cnn_keep.onnx")
    rc, log = kiln(args, "prune", cnn, "--sparsity", "0.8", "--keep", "/2/Conv", "-o", out)
    check(rc == 0 and re.search(r"^/2/Conv .*left as it was: --keep", log, re.M) is not None,
          "--keep /2/Conv: reported as left")
    if rc == 0:
        w = weights(out)
        m = re.search(r"^/2/Conv\s+(\S+)", log, re.M)
        check(m is not None and np.array_equal(w[m.group(1)], base[m.group(1)]), "--keep /2/Conv: its weights unchanged")

    # bad input
    bad = os.path.join(d, "bad.onnx")
    for v in ("1", "-0.5", "1.5", "abc", "nan"):
        rc, log = kiln(args, "prune", cnn, "--sparsity", v, "-o", bad)
        check(rc == 2 and f"--sparsity '{v}': expected a number in [0, 1)" in log, f"bad input --sparsity {v}")
    rc, log = kiln(args, "prune", cnn, "--sparsity", "0.5", "--ratio", "0.5", "-o", bad)
    check(rc == 2 and "does not combine with channel pruning" in log, "bad input --sparsity with --ratio")
    rc, log = kiln(args, "prune", cnn, "--sparsity", "0.5")
    check(rc == 2 and "-o FILE is required" in log, "bad input --sparsity without -o")
    rc, log = kiln(args, "prune", cnn, "--sparsity", "0.5", "--keep", "nosuch", "-o", bad)
    check(rc == 1 and "--keep: no layer (node) named 'nosuch'" in log, "bad input --keep nosuch")
    check(not os.path.exists(bad), "no model written on bad input")

    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
