#!/usr/bin/env python3
"""Whole-model batch-1 latency: kiln CPU backend vs onnxruntime vs PyTorch, one run.

  models_peers.py --kiln build/kiln --models DIR [--names resnet18,mobilenet_v2,...]
                  [--threads N] [--repeat N] [--json FILE] [--no-torch]
                  [--layouts auto,nchw] [--rounds R] [--extra encoder]

DIR holds what tests/models/export_models.py writes (<name>.onnx, <name>_input.npy);
missing torchvision models are exported first. The default --names are every torchvision
CNN the tests export (ResNet-18/-50, MobileNetV2, EfficientNet-B0, DenseNet-121,
SqueezeNet 1.1, ShuffleNetV2 x1.0), and the table ends with the geometric mean of
kiln/ORT over the models both ran (issue 22's goal is <= 1.0). --extra (default without --names: encoder, the
transformer encoder block of tests/models/export_encoder.py, exported when missing) names models
measured the same way after them (kiln and onnxruntime; PyTorch runs the torchvision models only)
and reported below the geometric mean, outside it ('' for none).
For each model, with the same input,
the same thread count and the median of --repeat runs after warm-up:
  - kiln: `kiln run --target cpu --threads N --input input=<npy> --repeat N` with a
    fresh KILN_CACHE_DIR, parsing `latency: median X ms` and the cold compile time
    (the parsing is bench/models_cpu.py's);
  - onnxruntime: CPUExecutionProvider, intra_op_num_threads=N, all optimisations;
  - PyTorch (optional; skipped with a note when torch/torchvision are not importable,
    or with --no-torch): eager, torch.set_num_threads(N), no_grad, eval. The model is
    built by export_models.build_model, i.e. the same seeded weights as the ONNX
    file (its output is checked against <name>_ort.npy when present), but BatchNorm
    is not folded and nothing is fused: this is PyTorch as users run it.
--layouts runs kiln once per CPU memory layout (`kiln run --layout L`: auto is the
layout pass, NCHWc where it chooses; nchw turns it off), reported as "kiln cpu"
(auto) and "kiln cpu nchw". --rounds R measures every runtime R times in turn
(kiln auto, kiln nchw, onnxruntime, [PyTorch], then again), so a loaded machine
slows them alike, and reports the median of the R medians; the load average
before and after goes into the notes. kiln's compile cache is cold for its first
round only (the compile time is that round's). --cpu-time reports CPU time per run
(user + system, all threads) instead of the wall-clock median: on a machine loaded by
other jobs wall time mostly measures the scheduler, CPU time the work (kiln: the
rusage of `kiln run --repeat N+1` minus that of `--repeat 1`; onnxruntime:
time.process_time over N runs after warm-up).
Prints a line per model as it finishes (with an ETA), then a table; --json writes
{"threads", "repeat", "machine", "versions", "notes", "models": [{"name",
"latency_ms": {"kiln cpu", "onnxruntime", "pytorch"}, "compile_s", "kernels",
"errors"}]}, which bench/plot.py --models-json draws. Exit status 1 when any
runtime failed on any model (the others still run), 2 on a bad command line.
"""

import argparse
import json
import math
import os
import resource
import subprocess
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(HERE, "..", "tests", "models"))
import models_cpu  # noqa: E402  (LATENCY_RE, compile_figures, run, ort_latency)

KILN, ORT, TORCH = "kiln cpu", "onnxruntime", "pytorch"
KILN_NCHW = "kiln cpu nchw"
# every torchvision CNN tests/models/export_models.py exports
CNNS = ("resnet18", "mobilenet_v2", "resnet50", "efficientnet_b0", "densenet121", "squeezenet1_1",
        "shufflenet_v2_x1_0")
WARMUP = 3


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def kiln_latency(kiln, model, inp, threads, repeat, layout=None, cache=None):
    """(median ms, cold compile s or None, kernel count or None); |cache|: a
    compile cache folder to use (else a fresh one)."""
    with tempfile.TemporaryDirectory() as fresh:
        env = dict(os.environ, KILN_CACHE_DIR=cache or fresh)
        cmd = [kiln, "run", model, "--target", "cpu", "--threads", str(threads),
               "--input", f"input={inp}", "--repeat", str(repeat)]
        if layout:
            cmd += ["--layout", layout]
        out = models_cpu.run(cmd, env=env)
    m = models_cpu.LATENCY_RE.search(out)
    if not m:
        raise RuntimeError(f"no 'latency: median' line in kiln's output:\n{out}")
    c = models_cpu.compile_figures(out)
    return float(m.group(1)), c[1] if c else None, c[0] if c else None


