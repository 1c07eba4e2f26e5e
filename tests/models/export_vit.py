#!/usr/bin/env python3
"""Export a small torchvision VisionTransformer to ONNX with an onnxruntime
reference output (issue 20: the patchify conv, kernel 16 stride 16, that the
compiled targets refused, and the [B,1,K] x [K,N] MatMuls of its attention).

  export_vit.py --out DIR [--force]

Writes, into DIR:
  vit.onnx        opset 17, input "input" [1,3,64,64], output "logits" [1,10]
  vit_input.npy   float32 [1,3,64,64], np.random.default_rng(0).standard_normal
  vit_ort.npy     onnxruntime (CPUExecutionProvider) output on it

ViT-B/16's layout at a test's size: patch 16, 2 layers, 4 heads, hidden 64,
MLP 128, weights from torch.manual_seed(0). torchvision starts the head at
zero, which would make every logit 0 whatever the body computes, so the head
gets random weights too. Files are written under a temporary name and renamed;
an up-to-date export (newer than this script) is skipped.
"""

import argparse
import os
import sys

import numpy as np

from model_files import outputs, save_npy, up_to_date


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    paths = outputs(args.out, "vit")
    if not args.force and up_to_date(paths.values(), __file__):
        print("vit: up to date")
        return 0

    import onnxruntime as ort
    import torch
    from torchvision.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    model = VisionTransformer(image_size=64, patch_size=16, num_layers=2, num_heads=4, hidden_dim=64,
                              mlp_dim=128, num_classes=10).eval()
    with torch.no_grad():
        model.heads.head.weight.normal_(0.0, 0.5)
        model.heads.head.bias.normal_(0.0, 0.5)
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    tmp = paths["onnx"] + ".tmp"
    torch.onnx.export(model, torch.from_numpy(x), tmp, opset_version=17, input_names=["input"],
                      output_names=["logits"])
    os.replace(tmp, paths["onnx"])
    sess = ort.InferenceSession(paths["onnx"], providers=["CPUExecutionProvider"])
    y = sess.run(None, {"input": x})[0]
    save_npy(paths["input"], x)
    save_npy(paths["ort"], y)
    print(f"vit: wrote {paths['onnx']} (logits {y.shape})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
