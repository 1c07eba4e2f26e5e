#!/usr/bin/env python3
"""bench/conv_peak.py on a two-conv model (ctest label "bench").

  test_conv_peak.py KILN

KILN is the kiln CLI of the build (its libkiln beside it runs the profiled session).
A seeded model with a 3x3 conv (8 -> 16 channels) and a depthwise 3x3 conv on 16 x 20 x 20
goes through conv_peak.py with given peaks (--peak: no probe, so the test takes seconds):
both convs get a row, their FLOPs and roof follow from the shapes (the depthwise roof is
intensity x bandwidth under a high compute peak), the count below the goal matches the rows,
and a bad --peak is a usage error (exit 2). No timing is asserted.
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "bench", "conv_peak.py")


def model(path):
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((16, 1, 3, 3)).astype(np.float32), "w2")
    b2 = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b2")
    nodes = [
        helper.make_node("Conv", ["input", "w1"], ["a"], name="dense", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2", "b2"], ["y"], name="dw", pads=[1, 1, 1, 1], group=16),
    ]
    g = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 8, 20, 20])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16, 20, 20])], [w1, w2, b2])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def main():
    kiln = os.path.abspath(sys.argv[1])
    fails = []
    with tempfile.TemporaryDirectory(prefix="test_conv_peak") as tmp:
        model(os.path.join(tmp, "two.onnx"))
        out = os.path.join(tmp, "r.json")
        r = subprocess.run([sys.executable, SCRIPT, "--kiln", kiln, "--models", tmp, "--names", "two", "--threads", "1",
                            "--repeat", "3", "--rounds", "1", "--peak", "1000,10", "--json", out],
                           capture_output=True, text=True, timeout=300)
        print(r.stdout, r.stderr)
        if r.returncode != 0:
            sys.exit(f"FAIL: conv_peak.py exited {r.returncode}")
        rows = {x["node"]: x for x in json.load(open(out))["models"]["two"]}
        if set(rows) != {"dense", "dw"}:
            fails.append(f"rows {sorted(rows)}, expected dense and dw")
        else:
            d, w = rows["dense"], rows["dw"]
            flops_d, flops_w = 2 * 16 * 400 * 8 * 9, 2 * 16 * 400 * 9
            bytes_w = 4 * (16 * 400 + 16 * 9 + 16 * 400)
            if abs(d["gflops"] * d["ms"] * 1e6 - flops_d) > 1e-3 * flops_d:
                fails.append(f"dense conv FLOPs {d['gflops'] * d['ms'] * 1e6}, expected {flops_d}")
            if d["roof_gflops"] != 1000 or d["goal"] != 60:
                fails.append(f"dense conv roof {d['roof_gflops']} goal {d['goal']}, expected 1000 and 60")
            if abs(w["roof_gflops"] - 10 * flops_w / bytes_w) > 1e-6 or w["goal"] != 50:
                fails.append(f"depthwise roof {w['roof_gflops']} goal {w['goal']}, expected {10 * flops_w / bytes_w} and 50")
            below = sum(x["below"] for x in rows.values())
            if f"below the goal: {below}" not in r.stdout:
                fails.append(f"no 'below the goal: {below}' line")
        bad = subprocess.run([sys.executable, SCRIPT, "--kiln", kiln, "--models", tmp, "--names", "two", "--peak", "x"],
                             capture_output=True, text=True, timeout=60)
        if bad.returncode != 2:
            fails.append(f"--peak x exited {bad.returncode}, expected 2")
    for f in fails:
        print("FAIL:", f)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
