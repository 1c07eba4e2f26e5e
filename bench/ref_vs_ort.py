#!/usr/bin/env python3
"""Compare kiln's reference executor with onnxruntime on the exported test models.

  ref_vs_ort.py --kiln PATH --models DIR [--repeat 5] [--names resnet18,mobilenet_v2]

DIR is what tests/models/export_models.py writes (ctest's models_export puts it in
<build>/models): <name>.onnx and <name>_input.npy. For each model this measures the
batch-1 latency of
  - kiln:  `kiln run <name>.onnx --target ref --input input=<name>_input.npy --repeat N`,
           parsing the line it prints: `latency: median <ms> ms, min <ms> ms over <N> runs`
  - onnxruntime (CPUExecutionProvider) with intra_op_num_threads=1 and with its default
    thread count: median of N runs after warm-up runs,
and prints a table with the ratio kiln / ORT-1-thread (the fair comparison: the
reference executor is single-threaded). Exits 1 if any measurement failed.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import numpy as np

MODELS = ("resnet18", "mobilenet_v2")
LATENCY_RE = re.compile(
    r"^latency: median (?P<median>\S+) ms, min (?P<min>\S+) ms over (?P<runs>\d+) runs\s*$",
    re.MULTILINE)


class BenchError(Exception):
    pass


def parse_kiln_latency(text):
    """Returns (median_ms, min_ms, runs) from kiln's `--repeat` output."""
    m = LATENCY_RE.search(text)
    if not m:
        raise BenchError("no 'latency: median <ms> ms, min <ms> ms over <N> runs' line "
                         "in kiln's output")
    try:
        return float(m["median"]), float(m["min"]), int(m["runs"])
    except ValueError as e:
        raise BenchError(f"cannot parse kiln's latency line {m[0]!r}: {e}") from None


def kiln_latency(kiln, model, npy, repeat, timeout):
    cmd = [kiln, "run", model, "--target", "ref", "--input", f"input={npy}",
           "--repeat", str(repeat)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchError(f"timed out after {timeout} s: {' '.join(cmd)}") from None
    except OSError as e:
        raise BenchError(f"cannot run {kiln}: {e}") from None
    out = p.stdout + p.stderr
    if p.returncode != 0:
        tail = "\n".join(out.strip().splitlines()[-10:])
        raise BenchError(f"exit status {p.returncode}: {' '.join(cmd)}\n{tail}")
    median, _, runs = parse_kiln_latency(out)
    if runs != repeat:
        print(f"note: kiln reported {runs} runs, asked for {repeat}", file=sys.stderr)
    return median


def ort_latency(model, x, repeat, warmup, threads):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = threads
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    feeds = {sess.get_inputs()[0].name: x}
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def fmt(v):
    return f"{v:.2f}" if isinstance(v, float) else v


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Compare kiln's reference executor with onnxruntime (batch 1).")
    ap.add_argument("--kiln", required=True, help="path to the kiln CLI")
    ap.add_argument("--models", required=True,
                    help="directory written by tests/models/export_models.py")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per measurement")
    ap.add_argument("--warmup", type=int, default=2, help="untimed onnxruntime runs first")
    ap.add_argument("--names", default=",".join(MODELS),
                    help=f"comma-separated models (default {','.join(MODELS)})")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per kiln run")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.warmup < 0:
        ap.error("--repeat must be >= 1 and --warmup >= 0")
    if not os.access(args.kiln, os.X_OK):
        ap.error(f"--kiln {args.kiln} is not an executable file")

    import onnxruntime as ort
    print(f"onnxruntime {ort.__version__}, {os.cpu_count()} CPUs, batch 1, "
          f"median of {args.repeat} runs")

    rows, failed = [], False
    for name in [n.strip() for n in args.names.split(",") if n.strip()]:
        model = os.path.join(args.models, f"{name}.onnx")
        npy = os.path.join(args.models, f"{name}_input.npy")
        if not (os.path.isfile(model) and os.path.isfile(npy)):
            print(f"{name}: {model} or {npy} missing; run tests/models/export_models.py "
                  f"--out {args.models}", file=sys.stderr)
            failed = True
            continue
        x = np.load(npy)
        row = {"model": name}
        try:
            row["kiln"] = kiln_latency(args.kiln, model, npy, args.repeat, args.timeout)
        except BenchError as e:
            print(f"{name}: kiln: {e}", file=sys.stderr)
            row["kiln"], failed = "error", True
        row["ort1"] = ort_latency(model, x, args.repeat, args.warmup, threads=1)
        row["ortd"] = ort_latency(model, x, args.repeat, args.warmup, threads=0)
        if isinstance(row["kiln"], float) and row["ort1"] > 0:
            row["ratio"] = f"{row['kiln'] / row['ort1']:.1f}x"
        else:
            row["ratio"] = "-"
        rows.append(row)

    header = ("model", "kiln ref ms", "ORT 1-thread ms", "ORT default ms", "kiln/ORT-1t")
    cells = [[r["model"], fmt(r["kiln"]), fmt(r["ort1"]), fmt(r["ortd"]), r["ratio"]]
             for r in rows]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *cells)]
    for line in [header] + cells:
        print("  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                        for i, (c, w) in enumerate(zip(line, widths))))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
