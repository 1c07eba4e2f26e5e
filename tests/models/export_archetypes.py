#!/usr/bin/env python3
"""Export issue 20's archetype models to ONNX (opset 17) with onnxruntime
reference outputs, random seeded weights, nothing downloaded.

  export_archetypes.py --out DIR [--models a,b,...] [--force] [--list]

For each model NAME this writes, into DIR:
  NAME.onnx               input "input", outputs as listed in archetypes.json
  NAME_input.npy          the input (float32 N(0,1) from np.random.default_rng(0),
                          or int64 token ids in [0, VOCAB))
  NAME_ort_OUTPUT.npy     onnxruntime (CPUExecutionProvider) value of each output
and NAME.archetype.json, its manifest entry (one file per model, so that
exports of different models may run at once): its tier
("default": small, a few seconds per target; "slow": the full-size torchvision
networks; "detector": the torchvision detectors with their NMS post-processing;
"bench": ViT-B/16 at 224x224 for the CPU speed comparison, exported only when
named or with --tier bench), input and output files and a suggested tolerance.

The transformer blocks (BERT-like, GPT-2-like, llama-like), the GroupNorm UNet
block, the wav2vec2-style conv front end, the YOLO-style head and the LSTM and
GRU taggers are small
nn.Modules written here; the others are torchvision architectures built with
weights=None at small input sizes. BatchNorm layers get random affine
parameters and calibrated statistics (export_models.calibrate_batchnorm) so
that activations stay O(1); a classifier head that torchvision starts at zero
gets random weights. Each export is checked against torch's own output before
it becomes a reference. An export newer than this script is skipped.
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np

from export_models import calibrate_batchnorm, segmentation_out
from model_files import save_npy, up_to_date

OPSET = 17
VOCAB = 1000


def _torch():
    import torch
    return torch


# ---- small hand-written archetypes ---------------------------------------------------

def build_bert():
    """BERT-like encoder: token + position embeddings, LayerNorm, 2 post-norm
    nn.TransformerEncoderLayer (GELU), tanh pooler over the first token."""
    torch = _torch()
    nn = torch.nn

    class Bert(nn.Module):
        def __init__(self, d=128, heads=4, ffn=512, layers=2, seq=32):
            super().__init__()
            self.tok = nn.Embedding(VOCAB, d)
            self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.1)
            self.ln = nn.LayerNorm(d)
            self.layers = nn.ModuleList(
                nn.TransformerEncoderLayer(d, heads, ffn, dropout=0.0, activation="gelu", batch_first=True)
                for _ in range(layers))
            self.pool = nn.Linear(d, d)

        def forward(self, ids):
            x = self.ln(self.tok(ids) + self.pos)
            for layer in self.layers:
                x = layer(x)
            return x, torch.tanh(self.pool(x[:, 0]))

    return Bert().eval(), _ids(32), ["hidden", "pooled"]


class _CausalBlocks:
    """Shared pieces of the decoder archetypes."""

    @staticmethod
    def heads(t, n):
        b, s, d = t.shape
        return t.reshape(b, s, n, d // n).transpose(1, 2)


def build_gpt2():
    """GPT-2-like decoder: pre-norm blocks with a fused qkv projection, causal
    mask (masked_fill from a lower-triangular buffer), tanh-GELU MLP, final
    LayerNorm and an lm head tied to the token embedding."""
    torch = _torch()
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self, d, heads, seq):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.register_buffer("causal", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (_CausalBlocks.heads(t, self.heads) for t in (q, k, v))
            att = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
            att = att.masked_fill(~self.causal[:s, :s], float("-inf")).softmax(-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class Gpt2(nn.Module):
        def __init__(self, d=128, heads=4, layers=2, seq=32):
            super().__init__()
            self.wte = nn.Embedding(VOCAB, d)
            self.wpe = nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block(d, heads, seq) for _ in range(layers))
            self.ln = nn.LayerNorm(d)

        def forward(self, ids):
            pos = torch.arange(ids.shape[1]).unsqueeze(0)
            x = self.wte(ids) + self.wpe(pos)
            for blk in self.blocks:
                x = blk(x)
            return self.ln(x) @ self.wte.weight.t()

    return Gpt2().eval(), _ids(32), ["logits"]


def build_llama():
    """llama-style decoder block: RMSNorm, rotary embedding (cos/sin of the
    positions computed in the graph), causal mask from Trilu and Where, SiLU-
    gated MLP, final RMSNorm, lm head and the ArgMax of the last position."""
    torch = _torch()
    nn = torch.nn
    F = torch.nn.functional

    class RMSNorm(nn.Module):
        def __init__(self, d, eps=1e-6):
            super().__init__()
            self.w = nn.Parameter(torch.rand(d) + 0.5)
            self.eps = eps

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.w

    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    class Llama(nn.Module):
        def __init__(self, d=128, heads=4, hidden=344):
            super().__init__()
            self.heads, self.hd = heads, d // heads
            self.emb = nn.Embedding(VOCAB, d)
            self.n1, self.n2, self.nf = RMSNorm(d), RMSNorm(d), RMSNorm(d)
            self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
            self.gate, self.up = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
            self.down = nn.Linear(hidden, d, bias=False)
            self.head = nn.Linear(d, VOCAB, bias=False)
            self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd)))

        def forward(self, ids):
            b, s = ids.shape
            x = self.emb(ids)
            pos = torch.arange(s, dtype=torch.float32)
            freqs = torch.outer(pos, self.inv_freq)
            ang = torch.cat((freqs, freqs), dim=-1)
            cos, sin = ang.cos(), ang.sin()
            h = self.n1(x)
            q, k, v = (_CausalBlocks.heads(p(h), self.heads) for p in (self.q, self.k, self.v))
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            att = q @ k.transpose(-2, -1) / math.sqrt(self.hd)
            keep = torch.tril(torch.ones_like(att)) > 0
            att = torch.where(keep, att, torch.full_like(att, -1e9)).softmax(-1)
            x = x + self.o((att @ v).transpose(1, 2).reshape(b, s, -1))
            h = self.n2(x)
            x = x + self.down(F.silu(self.gate(h)) * self.up(h))
            logits = self.head(self.nf(x))
            return logits, logits[:, -1].argmax(-1)

    return Llama().eval(), _ids(32), ["logits", "next_token"]


def build_unet_block():
    """A diffusion-UNet stage: GroupNorm/SiLU residual blocks with a time-
    embedding bias, a strided-conv downsample, a nearest upsample and the skip
    concatenation."""
    torch = _torch()
    nn = torch.nn
    F = torch.nn.functional

    class ResBlock(nn.Module):
        def __init__(self, cin, cout, tdim=64):
            super().__init__()
            self.n1, self.n2 = nn.GroupNorm(8, cin), nn.GroupNorm(8, cout)
            self.c1, self.c2 = nn.Conv2d(cin, cout, 3, padding=1), nn.Conv2d(cout, cout, 3, padding=1)
            self.t = nn.Linear(tdim, cout)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

        def forward(self, x, temb):
            h = self.c1(F.silu(self.n1(x))) + self.t(F.silu(temb))[:, :, None, None]
            h = self.c2(F.silu(self.n2(h)))
            return self.skip(x) + h

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.temb = nn.Parameter(torch.randn(1, 64))
            self.inp = nn.Conv2d(4, 32, 3, padding=1)
            self.r1 = ResBlock(32, 32)
            self.down = nn.Conv2d(32, 32, 3, stride=2, padding=1)
            self.r2 = ResBlock(32, 64)
            self.up = nn.Conv2d(64, 64, 3, padding=1)
            self.r3 = ResBlock(96, 32)
            self.outn, self.outc = nn.GroupNorm(8, 32), nn.Conv2d(32, 4, 3, padding=1)

        def forward(self, x):
            s = self.r1(self.inp(x), self.temb)
            h = self.r2(self.down(s), self.temb)
            h = self.up(F.interpolate(h, scale_factor=2.0, mode="nearest"))
            h = self.r3(torch.cat((h, s), dim=1), self.temb)
            return self.outc(F.silu(self.outn(h)))

    return UNet().eval(), _image((1, 4, 32, 32)), ["output"]


def build_wav2vec2():
    """wav2vec2-style feature encoder: Conv1d stack (the first with GroupNorm
    per channel), GELU, then LayerNorm and the feature projection."""
    torch = _torch()
    nn = torch.nn

    class FrontEnd(nn.Module):
        def __init__(self, c=64, d=128):
            super().__init__()
            layers = [nn.Conv1d(1, c, 10, stride=5, bias=False), nn.GroupNorm(c, c), nn.GELU()]
            for k in (3, 3, 3, 2):
                layers += [nn.Conv1d(c, c, k, stride=2, bias=False), nn.GELU()]
            self.conv = nn.Sequential(*layers)
            self.ln = nn.LayerNorm(c)
            self.proj = nn.Linear(c, d)

        def forward(self, wav):
            f = self.conv(wav.unsqueeze(1)).transpose(1, 2)
            return self.proj(self.ln(f))

    return FrontEnd().eval(), _image((1, 8000)), ["features"]


def build_yolo_head():
    """YOLO-style detector without NMS: a Conv-BN-SiLU backbone with two output
    scales, 1x1 heads of 3 anchors x (5 + 4 classes), the sigmoid box decode
    against grid offsets and anchor sizes, and the concatenated predictions."""
    torch = _torch()
    nn = torch.nn

    def cbs(cin, cout, stride):
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.SiLU())

    class Yolo(nn.Module):
        anchors = ((10, 13, 16, 30, 33, 23), (30, 61, 62, 45, 59, 119))
        strides = (8, 16)
        na, no = 3, 9

        def __init__(self):
            super().__init__()
            self.s8 = nn.Sequential(cbs(3, 16, 2), cbs(16, 32, 2), cbs(32, 64, 2))
            self.s16 = cbs(64, 128, 2)
            self.heads = nn.ModuleList(nn.Conv2d(c, self.na * self.no, 1) for c in (64, 128))

        def decode(self, p, i):
            b, _, h, w = p.shape
            p = p.reshape(b, self.na, self.no, h, w).permute(0, 1, 3, 4, 2).sigmoid()
            gy, gx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
            grid = torch.stack((gx, gy), -1).reshape(1, 1, h, w, 2).float()
            anchor = torch.tensor(self.anchors[i], dtype=torch.float32).reshape(1, self.na, 1, 1, 2)
            xy = (p[..., :2] * 2 - 0.5 + grid) * self.strides[i]
            wh = (p[..., 2:4] * 2) ** 2 * anchor
            return torch.cat((xy, wh, p[..., 4:]), -1).reshape(b, -1, self.no)

        def forward(self, x):
            f8 = self.s8(x)
            f16 = self.s16(f8)
            return torch.cat([self.decode(hd(f), i) for i, (hd, f) in enumerate(zip(self.heads, (f8, f16)))], 1)

    model = calibrate_batchnorm(Yolo(), (8, 3, 128, 128))
    return model, _image((1, 3, 128, 128)), ["predictions"]


def _recurrent(cell):
    """A speech-style recurrent tagger: 40 features per frame, 64 frames,
    2-layer bidirectional nn.LSTM / nn.GRU (hidden 128, batch_first: the
    exporter adds the transposes), a per-frame Linear to 32 classes."""
    torch = _torch()
    nn = torch.nn

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = getattr(nn, cell)(40, 128, num_layers=2, bidirectional=True, batch_first=True)
            self.out = nn.Linear(256, 32)

        def forward(self, x):
            return self.out(self.rnn(x)[0])

    return Tagger().eval(), _image((1, 64, 40)), ["output"]


def build_lstm():
    return _recurrent("LSTM")


def build_gru():
    return _recurrent("GRU")


# ---- torchvision architectures ----------------------------------------------------------

def _tv(name, size, **kw):
    torch = _torch()
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None, **kw)
    if any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        model = calibrate_batchnorm(model, (4, 3, size, size))
    return model.eval()


def _random_head(linear):
    with _torch().no_grad():
        linear.weight.normal_(0.0, 0.5)
        linear.bias.normal_(0.0, 0.5)


def build_vit_b_16():
    model = _tv("vit_b_16", 112, image_size=112)
    _random_head(model.heads.head)
    return model, _image((1, 3, 112, 112)), ["logits"]


def build_vit_b_16_224():
    model = _tv("vit_b_16", 224)
    _random_head(model.heads.head)
    return model, _image((1, 3, 224, 224)), ["logits"]


def build_swin_t():
    return _tv("swin_t", 112), _image((1, 3, 112, 112)), ["logits"]


def build_convnext_tiny():
    return _tv("convnext_tiny", 64), _image((1, 3, 64, 64)), ["logits"]


def build_regnet_y_400mf():
    return _tv("regnet_y_400mf", 128), _image((1, 3, 128, 128)), ["logits"]


def build_deeplabv3():
    torch = _torch()
    import torchvision

    torch.manual_seed(0)
    seg = torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None, aux_loss=False, num_classes=8)
    seg = segmentation_out(seg)
    seg = calibrate_batchnorm(seg, (4, 3, 128, 128))
    return seg, _image((1, 3, 128, 128)), ["out"]


def _detector(ctor, size):
    torch = _torch()

    class Flat(torch.nn.Module):
        """One image in, the first image's boxes/scores/labels out (the export
        wants tensors, torchvision returns a list of dicts)."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            d = self.m([x[0]])[0]
            return d["boxes"], d["scores"], d["labels"]

    torch.manual_seed(0)
    return Flat(ctor()).eval(), _image((1, 3, size, size)), ["boxes", "scores", "labels"]