def kiln_cpu_ms(kiln, model, inp, threads, repeat, layout, cache):
    """CPU ms per run of `kiln run` (the difference of repeat+1 and 1 runs)."""
    def used(n):
        cmd = [kiln, "run", model, "--target", "cpu", "--threads", str(threads),
               "--input", f"input={inp}", "--repeat", str(n)] + (["--layout", layout] if layout else [])
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, KILN_CACHE_DIR=cache))
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    one = used(1)
    return (used(repeat + 1) - one) * 1e3 / repeat


def ort_cpu_ms(model, x, threads, repeat):
    sess, name = models_cpu.ort_session(model, x, threads)
    t0 = time.process_time()
    for _ in range(repeat):
        sess.run(None, {name: x})
    return (time.process_time() - t0) * 1e3 / repeat


def torch_available():
    """None when PyTorch can run, else why not."""
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except Exception as e:  # ImportError, or a broken install raising something else
        return f"{type(e).__name__}: {e}"
    return None


def torch_latency(name, x, threads, repeat, ref_path):
    """(median ms, max |torch - onnxruntime reference| or None)."""
    import torch
    import torchvision
    from export_models import build_model

    if not hasattr(torchvision.models, name):
        raise RuntimeError(f"torchvision has no model '{name}'")
    torch.set_num_threads(threads)
    model = build_model(name)
    xt = torch.from_numpy(x)
    with torch.no_grad():
        y = model(xt)
        for _ in range(WARMUP - 1):
            model(xt)
        ts = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            model(xt)
            ts.append((time.perf_counter() - t0) * 1e3)
    diff = None
    if os.path.exists(ref_path):
        ref = np.load(ref_path)
        if ref.shape == tuple(y.shape):
            diff = float(np.max(np.abs(ref - y.numpy())))
    return statistics.median(ts), diff


def export_missing(models_dir, names):
    missing = [n for n in names if not os.path.exists(os.path.join(models_dir, n + ".onnx"))]
    if not missing:
        return
    if "encoder" in missing:
        print(f"exporting encoder into {models_dir} ...", flush=True)
        models_cpu.run([sys.executable, os.path.join(HERE, "..", "tests", "models", "export_encoder.py"),
                        "--out", models_dir])
        missing.remove("encoder")
        if not missing:
            return
    import export_models
    known = [n for n in missing if n in export_models.MODELS]
    if known:
        print(f"exporting {', '.join(known)} into {models_dir} ...", flush=True)
        models_cpu.run([sys.executable, os.path.join(HERE, "..", "tests", "models", "export_models.py"),
                        "--out", models_dir, "--models", ",".join(known)])


def fmt(v, spec=".2f"):
    return "-" if v is None else format(v, spec)


def ratio(a, b):
    return None if a is None or not b else a / b


