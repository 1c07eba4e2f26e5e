#!/usr/bin/env python3
"""kiln's targets against its own CPU backend: batch-1 latency per model, same run.

  targets.py --kiln build/kiln --models DIR [--names resnet18,mobilenet_v2]
             [--targets cpu,opencl] [--precision fp32[,fp16]] [--rounds 5]
             [--repeat 20] [--csv FILE]

DIR holds what tests/models/export_models.py writes (<name>.onnx). For each
model and round, every target runs once in turn (`kiln run MODEL --target T
--repeat R`, parsing `latency: median <ms> ms, min <ms> ms over <N> runs`),
so a slow spell of the machine hits all targets alike; a target's figure is
the median over the rounds of its per-round medians. The first round also
checks the result against the reference interpreter (--check-ref) and is
where a cold driver compiles (PoCL: minutes for ResNet-18; its cache makes
later sessions sub-second); it is not timed in the figures unless --rounds
is 1. Prints the host CPU (its model name, family and model: ratios to the CPU
backend differ between hosts), then per model,
  targets resnet18: cpu 20.1 ms, opencl 34.2 ms (1.70x cpu)
and exits non-zero only when a run fails or a result does not match.

--precision runs every target at each precision listed (`kiln run --precision
P`; fp16 results are checked at the CLI's fp16 tolerance). With more than
fp32, each target's figure carries its precision (`opencl fp16 30.1 ms (1.50x
cpu fp16)`): a ratio compares with the CPU backend at the same precision. The
CSV gets a last column, precision (fp32 rows as before).
"""

import argparse
import csv
import re
import statistics
import subprocess
import sys

LATENCY_RE = re.compile(r"^latency: median (\S+) ms, min (\S+) ms over (\d+) runs", re.M)
RAN_RE = re.compile(r"^ran .* on target (\S+) in ", re.M)
CHECK_RE = re.compile(r"^check \S+ vs reference interpreter: (match|MISMATCH)", re.M)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.stdout


def latency(kiln, model, target, precision, repeat, check):
    # --strict makes a target that cannot be opened an error; with fp16 it
    # also refuses a device without fp16 arithmetic (fp16 storage with fp32
    # arithmetic is what we measure there), so fp16 runs check the target
    # that ran instead
    cmd = [kiln, "run", model, "--target", target, "--repeat", str(repeat)]
    cmd += ["--strict"] if precision == "fp32" else ["--precision", precision]
    if check:
        cmd.append("--check-ref")
        if precision == "fp16":
            # fp16 storage on these deep random-weight models is off the fp32
            # reference by up to ~0.008 on O(0.5) logits on every target,
            # the CPU's included (MobileNetV2), so the CLI's fp16 atol (1e-3)
            # flags the format itself; 1e-2 still catches a broken kernel
            cmd += ["--rtol", "1e-2", "--atol", "1e-2"]
    out = run(cmd)
    m = LATENCY_RE.search(out)
    if not m:
        raise RuntimeError(f"no latency line in the output of {' '.join(cmd)}:\n{out}")
    ran = RAN_RE.search(out)
    if not ran or ran.group(1) != target.split(":")[0]:
        raise RuntimeError(f"{' '.join(cmd)} did not run on {target}:\n{out}")
    if check:
        c = CHECK_RE.findall(out)
        if not c or any(x != "match" for x in c):
            raise RuntimeError(f"{model} on {target} does not match the reference:\n{out}")
    return float(m.group(1))


def host_cpu():
    """The host CPU as /proc/cpuinfo names it, with its family and model: a ratio to
    the CPU backend depends on it (an EPYC of family 25, Zen 4, runs the backend's
    AVX-512 code at half the width a family-26 one, Zen 5, does; lavapipe's 256-bit
    code runs about alike on both)."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                k, _, v = line.partition(":")
                info.setdefault(k.strip(), v.strip())
    except OSError:
        return "unknown (no /proc/cpuinfo)"
    flags = set(info.get("flags", "").split())
    simd = "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "other"
    return (f"{info.get('model name', '?')}, family {info.get('cpu family', '?')} "
            f"model {info.get('model', '?')}, {simd}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models", required=True, help="directory with <name>.onnx")
    ap.add_argument("--names", default="resnet18,mobilenet_v2")
    ap.add_argument("--targets", default="cpu,opencl")
    ap.add_argument("--precision", default="fp32", help="comma-separated: fp32, fp16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--csv", help="write model,target,median_ms,ratio_to_cpu,precision rows")
    a = ap.parse_args()
    targets = [t for t in a.targets.split(",") if t]
    if "cpu" not in targets:
        targets.insert(0, "cpu")
    precisions = [p for p in a.precision.split(",") if p]
    bad = [p for p in precisions if p not in ("fp32", "fp16")]
    if bad or not precisions:
        ap.error(f"--precision: expected fp32 and/or fp16, got '{a.precision}'")
    # (target, precision) pairs in the order they run each round
    runs = [(t, p) for p in precisions for t in targets]

    def label(t, p):
        return t if precisions == ["fp32"] else f"{t} {p}"
    rows = []
    failed = False
    print(f"targets host: {host_cpu()}", flush=True)
    for name in [n for n in a.names.split(",") if n]:
        model = f"{a.models}/{name}.onnx"
        per = {tp: [] for tp in runs}
        try:
            for r in range(max(a.rounds, 1)):
                for t, p in runs:
                    ms = latency(a.kiln, model, t, p, a.repeat, check=(r == 0))
                    if r > 0 or a.rounds == 1:
                        per[(t, p)].append(ms)
        except RuntimeError as e:
            print(f"targets {name}: {e}", file=sys.stderr)
            failed = True
            continue
        med = {tp: statistics.median(v) for tp, v in per.items()}
        parts = []
        for t, p in runs:
            ms, cpu = med[(t, p)], med[("cpu", p)]
            if t == "cpu":
                parts.append(f"{label(t, p)} {ms:.1f} ms")
            else:
                parts.append(f"{label(t, p)} {ms:.1f} ms ({ms / cpu:.2f}x {label('cpu', p)})")
        print(f"targets {name}: " + ", ".join(parts), flush=True)
        for t, p in runs:
            rows.append((name, t, f"{med[(t, p)]:.3f}", f"{med[(t, p)] / med[('cpu', p)]:.3f}", p))
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["model", "target", "median_ms", "ratio_to_cpu", "precision"])
            w.writerows(rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
