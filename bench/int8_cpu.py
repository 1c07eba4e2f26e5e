#!/usr/bin/env python3
"""Issue 21's CPU goals in one run: batch-1 latency of kiln int8 (an onnxruntime
quantize_static QDQ model, which kiln's "fold-qdq" pass turns into int8 ops
end to end) against kiln fp32, onnxruntime fp32 and onnxruntime running the
same QDQ model (its own int8 kernels); module weights and arena of kiln's
int8 against its fp32; the SQNR of each runtime's int8 logits against fp32.

  int8_cpu.py --models DIR [--names resnet18,mobilenet_v2,resnet50]
              [--threads 1,2] [--repeat 15] [--sqnr-inputs 100]

DIR holds what tests/models writes: qdq_float.onnx (export_qdq.py, the small
CNN of the model_qdq tests), resnet18.onnx, mobilenet_v2.onnx and
resnet50.onnx (export_models.py, random weights); missing ones are skipped.
Each float model is quantized here by onnxruntime (QDQ, u8 activations per
tensor, i8 weights per channel, MinMax on 8 seeded N(0,1) inputs); kiln and
onnxruntime run that same QDQ file. kiln runs in this process through its
Python bindings (python/kiln; KILN_LIBRARY_PATH names the build folder), so
the four runtimes are timed interleaved, one run each per round (A B C D A B
C D ...), and the ratios are of medians taken under the same load. Latency
columns: median ms (min). SQNR (dB, higher is better) of the int8 logits
against onnxruntime's fp32 logits over --sqnr-inputs seeded N(0,1) inputs:
kiln int8 beside onnxruntime int8; "spec" is kiln int8 against onnxruntime
running the Q/DQ nodes as written (optimisations off).
The two "cpu" columns are the same ratios of median process CPU time per
run (time.process_time: it leaves out the time a loaded machine makes a
run wait for a core, which swings the wall-clock medians).
"""

import argparse
import ctypes
import os
import statistics
import sys
import tempfile
import time

import numpy as np

MODELS = {"qdq": "qdq_float.onnx", "resnet18": "resnet18.onnx", "mobilenet_v2": "mobilenet_v2.onnx",
          "resnet50": "resnet50.onnx"}


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


def ort_session(model, threads, optimize=True):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3  # no warnings about initializers the quantizer left
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


class SessionMemory(ctypes.Structure):  # kiln_session_memory_t (include/kiln/runtime.h)
    _fields_ = [("arena_bytes", ctypes.c_uint64), ("naive_bytes", ctypes.c_uint64),
                ("lower_bound_bytes", ctypes.c_uint64), ("weights_bytes", ctypes.c_uint64),
                ("slots", ctypes.c_int32), ("barriers", ctypes.c_int32), ("dispatches", ctypes.c_int32)]


def kiln_memory(kiln, sess):
    m = SessionMemory()
    kiln.rt.kiln_session_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(SessionMemory)]
    kiln.rt.kiln_session_memory.restype = None
    kiln.rt.kiln_session_memory(sess._ptr, ctypes.byref(m))
    return m.arena_bytes / 1e6, m.weights_bytes / 1e6


def folds(module):
    for r in module.report:
        if r["section"] == "passes" and r["text"].startswith("pass fold-qdq"):
            return int(r["text"].split()[3])
    return -1


