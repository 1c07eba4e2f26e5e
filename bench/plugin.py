#!/usr/bin/env python3
"""The example plugin's kernels (examples/plugin) against kiln's own, same run.

  plugin.py --kiln build/kiln --plugin build/tests/libkiln_example.so
            [--targets cpu,opencl,vulkan] [--rounds 3] [--repeat 20] [--work DIR]

Two cases, each one ONNX graph run with and without the plugin
(`kiln run --repeat R`, parsing `latency: median <ms> ms`):
  swish  X[1,64,128,128] -> x * sigmoid(1.5 x): kiln's fused element-wise
         kernel (Mul, Sigmoid, Mul fused by kiln) against the plugin's
         ScaledSwish kernel (the same math as a plugin body). Both are
         compiled by the same compiler with the same flags into the same
         program, so they should run at the same speed: this is the
         "plugin kernel vs the same code compiled into kiln" check.
  cbr    X[1,32,56,56] -> Conv 3x3 (32 -> 32, pad 1) -> BatchNormalization
         -> Relu: kiln's conv path (BN folded into the weights, Relu fused,
         kiln's tiled conv) against the plugin's FusedConvBNReLU (the
         pattern replaces the chain; a direct convolution, one work-item per
         output). It measures what a naive fused plugin kernel costs next to
         kiln's own, not plugin overhead.
  fn     (cpu only) the same X -> x * sigmoid(1.5 x) as the plugin's
         ScaledSwish (the loop as source, compiled into kiln's module) against
         ScaledSwishFn (the same loop in a C function inside the plugin,
         cpu_fn, called by the module's code through a pointer): what a
         kernel given as a function costs against the same code compiled
         into kiln. The plugin is built -O3 -fno-math-errno -fopenmp,
         without kiln's -march=native (tests/plugin_tests.cmake).
Rounds alternate the two variants so a slow spell hits both; a figure is
the median of the per-round medians. The first round checks both variants
against the reference (--check-ref) and is not timed unless --rounds is 1.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

LAT = re.compile(r"latency: median ([0-9.]+) ms")


def swish(plugin, op="ScaledSwish"):
    x = h.make_tensor_value_info("x", T.FLOAT, [1, 64, 128, 128])
    y = h.make_tensor_value_info("y", T.FLOAT, None)
    if plugin:
        nodes, inits = [h.make_node(op, ["x"], ["y"], domain="com.kiln.example", beta=1.5)], []
    else:
        inits = [nh.from_array(np.array(1.5, np.float32), "beta")]
        nodes = [h.make_node("Mul", ["x", "beta"], ["xb"]), h.make_node("Sigmoid", ["xb"], ["s"]),
                 h.make_node("Mul", ["x", "s"], ["y"])]
    ops = [h.make_opsetid("", 17)] + ([h.make_opsetid("com.kiln.example", 1)] if plugin else [])
    return h.make_model(h.make_graph(nodes, "swish", [x], [y], inits), opset_imports=ops)


def cbr():
    rng = np.random.default_rng(0)
    c = 32
    inits = [nh.from_array((rng.standard_normal((c, c, 3, 3)) * 0.1).astype(np.float32), "w"),
             nh.from_array(rng.standard_normal(c).astype(np.float32), "scale"),
             nh.from_array(rng.standard_normal(c).astype(np.float32), "bias"),
             nh.from_array((rng.standard_normal(c) * 0.1).astype(np.float32), "mean"),
             nh.from_array((rng.random(c) + 0.5).astype(np.float32), "var")]
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"]),
             h.make_node("Relu", ["b"], ["y"])]
    g = h.make_graph(nodes, "cbr", [h.make_tensor_value_info("x", T.FLOAT, [1, c, 56, 56])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout}{p.stderr}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--targets", default="cpu")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--work", default="/tmp/kiln_bench_plugin")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    paths = {}
    for name, m in (("swish_kiln", swish(False)), ("swish_plugin", swish(True)),
                    ("swish_fn", swish(True, "ScaledSwishFn")), ("cbr", cbr())):
        paths[name] = os.path.join(a.work, name + ".onnx")
        onnx.save(m, paths[name])
    # case: (label A, model A, A loads the plugin, label B, model B); B always loads it
    cases = {"swish": ("kiln", paths["swish_kiln"], False, "plugin", paths["swish_plugin"]),
             "cbr": ("kiln", paths["cbr"], False, "plugin", paths["cbr"]),
             "fn": ("source", paths["swish_plugin"], True, "cpu_fn", paths["swish_fn"])}
    for t in [t for t in a.targets.split(",") if t]:
        for case, (la, ma, pa, lb, mb) in cases.items():
            if case == "fn" and t != "cpu":
                continue  # a cpu_fn runs on the CPU only
            times = {la: [], lb: []}
            plug = ["--plugin", a.plugin]
            for r in range(a.rounds):
                for who, model, extra in ((la, ma, plug if pa else []), (lb, mb, plug)):
                    cmd = [a.kiln, "run", model, "-t", t, "--strict", "--repeat", str(a.repeat)] + extra
                    out = run(cmd + (["--check-ref"] if r == 0 else []))
                    if r > 0 or a.rounds == 1:
                        times[who].append(float(LAT.search(out).group(1)))
            k, p = statistics.median(times[la]), statistics.median(times[lb])
            print(f"plugin {t} {case}: {la} {k:.3f} ms, {lb} {p:.3f} ms ({p / k:.2f}x {la})", flush=True)


if __name__ == "__main__":
    main()
