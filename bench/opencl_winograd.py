#!/usr/bin/env python3
"""OpenCL Winograd F(2x2, 3x3) against the implicit-GEMM conv template, same run.

  opencl_winograd.py --kiln build/kiln [--models DIR] [--rounds 3] [--repeat 20]
                     [--csv FILE]

Writes one-Conv models (3x3, pad 1, stride 1, bias, Relu; random weights)
into a temporary directory, and runs each on `--target opencl` with
KILN_OPENCL_WINOGRAD=off (the implicit-GEMM template) and =all (Winograd
wherever it covers the conv), in turn within every round, reading the conv
kernel's time from `kiln run --profile` (device timestamps; the phase split
of the input is the same in both and left out). The figure per variant is
the median over the rounds. With --models DIR (holding resnet18.onnx) it
also times ResNet-18 end to end with Winograd off and as kiln chooses it
(the default), checking the result against the reference interpreter in
the first round. Prints, per shape,
  winograd c64 m64 56x56: implicit GEMM 1.72 ms, winograd 1.03 ms (1.67x)
and exits non-zero when a run fails or a result does not match.
"""

import argparse
import csv
import os
import re
import statistics
import subprocess
import sys
import tempfile

SHAPES = [  # (C, M, H): ResNet-18's 3x3 stride-1 convs, then small ones
    (64, 64, 56), (128, 128, 28), (256, 256, 14), (512, 512, 7),
    (16, 16, 14), (32, 32, 8), (16, 32, 28), (8, 16, 28),
]
KERNEL_RE = re.compile(r"^  (\S+)\s+Conv\s+(\S+)\s", re.M)
LATENCY_RE = re.compile(r"^latency: median (\S+) ms", re.M)
CHECK_RE = re.compile(r"^check \S+ vs reference interpreter: (match|MISMATCH)", re.M)


def write_conv(path, c, m, h, seed):
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array((rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b")
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["t"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
         helper.make_node("Relu", ["t"], ["y"])],
        f"conv_c{c}_m{m}_{h}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, h, h])], [w, b])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def run(cmd, env):
    e = dict(os.environ)
    e.update(env)
    p = subprocess.run(cmd, capture_output=True, text=True, env=e)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.stdout


def check(out, what):
    c = CHECK_RE.findall(out)
    if not c or any(x != "match" for x in c):
        raise RuntimeError(f"{what} does not match the reference:\n{out}")


def conv_ms(kiln, model, mode, repeat, first):
    cmd = [kiln, "run", model, "--target", "opencl", "--strict", "--repeat", str(repeat), "--profile",
           "--trace", os.devnull]
    if first:
        cmd.append("--check-ref")
    out = run(cmd, {"KILN_OPENCL_WINOGRAD": mode})
    if first:
        check(out, f"{model} (winograd {mode})")
    rows = KERNEL_RE.findall(out)
    if not rows:
        raise RuntimeError(f"no Conv kernel in the profile of {model}:\n{out}")
    return max(float(ms) for _, ms in rows)  # the conv itself, not its input's phase split


def model_ms(kiln, model, env, repeat, first):
    cmd = [kiln, "run", model, "--target", "opencl", "--strict", "--repeat", str(repeat)]
    if first:
        cmd.append("--check-ref")
    out = run(cmd, env)
    if first:
        check(out, f"{model} ({env or 'default'})")
    m = LATENCY_RE.search(out)
    if not m:
        raise RuntimeError(f"no latency line for {model}:\n{out}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models", help="directory with resnet18.onnx (end-to-end figure)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--csv")
    a = ap.parse_args()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="kiln-winograd-") as tmp:
            for i, (c, m, h) in enumerate(SHAPES):
                path = os.path.join(tmp, f"conv_c{c}_m{m}_{h}.onnx")
                write_conv(path, c, m, h, i)
                t = {"off": [], "all": []}
                for r in range(a.rounds):
                    for mode in t:
                        t[mode].append(conv_ms(a.kiln, path, mode, a.repeat, r == 0))
                gemm, wino = statistics.median(t["off"]), statistics.median(t["all"])
                print(f"winograd c{c} m{m} {h}x{h}: implicit GEMM {gemm:.3f} ms, winograd {wino:.3f} ms "
                      f"({gemm / wino:.2f}x)", flush=True)
                rows.append({"what": f"conv c{c} m{m} {h}x{h}", "implicit_gemm_ms": f"{gemm:.4f}",
                             "winograd_ms": f"{wino:.4f}", "speedup": f"{gemm / wino:.3f}"})
        r18 = os.path.join(a.models, "resnet18.onnx") if a.models else None
        if r18 and os.path.exists(r18):
            t = {"off": [], "default": []}
            for r in range(a.rounds):
                t["off"].append(model_ms(a.kiln, r18, {"KILN_OPENCL_WINOGRAD": "off"}, a.repeat, r == 0))
                t["default"].append(model_ms(a.kiln, r18, {}, a.repeat, r == 0))
            off, on = statistics.median(t["off"]), statistics.median(t["default"])
            print(f"winograd resnet18 (opencl): off {off:.2f} ms, as chosen {on:.2f} ms ({off / on:.2f}x)")
            rows.append({"what": "resnet18 end to end", "implicit_gemm_ms": f"{off:.4f}",
                         "winograd_ms": f"{on:.4f}", "speedup": f"{off / on:.3f}"})
    except RuntimeError as e:
        print(f"opencl_winograd: {e}", file=sys.stderr)
        return 1
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
            w.writeheader()
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
