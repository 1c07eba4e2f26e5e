#!/usr/bin/env python3
"""Issue 21's CPU speed goal: batch-1 latency of kiln's int8 (an onnxruntime
quantize_static QDQ model, which kiln's "fold-qdq" pass turns into
QLinearConv/QLinearMatMul) against kiln's own fp32 and against onnxruntime
running the same QDQ model (its int8 kernels) and the fp32 model, in one run.

  int8_cpu.py --kiln build/kiln --models DIR [--names qdq,resnet18]
              [--threads 2] [--repeat 10]

DIR holds what tests/models writes: qdq_float.onnx (export_qdq.py, the small
CNN of the model_qdq tests), resnet18.onnx and mobilenet_v2.onnx
(export_models.py, random weights); missing ones are skipped. Each float model is quantized here by
onnxruntime (QDQ, u8 activations per tensor, i8 weights per channel, MinMax
on 8 seeded N(0,1) inputs). kiln: `kiln run --target cpu --threads T
--repeat R` (median); onnxruntime: CPUExecutionProvider, all graph
optimisations on, median of R runs after warm-up; minima beside (the
machine may be shared). The fold-qdq rewrites (folded Conv/MatMul) that
`kiln compile` reports are printed, the module weights of kiln's int8
against its fp32 (w8/w32), and the SQNR of kiln's int8 output against
onnxruntime running the Q/DQ nodes as written.
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

LATENCY_RE = re.compile(r"^latency: median (\S+) ms, min (\S+) ms", re.M)
FOLD_RE = re.compile(r"^pass fold-qdq\s+rewrites\s+(\d+)", re.M)
WEIGHTS_RE = re.compile(r"^compiled .*?([0-9.]+) MB of weights", re.M)
MODELS = {"qdq": "qdq_float.onnx", "resnet18": "resnet18.onnx", "mobilenet_v2": "mobilenet_v2.onnx"}


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.stdout + p.stderr


def input_of(model):
    import onnx
    m = onnx.load(model, load_external_data=False)
    inits = {t.name for t in m.graph.initializer}
    i = next(i for i in m.graph.input if i.name not in inits)
    dims = [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]
    return i.name, dims


def quantize(model, name, dims, out):
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    rng = np.random.default_rng(0)
    calib = [rng.standard_normal(dims).astype(np.float32) for _ in range(8)]

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter([{name: x} for x in calib])

        def get_next(self):
            return next(self.it, None)

    quantize_static(model, out, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)


def ort_latency(model, name, x, threads, repeat):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    if not repeat:  # the Q/DQ nodes as written (optimisations off): the output
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
        return sess.run(None, {name: x})[0]
    for _ in range(3):
        sess.run(None, {name: x})
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(None, {name: x})
        ts.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ts), min(ts)


def kiln_latency(kiln, model, name, inp, threads, repeat, outdir=None):
    cmd = [kiln, "run", model, "--target", "cpu", "--threads", str(threads),
           "--input", f"{name}={inp}", "--repeat", str(repeat)]
    out = run(cmd + (["--output", outdir] if outdir else []))
    m = LATENCY_RE.search(out)
    if not m:
        raise RuntimeError(f"no latency line from kiln run {model}:\n{out}")
    return float(m.group(1)), float(m.group(2))


def sqnr(ref, got):
    """dB of |ref|^2 over |ref - got|^2 (inf when equal)."""
    err = float(np.sum((ref.astype(np.float64) - got) ** 2))
    return float("inf") if err == 0 else 10 * np.log10(float(np.sum(ref.astype(np.float64) ** 2)) / err)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--names", default="qdq,resnet18")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    print("ms per run, median (min) of --repeat runs; SQNR: kiln int8's output against\n"
          "onnxruntime running the same QDQ model's Q/DQ nodes as written (optimisations off)")
    print(f"{'model':<12} {'folded':>6} {'kiln fp32':>16} {'kiln int8':>16} {'ORT fp32':>16} "
          f"{'ORT int8':>16} {'int8/fp32':>9} {'int8/ORT8':>9} {'SQNR dB':>8} {'w8/w32 MB':>14}")
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
            try:
                quantize(model, name, dims, q)
                out8 = run([args.kiln, "compile", q, "--target", "cpu"])
                m = FOLD_RE.search(out8)
                folded = m.group(1) if m else "?"
                w8 = WEIGHTS_RE.search(out8)
                w32 = WEIGHTS_RE.search(run([args.kiln, "compile", model, "--target", "cpu"]))
                wcell = f"{w8.group(1)}/{w32.group(1)}" if w8 and w32 else "?"
                k32 = kiln_latency(args.kiln, model, name, inp, args.threads, args.repeat)
                outdir = os.path.join(tmp, f"{key}_out")
                k8 = kiln_latency(args.kiln, q, name, inp, args.threads, args.repeat, outdir)
                o32 = ort_latency(model, name, x, args.threads, args.repeat)
                o8 = ort_latency(q, name, x, args.threads, args.repeat)
                spec = ort_latency(q, name, x, args.threads, 0)
                got = np.load(os.path.join(outdir, sorted(os.listdir(outdir))[0]))
            except RuntimeError as e:
                print(f"{key:<12} failed: {e}")
                failed = True
                continue
            cell = lambda t: f"{t[0]:.3f} ({t[1]:.3f})"  # noqa: E731
            print(f"{key:<12} {folded:>6} {cell(k32):>16} {cell(k8):>16} {cell(o32):>16} "
                  f"{cell(o8):>16} {k8[0] / k32[0]:>9.2f} {k8[0] / o8[0]:>9.2f} "
                  f"{sqnr(spec, got.reshape(spec.shape)):>8.1f} {wcell:>14}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
