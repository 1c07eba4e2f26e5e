#!/usr/bin/env python3
"""A new user's sweep of torchvision architectures the model tests do not
cover, on every kiln target, fp32 and fp16 (issue 23).

  sweep_torchvision.py --out DIR [--kiln build/kiln] [--models a,b,...]
                       [--targets cpu,opencl,vulkan] [--precisions fp32,fp16]
                       [--timeout 600] [--jobs 1] [--export-only] [--list]

For each model this exports, into DIR (skipped when up to date, as the other
exporters do): NAME.onnx (opset 17, input "input", output "output"),
NAME_input.npy, NAME_ort.npy (onnxruntime's output, checked against torch's)
and NAME.fp16.json (the fp16 tolerance, see below). Weights are seeded and
random, BatchNorm calibrated (export_models.calibrate_batchnorm), nothing is
downloaded; inputs are batch 1 at the smallest size the architecture takes.

Then it runs `kiln run NAME.onnx --target T [--precision fp16] --compare ...`
for every model x target x precision, each under a time box, and prints one
line per run and a table. Results:
  ok        matched onnxruntime within the tolerance, nothing ran elsewhere
  wrong     outside the tolerance (max abs error and the tolerance shown)
  fallback  matched, but a node or the device fell back to the CPU
  refused   kiln returned an error (its message shown)
  crash     killed by a signal
  slow      did not finish within --timeout (compile + one run)
  validation  a Vulkan validation-layer message

Tolerances are those of the model tests (tests/models/matrix.cmake): fp32
rtol 1e-3 and atol 1e-4 of the output scale S (at least 1e-4); fp16 rtol
1e-2 and atol 3x the error F that f16 storage alone causes (torch, every
weight and leaf-module output rounded to f16, as fp16_error.py), at least
S/1000 and at most S/20. GPU fp32 runs and Vulkan fp16 runs use --strict;
the CPU and PoCL fp16 runs cannot (no fp16 arithmetic there) and a fallback
line is reported instead. The Vulkan validation layer is on.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from export_models import calibrate_batchnorm, segmentation_out
from model_files import save_npy, up_to_date

OPSET = 17
HERE = os.path.dirname(os.path.abspath(__file__))


def _torch():
    import torch
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    return torch


def _rand(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _random_head(model):
    """torchvision starts some classifier heads at zero (or near it); random
    weights keep the outputs O(1) so that the atol means something."""
    torch = _torch()
    last = [m for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d))][-1]
    with torch.no_grad():
        last.weight.normal_(0.0, 0.5 / max(1, last.weight[0].numel()) ** 0.5)
        if last.bias is not None:
            last.bias.normal_(0.0, 0.5)


def _classifier(name, size, **kw):
    def build():
        torch = _torch()
        import torchvision
        torch.manual_seed(0)
        m = getattr(torchvision.models, name)(weights=None, **kw)
        _random_head(m)
        return calibrate_batchnorm(m, (4, 3, size, size)), _rand((1, 3, size, size))
    return build


def _video(name, frames, size):
    def build():
        torch = _torch()
        import torchvision
        torch.manual_seed(0)
        m = getattr(torchvision.models.video, name)(weights=None)
        _random_head(m)
        return calibrate_batchnorm(m, (2, 3, frames, size, size)), _rand((1, 3, frames, size, size))
    return build


def _segmentation(name, size, **kw):
    def build():
        torch = _torch()
        import torchvision

        torch.manual_seed(0)
        m = getattr(torchvision.models.segmentation, name)(
            weights=None, weights_backbone=None, num_classes=8, **kw)
        return calibrate_batchnorm(segmentation_out(m), (4, 3, size, size)), _rand((1, 3, size, size))
    return build


def _raft(size, updates):
    def build():
        torch = _torch()
        import torchvision

        class Flow(torch.nn.Module):
            """Two frames stacked on the batch dim in, the last flow estimate out."""

            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x):
                return self.m(x[0:1], x[1:2], num_flow_updates=updates)[-1]

        torch.manual_seed(0)
        m = torchvision.models.optical_flow.raft_small(weights=None)
        # RAFT-small has no BatchNorm (instance norm / none); eval mode only
        return Flow(m).eval(), _rand((2, 3, size, size))
    return build


# name -> (builder, description). Most-used architectures first.
MODELS = {
    "mobilenet_v3_small": (_classifier("mobilenet_v3_small", 96), "96x96"),
    "mobilenet_v3_large": (_classifier("mobilenet_v3_large", 96), "96x96"),
    "resnext50_32x4d": (_classifier("resnext50_32x4d", 96), "96x96, grouped 3x3 convs"),
    "wide_resnet50_2": (_classifier("wide_resnet50_2", 96), "96x96"),
    "efficientnet_v2_s": (_classifier("efficientnet_v2_s", 96), "96x96, fused MBConv"),
    "regnet_x_400mf": (_classifier("regnet_x_400mf", 96), "96x96, grouped convs"),
    "mnasnet0_5": (_classifier("mnasnet0_5", 96), "96x96"),
    "googlenet": (_classifier("googlenet", 96, aux_logits=False, init_weights=True), "96x96"),
    "inception_v3": (_classifier("inception_v3", 128, aux_logits=False, init_weights=True), "128x128"),
    "alexnet": (_classifier("alexnet", 224), "224x224"),
    "vgg11_bn": (_classifier("vgg11_bn", 224), "224x224"),
    "squeezenet1_0": (_classifier("squeezenet1_0", 96), "96x96"),
    "swin_v2_t": (_classifier("swin_v2_t", 128), "128x128"),
    "maxvit_t": (_classifier("maxvit_t", 224), "224x224 (its only size)"),
    "r3d_18": (_video("r3d_18", 8, 64), "8x64x64 clip, 3-D convs"),
    "mc3_18": (_video("mc3_18", 8, 64), "8x64x64 clip, mixed 3-D/2-D convs"),
    "r2plus1d_18": (_video("r2plus1d_18", 8, 64), "8x64x64 clip, (2+1)-D convs"),
    "lraspp_mobilenet_v3_large": (_segmentation("lraspp_mobilenet_v3_large", 128), "128x128, 8 classes"),
    "fcn_resnet50": (_segmentation("fcn_resnet50", 128, aux_loss=False), "128x128, 8 classes"),
    "deeplabv3_resnet50": (_segmentation("deeplabv3_resnet50", 128, aux_loss=False), "128x128, 8 classes"),
    "raft_small": (_raft(64, 4), "two 64x64 frames, 4 flow updates, grid_sample"),
}


def paths(out_dir, name):
    return {"onnx": os.path.join(out_dir, f"{name}.onnx"),
            "input": os.path.join(out_dir, f"{name}_input.npy"),
            "ort": os.path.join(out_dir, f"{name}_ort.npy"),
            "meta": os.path.join(out_dir, f"{name}.fp16.json")}


def _round_f16(_mod, _inp, out):
    import torch
    if torch.is_tensor(out) and out.is_floating_point():
        return out.half().float()
    return out


def export(name, out_dir):
    import onnx
    import onnxruntime as ort
    torch = _torch()

    p = paths(out_dir, name)
    model, x = MODELS[name][0]()
    tmp = p["onnx"] + ".tmp"
    with torch.no_grad():
        torch.onnx.export(model, torch.from_numpy(x), tmp, opset_version=OPSET,
                          input_names=["input"], output_names=["output"], do_constant_folding=True)
        y32 = model(torch.from_numpy(x)).numpy()
    onnx.checker.check_model(onnx.load(tmp))
    sess = ort.InferenceSession(tmp, providers=["CPUExecutionProvider"])
    y = sess.run(["output"], {"input": x})[0]
    scale = float(np.abs(y).max())
    if y.shape != y32.shape or not np.all(np.isfinite(y)):
        raise RuntimeError(f"{name}: onnxruntime's output has shape {y.shape} (torch {y32.shape}) "
                           f"or is not finite")
    diff = float(np.abs(y - y32).max())
    if not np.allclose(y, y32, rtol=1e-3, atol=1e-4 * max(scale, 1.0)):
        # deep random-weight networks: onnxruntime's fused, reordered sums move
        # the outputs a little; more than 2% of the scale is an export problem
        if diff > 0.02 * scale:
            raise RuntimeError(f"{name}: onnxruntime and torch disagree (max |diff| {diff:g}, "
                               f"max |out| {scale:g})")
        print(f"{name}: warning: onnxruntime and torch differ by {diff:g} (max |out| {scale:g}); "
              f"onnxruntime stays the reference", flush=True)
    if scale < 0.05:
        raise RuntimeError(f"{name}: degenerate output (max |value| {scale:g})")
    # what f16 storage alone does (fp16_error.py's emulation)
    with torch.no_grad():
        for prm in model.parameters():
            prm.copy_(prm.half().float())
        for mod in model.modules():
            if not list(mod.children()):
                mod.register_forward_hook(_round_f16)
        y16 = model(torch.from_numpy(x)).numpy()
    f16 = float(np.abs(y16 - y32).max())
    os.replace(tmp, p["onnx"])
    save_npy(p["input"], x)
    save_npy(p["ort"], y.astype(np.float32))
    meta = {"scale": scale, "fp16_storage_error": f16, "shape": list(y.shape),
            "input": list(x.shape), "description": MODELS[name][1]}
    with open(p["meta"] + ".tmp", "w") as f:
        json.dump(meta, f)
    os.replace(p["meta"] + ".tmp", p["meta"])
    return meta


def tolerances(meta, prec):
    s = max(meta["scale"], 1.0)
    if prec == "fp32":
        return 1e-3, float(f"{1e-4 * s:.2g}")
    atol = min(max(3 * meta["fp16_storage_error"], 1e-3 * meta["scale"]), meta["scale"] / 20)
    return 1e-2, float(f"{atol:.2g}")


_ERR = re.compile(r"(error|unsupported|refus|cannot|failed)[^\n]*", re.I)
_MAXERR = re.compile(r"max abs err(?:or)?\s*[=:]?\s*([0-9.eE+-]+)")


def run_one(kiln, out_dir, name, target, prec, timeout, cache):
    p = paths(out_dir, name)
    with open(p["meta"]) as f:
        meta = json.load(f)
    rtol, atol = tolerances(meta, prec)
    cmd = [kiln, "run", p["onnx"], "--target", target, "--quiet",
           "--input", f"input={p['input']}", "--compare", f"output={p['ort']}",
           "--rtol", str(rtol), "--atol", str(atol)]
    if prec == "fp16":
        cmd += ["--precision", "fp16"]
    if target != "cpu" and (prec == "fp32" or target == "vulkan"):
        cmd.append("--strict")
    env = dict(os.environ, KILN_CACHE_DIR=cache, KILN_VULKAN_VALIDATION="1")
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, text=True, errors="replace")
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return "slow", f">{timeout} s", out, time.monotonic() - t0
    dt = time.monotonic() - t0
    rc = proc.returncode
    errs = _MAXERR.findall(out)
    err = f"max abs err {max(float(e) for e in errs):.3g} (atol {atol:g})" if errs else ""
    if "kiln vulkan validation:" in out:
        return "validation", next(l for l in out.splitlines() if "validation:" in l)[:200], out, dt
    if rc < 0:
        return "crash", f"signal {-rc}", out, dt
    if rc == 3 or "MISMATCH" in out:
        return "wrong", err, out, dt
    if rc != 0:
        m = _ERR.search(out)
        msg = m.group(0) if m else (out.strip().splitlines() or [f"exit {rc}"])[-1]
        return "refused", msg[:300], out, dt
    fb = [l for l in out.splitlines() if "falling back to the CPU" in l or "fallback: node" in l]
    if fb:
        return "fallback", fb[0][:200], out, dt
    return "ok", err, out, dt


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="scratch folder for the exports, logs and results (required but with --list)")
    ap.add_argument("--kiln", default=os.path.join(HERE, "..", "..", "build", "kiln"))
    ap.add_argument("--models", default="", help="comma-separated subset (default: all; see --list)")
    ap.add_argument("--targets", default="cpu,opencl,vulkan")
    ap.add_argument("--precisions", default="fp32,fp16")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per run (compile + one run)")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once")
    ap.add_argument("--export-only", action="store_true")
    ap.add_argument("--force", action="store_true", help="re-export even if up to date")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    if args.list:
        for n, (_, d) in MODELS.items():
            print(f"{n:28} {d}")
        return 0
    if not args.out:
        ap.error("--out is required")
    names = [n.strip() for n in args.models.split(",") if n.strip()] or list(MODELS)
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {','.join(unknown)}; see --list")
    os.makedirs(args.out, exist_ok=True)
    logs = os.path.join(args.out, "logs")
    os.makedirs(logs, exist_ok=True)

    ready = []
    for n in names:
        p = paths(args.out, n)
        if not args.force and up_to_date(p.values(), __file__):
            ready.append(n)
            continue
        t0 = time.monotonic()
        try:
            meta = export(n, args.out)
        except Exception as e:  # an export failure is a result too, not the end of the sweep
            print(f"{n}: export failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}", flush=True)
            continue
        print(f"{n}: exported in {time.monotonic() - t0:.0f} s (max |out| {meta['scale']:.3g}, "
              f"f16-storage error {meta['fp16_storage_error']:.2g})", flush=True)
        ready.append(n)
    if args.export_only:
        return 0

    kiln = os.path.abspath(args.kiln)
    cache = os.path.join(args.out, "kiln-cache")
    runs = [(n, t, pr) for pr in args.precisions.split(",") for t in args.targets.split(",") for n in ready]
    results = {}

    def go(r):
        n, t, pr = r
        res = run_one(kiln, args.out, n, t, pr, args.timeout, cache)
        with open(os.path.join(logs, f"{n}_{t}_{pr}.log"), "w") as f:
            f.write(res[2])
        print(f"{n:28} {t:7} {pr}  {res[0]:10} {res[3]:6.0f} s  {res[1]}", flush=True)
        results[r] = res
        return res

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        list(pool.map(go, runs))

    res_file = os.path.join(args.out, "results.json")
    old = {}
    if os.path.exists(res_file):
        with open(res_file) as f:
            old = json.load(f)
    for (n, t, pr), (status, detail, _, dt) in results.items():
        old[f"{n}|{t}|{pr}"] = {"status": status, "detail": detail, "seconds": round(dt)}
    with open(res_file, "w") as f:
        json.dump(old, f, indent=1, sort_keys=True)
    bad = sum(1 for v in results.values() if v[0] != "ok")
    print(f"{len(results) - bad} of {len(results)} runs ok; all results in {res_file}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