def geomean(values):
    """Geometric mean of the positive values, None when there are none."""
    v = [x for x in values if x is not None and x > 0]
    return None if not v else math.exp(sum(math.log(x) for x in v) / len(v))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--kiln", required=True, help="the kiln CLI (build/kiln)")
    ap.add_argument("--models", required=True, help="folder of <name>.onnx + <name>_input.npy")
    ap.add_argument("--names", help="models to run (default: every CNN above, then --extra)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--no-torch", action="store_true", help="skip PyTorch")
    ap.add_argument("--layouts", default="auto", help="kiln's CPU layouts to run: auto, nchw or both")
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds (median of their medians)")
    ap.add_argument("--cpu-time", action="store_true", help="CPU time per run instead of wall-clock latency")
    ap.add_argument("--extra",
                    help="models after the CNNs, left out of the geometric mean "
                         "(default: encoder without --names, none with it; '' for none)")
    args = ap.parse_args(argv)
    if args.threads < 1 or args.repeat < 1 or args.rounds < 1:
        ap.error("--threads, --repeat and --rounds must be >= 1")
    layouts = [x for x in args.layouts.split(",") if x]
    if not layouts or any(x not in ("auto", "nchw") for x in layouts):
        ap.error("--layouts: a comma-separated list of auto and nchw")
    names = [n for n in (args.names if args.names is not None else ",".join(CNNS)).split(",") if n]
    if not names:
        ap.error("--names is empty")
    if args.extra is None:
        args.extra = "" if args.names is not None else "encoder"
    extra = [n for n in args.extra.split(",") if n and n not in names]
    names += extra

    notes = []
    try:
        export_missing(args.models, names)
    except Exception as e:  # each missing model then fails on its own below
        print(f"export failed: {e}", file=sys.stderr)

    import onnxruntime
    versions = {"onnxruntime": onnxruntime.__version__, "numpy": np.__version__}
    why_no_torch = "--no-torch given" if args.no_torch else torch_available()
    if why_no_torch:
        notes.append(f"PyTorch skipped: {why_no_torch}.")
    else:
        import torch
        import torchvision
        versions.update(torch=torch.__version__, torchvision=torchvision.__version__)
        notes.append("PyTorch: eager torchvision model with the same seeded weights as the ONNX "
                     "file (BatchNorm not folded, nothing fused), torch.set_num_threads = threads.")
    kiln_rt = {"auto": KILN, "nchw": KILN_NCHW}
    if args.cpu_time and not why_no_torch:
        why_no_torch = "--cpu-time (not measured for PyTorch)"
        notes.append(f"PyTorch skipped: {why_no_torch}.")
    runtimes = [kiln_rt[x] for x in layouts] + [ORT] + ([] if why_no_torch else [TORCH])
    load0 = os.getloadavg()

    print(f"batch 1, {args.threads} threads, median of {args.repeat} runs after {WARMUP} warm-up "
          f"runs, {args.rounds} interleaved round(s); runtimes: {', '.join(runtimes)}; "
          f"load average {load0[0]:.2f}", flush=True)
    caches = tempfile.TemporaryDirectory()
    rows = []
    failed = False
    t_start = time.perf_counter()
    for k, name in enumerate(names):
        model = os.path.join(args.models, name + ".onnx")
        inp = os.path.join(args.models, name + "_input.npy")
        row = {"name": name, "latency_ms": {}, "compile_s": None, "kernels": None, "errors": {},
               "in_geomean": name not in extra}
        if not os.path.exists(model) or not os.path.exists(inp):
            row["errors"]["all"] = f"{model} or {inp} missing"
        else:
            x = np.load(inp)
            got = {r: [] for r in runtimes}
            for rnd in range(args.rounds):
                for lay in layouts:
                    r = kiln_rt[lay]
                    if r in row["errors"]:
                        continue
                    cache = os.path.join(caches.name, f"{name}-{lay}")
                    os.makedirs(cache, exist_ok=True)
                    try:
                        # one layout per cache folder: cold on the first round only
                        ms, comp, kern = kiln_latency(args.kiln, model, inp, args.threads,
                                                      1 if args.cpu_time else args.repeat,
                                                      None if lay == "auto" and len(layouts) == 1 else lay,
                                                      cache)
                        if args.cpu_time:
                            ms = kiln_cpu_ms(args.kiln, model, inp, args.threads, args.repeat,
                                             None if lay == "auto" and len(layouts) == 1 else lay, cache)
                        got[r].append(ms)
                        if rnd == 0 and r == runtimes[0]:
                            row["compile_s"], row["kernels"] = comp, kern
                        if rnd == 0:
                            row.setdefault("compile_s_by_layout", {})[lay] = comp
                            row.setdefault("kernels_by_layout", {})[lay] = kern
                    except Exception as e:
                        row["errors"][r] = str(e)
                if ORT not in row["errors"]:
                    try:
                        got[ORT].append(ort_cpu_ms(model, x, args.threads, args.repeat) if args.cpu_time
                                        else models_cpu.ort_latency(model, x, args.threads, args.repeat))
                    except Exception as e:
                        row["errors"][ORT] = str(e)
                if TORCH in runtimes and TORCH not in row["errors"] and name not in extra:  # torchvision's only
                    try:
                        ms, diff = torch_latency(name, x, args.threads, args.repeat,
                                                 os.path.join(args.models, name + "_ort.npy"))
                        got[TORCH].append(ms)
                        row["torch_vs_ort_max_abs"] = diff
                    except Exception as e:
                        row["errors"][TORCH] = str(e)
            for r, v in got.items():
                if v and r not in row["errors"]:
                    row["latency_ms"][r] = statistics.median(v)
                    if args.rounds > 1:
                        row.setdefault("rounds_ms", {})[r] = v
        rows.append(row)
        failed |= bool(row["errors"])
        elapsed = time.perf_counter() - t_start
        eta = elapsed / (k + 1) * (len(names) - k - 1)
        got = ", ".join(f"{r} {row['latency_ms'][r]:.2f} ms" for r in runtimes if r in row["latency_ms"])
        bad = ", ".join(f"{r} FAILED" for r in row["errors"])
        print(f"[{k + 1}/{len(names)}] {name}: {', '.join(s for s in (got, bad) if s)}  "
              f"(elapsed {elapsed:.0f} s, ETA {eta:.0f} s)", flush=True)
        for r, e in row["errors"].items():
            print(f"  {name} {r}: {e}", file=sys.stderr)

    caches.cleanup()
    load1 = os.getloadavg()
    notes.append(f"load average {load0[0]:.2f} / {load0[1]:.2f} / {load0[2]:.2f} before, "
                 f"{load1[0]:.2f} / {load1[1]:.2f} / {load1[2]:.2f} after ({os.cpu_count()} CPUs)")
    diffs = [r["torch_vs_ort_max_abs"] for r in rows if r.get("torch_vs_ort_max_abs") is not None]
    if diffs:
        notes.append(f"PyTorch outputs match the onnxruntime reference outputs (<name>_ort.npy) "
                     f"to max |diff| {max(diffs):.1e}: same weights, same computation.")
    print()
    w = max([14] + [len(r["name"]) + 1 for r in rows])  # model column
    head = f"{'model':<{w}}" + "".join(f"{r + ' ms':>16}" for r in runtimes)
    head += f"{'kiln/ORT':>10}" + (f"{'nchw/ORT':>10}" if KILN_NCHW in runtimes and KILN in runtimes else "")
    head += f"{'kiln/torch':>12}" if TORCH in runtimes else ""
    head += f"{'compile s':>11}"
    print(head)
    def table_line(row):
        lat = row["latency_ms"]
        line = f"{row['name']:<{w}}" + "".join(f"{fmt(lat.get(r)):>16}" for r in runtimes)
        first = KILN if KILN in runtimes else KILN_NCHW
        line += f"{fmt(ratio(lat.get(first), lat.get(ORT))) + 'x':>10}"
        if KILN_NCHW in runtimes and KILN in runtimes:
            line += f"{fmt(ratio(lat.get(KILN_NCHW), lat.get(ORT))) + 'x':>10}"
        if TORCH in runtimes:
            line += f"{fmt(ratio(lat.get(first), lat.get(TORCH))) + 'x':>12}"
        line += f"{fmt(row['compile_s']):>11}"
        print(line)
    for row in rows:
        if row["in_geomean"]:
            table_line(row)
    first = KILN if KILN in runtimes else KILN_NCHW
    ratios = [ratio(r["latency_ms"].get(first), r["latency_ms"].get(ORT)) for r in rows if r["in_geomean"]]
    gm = geomean(ratios)
    n_gm = sum(1 for x in ratios if x is not None and x > 0)
    print(f"{'geomean':<{w}}" + " " * (16 * len(runtimes)) + f"{fmt(gm) + 'x':>10}"
          + f"   kiln/ORT over {n_gm} model(s)")
    for row in rows:
        if not row["in_geomean"]:
            table_line(row)
    if extra:
        print(f"(not in the geometric mean: {', '.join(extra)})")
    if args.cpu_time:
        print("figures are CPU ms per run (user + system, all threads), not latency")
    print("ratios < 1 mean kiln is faster; compile = cold cache (lowering + codegen + cc + load)")
    for n in notes:
        print(f"note: {n}")

    if args.json:
        res = {"threads": args.threads, "repeat": args.repeat, "rounds": args.rounds, "layouts": layouts,
               "metric": "cpu_ms" if args.cpu_time else "latency_ms",
               "machine": {"cpu": cpu_name(), "threads": os.cpu_count()},
               "versions": versions, "notes": notes, "models": rows,
               "geomean_kiln_per_ort": gm}
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
        print(f"wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
