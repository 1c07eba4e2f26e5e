#!/usr/bin/env python3
"""A small ResNet-style CNN and a transformer encoder block with a dynamic batch,
for the dynamic-dim tests.

  export_dyn_cnn.py --out DIR [--size 32] [--width 16] [--batches 1,3,8]

Writes into DIR:
  dyn_cnn.onnx          opset 13, input "input" [batch,3,S,S], output "logits" [batch,10],
                        exported with torch dynamic_axes (batch symbolic "batch")
  dyn_cnn_in_bB.npy     float32 [B,3,S,S], np.random.default_rng(B)
  dyn_cnn_ort_bB.npy    onnxruntime's output on it, for each B of --batches
  dyn_enc.onnx          export_encoder.py's encoder block (attention + FFN, LayerNorm), input
                        "input" [batch,128,256], output "output", exported with dynamic_axes:
                        its head reshapes take the batch from Shape -> Gather -> Concat
  dyn_enc_in_bB.npy, dyn_enc_ort_bB.npy   the same for it
  dyn_encseq.onnx       the same block exported with dynamic_axes on batch and sequence
                        ("batch", "seq"): input "input" [batch,seq,256]
  dyn_encseq_in_bB_sS.npy, dyn_encseq_ort_bB_sS.npy   for (B,S) in (1,16), (2,77), (1,128), (1,64),
                                                           (1,77), (1,256), (1,300)

The net is ResNet-18's pattern at a small scale: a 3x3 stem with BatchNorm and ReLU, a
max pool, two basic blocks per stage over three stages (stride 2 with a 1x1 projection
at each stage change), global average pooling, flatten and a linear head. Weights are
seeded (torch.manual_seed(0)); BatchNorm gets seeded affine parameters and running
statistics so its folding into the convolutions is exercised.
"""

import argparse
import os
import sys

import numpy as np


def build(width):
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            y = self.b2(self.c2(y))
            return torch.relu(y + (self.down(x) if self.down is not None else x))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            w = width
            self.stem = nn.Sequential(nn.Conv2d(3, w, 3, 1, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            layers = []
            for cin, cout, s in ((w, w, 1), (w, 2 * w, 2), (2 * w, 4 * w, 2)):
                layers += [Block(cin, cout, s), Block(cout, cout, 1)]
            self.layers = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(4 * w, 10)

        def forward(self, x):
            return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))

    torch.manual_seed(0)
    net = Net()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(m.bias.shape, generator=gen) * 0.1)
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)
    return net.eval()


def export_encoder(out, batches):
    import onnxruntime as ort
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import export_encoder as enc

    model = enc.build_model()
    path = os.path.join(out, "dyn_enc.onnx")
    with torch.no_grad():
        torch.onnx.export(model, torch.zeros((1, enc.SEQ, enc.D_MODEL)), path + ".tmp", opset_version=enc.OPSET,
                          input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}}, do_constant_folding=True)
    os.replace(path + ".tmp", path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for b in batches:
        xb = np.random.default_rng(100 + b).standard_normal((b, enc.SEQ, enc.D_MODEL), dtype=np.float32)
        y = sess.run(["output"], {"input": xb})[0]
        if y.shape != (b, enc.SEQ, enc.D_MODEL):
            raise SystemExit(f"export: encoder batch {b}: output shape {y.shape}")
        np.save(os.path.join(out, f"dyn_enc_in_b{b}.npy"), xb)
        np.save(os.path.join(out, f"dyn_enc_ort_b{b}.npy"), y)


SEQ_SHAPES = [(1, 16), (2, 77), (1, 128), (1, 64), (1, 77), (1, 256), (1, 300)]


def export_encoder_seq(out):
    """The encoder with a dynamic batch and sequence, for the shape-bucket tests."""
    import onnxruntime as ort
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import export_encoder as enc

    model = enc.build_model()
    path = os.path.join(out, "dyn_encseq.onnx")
    with torch.no_grad():
        torch.onnx.export(model, torch.zeros((1, 16, enc.D_MODEL)), path + ".tmp", opset_version=enc.OPSET,
                          input_names=["input"], output_names=["output"],
                          dynamic_axes={"input": {0: "batch", 1: "seq"}, "output": {0: "batch", 1: "seq"}},
                          do_constant_folding=True)
    os.replace(path + ".tmp", path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for b, s in SEQ_SHAPES:
        xb = np.random.default_rng(1000 * b + s).standard_normal((b, s, enc.D_MODEL), dtype=np.float32)
        y = sess.run(["output"], {"input": xb})[0]
        if y.shape != (b, s, enc.D_MODEL):
            raise SystemExit(f"export: encoder batch {b} seq {s}: output shape {y.shape}")
        np.save(os.path.join(out, f"dyn_encseq_in_b{b}_s{s}.npy"), xb)
        np.save(os.path.join(out, f"dyn_encseq_ort_b{b}_s{s}.npy"), y)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--batches", default="1,3,8")
    a = ap.parse_args()
    import onnx
    import onnxruntime as ort
    import torch

    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "dyn_cnn.onnx")
    net = build(a.width)
    x = torch.zeros((1, 3, a.size, a.size))
    with torch.no_grad():
        torch.onnx.export(net, x, path + ".tmp", opset_version=13, input_names=["input"], output_names=["logits"],
                          dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}}, do_constant_folding=True)
    m = onnx.load(path + ".tmp")
    if m.graph.input[0].type.tensor_type.shape.dim[0].dim_param != "batch":
        raise SystemExit("export: the input's dim 0 is not the symbol 'batch'")
    os.replace(path + ".tmp", path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    batches = [int(s) for s in a.batches.split(",")]
    export_encoder(a.out, batches)
    export_encoder_seq(a.out)
    for b in batches:
        xb = np.random.default_rng(b).standard_normal((b, 3, a.size, a.size), dtype=np.float32)
        y = sess.run(["logits"], {"input": xb})[0]
        with torch.no_grad():
            t = net(torch.from_numpy(xb)).numpy()
        if y.shape != (b, 10) or float(np.max(np.abs(y - t))) > 1e-3 or float(np.max(np.abs(y))) < 0.05:
            raise SystemExit(f"export: batch {b}: onnxruntime and torch disagree or the logits are degenerate")
        np.save(os.path.join(a.out, f"dyn_cnn_in_b{b}.npy"), xb)
        np.save(os.path.join(a.out, f"dyn_cnn_ort_b{b}.npy"), y)


if __name__ == "__main__":
    main()
