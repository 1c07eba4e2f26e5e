#!/usr/bin/env python3
"""Export a hand-written transformer encoder block to ONNX with an onnxruntime
reference output (for the graph-pass tests: decomposed LayerNorm and Gelu).

  export_encoder.py --out DIR [--force]

Writes, into DIR:
  encoder.onnx        opset 13, input "input" [1,128,256], output "output" [1,128,256]
  encoder_input.npy   float32 [1,128,256], np.random.default_rng(0).standard_normal
  encoder_ort.npy     onnxruntime (CPUExecutionProvider) output on it

The block is written with plain torch ops so that the exporter emits their
decomposed forms: LayerNorm as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add
and F.gelu (exact erf form) as Div/Erf/Add/Mul/Mul. d_model 256, 4 heads, FFN 1024,
sequence 128, batch 1; weights from torch.manual_seed(0). Files are written under a
temporary name and renamed; an up-to-date export (newer than this script) is skipped.
"""

import argparse
import math
import os
import sys
import time

import numpy as np

from model_files import outputs, save_npy, up_to_date

OPSET = 13
D_MODEL, HEADS, FFN, SEQ = 256, 4, 1024, 128


def build_model():
    import torch
    import torch.nn.functional as F

    class LayerNorm(torch.nn.Module):
        """LayerNorm from mean/var ops so that it exports decomposed."""

        def __init__(self, d, eps=1e-5):
            super().__init__()
            self.gamma = torch.nn.Parameter(torch.rand(d) + 0.5)
            self.beta = torch.nn.Parameter(torch.randn(d) * 0.1)
            self.eps = eps

        def forward(self, x):
            mean = x.mean(-1, keepdim=True)
            d = x - mean
            var = d.pow(2).mean(-1, keepdim=True)
            return d / torch.sqrt(var + self.eps) * self.gamma + self.beta

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q = torch.nn.Linear(D_MODEL, D_MODEL)
            self.k = torch.nn.Linear(D_MODEL, D_MODEL)
            self.v = torch.nn.Linear(D_MODEL, D_MODEL)
            self.o = torch.nn.Linear(D_MODEL, D_MODEL)
            self.ln1 = LayerNorm(D_MODEL)
            self.ff1 = torch.nn.Linear(D_MODEL, FFN)
            self.ff2 = torch.nn.Linear(FFN, D_MODEL)
            self.ln2 = LayerNorm(D_MODEL)

        def heads(self, t):
            b, s, _ = t.shape
            return t.reshape(b, s, HEADS, D_MODEL // HEADS).transpose(1, 2)

        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
            att = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(D_MODEL // HEADS)
            att = torch.softmax(att, dim=-1)
            h = torch.matmul(att, v).transpose(1, 2).reshape(b, s, D_MODEL)
            x = self.ln1(x + self.o(h))
            f = self.ff2(F.gelu(self.ff1(x)))
            return self.ln2(x + f)

    torch.manual_seed(0)
    return Encoder().eval()


def export(paths):
    import onnx
    import onnxruntime as ort
    import torch

    model = build_model()
    x = np.random.default_rng(0).standard_normal((1, SEQ, D_MODEL), dtype=np.float32)
    tmp_onnx = paths["onnx"] + ".tmp"
    with torch.no_grad():
        torch.onnx.export(model, torch.from_numpy(x), tmp_onnx, opset_version=OPSET,
                          input_names=["input"], output_names=["output"],
                          do_constant_folding=True)
    m = onnx.load(tmp_onnx)
    onnx.checker.check_model(m, full_check=True)
    ops = {n.op_type for n in m.graph.node}
    for want in ("ReduceMean", "Erf", "Sqrt", "Softmax"):
        if want not in ops:
            raise RuntimeError(f"encoder: exported graph has no {want} (ops: {sorted(ops)})")
    m.doc_string = (f"transformer encoder block (d_model {D_MODEL}, {HEADS} heads, ffn {FFN}), "
                    f"random weights (torch.manual_seed(0)), decomposed LayerNorm and Gelu, "
                    f"opset {OPSET}; made by kiln tests/models/export_encoder.py")
    onnx.save(m, tmp_onnx)
    os.replace(tmp_onnx, paths["onnx"])

    sess = ort.InferenceSession(paths["onnx"], providers=["CPUExecutionProvider"])
    y = sess.run(["output"], {"input": x})[0]
    with torch.no_grad():
        t = model(torch.from_numpy(x)).numpy()
    diff = float(np.max(np.abs(y - t)))
    if y.shape != (1, SEQ, D_MODEL):
        raise RuntimeError(f"encoder: unexpected output shape {y.shape}")
    if not np.allclose(y, t, rtol=1e-3, atol=1e-4):
        raise RuntimeError(f"encoder: onnxruntime and torch disagree (max |diff| {diff:g})")
    save_npy(paths["input"], x)
    save_npy(paths["ort"], y.astype(np.float32))
    return f"{len(m.graph.node)} nodes, max|out| {float(np.max(np.abs(y))):.3g}, max|ort-torch| {diff:.2g}"


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Export a transformer encoder block to ONNX with an onnxruntime reference output.")
    ap.add_argument("--out", required=True, help="output directory (created if missing)")
    ap.add_argument("--force", action="store_true", help="re-export even if up to date")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    paths = outputs(args.out, "encoder")
    if not args.force and up_to_date(paths.values(), __file__):
        print(f"encoder: up to date in {args.out}")
        return 0
    t0 = time.monotonic()
    info = export(paths)
    print(f"encoder: exported in {time.monotonic() - t0:.1f} s ({info})")
    for p in paths.values():
        print(f"  wrote {p} ({os.path.getsize(p)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
