#!/usr/bin/env python3
"""Every convolution of a model against the measured peak: issue 22's per-conv goal.

  conv_peak.py --kiln build/kiln --models DIR [--names resnet18,mobilenet_v2]
               [--threads N] [--repeat N] [--rounds R] [--peak-runs P | --peak GF,GB]
               [--json FILE]

The goal (issue 22): every ResNet-18 / MobileNetV2 conv at >= 60% of the peak FLOP/s that
`kiln bench` measures (its FMA probe), depthwise convs at >= 50% of their roof,
min(peak FLOP/s, intensity x peak bandwidth) with intensity = FLOPs / (input + weights +
output bytes, each once). Both peaks come from `kiln bench --threads N` (the probes alone: no
cases), taken P times spread over the rounds, best of them (a probe that shared the cores
with another job reads low, which would flatter the convs).

Each conv's time is from the model as it runs: a profiled session (`kiln run --profile`'s
per-kernel times, through the Python bindings and the libkiln beside --kiln, in a child
process per round), each kernel's time summed per graph node per run (a conv's zero-padded
input copy counts with it, epilogues fused into it, Relu or the residual Add, too), the
median of --repeat runs after 5 warm-up, then the median over R rounds per node. Each timed
run follows an untimed one at once, as the runs of `kiln run --repeat` or a serving loop
follow each other: after a pause (here the profile read) the OpenMP worker threads have
gone to sleep and the run's first kernel pays their wake-up (~20 us on the 2-core VM: the
first conv at 51-57% of the peak, 74% back to back), a cost of the run's start, not the
conv's.
A conv's FLOPs are 2 x output elements x (input channels / group) x kernel taps, from the
ONNX model's shapes (the bias and epilogues not counted). On a machine shared with other
jobs, put `chrt -f 10` in front. Prints a table per model (slowest against its goal first)
and the count below the goal; exit status 0 however many are below (a bench, not a test),
1 when kiln failed, 2 on a bad command line.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import onnx
from onnx import shape_inference

HERE = os.path.dirname(os.path.abspath(__file__))
PEAK_RE = re.compile(r"peak: ([0-9.]+) GFLOP/s \(FMA probe\), ([0-9.]+) GB/s")
GOAL, GOAL_DW = 60.0, 50.0


def peak(kiln, threads):
    """(GFLOP/s, GB/s) of one run of kiln bench's probes."""
    r = subprocess.run([kiln, "bench", "--threads", str(threads), "--suite", "gemm", "--filter", "\x01none"],
                       capture_output=True, text=True, timeout=600)
    m = PEAK_RE.search(r.stdout)
    if not m:
        sys.exit(f"conv_peak.py: no peak line from kiln bench:\n{r.stdout}{r.stderr}")
    return float(m.group(1)), float(m.group(2))


def convs(path):
    """{node name: (flops, bytes, depthwise, description)} for every Conv of the model."""
    m = onnx.load(path)
    for v in m.graph.input:  # symbolic dims at 1, as `kiln run` gives them by default
        for d in v.type.tensor_type.shape.dim:
            if not d.dim_value:
                d.dim_value = 1
    m = shape_inference.infer_shapes(m)
    shapes = {}
    for v in list(m.graph.input) + list(m.graph.value_info) + list(m.graph.output):
        shapes[v.name] = [d.dim_value for d in v.type.tensor_type.shape.dim]
    inits = {i.name: list(i.dims) for i in m.graph.initializer}
    out = {}
    for n in m.graph.node:
        if n.op_type != "Conv":
            continue
        x, w, y = shapes.get(n.input[0]), inits.get(n.input[1]), shapes.get(n.output[0])
        if not x or not w or not y or 0 in x or 0 in y:
            continue
        g = next((a.i for a in n.attribute if a.name == "group"), 1)
        stride = next((list(a.ints) for a in n.attribute if a.name == "strides"), [1, 1])
        taps = w[2] * w[3]
        ysz = y[0] * y[1] * y[2] * y[3]
        flops = 2 * ysz * w[1] * taps
        nbytes = 4 * (x[0] * x[1] * x[2] * x[3] + w[0] * w[1] * taps + ysz)
        dw = g > 1 and g == x[1] and w[1] == 1
        desc = f"{x[1]}->{y[1]} {w[2]}x{w[3]}/{stride[0]} {y[2]}x{y[3]}" + (" dw" if dw else "")
        out[n.name] = (flops, nbytes, dw, desc)
    return out


def profile_child(model, threads, repeat):
    """Run in a child process (the kiln library of --kiln's folder): print {node: median ms}."""
    import numpy as np
    import kiln

    m = onnx.load(model)
    shape = [d.dim_value or 1 for d in m.graph.input[0].type.tensor_type.shape.dim]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    sess = kiln.compile(model, target="cpu").session(profile=True, threads=threads)
    for _ in range(5):
        sess.run([x])
    per = {}
    for _ in range(repeat):
        # back to back with an untimed run: reading the profile takes this
        # loop longer than the OpenMP workers spin (~100 us), and the first
        # kernel of a run after a pause pays their wake-up (MobileNetV2's
        # stem 0.070-0.074 ms against 0.052-0.055 ms run after run)
        sess.run([x])
        sess.run([x])
        run = {}
        for e in sess.profile():
            run[e["node"]] = run.get(e["node"], 0.0) + e["last_s"] * 1e3
        for k, v in run.items():
            per.setdefault(k, []).append(v)
    sess.close()
    json.dump({k: statistics.median(v) for k, v in per.items()}, sys.stdout)