def sqnr(ref, got):
    """dB of |ref|^2 over |ref - got|^2 (inf when equal)."""
    ref = np.asarray(ref, np.float64)
    err = float(np.sum((ref - got) ** 2))
    return float("inf") if err == 0 else 10 * np.log10(float(np.sum(ref ** 2)) / err)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", required=True)
    ap.add_argument("--names", default="resnet18,mobilenet_v2,resnet50")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--repeat", type=int, default=15, help="interleaved rounds per thread count")
    ap.add_argument("--sqnr-inputs", type=int, default=100)
    args = ap.parse_args()
    import kiln
    print(f"load average {os.getloadavg()[0]:.1f} at start; ms median (min) of {args.repeat} interleaved rounds")
    print(f"{'model':<12} {'thr':>3} {'kiln fp32':>15} {'kiln int8':>15} {'ORT fp32':>15} {'ORT int8':>15} "
          f"{'k8/k32':>6} {'k8/ORT8':>7} {'cpu':>6} {'cpu':>7}")
    failed = False
    notes = []
    with tempfile.TemporaryDirectory() as tmp:
        for key in args.names.split(","):
            model = os.path.join(args.models, MODELS[key])
            if not os.path.exists(model):
                print(f"{key:<12} skipped: {model} missing")
                continue
            name, dims = input_of(model)
            q = os.path.join(tmp, f"{key}.int8.onnx")
            try:
                quantize(model, name, dims, q)
                m32, m8 = kiln.compile(model, target="cpu"), kiln.compile(q, target="cpu")
            except Exception as e:  # noqa: BLE001 (report and go on with the next model)
                print(f"{key:<12} failed: {e}")
                failed = True
                continue
            x = np.random.default_rng(1).standard_normal(dims).astype(np.float32)
            mem = {}
            for threads in [int(t) for t in args.threads.split(",")]:
                runs = {"kiln fp32": kiln.Session(m32, "cpu", threads=threads),
                        "kiln int8": kiln.Session(m8, "cpu", threads=threads)}
                mem = {k: kiln_memory(kiln, s) for k, s in runs.items()}
                o32, o8 = ort_session(model, threads), ort_session(q, threads)
                fns = [lambda s=runs["kiln fp32"]: s.run({name: x}), lambda s=runs["kiln int8"]: s.run({name: x}),
                       lambda: o32.run(None, {name: x}), lambda: o8.run(None, {name: x})]
                for f in fns:  # warm-up
                    f()
                    f()
                ts = [[] for _ in fns]
                cpu = [[] for _ in fns]  # process CPU time: leaves out the waits for a core
                for _ in range(args.repeat):
                    for i, f in enumerate(fns):
                        c0, t0 = time.process_time(), time.perf_counter()
                        f()
                        ts[i].append((time.perf_counter() - t0) * 1e3)
                        cpu[i].append((time.process_time() - c0) * 1e3)
                med = [statistics.median(t) for t in ts]
                mcpu = [statistics.median(t) for t in cpu]
                cell = lambda i: f"{med[i]:.1f} ({min(ts[i]):.1f})"  # noqa: E731
                print(f"{key:<12} {threads:>3} {cell(0):>15} {cell(1):>15} {cell(2):>15} {cell(3):>15} "
                      f"{med[1] / med[0]:>6.2f} {med[1] / med[3]:>7.2f} {mcpu[1] / mcpu[0]:>6.2f} "
                      f"{mcpu[1] / mcpu[3]:>7.2f}   (load {os.getloadavg()[0]:.1f})",
                      flush=True)
                if threads == 1:  # accuracy once, single-threaded
                    spec = ort_session(q, 1, optimize=False)
                    refs, k8s, o8s, specs = [], [], [], []
                    for i in range(args.sqnr_inputs):
                        xi = np.random.default_rng(1000 + i).standard_normal(dims).astype(np.float32)
                        refs.append(o32.run(None, {name: xi})[0].ravel())
                        k8s.append(runs["kiln int8"].run({name: xi})[0].ravel())
                        o8s.append(o8.run(None, {name: xi})[0].ravel())
                        specs.append(spec.run(None, {name: xi})[0].ravel())
                    ref = np.concatenate(refs)
                    notes.append(f"{key:<12} folds {folds(m8):>3}  SQNR vs fp32 over {args.sqnr_inputs} inputs: "
                                 f"kiln int8 {sqnr(ref, np.concatenate(k8s)):.1f} dB, ORT int8 "
                                 f"{sqnr(ref, np.concatenate(o8s)):.1f} dB; kiln int8 vs the Q/DQ spec "
                                 f"{sqnr(np.concatenate(specs), np.concatenate(k8s)):.1f} dB")
                for s in runs.values():
                    s.close()
            w32, w8 = mem["kiln fp32"][1], mem["kiln int8"][1]
            a32, a8 = mem["kiln fp32"][0], mem["kiln int8"][0]
            notes.append(f"{key:<12} weights int8 {w8:.2f} / fp32 {w32:.2f} MB = {w8 / w32:.3f}x; "
                         f"arena (per slot) {a8:.2f} / {a32:.2f} MB = {a8 / a32:.3f}x")
    print("\n".join(notes))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
