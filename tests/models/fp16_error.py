#!/usr/bin/env python3
"""What fp16 storage alone does to a torchvision CNN's logits (the seeded
random-weight models of export_models.py), to set and check the fp16
tolerances of the model tests (tests/models/matrix.cmake).

  fp16_error.py resnet18 shufflenet_v2_x1_0 ...

Runs each model in torch twice on export_models.py's batch-1 input: in f32,
then with every parameter and every leaf module's output rounded to f16 and
back (the arithmetic stays f32, as kiln's --precision fp16 on a device
without fp16 arithmetic). Prints the largest |logit| S and the largest
difference E between the two runs: an error of the format, independent of
kiln, which any target's fp16 run should show about as much of.
"""

import sys

import numpy as np

from export_models import MODELS, build_model, make_inputs


def fp16_error(name):
    import torch

    model = build_model(name)
    x = torch.from_numpy(make_inputs()[0])
    with torch.no_grad():
        y32 = model(x).numpy()
        for p in model.parameters():
            p.copy_(p.half().float())
        for mod in model.modules():
            if not list(mod.children()):
                mod.register_forward_hook(lambda _m, _i, out: out.half().float())
        y16 = model(x).numpy()
    return float(np.abs(y32).max()), float(np.abs(y16 - y32).max())


def main(argv):
    names = argv or ["resnet18", "mobilenet_v2"]
    bad = [n for n in names if n not in MODELS]
    if bad:
        print(f"unknown model(s) {','.join(bad)}; choose from {','.join(MODELS)}", file=sys.stderr)
        return 2
    for name in names:
        s, e = fp16_error(name)
        print(f"{name}: max |logit| {s:.3g}, fp16 storage max abs error {e:.3g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
