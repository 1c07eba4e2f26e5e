#!/usr/bin/env python3
"""Tuned vs default latency in the same run (issue 24).

  tune.py --kiln build/kiln --models DIR [--names resnet18,mobilenet_v2]
          [--targets opencl] [--budget 10m] [--repeat 20] [--rounds 3] [--threads 2] [--out DIR]

Per model and target: `kiln tune MODEL -t T --budget B --cache OUT/tune-NAME-T.tsv` on a
fresh cache (its time is the tuning time), then `kiln run` without and with
`--tuning-cache` interleaved for --rounds rounds of --repeat runs each (the median of the
rounds' medians is reported), so both see the same machine load. Prints a table: default and
tuned batch-1 latency, speed-up, tuning time against the budget, kernels improved, kernels
whose tuned point lost on re-measurement (kept at their default: never slower) and kernels
left untuned, and whether the tuning time kept within 5% of the budget. The default runs pass
--no-tuning-cache (kiln compile|run read the cache folder's tuning.tsv otherwise).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def latency(out):
    m = re.search(r"latency: median ([0-9.]+) ms", out)
    return float(m.group(1)) if m else None


def budget_s(b):
    m = re.fullmatch(r"([0-9.]+)([smh]?)", b)
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--models", default="build/models")
    ap.add_argument("--names", default="resnet18,mobilenet_v2")
    ap.add_argument("--targets", default="opencl,cpu")
    ap.add_argument("--budget", default="10m")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out", default="build/bench-out")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rows = []
    for name in a.names.split(","):
        model = os.path.join(a.models, name + ".onnx")
        for t in a.targets.split(","):
            cache = os.path.join(a.out, f"tune-{name}-{t}.tsv")
            if os.path.exists(cache):
                os.remove(cache)
            t0 = time.time()
            rc, out = run([a.kiln, "tune", model, "-t", t, "--budget", a.budget, "--cache", cache,
                           "--threads", str(a.threads)])
            took = time.time() - t0
            print(out.replace("\r", "\n"), flush=True)
            if rc != 0:
                rows.append((name, t, None, None, took, "tune failed: " + out.strip().splitlines()[-1]))
                continue
            m = re.search(r"(\d+) of (\d+) kernels improved, (\d+) reverted", out)
            improved, kernels, reverted = (m.group(1), m.group(2), m.group(3)) if m else ("?", "?", "?")
            base = [a.kiln, "run", model, "-t", t, "--repeat", str(a.repeat), "--threads", str(a.threads)]
            within = took <= budget_s(a.budget) * 1.05
            d, u, untuned = [], [], "?"
            for _ in range(a.rounds):
                rc1, o1 = run(base + ["--no-tuning-cache"])
                rc2, o2 = run(base + ["--tuning-cache", cache])
                if rc1 or rc2 or latency(o1) is None or latency(o2) is None:
                    print(o1, o2)
                    break
                d.append(latency(o1))
                u.append(latency(o2))
                m2 = re.search(r"tuning: (\d+) of (\d+) (?:template kernels|CPU GEMMs) tuned.*?(\d+) untuned", o2)
                if m2:
                    untuned = m2.group(3)
            if not d:
                rows.append((name, t, None, None, took, "run failed"))
                continue
            rows.append((name, t, statistics.median(d), statistics.median(u), took,
                         f"{improved} of {kernels} kernels improved, {reverted} slower on re-measurement "
                         f"(kept default), {untuned} untuned; budget {'kept' if within else 'EXCEEDED'} "
                         f"({100 * took / budget_s(a.budget):.0f}%)"))
    print(f"\nkiln tune, budget {a.budget} ({budget_s(a.budget):.0f} s), {a.rounds} x {a.repeat} runs "
          f"interleaved, threads {a.threads or 'all'}")
    print(f"| model | target | default ms | tuned ms | speed-up | tuning s | kernels |")
    print(f"|---|---|---|---|---|---|---|")
    for name, t, d, u, took, note in rows:
        if d is None:
            print(f"| {name} | {t} | | | | {took:.0f} | {note} |")
        else:
            print(f"| {name} | {t} | {d:.2f} | {u:.2f} | {d / u:.2f}x | {took:.0f} | {note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