def profile(kiln, model, threads, repeat):
    """{node: median ms per run} of the model in kiln's profiled session, a node's kernels summed."""
    env = dict(os.environ, KILN_LIBRARY_PATH=os.path.dirname(os.path.abspath(kiln)),
               PYTHONPATH=os.path.join(HERE, "..", "python"))
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--profile-child", model, "--threads",
                        str(threads), "--repeat", str(repeat)], capture_output=True, text=True, env=env,
                       timeout=1200)
    if r.returncode != 0:
        sys.exit(f"conv_peak.py: profiling {model} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--models", default="build/models", help="folder of <name>.onnx")
    ap.add_argument("--names", default="resnet18,mobilenet_v2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=30, help="profiled runs per round (default 30)")
    ap.add_argument("--rounds", type=int, default=3, help="kiln runs per model; per-node median (default 3)")
    ap.add_argument("--peak-runs", type=int, default=3, help="peak probes, best taken (default 3)")
    ap.add_argument("--peak", help="GFLOPS,GBS: use these peaks instead of probing (e.g. a quiet run's)")
    ap.add_argument("--json", help="write {peak, models: {name: [rows]}} here")
    ap.add_argument("--profile-child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.profile_child:
        return profile_child(a.profile_child, a.threads, a.repeat)
    if a.threads < 1 or a.repeat < 1 or a.rounds < 1 or a.peak_runs < 1:
        ap.error("--threads, --repeat, --rounds and --peak-runs must be at least 1")
    given = None
    if a.peak:
        try:
            given = tuple(float(v) for v in a.peak.split(","))
        except ValueError:
            given = ()
        if len(given) != 2 or min(given) <= 0:
            ap.error(f"--peak '{a.peak}': expected GFLOPS,GBS (two positive numbers)")
    names = [n for n in a.names.split(",") if n]
    for n in names:
        if not os.path.exists(os.path.join(a.models, n + ".onnx")):
            ap.error(f"no {n}.onnx in {a.models}")
    probes = [given] if given else [peak(a.kiln, a.threads)]
    times = {n: [] for n in names}
    for r in range(a.rounds):
        for n in names:
            times[n].append(profile(a.kiln, os.path.join(a.models, n + ".onnx"), a.threads, a.repeat))
        if not given and len(probes) < a.peak_runs:
            probes.append(peak(a.kiln, a.threads))
    while not given and len(probes) < a.peak_runs:
        probes.append(peak(a.kiln, a.threads))
    gf = max(p[0] for p in probes)
    gb = max(p[1] for p in probes)
    src = "given by --peak" if given else f"best of {len(probes)} probes"
    print(f"peak ({a.threads} threads, {src}): {gf:.1f} GFLOP/s, {gb:.1f} GB/s; "
          f"probes {', '.join(f'{p[0]:.0f}' for p in probes)} GFLOP/s; goal {GOAL:.0f}% of peak "
          f"(depthwise {GOAL_DW:.0f}% of its roof); {a.rounds} rounds of {a.repeat} runs, per-node median")
    report = {"threads": a.threads, "peak_gflops": gf, "peak_gbs": gb, "probes": probes, "models": {}}
    for n in names:
        cv = convs(os.path.join(a.models, n + ".onnx"))
        rows = []
        for node, (flops, nbytes, dw, desc) in cv.items():
            ts = [t[node] for t in times[n] if node in t]
            if not ts:
                continue
            ms = statistics.median(ts)
            g = flops / (ms * 1e6)
            roof = min(gf, gb * flops / nbytes) if dw else gf
            pct = 100.0 * g / roof
            goal = GOAL_DW if dw else GOAL
            rows.append({"node": node, "conv": desc, "ms": ms, "gflops": g, "roof_gflops": roof, "pct": pct,
                         "goal": goal, "below": pct < goal})
        if not rows:
            sys.exit(f"conv_peak.py: no conv of {n} matched the profile's nodes")
        rows.sort(key=lambda r: r["pct"] - r["goal"])
        below = sum(r["below"] for r in rows)
        tot = sum(r["ms"] for r in rows)
        fl = sum(cv[r["node"]][0] for r in rows)
        print(f"\n{n}: {len(rows)} convs, {tot:.3f} ms, {fl / (tot * 1e6):.1f} GFLOP/s overall "
              f"({100 * fl / (tot * 1e6) / gf:.0f}% of peak); below the goal: {below}")
        print(f"  {'node':40s} {'conv':24s} {'ms':>7s} {'GFLOP/s':>8s} {'roof':>7s} {'%':>5s}")
        for r in rows:
            print(f"  {r['node'][-40:]:40s} {r['conv']:24s} {r['ms']:7.3f} {r['gflops']:8.1f} "
                  f"{r['roof_gflops']:7.1f} {r['pct']:5.1f}{'  <' if r['below'] else ''}")
        report["models"][n] = rows
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
