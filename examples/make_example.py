#!/usr/bin/env python3
"""Write examples/tinycnn.onnx: a small MNIST-shaped CNN built with onnx.helper.

  make_example.py [--out PATH]   (default: tinycnn.onnx next to this script)

  image [N,1,28,28] -> Conv(8, 3x3, pad 1) -> Relu -> MaxPool 2x2
                    -> Conv(16, 3x3, pad 1) -> Relu -> MaxPool 2x2
                    -> Flatten -> Gemm(784 -> 10) -> Softmax -> probs [N,10]

Weights are random (np.random.default_rng(0), He-scaled normal), so the output is
meaningless but deterministic: the same bytes on every run. The model is checked with
onnx.checker and run once with onnxruntime before this script reports success.
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
# IR version 7 is the one that goes with opset 13; older readers (e.g. a system
# onnx.proto at IR 8) accept it.
IR_VERSION = 7

DOC = ("tinycnn: image [N,1,28,28] -> Conv(8,3x3,pad 1)+Relu+MaxPool 2x2 -> "
       "Conv(16,3x3,pad 1)+Relu+MaxPool 2x2 -> Flatten -> Gemm(784->10) -> Softmax -> "
       "probs [N,10]. Random weights from np.random.default_rng(0) (He-scaled normal); "
       "made by kiln examples/make_example.py with onnx.helper, opset 13.")


def he(rng, shape, fan_in):
    return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)


def build():
    rng = np.random.default_rng(0)
    weights = {
        "conv1.w": he(rng, (8, 1, 3, 3), 1 * 9),
        "conv1.b": (rng.standard_normal(8) * 0.1).astype(np.float32),
        "conv2.w": he(rng, (16, 8, 3, 3), 8 * 9),
        "conv2.b": (rng.standard_normal(16) * 0.1).astype(np.float32),
        "fc.w": he(rng, (10, 16 * 7 * 7), 16 * 7 * 7),  # [out, in], used with transB=1
        "fc.b": (rng.standard_normal(10) * 0.1).astype(np.float32),
    }
    inits = [numpy_helper.from_array(v, name=k) for k, v in weights.items()]

    conv = dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1])
    pool = dict(kernel_shape=[2, 2], strides=[2, 2])
    nodes = [
        helper.make_node("Conv", ["image", "conv1.w", "conv1.b"], ["c1"], name="conv1", **conv),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", **pool),
        helper.make_node("Conv", ["p1", "conv2.w", "conv2.b"], ["c2"], name="conv2", **conv),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", **pool),
        helper.make_node("Flatten", ["p2"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "tinycnn",
        inputs=[helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 28, 28])],
        outputs=[helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 10])],
        initializer=inits)
    model = helper.make_model(graph, producer_name="kiln examples/make_example.py",
                              opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=IR_VERSION, doc_string=DOC)
    return model, weights


def numpy_forward(x, w):
    """Independent numpy version of the model, to check onnxruntime against."""
    def conv(x, k, b):
        n, c, h, wd = x.shape
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        cols = np.stack([xp[:, :, i:i + h, j:j + wd] for i in range(3) for j in range(3)], axis=2)
        return np.einsum("nckhw,ock->nohw", cols, k.reshape(k.shape[0], c, 9)) + b[:, None, None]

    def pool(x):
        n, c, h, wd = x.shape
        return x.reshape(n, c, h // 2, 2, wd // 2, 2).max(axis=(3, 5))

    y = pool(np.maximum(conv(x, w["conv1.w"], w["conv1.b"]), 0))
    y = pool(np.maximum(conv(y, w["conv2.w"], w["conv2.b"]), 0))
    y = y.reshape(y.shape[0], -1) @ w["fc.w"].T + w["fc.b"]
    e = np.exp(y - y.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Write the tinycnn example ONNX model.")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "tinycnn.onnx"))
    args = ap.parse_args(argv)

    import onnxruntime as ort

    model, weights = build()
    onnx.checker.check_model(model, full_check=True)
    data = model.SerializeToString(deterministic=True)

    # Run at batch 1 and 3 so the symbolic batch dim is exercised.
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).standard_normal((3, 1, 28, 28), dtype=np.float32)
    for batch in (1, 3):
        y = sess.run(["probs"], {"image": x[:batch]})[0]
        ref = numpy_forward(x[:batch].astype(np.float64), weights)
        if y.shape != (batch, 10) or not np.allclose(y, ref, rtol=1e-4, atol=1e-6):
            sys.exit(f"make_example.py: onnxruntime output {y.shape} does not match numpy "
                     f"(max |diff| {np.max(np.abs(y - ref)):g})")

    tmp = args.out + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, args.out)
    print(f"wrote {args.out} ({len(data)} bytes); onnxruntime batch 1 and 3 match numpy; "
          f"probs[0] = {np.array2string(y[0], precision=3)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
