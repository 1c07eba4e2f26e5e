#!/usr/bin/env python3
"""Export torchvision models to ONNX with onnxruntime reference outputs.

  export_models.py --out DIR [--models resnet18,mobilenet_v2] [--force]

For each model this writes, into DIR:
  <name>.onnx          opset 13, input "input" [N,3,224,224], output "logits" [N,1000],
                       batch dim symbolic ("N", via dynamic_axes)
  <name>_input.npy     float32 [1,3,224,224], np.random.default_rng(0).standard_normal
  <name>_ort.npy       onnxruntime (CPUExecutionProvider) output on it
  <name>_input_b2.npy  float32 [2,3,224,224]: row 0 is <name>_input.npy, row 1 is drawn
                       from np.random.default_rng(1), so both the symbolic batch dim and
                       batch independence are exercised
  <name>_ort_b2.npy    onnxruntime output on it

Weights are random and nothing is downloaded: torch.manual_seed(0) before building
each model with weights=None. torchvision's default init leaves BatchNorm as the
identity, and for mobilenet_v2 that makes the activations shrink layer by layer until
the logits are ~1e-9 -- any output would then pass an atol of 1e-4. So before export
the BatchNorm layers get seeded random affine parameters and their running statistics
are calibrated on seeded random images (train-mode forward passes, cumulative
average); in eval mode every BatchNorm then roughly normalises its input and the
logits are O(1). The exporter folds BatchNorm into the convolutions either way.

A model whose files all exist and are newer than this script is skipped. Files are
written under a temporary name and renamed, so an interrupted run never leaves a
truncated file that looks up to date.
"""

import argparse
import os
import sys
import time

import numpy as np

from model_files import save_npy, up_to_date

# efficientnet_b0 (SiLU and squeeze-excite) and densenet121 (long concat chains, the
# cold-compile case) are for the CPU target's bench and its EfficientNet test;
# squeezenet1_1 (fire modules: 1x1 and 3x3 expands concatenated, no BatchNorm) and
# shufflenet_v2_x1_0 (channel split and shuffle around depthwise convs) complete the
# bench's set of torchvision CNNs (bench/models_peers.py, issue 22).
MODELS = ("resnet18", "mobilenet_v2", "resnet50", "efficientnet_b0", "densenet121",
          "squeezenet1_1", "shufflenet_v2_x1_0")
OPSET = 13
# Logits smaller than this would make the atol of the kiln comparison meaningless.
MIN_LOGIT_SCALE = 0.1


def outputs(out_dir, name):
    return {
        "onnx": os.path.join(out_dir, f"{name}.onnx"),
        "input": os.path.join(out_dir, f"{name}_input.npy"),
        "ort": os.path.join(out_dir, f"{name}_ort.npy"),
        "input_b2": os.path.join(out_dir, f"{name}_input_b2.npy"),
        "ort_b2": os.path.join(out_dir, f"{name}_ort_b2.npy"),
    }


def make_inputs():
    x1 = np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)
    extra = np.random.default_rng(1).standard_normal((1, 3, 224, 224), dtype=np.float32)
    x2 = np.concatenate([x1, extra], axis=0)
    return x1, x2


def build_model(name):
    """Seeded random model in eval mode with non-degenerate activations."""
    import torch
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None)
    return calibrate_batchnorm(model, (8, 3, 224, 224))


def segmentation_out(model):
    """torchvision's segmentation |model| behind a module that returns its
    'out' tensor: the models return a dict, the export wants tensors."""
    import torch

    class OutOnly(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x)["out"]

    return OutOnly(model)


def calibrate_batchnorm(model, batch_shape, batches=2, forward=None):
    """Seeded random BatchNorm affine parameters, running statistics averaged over
    `batches` train-mode passes on seeded random inputs of `batch_shape` (or
    `forward(model, gen)`, which draws its own inputs from the generator, for models
    whose train-mode call wants more than a batch); returns the model in eval mode
    (see the module docstring for why)."""
    import torch

    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for bn in bns:
            bn.weight.copy_(torch.rand(bn.weight.shape, generator=gen) + 0.5)
            bn.bias.copy_(torch.randn(bn.bias.shape, generator=gen) * 0.1)
            bn.reset_running_stats()
            bn.momentum = None  # cumulative average over the calibration batches
        model.train()
        for _ in range(batches):
            if forward:
                forward(model, gen)
            else:
                model(torch.randn(batch_shape, generator=gen))
    return model.eval()


