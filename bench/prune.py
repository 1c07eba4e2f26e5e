#!/usr/bin/env python3
"""`kiln prune` benchmark (issue 27): what structured pruning buys and costs.

  prune.py --kiln BUILD/kiln --out DIR [--resnet MODELS_DIR] [--targets cpu,opencl]
           [--threads 1] [--repeat 50]

1. The digits CNN (tests/models/train_digits.py, seeded): held-out top-1 in
   onnxruntime, parameters, FLOPs and kiln's measured latency (`kiln run
   --repeat`, the minimum and median, batch 1 and batch 64) before and after
   `kiln prune` at ratios 0.25, 0.5, 0.75 and at --calibrate --tolerance T
   for several T, without fine-tuning; then each pruned model fine-tuned by
   tools/finetune_pruned.py (5 epochs, seeded) to show what recovers.
2. With --resnet (export_models.py's folder with resnet18.onnx): ResNet-18 at
   `--flops 0.5` with the latency-aware rounding measured on each target, and
   its latency against the original on that target: the latency reduction
   next to the FLOP reduction.

Writes DIR/prune.md (markdown tables) and DIR/prune.json, and prints both.
"""

import argparse
import json
import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def sh(cmd, timeout=3600):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return r.stdout + r.stderr


def latency(args, model, target, batch):
    out = sh([args.kiln, "run", model, "-t", target, "--dim", f"N={batch}", "--repeat", str(args.repeat),
              "--threads", str(args.threads)])
    m = re.search(r"latency: median ([0-9.]+) ms, min ([0-9.]+) ms", out)
    return float(m.group(2)), float(m.group(1))


def top1(model, x, y):
    import onnxruntime as ort
    s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return 100.0 * float((s.run(None, {s.get_inputs()[0].name: x})[0].argmax(1) == y).mean())


def digits(args):
    d = os.path.join(args.out, "digits")
    sh([sys.executable, os.path.join(ROOT, "tests", "models", "train_digits.py"), "--out", d])
    cnn = os.path.join(d, "digits_cnn.onnx")
    calib = os.path.join(d, "calib_cnn")
    x = np.load(os.path.join(d, "test_images.npy"))
    y = np.load(os.path.join(d, "test_labels.npy"))
    rows = []
    base = {"variant": "fp32 (unpruned)", "top1": top1(cnn, x, y)}
    variants = [("--ratio 0.25", ["--ratio", "0.25"]), ("--ratio 0.4", ["--ratio", "0.4"]), ("--ratio 0.5", ["--ratio", "0.5"]),
                ("--ratio 0.75", ["--ratio", "0.75"])]
    for t in ("0.05", "0.1", "0.2", "0.3"):
        variants.append((f"--tolerance {t}", ["--calibrate", calib, "--tolerance", t]))
    for name, flags in [(None, None)] + variants:
        if name is None:
            model, row, params, flops = cnn, base, None, None
        else:
            model = os.path.join(d, "cnn_" + re.sub(r"[^0-9a-z.]", "", name) + ".onnx")
            out = sh([args.kiln, "prune", cnn, "-o", model, "--threads", str(args.threads), *flags])
            m = re.search(r"parameters (\d+) -> (\d+).*FLOPs (\d+) -> (\d+)", out)
            base["params"], base["flops"] = int(m.group(1)), int(m.group(3))
            params, flops = int(m.group(2)), int(m.group(4))
            kept = re.findall(r"^(/\S+)\s+\d+\s+(\d+)\s+(\d+)", out, re.M)
            row = {"variant": name, "top1": top1(model, x, y), "params": params, "flops": flops,
                   "channels": " ".join(f"{k}/{c}" for _, c, k in kept)}
            ft = model.replace(".onnx", ".ft.onnx")
            out = sh([sys.executable, os.path.join(ROOT, "tools", "finetune_pruned.py"), model, "-o", ft])
            row["top1_finetuned"] = top1(ft, x, y)
        for b in (1, 64):
            row[f"ms_min_b{b}"], row[f"ms_median_b{b}"] = latency(args, model, "cpu", b)
        if name is not None:
            rows.append(row)
        print(json.dumps(row))
    return base, rows


def resnet(args):
    model = os.path.join(args.resnet, "resnet18.onnx")
    res = []
    for t in args.targets.split(","):
        out_m = os.path.join(args.out, f"resnet18_flops05_{t}.onnx")
        log = sh([args.kiln, "prune", model, "-o", out_m, "--flops", "0.5", "-t", t, "--threads", str(args.threads),
                  "--reps", "3"])
        m = re.search(r"FLOPs (\d+) -> (\d+)", log)
        f0, f1 = int(m.group(1)), int(m.group(2))
        l0, l0m = latency(args, model, t, 1)
        l1, l1m = latency(args, out_m, t, 1)
        row = {"target": t, "flops": f0, "flops_pruned": f1, "flop_reduction": f0 / f1, "ms_min": l0,
               "ms_min_pruned": l1, "ms_median": l0m, "ms_median_pruned": l1m, "latency_reduction": l0 / l1}
        row["ratio_of_reductions"] = row["latency_reduction"] / row["flop_reduction"]
        import onnx
        row["conv_channels"] = sorted({int(i.dims[0]) for i in onnx.load(out_m).graph.initializer if len(i.dims) == 4})
        print(json.dumps(row))
        res.append(row)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--resnet")
    ap.add_argument("--targets", default="cpu")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--no-digits", action="store_true", help="only the ResNet-18 part")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    md, base, rows = [], None, []
    if not args.no_digits:
        base, rows = digits(args)
        md = ["| digits CNN | top-1 % | top-1 % fine-tuned | params | FLOPs | CPU ms b1 (min) | CPU ms b64 (min / median) | channels kept |",
              "|---|---|---|---|---|---|---|---|",
              f"| unpruned | {base['top1']:.2f} | | {base['params']} | {base['flops']} | {base['ms_min_b1']:.3f} | "
              f"{base['ms_min_b64']:.3f} / {base['ms_median_b64']:.3f} | |"]
    for r in rows:
        md.append(f"| {r['variant']} | {r['top1']:.2f} | {r['top1_finetuned']:.2f} | {r['params']} | {r['flops']} | "
                  f"{r['ms_min_b1']:.3f} | {r['ms_min_b64']:.3f} / {r['ms_median_b64']:.3f} | {r['channels']} |")
    rn = resnet(args) if args.resnet else []
    if rn:
        md += ["", "| ResNet-18 --flops 0.5 | FLOPs reduction | ms (min) before -> after | latency reduction | latency / FLOP reduction |",
               "|---|---|---|---|---|"]
        for r in rn:
            md.append(f"| {r['target']} | {r['flop_reduction']:.2f}x | {r['ms_min']:.2f} -> {r['ms_min_pruned']:.2f} | "
                      f"{r['latency_reduction']:.2f}x | {r['ratio_of_reductions']:.2f} |")
    text = "\n".join(md)
    print(text)
    with open(os.path.join(args.out, "prune.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, "prune.json"), "w") as f:
        json.dump({"digits": {"base": base, "variants": rows}, "resnet18": rn}, f, indent=1)


if __name__ == "__main__":
    main()
