#!/usr/bin/env python3
"""kiln CPU backend vs onnxruntime: batch-1 latency and compile time per model.

  models_cpu.py --kiln build/kiln --models DIR [--names resnet18,mobilenet_v2,resnet50]
                [--threads 2] [--repeat 20]

DIR holds what tests/models/export_models.py writes (<name>.onnx, <name>_input.npy);
missing models are exported first. For each model, in one run:
  - compile time with a cold cache (a fresh KILN_CACHE_DIR): kiln prints
    `compiled N kernels: lowering X ms, codegen Y ms, cc|cache hit Z ms, load W ms`;
  - kiln latency: `kiln run --target cpu --threads T --repeat R`, parsing
    `latency: median <ms> ms, min <ms> ms over <N> runs`;
  - onnxruntime (CPUExecutionProvider, intra_op_num_threads=T, all graph
    optimisations on): median of R runs after warm-up.
Prints one line per model with the ratio kiln / onnxruntime (< 1 means kiln is faster).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

LATENCY_RE = re.compile(r"^latency: median (\S+) ms, min (\S+) ms over (\d+) runs", re.M)
# kiln run's compile lines: the pipeline's, then the CPU device's build (the
# C compiler's wall time, or a compile cache hit) and the shared object's load
COMPILE_RE = re.compile(r"^compiled (\d+) kernels for \S+: lowering (\S+) ms, codegen (\S+) ms", re.M)
BUILD_RE = re.compile(r"^cpu: C compiler(?: \S+ (\S+) ms \(|: none \(compile cache hit\)).*?, loaded in (\S+) ms",
                      re.M)


def compile_figures(out):
    """(kernels, seconds of lowering + codegen + C compiler + load) from kiln
    run's output, or None when the lines are missing."""
    c, b = COMPILE_RE.search(out), BUILD_RE.search(out)
    if not c or not b:
        return None
    ms = float(c.group(2)) + float(c.group(3)) + float(b.group(1) or 0) + float(b.group(2))
    return int(c.group(1)), ms / 1e3


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.stdout


def ort_session(model, x, threads):
    """An onnxruntime CPU session (all optimisations, |threads| intra-op)
    and its input name, after 3 warm-up runs on |x|."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    for _ in range(3):
        sess.run(None, {name: x})
    return sess, name


def ort_latency(model, x, threads, repeat):
    sess, name = ort_session(model, x, threads)
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(None, {name: x})
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--names", default="resnet18,mobilenet_v2,resnet50")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    names = [n for n in args.names.split(",") if n]
    here = os.path.dirname(os.path.abspath(__file__))
    exporter = os.path.join(here, "..", "tests", "models", "export_models.py")
    missing = [n for n in names if not os.path.exists(os.path.join(args.models, n + ".onnx"))]
    if missing:
        run([sys.executable, exporter, "--out", args.models, "--models", ",".join(missing)])

    print(f"batch 1, {args.threads} threads, median of {args.repeat} runs; "
          f"compile = cold cache (lowering + codegen + cc + load)")
    print(f"{'model':<14}{'kernels':>8}{'compile s':>11}{'kiln ms':>10}{'ORT ms':>9}{'kiln/ORT':>10}")
    failed = False
    for name in names:
        model = os.path.join(args.models, name + ".onnx")
        inp = os.path.join(args.models, name + "_input.npy")
        try:
            with tempfile.TemporaryDirectory() as cache:
                env = dict(os.environ, KILN_CACHE_DIR=cache)
                t0 = time.perf_counter()
                out = run([args.kiln, "run", model, "--target", "cpu", "--threads",
                           str(args.threads), "--input", f"input={inp}", "--repeat",
                           str(args.repeat)], env=env)
                wall = time.perf_counter() - t0
            c = compile_figures(out)
            m = LATENCY_RE.search(out)
            if not c or not m:
                raise RuntimeError(f"unexpected kiln output:\n{out}")
            kernels, compile_s = c
            kiln_ms = float(m.group(1))
            x = np.load(inp)
            ort_ms = ort_latency(model, x, args.threads, args.repeat)
            print(f"{name:<14}{kernels:>8}{compile_s:>11.2f}{kiln_ms:>10.2f}{ort_ms:>9.2f}"
                  f"{kiln_ms / ort_ms:>9.2f}x")
        except Exception as e:  # report and go on with the other models
            failed = True
            print(f"{name:<14} FAILED: {e}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
