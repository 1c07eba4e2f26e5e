"""A small detector-style model with data-dependent outputs for the staged
module CLI tests (tests/staged_cli_tests.cmake): a compiled stage (Mul, Sub,
Relu, Add) feeding NonMaxSuppression and NonZero, which run on the host.

  staged_det.py --out DIR          writes DIR/det.onnx, DIR/boxes.npy,
                                   DIR/scores.npy and onnxruntime's outputs
                                   DIR/ort/{sel,nz,r}.npy
  staged_det.py --out DIR --check D  exit 1 unless D/{sel,nz,r}.npy equal
                                   onnxruntime's exactly (dtype, shape, values)
  staged_det.py --out DIR --check-ops D  the same for ops.onnx (Compress and
                                   TopK with a run-time K, write_ops):
                                   D/{c,cf,top,topi,low}.npy
"""
import argparse
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

OUTS = ["sel", "nz", "r"]


def write(out):
    nodes = [
        h.make_node("Mul", ["scores", "two"], ["s2"], name="scale"),
        h.make_node("Sub", ["s2", "cut"], ["d"], name="minus"),
        h.make_node("Relu", ["d"], ["r"], name="relu"),
        h.make_node("Add", ["boxes", "zero"], ["b2"], name="shift"),
        h.make_node("NonMaxSuppression", ["b2", "s2", "max_out", "iou", "thr"], ["sel"], name="nms",
                    center_point_box=0),
        h.make_node("NonZero", ["r"], ["nz"], name="nz"),
    ]
    inits = [nh.from_array(np.array([v], dt), n) for n, v, dt in
             [("two", 2.0, np.float32), ("cut", 0.6, np.float32), ("zero", 0.0, np.float32),
              ("max_out", 12, np.int64), ("iou", 0.5, np.float32), ("thr", 0.2, np.float32)]]
    g = h.make_graph(nodes, "staged_det",
                     [h.make_tensor_value_info("boxes", T.FLOAT, [1, 16, 4]),
                      h.make_tensor_value_info("scores", T.FLOAT, [1, 1, 16])],
                     [h.make_tensor_value_info("sel", T.INT64, None), h.make_tensor_value_info("nz", T.INT64, None),
                      h.make_tensor_value_info("r", T.FLOAT, [1, 1, 16])], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    os.makedirs(os.path.join(out, "ort"), exist_ok=True)
    onnx.save(m, os.path.join(out, "det.onnx"))
    rng = np.random.default_rng(7)
    # four clusters of four jittered unit boxes: NMS keeps about one per cluster
    corner = np.repeat(np.array([[0, 0], [0, 3], [3, 0], [3, 3]], np.float32), 4, axis=0)
    corner += rng.normal(0, 0.05, corner.shape).astype(np.float32)
    boxes = np.concatenate([corner, corner + 1], axis=1)[None].astype(np.float32)
    scores = rng.random((1, 1, 16), dtype=np.float32)
    np.save(os.path.join(out, "boxes.npy"), boxes)
    np.save(os.path.join(out, "scores.npy"), scores)
    res = ort.InferenceSession(os.path.join(out, "det.onnx")).run(None, {"boxes": boxes, "scores": scores})
    for n, v in zip(OUTS, res):
        np.save(os.path.join(out, "ort", n + ".npy"), v)
    # the test is only worth something when the sizes are neither empty nor full
    assert 0 < res[0].shape[0] < 12 and 0 < res[1].shape[1] < 16, (res[0].shape, res[1].shape)


OPS_OUTS = ["c", "cf", "top", "topi", "low"]


def write_ops(out):
    """The other host kernels of staged modules: Compress (along an axis and
    flattened) and TopK whose K a stage computes (both outputs, and the
    smallest values alone) -- ops.onnx, x.npy, s.npy, ort_ops/*.npy."""
    nodes = [
        h.make_node("Greater", ["s", "half"], ["m"], name="mask"),
        h.make_node("Cast", ["m"], ["mi"], name="to_int", to=T.INT64),
        h.make_node("ReduceSum", ["mi", "axes"], ["k"], name="count", keepdims=1),
        h.make_node("Compress", ["x", "m"], ["c"], name="keep_cols", axis=1),
        h.make_node("Compress", ["s", "m"], ["cf"], name="keep_flat"),
        h.make_node("TopK", ["s", "k"], ["top", "topi"], name="top"),
        h.make_node("TopK", ["s", "k"], ["low", "lowi"], name="low", largest=0),  # lowi read by nothing
    ]
    inits = [nh.from_array(np.array(0.5, np.float32), "half"), nh.from_array(np.array([0], np.int64), "axes")]
    g = h.make_graph(nodes, "staged_ops",
                     [h.make_tensor_value_info("x", T.FLOAT, [3, 20]), h.make_tensor_value_info("s", T.FLOAT, [20])],
                     [h.make_tensor_value_info(n, T.INT64 if n == "topi" else T.FLOAT, None) for n in OPS_OUTS], inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    os.makedirs(os.path.join(out, "ort_ops"), exist_ok=True)
    onnx.save(m, os.path.join(out, "ops.onnx"))
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 20)).astype(np.float32)
    s = rng.random(20, dtype=np.float32)
    s[3] = s[7] = s[12]  # ties, broken by index
    np.save(os.path.join(out, "x.npy"), x)
    np.save(os.path.join(out, "s.npy"), s)
    res = ort.InferenceSession(os.path.join(out, "ops.onnx")).run(OPS_OUTS, {"x": x, "s": s})
    for n, v in zip(OPS_OUTS, res):
        np.save(os.path.join(out, "ort_ops", n + ".npy"), v)
    assert 0 < res[2].shape[0] < 20, res[2].shape


def check(out, d, outs=OUTS, ref="ort"):
    bad = 0
    for n in outs:
        want = np.load(os.path.join(out, ref, n + ".npy"))
        got = np.load(os.path.join(d, n + ".npy"))
        if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
            print(f"{n}: {got.dtype}{list(got.shape)} differs from onnxruntime's {want.dtype}{list(want.shape)}")
            bad += 1
        else:
            print(f"{n}: {got.dtype}{list(got.shape)} equals onnxruntime's")
    return 1 if bad else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--check")
    ap.add_argument("--check-ops")
    a = ap.parse_args()
    if a.check:
        sys.exit(check(a.out, a.check))
    if a.check_ops:
        sys.exit(check(a.out, a.check_ops, OPS_OUTS, "ort_ops"))
    write(a.out)
    write_ops(a.out)
