#!/usr/bin/env python3
"""kiln's targets against its own CPU backend: batch-1 latency per model, same run.

  targets.py --kiln build/kiln --models DIR [--names resnet18,mobilenet_v2]
             [--targets cpu,opencl] [--rounds 5] [--repeat 20] [--csv FILE]

DIR holds what tests/models/export_models.py writes (<name>.onnx). For each
model and round, every target runs once in turn (`kiln run MODEL --target T
--repeat R`, parsing `latency: median <ms> ms, min <ms> ms over <N> runs`),
so a slow spell of the machine hits all targets alike; a target's figure is
the median over the rounds of its per-round medians. The first round also
checks the result against the reference interpreter (--check-ref) and is
where a cold driver compiles (PoCL: minutes for ResNet-18; its cache makes
later sessions sub-second); it is not timed in the figures unless --rounds
is 1. Prints, per model,
  targets resnet18: cpu 20.1 ms, opencl 34.2 ms (1.70x cpu)
and exits non-zero only when a run fails or a result does not match.
"""

import argparse
import csv
import re
import statistics
import subprocess
import sys

LATENCY_RE = re.compile(r"^latency: median (\S+) ms, min (\S+) ms over (\d+) runs", re.M)
CHECK_RE = re.compile(r"^check \S+ vs reference interpreter: (match|MISMATCH)", re.M)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.stdout


def latency(kiln, model, target, repeat, check):
    cmd = [kiln, "run", model, "--target", target, "--repeat", str(repeat), "--strict"]
    if check:
        cmd.append("--check-ref")
    out = run(cmd)
    m = LATENCY_RE.search(out)
    if not m:
        raise RuntimeError(f"no latency line in the output of {' '.join(cmd)}:\n{out}")
    if check:
        c = CHECK_RE.findall(out)
        if not c or any(x != "match" for x in c):
            raise RuntimeError(f"{model} on {target} does not match the reference:\n{out}")
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models", required=True, help="directory with <name>.onnx")
    ap.add_argument("--names", default="resnet18,mobilenet_v2")
    ap.add_argument("--targets", default="cpu,opencl")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--csv", help="write model,target,median_ms,ratio_to_cpu rows")
    a = ap.parse_args()
    targets = [t for t in a.targets.split(",") if t]
    if "cpu" not in targets:
        targets.insert(0, "cpu")
    rows = []
    failed = False
    for name in [n for n in a.names.split(",") if n]:
        model = f"{a.models}/{name}.onnx"
        per = {t: [] for t in targets}
        try:
            for r in range(max(a.rounds, 1)):
                for t in targets:
                    ms = latency(a.kiln, model, t, a.repeat, check=(r == 0))
                    if r > 0 or a.rounds == 1:
                        per[t].append(ms)
        except RuntimeError as e:
            print(f"targets {name}: {e}", file=sys.stderr)
            failed = True
            continue
        med = {t: statistics.median(v) for t, v in per.items()}
        parts = [f"cpu {med['cpu']:.1f} ms"]
        for t in targets:
            if t != "cpu":
                parts.append(f"{t} {med[t]:.1f} ms ({med[t] / med['cpu']:.2f}x cpu)")
        print(f"targets {name}: " + ", ".join(parts), flush=True)
        for t in targets:
            rows.append((name, t, f"{med[t]:.3f}", f"{med[t] / med['cpu']:.3f}"))
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["model", "target", "median_ms", "ratio_to_cpu"])
            w.writerows(rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