def _calibrate_detector(model, size, batches=2):
    """calibrate_batchnorm for a torchvision detector: its train-mode forward
    wants targets, so the calibration passes run its transform, backbone and
    (SSD) head, where its BatchNorm layers are. Uncalibrated (running mean 0,
    variance 1 under random convolutions) the activations shrink by ~100x a
    stage: ssdlite's deepest features were ~1e-25 and its class logits
    ~1e-14, fasterrcnn's FPN outputs ~1e-8 (0 in f16), so every score was
    the same (1/8 for ssdlite), every box a decoded anchor or proposal, and
    the tests compared the anchors and the tie order of NMS and TopK."""
    torch = _torch()

    def forward(model, gen):
        imgs = [torch.randn(3, size, size, generator=gen) for _ in range(4)]
        feats = model.backbone(model.transform(imgs)[0].tensors)
        if hasattr(model, "head"):
            model.head(list(feats.values()))

    return calibrate_batchnorm(model, None, batches, forward)


def build_ssdlite():
    import torchvision.models.detection as det
    return _detector(lambda: _calibrate_detector(det.ssdlite320_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=8, detections_per_img=20), 320), 320)


def build_fasterrcnn():
    import torchvision.models.detection as det
    return _detector(lambda: _calibrate_detector(det.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, num_classes=8, box_detections_per_img=20), 320), 320)


