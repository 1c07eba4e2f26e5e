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
  detector.onnx         a detector's post-processing, staged (kiln.StagedModel):
                        NonMaxSuppression over boxes [1,8,4] and scores [1,1,8],
                        Gathers of the kept boxes and scores, NonZero of those
                        above 0.5, a TopK whose K is min(kept, 3), an If on the
                        best score (boxes doubled or kept) and a Loop summing
                        the top scores
  detector_{boxes,scores}_rN.npy   inputs for runs N = 0..2 (different counts)
  detector_<output>_rN.npy         onnxruntime's outputs on them
  staged.onnx           fixed-size stages around NonMaxSuppression and NonZero:
                        a StagedModel with a staged module (save())
  staged_<output>_rN.npy           onnxruntime's outputs on the detector inputs
  lowbit.onnx           int4 input "x" [6] -> DequantizeLinear -> "y" (f32),
                        QuantizeLinear -> "q" (int4), Cast -> "h" (float8 e5m2,
                        saturate 0), opset 21
  lowbit_{x,y,q,h}.npy  its input and the ONNX reference's outputs, int4 as
                        int8 values and float8 as uint8 codes (onnxruntime
                        1.20 has no int4 QuantizeLinear)
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


def build_lowbit(path):
    nodes = [
        helper.make_node("DequantizeLinear", ["x", "s1", "z1"], ["y"], name="dq"),
        helper.make_node("QuantizeLinear", ["y", "s2", "z2"], ["q"], name="q"),
        helper.make_node("Cast", ["y"], ["h"], name="to_f8", to=TensorProto.FLOAT8E5M2, saturate=0),
    ]
    inits = [helper.make_tensor("s1", TensorProto.FLOAT, [], [0.5]),
             helper.make_tensor("z1", TensorProto.INT4, [], [-3]),
             helper.make_tensor("s2", TensorProto.FLOAT, [], [0.25]),
             helper.make_tensor("z2", TensorProto.INT4, [], [1])]
    graph = helper.make_graph(nodes, "lowbit", [helper.make_tensor_value_info("x", TensorProto.INT4, [6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6]),
                               helper.make_tensor_value_info("q", TensorProto.INT4, [6]),
                               helper.make_tensor_value_info("h", TensorProto.FLOAT8E5M2, [6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    onnx.save(model, path)


DETECTOR_OUTPUTS = ["boxes_out", "top", "strong", "topsum", "sel"]


def build_detector(path):
    i64 = lambda name, v, shape=None: numpy_helper.from_array(np.array(v, np.int64).reshape(shape or np.shape(v)), name)
    f32 = lambda name, v: numpy_helper.from_array(np.array(v, np.float32), name)
    inits = [i64("max_out", [5]), f32("iou", [0.5]), f32("thr", [0.2]), i64("col", 2), i64("zero", 0),
             i64("bshape", [8, 4]), i64("sshape", [8]), i64("three", 3), i64("kshape", [1]), i64("flat", [-1]),
             f32("half", 0.5), f32("high", 0.8), f32("two", 2.0), f32("acc0", 0.0)]
    then_g = helper.make_graph([helper.make_node("Mul", ["kb", "two"], ["t_out"], name="double")], "then", [],
                               [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, ["k", 4])])
    else_g = helper.make_graph([helper.make_node("Identity", ["kb"], ["e_out"], name="same")], "else", [],
                               [helper.make_tensor_value_info("e_out", TensorProto.FLOAT, ["k", 4])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
         helper.make_node("Gather", ["top", "it"], ["ti"], name="take", axis=0),
         helper.make_node("Add", ["acc_in", "ti"], ["acc_out"], name="accumulate")],
        "body",
        [helper.make_tensor_value_info("it", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [])])
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "thr"], ["sel"], name="nms"),
        helper.make_node("Gather", ["sel", "col"], ["bi"], name="pick", axis=1),
        helper.make_node("Reshape", ["boxes", "bshape"], ["b2"], name="flat_boxes"),
        helper.make_node("Reshape", ["scores", "sshape"], ["s1"], name="flat_scores"),
        helper.make_node("Gather", ["b2", "bi"], ["kb"], name="kept_boxes", axis=0),
        helper.make_node("Gather", ["s1", "bi"], ["ks"], name="kept_scores", axis=0),
        helper.make_node("Greater", ["ks", "half"], ["is_strong"], name="strong_mask"),
        helper.make_node("NonZero", ["is_strong"], ["nz"], name="nz"),
        helper.make_node("Reshape", ["nz", "flat"], ["nzf"], name="nz_flat"),
        helper.make_node("Gather", ["kb", "nzf"], ["strong"], name="strong_boxes", axis=0),
        helper.make_node("Shape", ["ks"], ["ksh"], name="count_shape"),
        helper.make_node("Gather", ["ksh", "zero"], ["kcount"], name="count", axis=0),
        helper.make_node("Min", ["kcount", "three"], ["k"], name="k"),
        helper.make_node("Reshape", ["k", "kshape"], ["k1"], name="k1"),
        helper.make_node("TopK", ["ks", "k1"], ["top", "topi"], name="topk"),
        helper.make_node("ReduceMax", ["scores"], ["best"], name="best", keepdims=0),
        helper.make_node("Greater", ["best", "high"], ["confident"], name="confident"),
        helper.make_node("If", ["confident"], ["boxes_out"], name="if_confident", then_branch=then_g,
                         else_branch=else_g),
        helper.make_node("Loop", ["k", "", "acc0"], ["topsum"], name="sum_top", body=body),
    ]
    graph = helper.make_graph(
        nodes, "detector",
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 8, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 8])],
        [helper.make_tensor_value_info("boxes_out", TensorProto.FLOAT, ["k", 4]),
         helper.make_tensor_value_info("top", TensorProto.FLOAT, ["t"]),
         helper.make_tensor_value_info("strong", TensorProto.FLOAT, ["m", 4]),
         helper.make_tensor_value_info("topsum", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("sel", TensorProto.INT64, ["k", 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


STAGED_OUTPUTS = ["sel", "nz", "r"]


def build_staged(path):
    """Stages of fixed sizes around NonMaxSuppression and NonZero: a model with a staged module."""
    f32 = lambda name, v: numpy_helper.from_array(np.array([v], np.float32), name)
    inits = [numpy_helper.from_array(np.array([4], np.int64), "max_out"), f32("iou", 0.5), f32("thr", 0.3),
             f32("two", 2.0), f32("cut", 0.4)]
    nodes = [
        helper.make_node("Mul", ["scores", "two"], ["s2"], name="scale"),
        helper.make_node("NonMaxSuppression", ["boxes", "s2", "max_out", "iou", "thr"], ["sel"], name="nms"),
        helper.make_node("Sub", ["scores", "cut"], ["d"], name="minus"),
        helper.make_node("Relu", ["d"], ["r"], name="relu"),
        helper.make_node("NonZero", ["r"], ["nz"], name="nz"),
    ]
    graph = helper.make_graph(
        nodes, "staged",
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 8, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 8])],
        [helper.make_tensor_value_info("sel", TensorProto.INT64, ["k", 3]),
         helper.make_tensor_value_info("nz", TensorProto.INT64, [3, "m"]),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 1, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def detector_inputs(r):
    """Boxes in clusters (so NMS suppresses some) and scores that differ per run."""
    rng = np.random.default_rng(100 + r)
    centers = rng.uniform(0, 10, (3, 2))
    c = centers[rng.integers(0, 3, 8)] + rng.normal(0, 0.3, (8, 2))
    boxes = np.concatenate([c - 1, c + 1], axis=1).astype(np.float32).reshape(1, 8, 4)
    scores = rng.uniform(0, 1, (1, 1, 8)).astype(np.float32)
    if r == 2:
        scores *= 0.7  # nothing above the If's 0.8: the else branch
    return boxes, scores


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
    lowbit = os.path.join(out, "lowbit.onnx")
    build_lowbit(lowbit)
    from onnx._custom_element_types import int4
    from onnx.reference import ReferenceEvaluator
    x = np.array([-8, -3, 0, 5, 7, -1], np.int8)
    y, q, h = ReferenceEvaluator(lowbit).run(None, {"x": x.astype(int4)})
    for name, a in (("x", x), ("y", y), ("q", np.asarray(q).view(np.int8)), ("h", np.asarray(h).view(np.uint8))):
        np.save(os.path.join(out, f"lowbit_{name}.npy"), a)
    det = os.path.join(out, "detector.onnx")
    build_detector(det)
    sess = ort.InferenceSession(det, providers=["CPUExecutionProvider"])
    for r in range(3):
        boxes, scores = detector_inputs(r)
        np.save(os.path.join(out, f"detector_boxes_r{r}.npy"), boxes)
        np.save(os.path.join(out, f"detector_scores_r{r}.npy"), scores)
        for name, v in zip(DETECTOR_OUTPUTS, sess.run(DETECTOR_OUTPUTS, {"boxes": boxes, "scores": scores})):
            np.save(os.path.join(out, f"detector_{name}_r{r}.npy"), v)
    stg = os.path.join(out, "staged.onnx")
    build_staged(stg)
    sess = ort.InferenceSession(stg, providers=["CPUExecutionProvider"])
    for r in range(3):
        boxes, scores = detector_inputs(r)
        for name, v in zip(STAGED_OUTPUTS, sess.run(STAGED_OUTPUTS, {"boxes": boxes, "scores": scores})):
            np.save(os.path.join(out, f"staged_{name}_r{r}.npy"), v)


if __name__ == "__main__":
    main()
