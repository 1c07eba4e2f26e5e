#!/usr/bin/env python3
"""One module for several sequence lengths vs one static module per length (issue 25).

  dyn_seq.py --kiln build/kiln --model dyn_encseq.onnx --seqs 16,64,128,256
             [--batch 1..2 | --range 8..256 [--printed]] [--target cpu|opencl|vulkan] [--work DIR]
             [--threads 1] [--rounds 5] [--repeat 5] [--no-check]

The model has a symbolic sequence dim "seq" inside MatMul, Softmax, Reshape and
Transpose shapes (tests/models/export_dyn_cnn.py writes dyn_encseq.onnx: the encoder
block of export_encoder.py with dynamic_axes on batch and sequence). It is compiled ONCE
with `--dim seq=S1,S2,...` (shape buckets: one static program per length in one module;
with --batch LO..HI the batch is a dynamic range on top) and once per length with
`--dim seq=S` (static). Then, interleaved round by round so that a busy machine slows
both alike, `kiln run MODULE --threads T --repeat R` (random inputs; the bucketed module
at `--dim seq=S`), parsing `latency: median <ms> ms`; with --threads 1 also the CPU time
one run costs (getrusage of the child: (CPU of --repeat R+2) - (CPU of --repeat 2), over
R runs), which other processes barely move. Prints per length the medians, the ratio
(bucketed / static; the goal is <= 1.15), the bucketed module's arena at that length
against that length's lower bound (`shape bucket 'seq' = S ...: arena X bytes, lower
bound Y`) and against the static module's bound, and, unless --no-check, the largest difference of its output from the
reference interpreter's on the same input (kiln run MODEL.onnx --target ref).
With --range LO..HI the one module is `--dim batch=1 --dim seq=LO..HI` instead (a range
inside the shapes, lowering/plan_seq.h: one program whose kernels run to the run's
length), its arena the one `kiln run` reports for the length.
--target opencl compiles every module for the OpenCL target (`-t opencl --device none`: no
program binary in the module; the driver's cache serves every run after a first, unmeasured
one) and runs them on its device 0; the goal there is <= 1.3. The device's threads are its
own, so the CPU time (taken at any --threads) sums them: the work a run costs.
--target vulkan the same on the Vulkan target (`-t vulkan`: the range compile asks device 0
for its loop limit; lavapipe here).
--printed (with --range on a GPU target) also compiles the range with KILN_SEQ_GEMM_TEMPLATE=off
(every GEMM a printed kernel) and measures it in the same rounds: per length the CPU time of
a run of the range program with the GEMM template over the one without.
"""

import argparse
import os
import re
import statistics
import sys

import numpy as np

import dyn_common
from dyn_batch import STATIC_RE, measure, run  # the same runs and CPU-time measure as the batch bench

BUCKET_RE = re.compile(r"^shape bucket '[^']*' = (\d+) \(\d+ of \d+\): arena (\d+) bytes, lower bound (\d+)", re.M)
RANGE_RE = re.compile(r"^dynamic dim '[^']*' = (\d+) \(range \d+\.\.\d+\): arena (\d+) bytes, lower bound (\d+)", re.M)
UNIT = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def size_bytes(text):
    """Bytes of a size as `kiln run` prints it ("114.7 KB")."""
    v, u = text.split()
    return float(v) * UNIT[u]


