#!/usr/bin/env python3
"""What fp16 storage alone does to a test model's outputs (the seeded
random-weight models of export_models.py and export_archetypes.py), to set
and check the fp16 tolerances of the model tests (tests/models/matrix.cmake).

  fp16_error.py resnet18 shufflenet_v2_x1_0 regnet_y_400mf bert ...

Runs each model in torch twice on its exporter's (batch-1) input: in f32,
then with every parameter and every leaf module's floating output rounded
to f16 and back (the arithmetic stays f32, as kiln's --precision fp16 on a
device without fp16 arithmetic). Prints, per output, the largest |value| S
and the largest difference F between the two runs: an error of the format,
independent of kiln, which any target's fp16 run should show about as much
of (integer outputs: whether they are equal).
"""

import sys

import numpy as np

from export_archetypes import ARCHETYPES
from export_models import MODELS, build_model, make_inputs


def _round_f16(_mod, _inp, out):
    import torch
    if torch.is_tensor(out) and out.is_floating_point():
        return out.half().float()
    return out


def _as_list(y):
    return [t.numpy() for t in (y if isinstance(y, (tuple, list)) else [y])]


def fp16_error(name):
    """[(output name, f32 value, f16-storage value)] for one model."""
    import torch

    if name in MODELS:
        model, x, outs = build_model(name), make_inputs()[0], ["logits"]
    else:
        torch.manual_seed(0)
        model, x, outs = ARCHETYPES[name][0]()
    x = torch.from_numpy(x)
    with torch.no_grad():
        y32 = _as_list(model(x))
        for p in model.parameters():
            p.copy_(p.half().float())
        for mod in model.modules():
            if not list(mod.children()):
                mod.register_forward_hook(_round_f16)
        y16 = _as_list(model(x))
    return list(zip(outs, y32, y16))


def main(argv):
    names = argv or ["resnet18", "mobilenet_v2"]
    bad = [n for n in names if n not in MODELS and n not in ARCHETYPES]
    if bad:
        print(f"unknown model(s) {','.join(bad)}; choose from "
              f"{','.join(MODELS)},{','.join(ARCHETYPES)}", file=sys.stderr)
        return 2
    for name in names:
        for out, a, b in fp16_error(name):
            if a.dtype.kind == "f":
                print(f"{name} {out}: max |value| {np.abs(a).max():.3g}, "
                      f"fp16 storage max abs error {np.abs(a - b).max():.3g}", flush=True)
            else:
                print(f"{name} {out}: equal in fp16 storage: {bool(np.array_equal(a, b))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
