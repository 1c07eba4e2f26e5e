#!/usr/bin/env python3
"""Per-layer times of kiln's CPU target beside onnxruntime's, on one model.

  PYTHONPATH=python KILN_LIBRARY_PATH=build layers_ort.py MODEL.onnx [--threads N] [--runs N] [--top N]

kiln runs MODEL through its Python bindings with profiling on (each kernel's time of every
run; the median over the runs per graph node, a node's kernels summed: a conv's zero-padded
input copy counts with it); onnxruntime (CPUExecutionProvider, intra_op_num_threads=N) runs
it with SessionOptions.enable_profiling (its node events, the median per node). kiln's runs
come first, then onnxruntime's, so neither's waiting workers take the other's cores. An
onnxruntime node is matched to the Conv it computes: its NCHWc nodes are named after the
tensor they write (a fused Relu's or residual Add's output), which is followed back through
Relu / Clip / Add to the Conv that is not matched yet. Prints the kernel sums, then the rows
slowest against onnxruntime first (kiln ms, onnxruntime ms, ratio). On a machine shared
with other jobs, `chrt -f 10` in front.
"""

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort


def ort_times(model, x, threads, runs):
    """Median time per node (ms) of onnxruntime's profile, by node name."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.enable_profiling = True
    tmp = tempfile.mkdtemp(prefix="layers_ort")
    so.profile_file_prefix = os.path.join(tmp, "prof")
    s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    warm = 5
    for _ in range(warm + runs):
        s.run(None, {name: x})
    path = s.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    os.rmdir(tmp)
    per = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            per[e["name"][: -len("_kernel_time")]].append(e["dur"] / 1e3)
    return {k: statistics.median(v[warm:] or v) for k, v in per.items()}


def match_ort(graph, times):
    """onnxruntime's node times keyed by the ONNX node each computes (Convs with what they fused)."""
    prod = {o: n for n in graph.node for o in n.output}
    out = collections.defaultdict(float)
    claimed = set()
    pending = []
    for k, v in times.items():
        t = k[: -len("_nchwc")] if k.endswith("_nchwc") else k
        n = prod.get(t)
        if n is not None and n.op_type == "Conv":
            claimed.add(n.name)
            out[n.name] += v
        else:
            pending.append((k, t, v))
    for k, t, v in pending:
        n = prod.get(t)
        while n is not None and n.op_type in ("Relu", "Clip", "Add"):
            if n.op_type == "Add":
                convs = [prod[i] for i in n.input
                         if i in prod and prod[i].op_type == "Conv" and prod[i].name not in claimed]
                n = convs[-1] if convs else None
                break
            n = prod.get(n.input[0])
        if n is not None and n.op_type == "Conv" and n.name not in claimed:
            claimed.add(n.name)
            out[n.name] += v
        else:
            m = prod.get(t)
            out[m.name if m is not None else k] += v
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=100, help="timed runs of each runtime (default 100)")
    ap.add_argument("--top", type=int, default=0, help="print only this many rows (default: all)")
    a = ap.parse_args()
    if a.runs < 1:
        sys.exit("layers_ort.py: --runs must be at least 1")
    import kiln

    m = onnx.load(a.model)
    inp = m.graph.input[0]
    shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    sess = kiln.compile(a.model, target="cpu").session(profile=True, threads=a.threads)
    for _ in range(5):
        sess.run([x])
    per = collections.defaultdict(list)
    ops = {}
    for _ in range(a.runs):
        sess.run([x])
        run = collections.defaultdict(float)
        for e in sess.profile():
            run[e["node"]] += e["last_s"] * 1e3
            ops[e["node"]] = e["op"]
        for k, v in run.items():
            per[k].append(v)
    sess.close()
    kt = {k: statistics.median(v) for k, v in per.items()}
    ot = match_ort(m.graph, ort_times(a.model, x, a.threads, a.runs))
    print(f"{a.model}: {a.threads} threads, medians of {a.runs} runs; kernels kiln {sum(kt.values()):.3f} ms, "
          f"onnxruntime {sum(ot.values()):.3f} ms")
    rows = sorted(kt, key=lambda n: -(kt[n] - ot.get(n, 0.0)))
    if a.top > 0:
        rows = rows[: a.top]
    print(f"  {'node':45s} {'op':12s} {'kiln ms':>8s} {'ORT ms':>8s} {'ratio':>6s}")
    for n in rows:
        o = ot.get(n)
        r = f"{kt[n] / o:5.2f}x" if o else "     -"
        print(f"  {n[-45:]:45s} {ops[n][:12]:12s} {kt[n]:8.3f} {o if o is not None else float('nan'):8.3f} {r}")
    rest = sorted(set(ot) - set(kt), key=lambda n: -ot[n])
    if rest:
        print("  onnxruntime only: " + ", ".join(f"{n} {ot[n]:.3f}" for n in rest[:10]))


if __name__ == "__main__":
    main()
