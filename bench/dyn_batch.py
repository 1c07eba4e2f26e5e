#!/usr/bin/env python3
"""One module for a range of batch sizes vs one static module per size (issue 25).

  dyn_batch.py --kiln build/kiln --model resnet18.onnx --dim N --range 1..8 --batches 1,4,8
               [--target cpu|opencl|vulkan] [--work DIR] [--threads 1] [--rounds 5] [--repeat 5]

Compiles the model once with `--dim N=LO..HI` (the per-sample module: kernels loop
over the batch at run time) and once per batch with `--dim N=B` (static shapes), then
measures, interleaved round by round so that a busy machine slows both alike,
`kiln run MODULE --threads T --repeat R` (random inputs; the dynamic module at
`--dim N=B`), parsing `latency: median <ms> ms`. On a machine other work keeps
busy, wall-clock medians swing by 2x; with --threads 1 the script therefore also takes
the CPU time one run costs (getrusage of the child: (CPU of --repeat R+2) - (CPU of
--repeat 2), over R runs), which other processes barely move. Prints per batch: the median
over rounds of each module's latency, their ratio (dynamic / static; the goal is <= 1.15)
and the dynamic module's arena at that batch against that batch's lower bound
(`dynamic dim 'N' = B ...: arena X bytes, lower bound Y`), next to the static module's.

--target opencl compiles both for the OpenCL target (`-t opencl --device none`: no program
binary in the module; the driver's own cache, PoCL's, serves every run after the first) and
runs them on its device 0 (--target vulkan: `-t vulkan`, the module holds the SPIR-V); the goal
there is <= 1.3. The device's threads are its own, so the
CPU time (taken at any --threads) sums them: the work a run costs, not its latency. A first,
unmeasured run of each module warms the driver's caches.
"""

import argparse
import os
import re
import resource
import subprocess
import sys

import dyn_common

LATENCY_RE = re.compile(r"^latency: median (\S+) ms", re.M)
DYN_RE = re.compile(r"^dynamic dim '[^']*' = \d+ \(range [^)]*\): arena (\d+) bytes, lower bound (\d+)", re.M)
STATIC_RE = re.compile(r"arena (\S+ \S+) x \d+ slots \(lower bound (\S+ \S+),", re.M)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.stdout


def cpu_run(cmd):
    """(stdout, CPU seconds the child used)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = run(cmd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return out, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def measure(cmd, repeat, cpu):
    """(stdout, wall median ms, CPU ms per run or None)."""
    out, c_long = cpu_run(cmd + ["--repeat", str(repeat + 2)])
    wall = float(LATENCY_RE.search(out).group(1))
    if not cpu:
        return out, wall, None
    _, c_short = cpu_run(cmd + ["--repeat", "2"])
    return out, wall, (c_long - c_short) / repeat * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--dim", required=True, help="the model's symbolic batch dim")
    ap.add_argument("--range", required=True, help="LO..HI")
    ap.add_argument("--batches", default="1,4,8")
    ap.add_argument("--work", default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--target", default="cpu", choices=["cpu", "opencl", "vulkan"])
    a = ap.parse_args()
    gpu = a.target != "cpu"
    goal = 1.3 if gpu else 1.15
    work = a.work or os.path.dirname(os.path.abspath(a.model))
    os.makedirs(work, exist_ok=True)
    stem = os.path.splitext(os.path.basename(a.model))[0]
    batches = [int(b) for b in a.batches.split(",")]
    tag = "" if not gpu else f"_{a.target}"
    dyn = os.path.join(work, f"{stem}{tag}_dyn.kiln")
    static = {b: os.path.join(work, f"{stem}{tag}_b{b}.kiln") for b in batches}
    target_args = (["-t", a.target] + (["--device", "none"] if a.target == "opencl" else [])) if gpu else []
    for path, spec in [(dyn, a.range)] + [(static[b], str(b)) for b in batches]:
        if not os.path.exists(path):
            run([a.kiln, "compile", a.model, "--dim", f"{a.dim}={spec}", "-o", path] + target_args)
            print(f"compiled {os.path.basename(path)} (--dim {a.dim}={spec})", flush=True)
    if gpu:  # the driver compiles each kernel at its first launch: not measured
        for b in batches:
            run([a.kiln, "run", dyn, "--dim", f"{a.dim}={b}"])
            run([a.kiln, "run", static[b]])
    lat = {(k, b): [] for k in ("dyn", "static") for b in batches}
    cpu = {(k, b): [] for k in ("dyn", "static") for b in batches}
    mem = {}
    use_cpu = a.threads == 1 or gpu
    for _ in range(a.rounds):
        for b in batches:
            out, w, c = measure([a.kiln, "run", dyn, "--dim", f"{a.dim}={b}", "--threads", str(a.threads)],
                                a.repeat, use_cpu)
            lat[("dyn", b)].append(w)
            cpu[("dyn", b)].append(c)
            m = DYN_RE.search(out)
            mem[("dyn", b)] = (int(m.group(1)), int(m.group(2)))
            out, w, c = measure([a.kiln, "run", static[b], "--threads", str(a.threads)], a.repeat, use_cpu)
            lat[("static", b)].append(w)
            cpu[("static", b)].append(c)
            m = STATIC_RE.search(out)
            mem[("static", b)] = (m.group(1), m.group(2))
    where = f"target {a.target}" if gpu else f"{a.threads} thread(s)"
    print(f"{stem}: one module for {a.dim}={a.range} vs a static module per batch, {where}, "
          f"median of {a.rounds} rounds x median of {a.repeat} runs")
    print("| batch | dynamic ms (wall) | static ms (wall) | ratio | dynamic CPU ms | static CPU ms | ratio "
          "| dynamic arena | lower bound | arena / bound | static arena (bound) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for b in batches:
        d, s, cells, ratio, (ar, lb), (sa, sl) = dyn_common.row(lat, cpu, mem, b, use_cpu)
        worst = max(worst, ratio)
        print(f"| {b} | {d:.2f} | {s:.2f} | {d / s:.3f} | {' | '.join(cells)} | {ar / 1e6:.2f} MB | "
              f"{lb / 1e6:.2f} MB | {ar / lb:.3f} | {sa} ({sl}) |")
    print(f"worst dynamic / static ({'CPU time' if use_cpu else 'wall'}): {worst:.3f} (goal <= {goal})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
