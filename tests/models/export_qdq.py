#!/usr/bin/env python3
"""Export a small CNN quantized by onnxruntime into QDQ models, with
onnxruntime's outputs, for the quantized-op import tests.

  export_qdq.py --out DIR

The float model (Conv -> Relu -> Conv(stride 2) -> Relu -> GlobalAveragePool
-> MatMul + Add, seeded random weights) is quantized by
onnxruntime.quantization.quantize_static, calibrated on eight seeded inputs,
in two flavours:
  qdq_pc   per-channel int8 weights (axis 0), uint8 activations
  qdq_s8   per-tensor int8 weights, int8 activations
Each goes to DIR/NAME.onnx with DIR/NAME_input.npy and DIR/NAME_ort.npy, the
output of onnxruntime with graph optimisations off, so that it runs every
QuantizeLinear/DequantizeLinear as written: kiln must match it to rounding
(the Q/DQ arithmetic is exact; only the float convolutions' sums differ).
"""

import argparse
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_static)


def float_model(rng):
    def init(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("MatMul", ["f", "wm"], ["m"]),
        helper.make_node("Add", ["m", "bm"], ["y"]),
    ]
    g = helper.make_graph(
        nodes, "qnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        initializer=[init("w1", [8, 3, 3, 3]), init("b1", [8]), init("w2", [16, 8, 3, 3]),
                     init("b2", [16]), init("wm", [16, 10]), init("bm", [10])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


class Reader(CalibrationDataReader):
    def __init__(self, seed):
        rng = np.random.default_rng(seed)
        self.data = iter([{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)}
                          for _ in range(8)])

    def get_next(self):
        return next(self.data, None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    fp32 = os.path.join(args.out, "qdq_float.onnx")
    onnx.save(float_model(np.random.default_rng(0)), fp32)
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    flavours = {"qdq_pc": (True, QuantType.QUInt8), "qdq_s8": (False, QuantType.QInt8)}
    for name, (per_channel, act) in flavours.items():
        path = os.path.join(args.out, name + ".onnx")
        quantize_static(fp32, path, Reader(2), quant_format=QuantFormat.QDQ,
                        per_channel=per_channel, activation_type=act,
                        weight_type=QuantType.QInt8)
        ops = {n.op_type for n in onnx.load(path).graph.node}
        assert {"QuantizeLinear", "DequantizeLinear"} <= ops, ops
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        y = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.save(os.path.join(args.out, name + "_input.npy"), x)
        np.save(os.path.join(args.out, name + "_ort.npy"), y)
        print(f"{name}: {sorted(ops)}; ort output {y.ravel()[:4]}")


if __name__ == "__main__":
    main()