def export(name, paths):
    # Imported here so that `--help` and an up-to-date run stay fast.
    import onnx
    import onnxruntime as ort
    import torch

    model = build_model(name)
    x1, x2 = make_inputs()

    tmp_onnx = paths["onnx"] + ".tmp"
    with torch.no_grad():
        torch.onnx.export(
            model, torch.from_numpy(x1), tmp_onnx,
            opset_version=OPSET,
            input_names=["input"], output_names=["logits"],
            dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}},
            do_constant_folding=True)
    m = onnx.load(tmp_onnx)
    onnx.checker.check_model(m, full_check=True)
    dim0 = m.graph.input[0].type.tensor_type.shape.dim[0]
    if dim0.dim_param != "N":
        raise RuntimeError(f"{name}: exported input batch dim is {dim0}, expected symbol 'N'")
    m.doc_string = (f"torchvision {name}, random weights (torch.manual_seed(0), "
                    f"BatchNorm calibrated on random images), eval mode, opset {OPSET}; "
                    f"made by kiln tests/models/export_models.py")
    onnx.save(m, tmp_onnx)
    os.replace(tmp_onnx, paths["onnx"])

    sess = ort.InferenceSession(paths["onnx"], providers=["CPUExecutionProvider"])
    y1 = sess.run(["logits"], {"input": x1})[0]
    y2 = sess.run(["logits"], {"input": x2})[0]

    # Sanity checks so that a broken export cannot become the reference kiln is held to.
    with torch.no_grad():
        t1 = model(torch.from_numpy(x1)).numpy()
    scale = float(np.max(np.abs(t1)))
    diff_torch = float(np.max(np.abs(y1 - t1)))
    diff_batch = float(np.max(np.abs(y2[0:1] - y1)))
    if y1.shape != (1, 1000) or y2.shape != (2, 1000):
        raise RuntimeError(f"{name}: unexpected output shapes {y1.shape}, {y2.shape}")
    if scale < MIN_LOGIT_SCALE:
        raise RuntimeError(f"{name}: logits are degenerate (max |logit| {scale:g})")
    if not np.allclose(y1, t1, rtol=1e-3, atol=1e-4 * scale):
        raise RuntimeError(f"{name}: onnxruntime and torch disagree (max |diff| {diff_torch:g})")
    if not np.allclose(y2[0:1], y1, rtol=1e-3, atol=1e-4 * scale):
        raise RuntimeError(f"{name}: batch-2 row 0 differs from batch 1 (max |diff| {diff_batch:g})")

    save_npy(paths["input"], x1)
    save_npy(paths["ort"], y1.astype(np.float32))
    save_npy(paths["input_b2"], x2)
    save_npy(paths["ort_b2"], y2.astype(np.float32))
    return (f"max|logit| {scale:.3g}, max|ort-torch| {diff_torch:.2g}, "
            f"max|ort_b2[0]-ort| {diff_batch:.2g}")


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Export torchvision models to ONNX with onnxruntime reference outputs.")
    ap.add_argument("--out", required=True, help="output directory (created if missing)")
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated subset of {','.join(MODELS)} (default: all)")
    ap.add_argument("--force", action="store_true", help="re-export even if up to date")
    args = ap.parse_args(argv)

    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODELS]
    if unknown or not names:
        ap.error(f"unknown model(s) {','.join(unknown) or '(none given)'}; "
                 f"choose from {','.join(MODELS)}")
    os.makedirs(args.out, exist_ok=True)

    for name in names:
        paths = outputs(args.out, name)
        if not args.force and up_to_date(paths.values(), __file__):
            print(f"{name}: up to date in {args.out}")
            continue
        t0 = time.monotonic()
        info = export(name, paths)
        print(f"{name}: exported in {time.monotonic() - t0:.1f} s ({info})")
        for p in paths.values():
            print(f"  wrote {p} ({os.path.getsize(p)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
