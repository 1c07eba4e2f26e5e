#!/usr/bin/env python3
"""The small model the Python package tests run, with onnxruntime's outputs.

  make_models.py OUT_DIR

Runs with the test Python that has onnx and onnxruntime (.venv); the package
tests themselves run in a fresh venv without them and read what this writes:
  small.onnx            Conv(3->8, 3x3) + Relu + GlobalAveragePool + Flatten +
                        Gemm(8->5) -> "logits", Softmax -> "probs";
                        input "input" [N,3,12,12] with N symbolic
  small_input_bN.npy    float32 inputs (rng 0) for N = 1, 2
  small_logits_bN.npy, small_probs_bN.npy   onnxruntime's outputs on them
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def build(path):
    rng = np.random.default_rng(42)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    b = rng.standard_normal(8).astype(np.float32) * 0.1
    fw = rng.standard_normal((5, 8)).astype(np.float32)
    fb = rng.standard_normal(5).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["input", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "small",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 3, 12, 12])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 5]),
         helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 5])],
        [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (b, "b"), (fw, "fw"), (fb, "fb"))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "small.onnx")
    build(path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for n in (1, 2):
        x = np.random.default_rng(0).standard_normal((n, 3, 12, 12)).astype(np.float32)
        logits, probs = sess.run(["logits", "probs"], {"input": x})
        np.save(os.path.join(out, f"small_input_b{n}.npy"), x)
        np.save(os.path.join(out, f"small_logits_b{n}.npy"), logits)
        np.save(os.path.join(out, f"small_probs_b{n}.npy"), probs)


if __name__ == "__main__":
    main()
