#!/usr/bin/env python3
"""Graph passes + kernel fusion: kernel count, intermediate traffic and CPU latency,
fused (-O1) vs unfused (-O0), measured in one run.

  fusion.py --kiln build/kiln --models DIR [--names resnet18,mobilenet_v2,encoder]
            [--threads 2] [--repeat 20]

DIR holds <name>.onnx and <name>_input.npy (tests/models/export_models.py and
tests/models/export_encoder.py write them; missing ones are exported first). For each
model it parses `kiln run` output:
  `fused K0 kernels into K1 (...), X MB less intermediate traffic`
  `latency: median <ms> ms, ...`
and `kiln info --fused` for the intermediate traffic without fusion, and prints one line
per model.
"""

import argparse
import os
import re
import subprocess
import sys

LATENCY_RE = re.compile(r"^latency: median (\S+) ms", re.M)
FUSED_RE = re.compile(r"^fused (\d+) kernels into (\d+)", re.M)
COMPILED_RE = re.compile(r"^compiled (\d+) kernels", re.M)
TRAFFIC_RE = re.compile(
    r"intermediate traffic: (\S+) MB without fusion, (\S+) MB no longer written/read \((\S+)% less\)")


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--names", default="resnet18,mobilenet_v2,encoder")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    exporters = {"encoder": "export_encoder.py"}
    for name in args.names.split(","):
        if not os.path.exists(os.path.join(args.models, name + ".onnx")):
            script = os.path.join(here, "..", "tests", "models", exporters.get(name, "export_models.py"))
            cmd = [sys.executable, script, "--out", args.models]
            if name not in exporters:
                cmd += ["--models", name]
            run(cmd)

    print(f"batch 1, {args.threads} threads, median of {args.repeat} runs, same run for -O0 and -O1")
    print(f"{'model':<14}{'kernels -O0':>12}{'-O1':>6}{'traffic MB':>12}{'saved':>8}"
          f"{'-O0 ms':>9}{'-O1 ms':>9}{'speedup':>9}")
    failed = False
    for name in args.names.split(","):
        model = os.path.join(args.models, name + ".onnx")
        inp = os.path.join(args.models, name + "_input.npy")
        try:
            info = run([args.kiln, "info", model, "--fused"])
            t = TRAFFIC_RE.search(info)
            lat = {}
            kernels = {}
            for level in ("-O0", "-O1"):
                out = run([args.kiln, "run", model, level, "--threads", str(args.threads),
                           "--input", f"input={inp}", "--repeat", str(args.repeat)])
                lat[level] = float(LATENCY_RE.search(out).group(1))
                kernels[level] = int(COMPILED_RE.search(out).group(1))
            print(f"{name:<14}{kernels['-O0']:>12}{kernels['-O1']:>6}{float(t.group(1)):>12.1f}"
                  f"{float(t.group(3)):>7.1f}%{lat['-O0']:>9.2f}{lat['-O1']:>9.2f}"
                  f"{lat['-O0'] / lat['-O1']:>8.2f}x")
        except Exception as e:
            failed = True
            print(f"{name:<14} FAILED: {e}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