# ---- inputs -----------------------------------------------------------------------------

def _image(shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


def _ids(seq):
    return np.random.default_rng(0).integers(0, VOCAB, size=(1, seq), dtype=np.int64)


# name -> (builder, tier, description). Tolerances are set from the output scale.
ARCHETYPES = {
    "bert": (build_bert, "default", "BERT-like encoder, 2 layers, d 128, seq 32"),
    "gpt2": (build_gpt2, "default", "GPT-2-like decoder, 2 layers, d 128, seq 32"),
    "llama": (build_llama, "default", "llama-style decoder block, RoPE, SwiGLU, ArgMax"),
    "unet_block": (build_unet_block, "default", "GroupNorm UNet stage, 4x32x32"),
    "wav2vec2": (build_wav2vec2, "default", "wav2vec2-style conv front end, 8000 samples"),
    "yolo_head": (build_yolo_head, "default", "YOLO-style two-scale head with box decode, 128x128"),
    "regnet_y_400mf": (build_regnet_y_400mf, "default", "torchvision regnet_y_400mf, 128x128"),
    "lstm": (build_lstm, "default", "2-layer bidirectional LSTM tagger, 64 frames x 40, hidden 128"),
    "gru": (build_gru, "default", "2-layer bidirectional GRU tagger, 64 frames x 40, hidden 128"),
    "convnext_tiny": (build_convnext_tiny, "slow", "torchvision convnext_tiny, 64x64"),
    "vit_b_16": (build_vit_b_16, "slow", "torchvision vit_b_16, 112x112"),
    "swin_t": (build_swin_t, "slow", "torchvision swin_t, 112x112"),
    "deeplabv3": (build_deeplabv3, "slow", "torchvision deeplabv3_mobilenet_v3_large, 8 classes, 128x128"),
    "ssdlite": (build_ssdlite, "detector", "torchvision ssdlite320_mobilenet_v3_large with NMS, 320x320"),
    "fasterrcnn": (build_fasterrcnn, "detector", "torchvision fasterrcnn_mobilenet_v3_large_320_fpn, 320x320"),
    "vit_b_16_224": (build_vit_b_16_224, "bench", "torchvision vit_b_16 at its 224x224 (the CPU speed goal's size)"),
}


def files(out_dir, name, output_names):
    return {
        "onnx": os.path.join(out_dir, f"{name}.onnx"),
        "input": os.path.join(out_dir, f"{name}_input.npy"),
        "outputs": {o: os.path.join(out_dir, f"{name}_ort_{o}.npy") for o in output_names},
    }


def _as_list(y):
    return list(y) if isinstance(y, (tuple, list)) else [y]


def export(name, out_dir):
    import onnx
    import onnxruntime as ort
    torch = _torch()

    builder, tier, desc = ARCHETYPES[name]
    torch.manual_seed(0)
    model, x, out_names = builder()
    paths = files(out_dir, name, out_names)
    tmp = paths["onnx"] + ".tmp"
    # Exported with autograd on: under no_grad, eval-mode nn.MultiheadAttention and
    # nn.TransformerEncoderLayer take torch's fused fast paths
    # (aten::_native_multi_head_attention, aten::_transformer_encoder_layer_fwd),
    # which have no ONNX export.
    torch.onnx.export(model, torch.from_numpy(x), tmp, opset_version=OPSET, input_names=["input"],
                      output_names=out_names, do_constant_folding=True)
    with torch.no_grad():
        ref = [t.numpy() for t in _as_list(model(torch.from_numpy(x)))]
    m = onnx.load(tmp)
    onnx.checker.check_model(m)
    m.doc_string = f"{desc}; random weights (seeded); made by kiln tests/models/export_archetypes.py"
    onnx.save(m, tmp)
    os.replace(tmp, paths["onnx"])

    sess = ort.InferenceSession(paths["onnx"], providers=["CPUExecutionProvider"])
    ys = sess.run(out_names, {"input": x})
    scale = max(float(np.max(np.abs(y))) if y.size and y.dtype.kind == "f" else 0.0 for y in ys)
    reference = "onnxruntime, checked against torch"
    for o, y, t in zip(out_names, ys, ref):
        problem = None
        if y.shape != t.shape:
            problem = f"output {o}: onnxruntime shape {y.shape}, torch {t.shape}"
        elif y.dtype.kind == "f" and not np.allclose(y, t, rtol=1e-3, atol=1e-4 * max(scale, 1.0)):
            problem = (f"output {o}: onnxruntime and torch disagree "
                       f"(max |diff| {float(np.max(np.abs(y - t))):g})")
        if problem and tier != "detector":
            raise RuntimeError(f"{name}: {problem}")
        if problem:
            # The detectors' traced post-processing (score threshold, per-class
            # NMS, top-k) is not re-checked here: with random weights their
            # boxes differ between torch and onnxruntime. onnxruntime's output
            # stays the reference, and the manifest says it is unchecked.
            reference = f"onnxruntime only ({problem})"
            print(f"{name}: warning: {problem}")
    save_npy(paths["input"], x)
    for o, y in zip(out_names, ys):
        save_npy(paths["outputs"][o], y)
    ops = sorted({n.op_type for n in m.graph.node})
    return {
        "tier": tier, "description": desc, "onnx": paths["onnx"],
        "inputs": {"input": paths["input"]}, "outputs": paths["outputs"],
        # Deep random-weight networks: onnxruntime fuses and reorders sums, so the
        # comparison allows rtol 1e-3 and an atol of 1e-4 of the output scale.
        "rtol": 1e-3, "atol": float(f"{1e-4 * max(scale, 1.0):.2g}"),
        "nodes": len(m.graph.node), "ops": ops, "output_scale": scale, "reference": reference,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory (created if missing)")
    ap.add_argument("--models", default="", help="comma-separated subset (default: all; see --list)")
    ap.add_argument("--tier", default="", help="only the archetypes of this tier (default, slow, detector, bench)")
    ap.add_argument("--force", action="store_true", help="re-export even if up to date")
    ap.add_argument("--list", action="store_true", help="print the archetype names and exit")
    args = ap.parse_args(argv)
    if args.list:
        for n, (_, tier, desc) in ARCHETYPES.items():
            print(f"{n:16} {tier:8} {desc}")
        return 0
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    if not names:
        # tier "bench" (ViT-B/16 at 224x224 for bench/models_peers.py) only when asked for
        names = [n for n in ARCHETYPES if ARCHETYPES[n][1] != "bench" or args.tier == "bench"]
    if args.tier:
        names = [n for n in names if n in ARCHETYPES and ARCHETYPES[n][1] == args.tier]
    unknown = [n for n in names if n not in ARCHETYPES]
    if unknown:
        ap.error(f"unknown archetype(s) {','.join(unknown)}; choose from {','.join(ARCHETYPES)}")
    os.makedirs(args.out, exist_ok=True)
    failed = []
    for name in names:
        manifest_path = os.path.join(args.out, f"{name}.archetype.json")
        entry = None
        if os.path.isfile(manifest_path):
            with open(manifest_path) as f:
                entry = json.load(f)
        if (not args.force and entry and
                up_to_date([manifest_path, entry["onnx"], *entry["inputs"].values(),
                            *entry["outputs"].values()], __file__)):
            print(f"{name}: up to date in {args.out}")
            continue
        t0 = time.monotonic()
        try:
            entry = export(name, args.out)
        except Exception as e:  # one archetype failing to export must not hide the others
            failed.append(name)
            msg = str(e).splitlines()[0] if str(e) else ""
            print(f"{name}: export FAILED: {type(e).__name__}: {msg}")
            continue
        print(f"{name}: exported in {time.monotonic() - t0:.1f} s "
              f"({entry['nodes']} nodes, max|out| {entry['output_scale']:.3g})")
        tmp = manifest_path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(entry, f, indent=1, sort_keys=True)
        os.replace(tmp, manifest_path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
