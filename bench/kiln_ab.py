#!/usr/bin/env python3
"""Interleaved A/B of kiln CPU builds or settings on one model, onnxruntime alongside.

  kiln_ab.py MODEL.onnx [--threads N] [--rounds R] [--repeat N] [--ort] VARIANT...

VARIANT is NAME=[VAR:VALUE;VAR:VALUE...][@KILN]: environment settings for that
variant's `kiln run` (e.g. GOMP_SPINCOUNT:2000, KILN_CACHE_DIR:/tmp/c, THREADS:1 for
another thread count) and the kiln CLI to run (default build/kiln). Each round runs
every variant once (`kiln run MODEL --target cpu --threads N --input input=<npy>
--repeat N`, parsing `latency: median X ms`) and, with --ort, onnxruntime in this
process (CPUExecutionProvider, intra_op_num_threads=N, median of N runs), so a loaded
machine slows them alike. Prints per variant the median of the round medians and the
CPU time per run (user + system, all threads: kiln's rusage of --repeat N minus
--repeat 1 over N-1 runs, onnxruntime's process time), the figure the load distorts
least, and the median of the rounds within 1.25x of the fastest (a job that takes a
core for a while slows whole rounds 2-3x). MODEL's input is <MODEL>_input.npy beside it,
named `input`. Every variant runs
once first to fill its compile cache. On a machine shared with other jobs,
`chrt -f 10` in front (root) runs it with the others' threads preempted: that
approximates an idle machine for what 2 threads gain (libgomp's waits included).
"""

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def parse_variant(spec):
    name, rest = spec.split("=", 1)
    kiln = "build/kiln"
    if "@" in rest:
        rest, kiln = rest.split("@", 1)
    env = dict(os.environ)
    threads = None
    for kv in filter(None, rest.split(";")):
        k, v = kv.split(":", 1)
        if k == "THREADS":
            threads = v
        else:
            env[k] = v
    return name, kiln, env, threads


def kiln_run(kiln, env, model, inp, threads, repeat):
    """(median ms, CPU seconds of the child)"""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([kiln, "run", model, "--target", "cpu", "--threads", threads, "--input",
                        "input=" + inp, "--repeat", str(repeat)], env=env, capture_output=True, text=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    m = re.search(r"latency: median ([\d.]+) ms", p.stdout + p.stderr)
    if p.returncode != 0 or not m:
        sys.exit(f"kiln_ab: {kiln} failed on {model}:\n{p.stdout}{p.stderr}")
    return float(m.group(1)), (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("variants", nargs="+")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--ort", action="store_true", help="onnxruntime in the same rounds")
    a = ap.parse_args()
    if a.repeat < 2:
        sys.exit("kiln_ab: --repeat must be at least 2")
    variants = [parse_variant(v) for v in a.variants]
    inp = a.model[:-len(".onnx")] + "_input.npy" if a.model.endswith(".onnx") else a.model + "_input.npy"
    res = {v[0]: ([], []) for v in variants}
    for name, kiln, env, th in variants:
        kiln_run(kiln, env, a.model, inp, th or a.threads, 1)
    sess = None
    if a.ort:
        import numpy as np
        import models_cpu
        x = np.load(inp)
        sess, iname = models_cpu.ort_session(a.model, x, int(a.threads))
        for _ in range(3):
            sess.run(None, {iname: x})
        res["onnxruntime"] = ([], [])
    load0 = os.getloadavg()[0]
    for _ in range(a.rounds):
        for name, kiln, env, th in variants:
            ms, cpu = kiln_run(kiln, env, a.model, inp, th or a.threads, a.repeat)
            _, cpu1 = kiln_run(kiln, env, a.model, inp, th or a.threads, 1)
            res[name][0].append(ms)
            res[name][1].append((cpu - cpu1) / (a.repeat - 1) * 1e3)
        if sess:
            ts = []
            c0 = time.process_time()
            for _ in range(a.repeat):
                t0 = time.perf_counter()
                sess.run(None, {iname: x})
                ts.append((time.perf_counter() - t0) * 1e3)
            res["onnxruntime"][0].append(statistics.median(ts))
            res["onnxruntime"][1].append((time.process_time() - c0) / a.repeat * 1e3)
    print(f"{os.path.basename(a.model)}: {a.threads} threads, {a.rounds} interleaved rounds of {a.repeat} runs, "
          f"load average {load0:.1f} -> {os.getloadavg()[0]:.1f}")
    for name, (ms, cpu) in res.items():
        print(f"  {name:14s} median {statistics.median(ms):9.3f} ms   CPU/run {statistics.median(cpu):9.3f} ms   "
              f"rounds {' '.join('%.2f' % x for x in ms)}")
    # Another job that takes a core for a while (a real-time one, or one of
    # higher priority) slows whole rounds 2-3x: the median of the rounds
    # within 1.25x of each runtime's fastest is what the unslowed rounds say.
    print("  rounds within 1.25x of each one's fastest (unslowed):")
    for name, (ms, _) in res.items():
        fast = [x for x in ms if x <= 1.25 * min(ms)]
        print(f"  {name:14s} median {statistics.median(fast):9.3f} ms   of {len(fast)} rounds")


if __name__ == "__main__":
    main()
