#!/usr/bin/env python3
"""Issue 20's archetype table: every archetype model on every kiln target,
checked against onnxruntime, with kiln's latency next to onnxruntime's.

  archetypes.py --kiln build/kiln --models DIR [--names a,b] [--targets cpu,opencl,vulkan]
                [--threads 2] [--repeat 5] [--timeout 600] [--json FILE]

DIR holds what tests/models/export_archetypes.py writes (ctest's
models_export_archetypes* put it in <build>/models; run the exporter first);
a model without its DIR/NAME.archetype.json is reported as not exported. For
each model and target, in one run:
  - `kiln run NAME.onnx --target T --strict --threads N --input input=...
     --output TMP --repeat R` (a warm-up run, then R timed ones), with a timeout
     (the detectors on GPU targets without --strict: their host nodes run on
     the CPU between the stages);
  - each output kiln wrote is compared with onnxruntime's: max abs error, max
    relative error (|kiln - ort| / max|ort|), and within the manifest's
    rtol/atol or not (integer outputs must match exactly);
  - onnxruntime's latency (CPUExecutionProvider, N intra-op threads, median of
    R runs after warm-up), measured once per model.
kiln's latency is its median (and min) over the R runs; the ratio uses the
median. On a loaded machine the median of a multi-threaded run suffers most
(threads wait at the barriers for a core), so compare the min as well.
A run that fails reports kiln's first error line. Exits 1 if any run failed or
mismatched (the table is printed either way).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models_cpu import LATENCY_RE, ort_latency  # noqa: E402


def first_error(text):
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower() or "unsupported" in ln.lower() or "refus" in ln.lower():
            return ln
    return lines[-1] if lines else "(no output)"


def compare(entry, out_dir):
    """(max abs error, max rel error, within tolerance, note) over every output."""
    max_abs, max_rel, ok, notes = 0.0, 0.0, True, []
    for name, ref_path in entry["outputs"].items():
        ref = np.load(ref_path)
        got_path = os.path.join(out_dir, name + ".npy")
        if not os.path.isfile(got_path):
            return None, None, False, f"kiln wrote no output {name}"
        got = np.load(got_path)
        if got.shape != ref.shape:
            return None, None, False, f"output {name}: shape {got.shape}, onnxruntime {ref.shape}"
        if ref.dtype.kind != "f":
            if not np.array_equal(got, ref):
                ok = False
                notes.append(f"{name}: {int(np.sum(got != ref))} of {ref.size} differ")
            continue
        if ref.size == 0:
            continue
        d = np.abs(got.astype(np.float64) - ref.astype(np.float64))
        a = float(np.max(d))
        scale = float(np.max(np.abs(ref))) or 1.0
        max_abs, max_rel = max(max_abs, a), max(max_rel, a / scale)
        if not np.allclose(got, ref, rtol=entry["rtol"], atol=entry["atol"]) or not np.all(np.isfinite(got)):
            ok = False
            notes.append(f"{name}: outside rtol {entry['rtol']:g} atol {entry['atol']:g}")
    return max_abs, max_rel, ok, "; ".join(notes)


def run_one(args, entry, target):
    with tempfile.TemporaryDirectory() as out_dir:
        # the detectors' host nodes run on the CPU between a GPU target's stages
        # (printed as fallback lines), which --strict refuses
        strict = [] if entry["tier"] == "detector" and target != "cpu" else ["--strict"]
        cmd = [args.kiln, "run", entry["onnx"], "--target", target, *strict,
               "--threads", str(args.threads), "--output", out_dir, "--repeat", str(args.repeat)]
        for name, path in entry["inputs"].items():
            cmd += ["--input", f"{name}={path}"]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            return {"status": "TIMEOUT", "note": f"no result in {args.timeout} s"}
        out = p.stdout + p.stderr
        if p.returncode != 0:
            return {"status": "FAIL", "note": first_error(out)}
        m = LATENCY_RE.search(out)
        max_abs, max_rel, ok, note = compare(entry, out_dir)
        return {"status": "ok" if ok else "MISMATCH", "note": note,
                "max_abs": max_abs, "max_rel": max_rel,
                "kiln_ms": float(m.group(1)) if m else None,
                "kiln_min_ms": float(m.group(2)) if m else None}


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models", required=True, help="export_archetypes.py's output directory")
    ap.add_argument("--names", default="", help="comma-separated subset (default: every exported model)")
    ap.add_argument("--targets", default="cpu,opencl,vulkan")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--timeout", type=int, default=600, help="seconds per kiln run")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "models"))
    from export_archetypes import ARCHETYPES  # noqa: E402 (only the names: torch is imported lazily)

    # tier "bench" (ViT-B/16 at 224x224) only when named: it is bench/models_peers.py's
    names = [n for n in args.names.split(",") if n] or [n for n in ARCHETYPES if ARCHETYPES[n][1] != "bench"]
    manifest = {}
    for name in names:
        path = os.path.join(args.models, f"{name}.archetype.json")
        if os.path.isfile(path):
            with open(path) as f:
                manifest[name] = json.load(f)
    targets = [t for t in args.targets.split(",") if t]

    print("| model | target | result | max abs err | max rel err | kiln ms (min) | ORT ms | kiln/ORT | note |")
    print("|---|---|---|---|---|---|---|---|---|")
    results, failed = {}, False
    for name in names:
        entry = manifest.get(name)
        if entry is None:
            print(f"| {name} | - | NOT EXPORTED | | | | | | no {name}.archetype.json: see export_archetypes.py |")
            failed = True
            continue
        x = {k: np.load(v) for k, v in entry["inputs"].items()}
        ort_ms = ort_latency(entry["onnx"], x["input"], args.threads, args.repeat)
        for target in targets:
            r = run_one(args, entry, target)
            r["ort_ms"] = ort_ms
            results.setdefault(name, {})[target] = r
            failed |= r["status"] != "ok"
            ratio = r["kiln_ms"] / ort_ms if r.get("kiln_ms") else None
            print(f"| {name} | {target} | {r['status']} | {fmt(r.get('max_abs'), '.2g')} | "
                  f"{fmt(r.get('max_rel'), '.2g')} | {fmt(r.get('kiln_ms'), '.1f')} ({fmt(r.get('kiln_min_ms'), '.1f')}) | "
                  f"{ort_ms:.1f} | "
                  f"{fmt(ratio, '.1f')} | {r['note'][:160]} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
