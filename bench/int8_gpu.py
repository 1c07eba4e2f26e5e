#!/usr/bin/env python3
"""Issue 21's int8 on the GPU targets: batch-1 latency of kiln's int8 (an
onnxruntime quantize_static QDQ model, which "fold-qdq" turns into
QLinearConv / QLinearMatMul, run by the int8 templates kernels/opencl/q8.cl
and kernels/vulkan/q8.comp) against kiln's fp32 of the same network, on
each --targets device, interleaved in one run (fp32, int8, fp32, int8, ...).

  int8_gpu.py --kiln build/kiln --models DIR [--names resnet18]
              [--targets opencl,vulkan] [--rounds 3] [--repeat 2]

DIR holds what tests/models/export_models.py writes (resnet18.onnx,
mobilenet_v2.onnx; random weights); the QDQ model is bench/int8_cpu.py's
(u8 activations per tensor, i8 weights per channel, MinMax on 8 seeded
N(0,1) inputs). Each round runs `kiln run --target T --repeat R` once per
precision; the figure is the median over the rounds of each run's median
(minimum beside). Also printed: the fold-qdq rewrites and int8 templates
in the program, the module weights (int8 / fp32, `kiln compile`), the load
average, and the int8 output's largest difference from kiln's CPU int8 of
the same model (the templates are bit-exact with the reference; the float
tail after them may differ in rounding).
"""

import argparse
import os
import re
import statistics
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from int8_cpu import FOLD_RE, LATENCY_RE, MODELS, WEIGHTS_RE, input_of, quantize, run  # noqa: E402

TEMPLATE_RE = re.compile(r"kiln int8 (conv|matmul)")


def latency(kiln, model, target, name, inp, repeat, outdir=None):
    cmd = [kiln, "run", model, "--target", target, "--strict", "--input", f"{name}={inp}", "--repeat", str(repeat)]
    out = run(cmd + (["--output", outdir] if outdir else []))
    m = LATENCY_RE.search(out)
    if not m:
        raise RuntimeError(f"no latency line from kiln run {model}:\n{out}")
    return float(m.group(1)), float(m.group(2))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--names", default="resnet18")
    ap.add_argument("--targets", default="opencl,vulkan")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} CPUs")
    print("ms per run: median over rounds of each run's median (min); int8/fp32 by medians")
    print(f"{'model':<12} {'target':<7} {'folded':>6} {'templ':>5} {'fp32':>18} {'int8':>18} {'int8/fp32':>9} "
          f"{'w8/w32 MB':>13} {'max |gpu-cpu|':>13}")
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.names.split(","):
            model = os.path.join(args.models, MODELS[key])
            if not os.path.exists(model):
                print(f"{key:<12} skipped: {model} missing")
                continue
            name, dims = input_of(model)
            x = np.random.default_rng(1).standard_normal(dims).astype(np.float32)
            inp = os.path.join(tmp, f"{key}_input.npy")
            np.save(inp, x)
            q = os.path.join(tmp, f"{key}.int8.onnx")
            quantize(model, name, dims, q)
            cpu_dir = os.path.join(tmp, f"{key}_cpu")
            latency(args.kiln, q, "cpu", name, inp, 1, cpu_dir)
            ref = np.load(os.path.join(cpu_dir, sorted(os.listdir(cpu_dir))[0]))
            for target in args.targets.split(","):
                try:
                    dump = os.path.join(tmp, f"{key}_{target}_dump")
                    out8 = run([args.kiln, "compile", q, "--target", target, "--dump", dump])
                    m = FOLD_RE.search(out8)
                    folded = m.group(1) if m else "?"
                    n_templ = sum(len(TEMPLATE_RE.findall(open(os.path.join(dump, f), errors="replace").read()))
                                  for f in os.listdir(dump)) if os.path.isdir(dump) else "?"
                    w8 = WEIGHTS_RE.search(out8)
                    w32 = WEIGHTS_RE.search(run([args.kiln, "compile", model, "--target", target]))
                    wcell = f"{w8.group(1)}/{w32.group(1)}" if w8 and w32 else "?"
                    t32, t8 = [], []
                    outdir = os.path.join(tmp, f"{key}_{target}_out")
                    for r in range(args.rounds):
                        t32.append(latency(args.kiln, model, target, name, inp, args.repeat))
                        t8.append(latency(args.kiln, q, target, name, inp, args.repeat, outdir if r == 0 else None))
                    got = np.load(os.path.join(outdir, sorted(os.listdir(outdir))[0]))
                except RuntimeError as e:
                    print(f"{key:<12} {target:<7} failed: {e}")
                    failed = True
                    continue
                med = lambda ts: (statistics.median(t[0] for t in ts), min(t[1] for t in ts))  # noqa: E731
                a, b = med(t32), med(t8)
                cell = lambda t: f"{t[0]:.1f} ({t[1]:.1f})"  # noqa: E731
                diff = float(np.max(np.abs(got.astype(np.float64) - ref)))
                print(f"{key:<12} {target:<7} {folded:>6} {n_templ:>5} {cell(a):>18} {cell(b):>18} "
                      f"{b[0] / a[0]:>9.2f} {wcell:>13} {diff:>13.3g}", flush=True)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
