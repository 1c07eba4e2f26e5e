#!/usr/bin/env python3
"""Block-sparse weights benchmark (issue 27 item 4): what `kiln prune
--sparsity` and the CPU's block-sparse conv kernel buy and cost.

  sparse.py --kiln BUILD/kiln --out DIR [--resnet MODELS_DIR] [--sparsity 0.8]
            [--threads 1] [--repeat 15] [--sweep 0,0.2,0.35,0.5] [--skip-digits] [--skip-resnet]

1. The digits CNN (tests/models/train_digits.py, seeded): held-out top-1 in
   onnxruntime before and after `kiln prune --sparsity S` for several S,
   every conv/GEMM layer sparsified, and only the conv (--keep the Gemms, the
   layers the sparse kernel does not run), without fine-tuning.
2. ResNet-18 (export_models.py's resnet18.onnx, seeded random weights;
   exported into DIR without --resnet): its 3x3 convs at block sparsity S
   (the stem, the 1x1 downsamples and the fc kept dense), compiled twice for
   the CPU from the same sparse model -- the compiler option sparse=on (the
   block-sparse kernel) and sparse=off (the dense kernel) -- and run
   interleaved in this one process (A B A B ..., medians): whole-model
   latency (wall and process CPU time), each 3x3 conv's time from profiled
   sessions (also interleaved; the least of the runs),
   module and weight bytes, and the largest difference between the two
   outputs. sparse=auto's choice is checked against the measured one.

3. With --sweep: single 3x3 convs of ResNet-18's four shapes at those
   zero-block fractions, sparse=on vs off (the measurements behind AUTO's
   rule, lowering/sparse_block.h).

The machine's load (os.getloadavg) is printed with every figure: compare
only the ratios of one run. Writes DIR/sparse.md and DIR/sparse.json.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)
from prune import sh, top1  # noqa: E402  (bench/prune.py's: a command's output, onnxruntime top-1)


def load():
    return "load %.1f/%.1f/%.1f on %d cores" % (*os.getloadavg(), os.cpu_count())


def digits(args):
    d = os.path.join(args.out, "digits")
    sh([sys.executable, os.path.join(ROOT, "tests", "models", "train_digits.py"), "--out", d])
    cnn = os.path.join(d, "digits_cnn.onnx")
    x = np.load(os.path.join(d, "test_images.npy"))
    y = np.load(os.path.join(d, "test_labels.npy"))
    import onnx
    gemms = ",".join(n.name for n in onnx.load(cnn).graph.node if n.op_type in ("Gemm", "MatMul"))
    rows = [{"sparsity": 0.0, "top1_all": top1(cnn, x, y), "top1_conv": top1(cnn, x, y)}]
    for s in args.digits_sparsities.split(","):
        row = {"sparsity": float(s)}
        for key, extra in (("top1_all", []), ("top1_conv", ["--keep", gemms])):
            out = os.path.join(d, f"cnn_sparse_{s}_{key}.onnx")
            sh([args.kiln, "prune", cnn, "--sparsity", s, "-o", out, *extra])
            row[key] = top1(out, x, y)
        rows.append(row)
    return rows


def resnet_model(args):
    if args.resnet:
        return os.path.join(args.resnet, "resnet18.onnx")
    m = os.path.join(args.out, "models")
    sh([sys.executable, os.path.join(ROOT, "tests", "models", "export_models.py"), "--out", m, "--models", "resnet18"])
    return os.path.join(m, "resnet18.onnx")


def median_runs(sessions, x, repeat):
    """Interleaved runs (A B A B ...) after a warm-up each: median wall seconds per session, and
    median CPU seconds of this process (with 1 thread, the one worker's: the CPU time leaves
    out the time the process waited for a core, which on a loaded machine is most of the wall
    time)."""
    for s in sessions:
        s.run(x)
    t = [[] for _ in sessions]
    c = [[] for _ in sessions]
    for r in range(repeat):
        # alternate which goes first, so neither always follows the other
        for i, s in (list(enumerate(sessions)) if r % 2 == 0 else list(enumerate(sessions))[::-1]):
            t0, c0 = time.perf_counter(), time.process_time()
            s.run(x)
            t[i].append(time.perf_counter() - t0)
            c[i].append(time.process_time() - c0)
    return [float(np.median(v)) for v in t], [float(np.median(v)) for v in c]


def resnet(args):
    import kiln
    import onnx
    src = resnet_model(args)
    m = onnx.load(src)
    inits = {i.name: i for i in m.graph.initializer}
    keep = []
    convs3 = []
    for n in m.graph.node:
        if n.op_type == "Conv" and len(n.input) > 1 and n.input[1] in inits:
            dims = list(inits[n.input[1]].dims)
            if dims[2:] == [3, 3] and dims[1] > 1:
                convs3.append(n.name)
                continue
        if n.op_type in ("Conv", "Gemm", "MatMul"):
            keep.append(n.name)
    out = os.path.join(args.out, f"resnet18_sparse_{args.sparsity}.onnx")
    log = sh([args.kiln, "prune", src, "--sparsity", str(args.sparsity), "--keep", ",".join(keep), "-o", out])
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    feeds = {"input": x}
    mods = {}
    for mode in ("on", "off", "auto"):
        t0 = time.perf_counter()
        mods[mode] = kiln.compile(out, target="cpu", threads=args.threads, dims={"N": 1}, sparse=mode)
        print(f"compiled sparse={mode} in {time.perf_counter() - t0:.1f} s", flush=True)
    lines = {mode: [e["text"] for e in mods[mode].report if e["section"] == "sparse" and e["key"] == "line"]
             for mode in mods}
    auto_sparse = sum("block-sparse kernel" in l for l in lines["auto"])
    ss = {mode: mods[mode].session(threads=args.threads) for mode in ("on", "off")}
    y_on, y_off = ss["on"].run(feeds)[0], ss["off"].run(feeds)[0]
    diff = float(np.abs(y_on - y_off).max() / max(1e-12, np.abs(y_off).max()))
    ld0 = load()
    (t_on, t_off), (c_on, c_off) = median_runs([ss["on"], ss["off"]], feeds, args.repeat)
    ld1 = load()
    # per conv: profiled sessions, interleaved too
    # (each run's last_s per kernel, a conv's kernels summed, the least over runs: on a loaded
    # machine a kernel of several ms is preempted in most runs, a short one in few, so medians
    # of wall time favour the shorter kernel; the least is each one's undisturbed time)
    ps = {mode: mods[mode].session(threads=args.threads, profile=True) for mode in ("on", "off")}
    samples = {}
    for r in range(args.repeat):
        for mode in ("on", "off") if r % 2 else ("off", "on"):
            ps[mode].run(feeds)
            run = {}
            for e in ps[mode].profile():
                if e["node"] in convs3:
                    run[e["node"]] = run.get(e["node"], 0.0) + e["last_s"]
            for k, v in run.items():
                samples.setdefault(k, {}).setdefault(mode, []).append(v)
    per = {k: {m: float(np.min(v)) for m, v in d.items()} for k, d in samples.items()}
    weights = {mode: next((e["value"] for e in mods[mode].report if e["section"] == "plan" and e["key"] == "weights_bytes"), 0)
               for mode in ("on", "off")}
    return {"model": src, "sparsity": args.sparsity, "threads": args.threads, "convs3": len(convs3),
            "auto_sparse_layers": auto_sparse, "latency_ms_sparse": 1e3 * t_on, "latency_ms_dense": 1e3 * t_off,
            "speedup": t_off / t_on, "cpu_ms_sparse": 1e3 * c_on, "cpu_ms_dense": 1e3 * c_off, "load_before": ld0, "load_after": ld1, "max_rel_diff": diff,
            "module_bytes": {m: len(mods[m].data) for m in ("on", "off")}, "weights_bytes": weights,
            "per_conv_ms": {k: {m: 1e3 * v[m] for m in v} for k, v in per.items()}, "prune_log": log,
            "report_on": lines["on"]}


def conv_model(path, C, H, zero, seed=1):
    """One 3x3 conv C -> C on HxW (pad 1) + Relu, |zero| of its 4 x 9 weight blocks zeroed at random."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((C, C, 3, 3)).astype(np.float32)
    for t in range(0, C, 4):
        for c in range(C):
            if rng.random() < zero:
                w[t:t + 4, c] = 0
    b = rng.standard_normal(C).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", kernel_shape=[3, 3], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, H, H])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def sweep(args):
    """AUTO's rule: ResNet-18's 3x3 conv shapes at several zero-block fractions, sparse=on vs off."""
    import kiln
    rows = []
    for C, H in ((64, 56), (128, 28), (256, 14), (512, 7)):
        for z in (float(v) for v in args.sweep.split(",")):
            path = os.path.join(args.out, f"conv{C}_{z}.onnx")
            conv_model(path, C, H, z)
            x = {"x": np.random.default_rng(2).standard_normal((1, C, H, H)).astype(np.float32)}
            ss = [kiln.compile(path, target="cpu", threads=args.threads, sparse=m).session(threads=args.threads)
                  for m in ("on", "off")]
            (t_on, t_off), (c_on, c_off) = median_runs(ss, x, args.repeat)
            rows.append({"C": C, "H": H, "zero": z, "ms_sparse": 1e3 * t_on, "ms_dense": 1e3 * t_off,
                         "cpu_ms_sparse": 1e3 * c_on, "cpu_ms_dense": 1e3 * c_off, "load": load()})
            print(f"conv {C}x{H}x{H} zero {z:.2f}: dense/sparse {t_off / t_on:.2f}x wall, {c_off / c_on:.2f}x CPU",
                  flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--resnet", help="folder with resnet18.onnx (export_models.py); default: export into --out")
    ap.add_argument("--sparsity", type=float, default=0.8)
    ap.add_argument("--digits-sparsities", default="0.5,0.8,0.9")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--skip-digits", action="store_true")
    ap.add_argument("--skip-resnet", action="store_true")
    ap.add_argument("--sweep", help="zero-block fractions, e.g. 0,0.2,0.35,0.5: single 3x3 convs of ResNet-18's "
                    "shapes sparse vs dense at each (AUTO's rule)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    res = {}
    md = []
    if not args.skip_digits:
        res["digits"] = digits(args)
        md += ["## Digits CNN: held-out top-1 (onnxruntime) at block sparsity, no fine-tuning", "",
               "| sparsity | every conv/GEMM layer | the conv only (Gemms kept) |", "| --- | --- | --- |"]
        md += [f"| {r['sparsity']:.2f} | {r['top1_all']:.2f}% | {r['top1_conv']:.2f}% |" for r in res["digits"]]
        md.append("")
    if args.sweep:
        res["sweep"] = sweep(args)
        md += ["## Single 3x3 convs (ResNet-18's shapes): dense / sparse by zero-block fraction", "",
               f"{args.threads} thread(s), {args.repeat} interleaved runs each, medians of wall and process CPU time.", "",
               "| conv | zero blocks | wall | CPU | load |", "| --- | --- | --- | --- | --- |"]
        md += [f"| {q['C']}x{q['H']}x{q['H']} | {100 * q['zero']:.0f}% | {q['ms_dense'] / q['ms_sparse']:.2f}x | "
               f"{q['cpu_ms_dense'] / q['cpu_ms_sparse']:.2f}x | {q['load']} |" for q in res["sweep"]]
        md.append("")
    r = res["resnet18"] = resnet(args) if not args.skip_resnet else None
    if r:
        md += [f"## ResNet-18, its {r['convs3']} 3x3 convs at block sparsity {r['sparsity']} (CPU, {r['threads']} thread(s))", "",
               f"Same sparse model, sparse=on vs sparse=off, {args.repeat} interleaved runs each, medians; "
               f"{r['load_before']} before, {r['load_after']} after.", "",
               "| | block-sparse | dense | dense / sparse |", "| --- | --- | --- | --- |",
               f"| whole model, wall | {r['latency_ms_sparse']:.2f} ms | {r['latency_ms_dense']:.2f} ms | {r['speedup']:.2f}x |"]
        if r["threads"] == 1:
            md.append(f"| whole model, CPU time of the process | {r['cpu_ms_sparse']:.2f} ms | {r['cpu_ms_dense']:.2f} ms | "
                      f"{r['cpu_ms_dense'] / r['cpu_ms_sparse']:.2f}x |")
        md.append("| per 3x3 conv (profiled sessions, wall, least of the runs): | | | |")
        tot = {"on": 0.0, "off": 0.0}
        for k, v in r["per_conv_ms"].items():
            if "on" in v and "off" in v:
                tot["on"] += v["on"]
                tot["off"] += v["off"]
                md.append(f"| {k} | {v['on']:.3f} ms | {v['off']:.3f} ms | {v['off'] / v['on']:.2f}x |")
        if tot["on"] > 0:
            md.append(f"| all 3x3 convs (profiled) | {tot['on']:.2f} ms | {tot['off']:.2f} ms | {tot['off'] / tot['on']:.2f}x |")
        md += ["", f"Weights in the module: {r['weights_bytes']['on'] / 1e6:.2f} MB block-sparse vs "
               f"{r['weights_bytes']['off'] / 1e6:.2f} MB dense (module files {r['module_bytes']['on'] / 1e6:.2f} vs "
               f"{r['module_bytes']['off'] / 1e6:.2f} MB); outputs differ by {r['max_rel_diff']:.2e} of the largest; "
               f"sparse=auto ran {r['auto_sparse_layers']} of the {r['convs3']} 3x3 convs block-sparse."]
    text = "\n".join(md) + "\n"
    print(text)
    with open(os.path.join(args.out, "sparse.md"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "sparse.json"), "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