MATCH_RE = re.compile(r"match: (\d+) of (\d+) elements outside .*?max abs err ([^,;\s]+)", re.M)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--seqs", default="16,64,128,256")
    ap.add_argument("--batch", default="1", help="a size, or LO..HI for a dynamic batch on top")
    ap.add_argument("--range", default=None, help="LO..HI: one module for a range of lengths instead of buckets")
    ap.add_argument("--work", default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument("--target", default="cpu", choices=["cpu", "opencl", "vulkan"])
    ap.add_argument("--printed", action="store_true",
                    help="with --range: also the range program without the GEMM template (KILN_SEQ_GEMM_TEMPLATE=off)")
    a = ap.parse_args()
    work = a.work or os.path.dirname(os.path.abspath(a.model))
    os.makedirs(work, exist_ok=True)
    stem = os.path.splitext(os.path.basename(a.model))[0]
    seqs = [int(s) for s in a.seqs.split(",")]
    bdim = a.batch.replace("..", "_")
    gpu = a.target != "cpu"
    tag = f"_{a.target}" if gpu else ""
    target_args = (["-t", a.target] + (["--device", "none"] if a.target == "opencl" else [])) if gpu else []
    goal = 1.3 if gpu else 1.15
    dyn = os.path.join(work, f"{stem}_seq_buckets_b{bdim}{tag}.kiln")
    dyn_dims = ["--dim", f"batch={a.batch}", "--dim", f"seq={a.seqs}"]
    if a.range:
        dyn = os.path.join(work, f"{stem}_seq_range_{a.range.replace('..', '_')}{tag}.kiln")
        dyn_dims = ["--dim", "batch=1", "--dim", f"seq={a.range}"]
    static = {s: os.path.join(work, f"{stem}_b1_s{s}{tag}.kiln") for s in seqs}
    printed = None
    if a.printed and a.range:
        printed = dyn.replace(".kiln", "_printed.kiln")
        if not os.path.exists(printed):
            os.environ["KILN_SEQ_GEMM_TEMPLATE"] = "off"
            run([a.kiln, "compile", a.model, *dyn_dims, "-o", printed] + target_args)
            del os.environ["KILN_SEQ_GEMM_TEMPLATE"]
            print(f"compiled {os.path.basename(printed)} ({' '.join(dyn_dims)}, KILN_SEQ_GEMM_TEMPLATE=off)", flush=True)
    compiles = 0
    for path, dims in [(dyn, dyn_dims)] + \
                      [(static[s], ["--dim", "batch=1", "--dim", f"seq={s}"]) for s in seqs]:
        if not os.path.exists(path):
            run([a.kiln, "compile", a.model, *dims, "-o", path] + target_args)
            compiles += path == dyn
            print(f"compiled {os.path.basename(path)} ({' '.join(dims)})", flush=True)
    err = {}
    if not a.no_check:
        for s in seqs:
            x = np.random.default_rng(s).standard_normal((1, s, 256), dtype=np.float32)
            xin = os.path.join(work, f"{stem}_in_s{s}.npy")
            np.save(xin, x)
            ref = os.path.join(work, f"{stem}_ref_s{s}")
            run([a.kiln, "run", a.model, "--target", "ref", "--input", f"input={xin}", "--output", ref])
            out = run([a.kiln, "run", dyn, "--input", f"input={xin}", "--compare", f"output={ref}/output.npy",
                       "--rtol", "1e-3", "--atol", "1e-4"])
            m = MATCH_RE.search(out)
            err[s] = (int(m.group(1)), float(m.group(3)))
    lat = {(k, s): [] for k in ("dyn", "static", "printed") for s in seqs}
    cpu = {(k, s): [] for k in ("dyn", "static", "printed") for s in seqs}
    mem = {}
    use_cpu = a.threads == 1 or gpu
    if gpu:  # the driver builds (and caches) each program at its first run: not measured
        for s in seqs:
            run([a.kiln, "run", dyn, "--dim", f"seq={s}"])
            run([a.kiln, "run", static[s]])
            if printed:
                run([a.kiln, "run", printed, "--dim", f"seq={s}"])
    for _ in range(a.rounds):
        for s in seqs:
            at1 = ["--dim", "batch=1"] if ".." in a.batch and not a.range else []
            out, w, c = measure([a.kiln, "run", dyn, "--dim", f"seq={s}", *at1, "--threads", str(a.threads)],
                                a.repeat, use_cpu)
            lat[("dyn", s)].append(w)
            cpu[("dyn", s)].append(c)
            m = (RANGE_RE if a.range else BUCKET_RE).search(out)
            mem[("dyn", s)] = (int(m.group(2)), int(m.group(3)))
            out, w, c = measure([a.kiln, "run", static[s], "--threads", str(a.threads)], a.repeat, use_cpu)
            lat[("static", s)].append(w)
            cpu[("static", s)].append(c)
            m = STATIC_RE.search(out)
            mem[("static", s)] = (m.group(1), m.group(2))
            if printed:
                _, w, c = measure([a.kiln, "run", printed, "--dim", f"seq={s}", "--threads", str(a.threads)],
                                  a.repeat, use_cpu)
                lat[("printed", s)].append(w)
                cpu[("printed", s)].append(c)
    what = f"seq={a.range}" if a.range else f"seq={a.seqs}"
    print(f"{stem}: one module for {what} (batch {a.batch if not a.range else 1}; compiled once{'' if compiles else ', cached'}) "
          f"vs a static module per length, batch 1, target {a.target}, {a.threads} thread(s), median of {a.rounds} rounds x median "
          f"of {a.repeat} runs; load {os.getloadavg()[0]:.1f}")
    print("| seq | one module ms (wall) | static ms (wall) | ratio | one module CPU ms | static CPU ms | ratio "
          "| arena | lower bound | arena / bound | static arena (bound) | arena / static bound | vs reference |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    worst = 0.0
    worst_mem = [0.0, 0.0]
    for s in seqs:
        d, st, cells, ratio, (ar, lb), (sa, sl) = dyn_common.row(lat, cpu, mem, s, use_cpu)
        worst = max(worst, ratio)
        chk = "-" if s not in err else f"{err[s][0]} outside, max abs err {err[s][1]:.2g}"
        vs_static = ar / size_bytes(sl)
        worst_mem = [max(worst_mem[0], ar / lb), max(worst_mem[1], vs_static)]
        print(f"| {s} | {d:.2f} | {st:.2f} | {d / st:.3f} | {' | '.join(cells)} | {ar / 1e6:.3f} MB | "
              f"{lb / 1e6:.3f} MB | {ar / lb:.3f} | {sa} ({sl}) | {vs_static:.3f} | {chk} |")
    if printed:
        print("range program with the GEMM template / without it (KILN_SEQ_GEMM_TEMPLATE=off), same rounds:")
        for s in seqs:
            key = cpu if use_cpu else lat
            t, p = statistics.median(key[("dyn", s)]), statistics.median(key[("printed", s)])
            print(f"  seq {s}: {t:.2f} / {p:.2f} ms {'CPU' if use_cpu else 'wall'} = {t / p:.3f} "
                  f"(wall {statistics.median(lat[('dyn', s)]):.2f} / {statistics.median(lat[('printed', s)]):.2f})")
    print(f"worst one module / static ({'CPU time' if use_cpu else 'wall'}): {worst:.3f} (goal <= {goal})")
    print(f"worst arena / its lower bound: {worst_mem[0]:.3f}, / the static module's bound: {worst_mem[1]:.3f} "
          f"(goal <= 1.05; the static bound as printed, 3-4 digits)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
