#!/usr/bin/env python3
"""A staged model (data-dependent shapes, control flow) through the Python package against
onnxruntime, interleaved in one process (issue 20: the torchvision detectors).

  KILN_LIBRARY_PATH=build PYTHONPATH=python .venv/bin/python bench/staged_ort.py \\
      --model DIR/fasterrcnn.onnx --input DIR/fasterrcnn_input.npy [--pairs 11]

The models and their inputs come from tests/models/export_archetypes.py --tier detector.
kiln.compile gives a kiln.StagedModel; its session runs once (compiling the stages for the
shapes that input meets, checked against onnxruntime's outputs: shapes equal, max abs error
printed), then the pairs alternate one kiln run and one onnxruntime run on the same input.
Prints both medians, their ratio, each pair's ratio and the runner's stats; say the machine's
load (uptime) with the figure.
"""
import argparse
import time

import numpy as np
import onnxruntime as ort

import kiln


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--input", required=True, help=".npy for the model's one input")
    ap.add_argument("--pairs", type=int, default=11)
    args = ap.parse_args()
    x = np.load(args.input)
    m = kiln.compile(args.model, target="cpu")
    s = m.session()
    o = ort.InferenceSession(args.model, providers=["CPUExecutionProvider"])
    feed_k, feed_o = {m.inputs[0]["name"]: x}, {o.get_inputs()[0].name: x}
    for out, a, b in zip(m.outputs, s.run(feed_k), o.run(None, feed_o)):
        if a.shape != b.shape:
            raise SystemExit(f"output {out['name']}: kiln {a.shape}, onnxruntime {b.shape}")
        err = float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0
        print(f"output {out['name']} {a.shape}: max abs error {err:.3g}")
    tk, to = [], []
    for _ in range(args.pairs):
        t = time.perf_counter()
        s.run(feed_k)
        tk.append(time.perf_counter() - t)
        t = time.perf_counter()
        o.run(None, feed_o)
        to.append(time.perf_counter() - t)
    mk, mo = float(np.median(tk)), float(np.median(to))
    print(f"kiln {mk * 1e3:.1f} ms, onnxruntime {mo * 1e3:.1f} ms (medians of {args.pairs}), ratio {mk / mo:.2f}; "
          "per pair: " + " ".join(f"{a / b:.2f}" for a, b in zip(tk, to)))
    print("runner:", s.stats())


if __name__ == "__main__":
    main()
