#!/usr/bin/env python3
"""What batching can buy on this CPU: CPU time per image at batch 1 and at
batch B, for kiln and for onnxruntime, in one run.

  batch_scaling.py --kiln build/kiln --models DIR [--names resnet18] [--batches 1,8]
                   [--threads 1,2] [--repeat 10] [--rounds 3]

The dynamic batcher (include/kiln/batcher.h, bench/batcher.sh) turns 8
single-image requests into one batch-8 run. Its throughput gain over 8
unbatched sessions is bounded by how much less one image costs inside a
batch than alone: per image, CPU time at batch 1 / CPU time at batch B.
This script measures that bound for both kiln (`kiln run --dim N=B`, the
rusage of --repeat R+1 minus --repeat 1, so compile and load drop out) and
onnxruntime (process CPU time of R session runs after warm-up), rounds
interleaved, medians printed. CPU time rather than wall time, so a loaded
machine still gives the figure. The model must have a symbolic batch dim
(tests/models/export_models.py exports `N`).
"""

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models_cpu  # noqa: E402


def kiln_cpu_ms(kiln, model, batch, threads, repeat, cache):
    def used(n):
        cmd = [kiln, "run", model, "--target", "cpu", "--threads", str(threads),
               "--dim", f"N={batch}", "--repeat", str(n)]
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, KILN_CACHE_DIR=cache))
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), p.stdout
    used(1)  # compiles into |cache| on the first call for this batch
    one, _ = used(1)
    many, out = used(repeat + 1)
    m = models_cpu.LATENCY_RE.search(out)
    if not m:
        raise RuntimeError(f"no 'latency: median' line in kiln's output:\n{out}")
    return (many - one) * 1e3 / repeat, float(m.group(1))


def ort_cpu_ms(model, x, threads, repeat):
    sess, name = models_cpu.ort_session(model, x, threads)
    t0 = time.process_time()
    walls = []
    for _ in range(repeat):
        w0 = time.perf_counter()
        sess.run(None, {name: x})
        walls.append((time.perf_counter() - w0) * 1e3)
    return (time.process_time() - t0) * 1e3 / repeat, statistics.median(walls)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--names", default="resnet18")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    threads = [int(t) for t in args.threads.split(",")]
    if len(batches) < 2 or batches[0] != 1 or any(b < 1 for b in batches):
        ap.error("--batches: 1 first, then the batch sizes to compare with it")
    if args.repeat < 1 or args.rounds < 1 or any(t < 1 for t in threads):
        ap.error("--repeat, --rounds and --threads must be positive")
    rng = np.random.default_rng(0)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    print("per image: ms of CPU time (all threads; onnxruntime's spinning workers count) and ms of wall"
          " time (median run / batch); b1/bB: batch 1's cost over batch B's (> 1: batching pays)")
    print(f"{'model':<12} {'thr':>3} {'batch':>5}   {'kiln cpu':>8} {'ort cpu':>8} {'kiln':>6} {'ort':>6}   "
          f"{'kiln wall':>8} {'ort wall':>8} {'kiln':>6} {'ort':>6}")
    for name in args.names.split(","):
        model = os.path.join(args.models, f"{name}.onnx")
        if not os.path.exists(model):
            sys.exit(f"batch_scaling.py: {model}: no such model (tests/models/export_models.py writes it)")
        one = np.load(os.path.join(args.models, f"{name}_input.npy"))
        with tempfile.TemporaryDirectory() as cache:
            for t in threads:
                got = {(b, tool, m): [] for b in batches for tool in ("kiln", "ort") for m in ("cpu", "wall")}
                for _ in range(args.rounds):
                    for b in batches:
                        x = rng.standard_normal((b,) + one.shape[1:], dtype=np.float32)
                        for tool, (c, w) in (("kiln", kiln_cpu_ms(args.kiln, model, b, t, args.repeat, cache)),
                                             ("ort", ort_cpu_ms(model, x, t, args.repeat))):
                            got[(b, tool, "cpu")].append(c / b)
                            got[(b, tool, "wall")].append(w / b)
                med = {k: statistics.median(v) for k, v in got.items()}
                for b in batches:
                    cells = []
                    for m in ("cpu", "wall"):
                        k, o = med[(b, "kiln", m)], med[(b, "ort", m)]
                        cells.append(f"{k:>8.2f} {o:>8.2f} {med[(1, 'kiln', m)] / k:>6.2f} "
                                     f"{med[(1, 'ort', m)] / o:>6.2f}")
                    print(f"{name:<12} {t:>3} {b:>5}   " + "   ".join(cells))
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
