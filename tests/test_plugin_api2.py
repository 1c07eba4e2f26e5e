"""End-to-end test of what custom-op API version 2 added. CPU kernels given
as functions (kiln_custom_op_t.cpu_fn): the example's ScaledSwishFn, whose
CPU kernel is a C function in the plugin and which has no GPU kernel.

  - cpu: `kiln run` matches onnxruntime on the unfused model (x*sigmoid(1.5x)
    then LeakyRelu, fused into the call as its epilogue) and the plugin's
    reference kernel; the generated C calls the function;
  - cpu: a module with machine code (`kiln compile`, section NATV) and one
    without (--cpu-target none: C compiled at load) run through
    `kiln-rt-run --plugin`; loaded with a build of the plugin that registers
    the op without a function (the example's _nofn build), the module is
    refused naming the op, the plugin and the node;
  - opencl, vulkan: the op runs on the CPU of the GPU session (heterogeneous
    execution) through the function, from `kiln run` and from a module
    through `kiln-rt-run --plugin`; --strict refuses it;
  - vulkan: a GLSL kernel whose declared loop count (glsl_loop_trips) is
    above the device's loop limit (lavapipe: 65535) is refused naming the
    op (tests/plugins/bad_plugin.c LoopHeavy), one below it runs;
  - cpu, opencl, vulkan: a residual block's tail becomes the example's
    FusedConvBNAddReLU through a pattern that is a graph, not a chain;
  - one registry: from Python, kiln.load_plugin (one load) serves both
    kiln.compile (libkiln) and the session (libkiln_rt).
Run by ctest (tests/plugin_tests.cmake).
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from plugin_run import run

DOMAIN = "com.kiln.example"
failures = []


def check(cond, what, out=""):
    print(("ok   " if cond else "FAIL ") + what + ("" if cond or not out else "\n" + out), flush=True)
    if not cond:
        failures.append(what)


def model(plugin):
    """x -> Conv -> ScaledSwishFn(1.5) -> LeakyRelu(0.2) -> Add -> y (plain: Mul, Sigmoid, Mul)"""
    rng = np.random.default_rng(5)
    inits = [nh.from_array((rng.standard_normal((8, 4, 3, 3)) * 0.3).astype(np.float32), "w"),
             nh.from_array(rng.standard_normal((1, 8, 1, 1)).astype(np.float32), "b")]
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])]
    if plugin:
        nodes.append(h.make_node("ScaledSwishFn", ["c"], ["s"], domain=DOMAIN, beta=1.5))
    else:
        inits.append(nh.from_array(np.array(1.5, np.float32), "beta"))
        nodes += [h.make_node("Mul", ["c", "beta"], ["cb"]), h.make_node("Sigmoid", ["cb"], ["sg"]),
                  h.make_node("Mul", ["c", "sg"], ["s"])]
    nodes += [h.make_node("LeakyRelu", ["s"], ["l"], alpha=0.2), h.make_node("Add", ["l", "b"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 17, 17])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    ops = [h.make_opsetid("", 17)] + ([h.make_opsetid(DOMAIN, 1)] if plugin else [])
    return h.make_model(g, opset_imports=ops)


def epi_model(plugin, op="ScaledSwish", full_add=False):
    """x -> ScaledSwish -> Tanh -> Mul(1.7) -> Add(-0.3) -> Clip(-1, 2) -> Elu(0.5) -> HardSwish -> Gelu
    -> HardSigmoid(0.3, 0.4) [-> Add(full tensor)] -> y. With the plugin: the Tanh fused by the graph
    pass, the rest by kiln's kernel fusion into the plugin's KILN_EPILOGUE0; an Add of a whole tensor
    depends on the index and stays a kernel of its own. Plain: Mul, Sigmoid, Mul for the op."""
    rng = np.random.default_rng(9)
    c = lambda n, v: inits.append(nh.from_array(np.array(v, np.float32), n))
    inits = []
    if plugin:
        nodes = [h.make_node(op, ["x"], ["s"], domain=DOMAIN, beta=1.5)]
    else:
        c("beta", 1.5)
        nodes = [h.make_node("Mul", ["x", "beta"], ["xb"]), h.make_node("Sigmoid", ["xb"], ["sg"]),
                 h.make_node("Mul", ["x", "sg"], ["s"])]
    c("k_mul", 1.7), c("k_add", -0.3), c("lo", -1.0), c("hi", 2.0)
    nodes += [h.make_node("Tanh", ["s"], ["t"]), h.make_node("Mul", ["t", "k_mul"], ["m"]),
              h.make_node("Add", ["m", "k_add"], ["a"]), h.make_node("Clip", ["a", "lo", "hi"], ["cl"]),
              h.make_node("Elu", ["cl"], ["e"], alpha=0.5), h.make_node("HardSwish", ["e"], ["hs"]),
              h.make_node("Gelu", ["hs"], ["g"]),
              h.make_node("HardSigmoid", ["g"], ["y" if not full_add else "hg"], alpha=0.3, beta=0.4)]
    if full_add:
        inits.append(nh.from_array(rng.standard_normal((1, 4, 17, 17)).astype(np.float32), "full"))
        nodes.append(h.make_node("Add", ["hg", "full"], ["y"]))
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 17, 17])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    ops = [h.make_opsetid("", 20)] + ([h.make_opsetid(DOMAIN, 1)] if plugin else [])
    return h.make_model(g, opset_imports=ops)


def residual_model():
    """x -> Conv -> BatchNormalization -> Add(., x) -> Relu -> y: a residual block's tail, which the
    example's graph pattern (not a chain: the Add reads the BN and the block's input) makes one
    FusedConvBNAddReLU"""
    rng = np.random.default_rng(13)
    inits = [nh.from_array((rng.standard_normal((4, 4, 3, 3)) * 0.3).astype(np.float32), "w"),
             nh.from_array((rng.standard_normal(4) * 0.1).astype(np.float32), "cb")]
    for n, v in (("scale", rng.standard_normal(4)), ("bias", rng.standard_normal(4) * 0.2),
                 ("mean", rng.standard_normal(4) * 0.1), ("var", rng.random(4) + 0.5)):
        inits.append(nh.from_array(v.astype(np.float32), n))
    nodes = [h.make_node("Conv", ["x", "w", "cb"], ["c"], pads=[1, 1, 1, 1]),
             h.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["b"], epsilon=1e-3),
             h.make_node("Add", ["x", "b"], ["a"]), h.make_node("Relu", ["a"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 17, 17])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def close(path, want):
    if not os.path.exists(path):
        return False
    got = np.load(path)
    return got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--rt-run", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--plugin-nofn", required=True)
    ap.add_argument("--bad-plugin", required=True)
    ap.add_argument("--targets", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--python-package")
    ap.add_argument("--lib-dir")
    a = ap.parse_args()
    targets = [t for t in a.targets.split(",") if t]
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    w = lambda *p: os.path.join(a.work, *p)
    onnx.save(model(False), w("plain.onnx"))
    onnx.save(model(True), w("fn.onnx"))
    x = np.random.default_rng(1).standard_normal((1, 4, 17, 17)).astype(np.float32)
    np.save(w("x.npy"), x)
    expected = ort.InferenceSession(w("plain.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.save(w("expected.npy"), expected)
    kiln, P = a.kiln, a.plugin

    for full in (False, True):
        tag = "_full" if full else ""
        onnx.save(epi_model(False, full_add=full), w(f"epi_plain{tag}.onnx"))
        want = ort.InferenceSession(w(f"epi_plain{tag}.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.save(w(f"epi_expected{tag}.npy"), want)
        for op in ("ScaledSwish", "ScaledSwishFn"):
            onnx.save(epi_model(True, op, full), w(f"epi_{op}{tag}.onnx"))
    onnx.save(residual_model(), w("residual.onnx"))
    res_want = ort.InferenceSession(w("residual.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.save(w("res_expected.npy"), res_want)
    for t in targets:
        d = w("dump_res_" + t)
        os.makedirs(d)
        rc, out = run([kiln, "run", w("residual.onnx"), "--plugin", P, "-t", t, "--strict", "--input",
                       "x=" + w("x.npy"), "--compare", w("res_expected.npy"), "--check-ref", "--dump", d])
        code = "".join(open(os.path.join(d, f), errors="replace").read() for f in os.listdir(d)
                       if f.startswith("kernels."))
        check(rc == 0 and "compare y" in out and "check y" in out and "compiled 1 kernels" in out and
              "plugin op com.kiln.example/FusedConvBNAddReLU" in code,
              f"{t}: the residual tail Conv -> BN -> Add(x, .) -> Relu becomes FusedConvBNAddReLU (a graph "
              f"pattern) and matches onnxruntime on the model as written (rc {rc})", out)

    for t in targets:
        for op in ("ScaledSwish", "ScaledSwishFn"):
            for full in (False, True):
                tag = "_full" if full else ""
                rc, out = run([kiln, "run", w(f"epi_{op}{tag}.onnx"), "--plugin", P, "-t", t, "--input",
                               "x=" + w("x.npy"), "--compare", w(f"epi_expected{tag}.npy"), "--check-ref"])
                # the plugin kernel, plus the whole-tensor Add; in a GPU session ScaledSwishFn runs
                # on the CPU and the chain after it on the GPU (fusion keeps devices apart)
                fused = (f"compiled {1 + full} kernels" in out if op == "ScaledSwish" or t == "cpu"
                         else "heterogeneous: 1 of" in out)
                check(rc == 0 and "compare y" in out and "check y" in out and fused,
                      f"{t}: {op} takes Tanh (graph pass) and Mul, Add, Clip, Elu, HardSwish, Gelu, HardSigmoid "
                      f"(kiln's fusion) as its epilogue{', not a whole-tensor Add' if full else ''}; matches "
                      f"onnxruntime on the unfused model and the reference (rc {rc})", out)

    for t in targets:
        d = w("dump_" + t)
        os.makedirs(d)
        rc, out = run([kiln, "run", w("fn.onnx"), "--plugin", P, "-t", t, "--input", "x=" + w("x.npy"),
                       "--compare", w("expected.npy"), "--check-ref", "--dump", d])
        src = os.path.join(d, "kernels.c" if t == "cpu" else "host_kernels.c")
        text = open(src).read() if os.path.exists(src) else ""
        if t != "cpu" and not text:  # where the dump keeps the host code of a GPU session
            for f in os.listdir(d):
                if f.endswith(".c"):
                    text += open(os.path.join(d, f)).read()
        check(rc == 0 and "compare y" in out and "check y" in out and
              "calls the plugin's cpu_fn" in text and "#define KILN_EPILOGUE0(v) ((v) >= 0.0" in text,
              f"{t}: ScaledSwishFn's cpu_fn (LeakyRelu fused after it) matches onnxruntime and its reference "
              f"kernel (rc {rc})", out)
        if t != "cpu":
            check("fallback: node" in out and "ScaledSwishFn" in out,
                  f"{t}: the op runs on the CPU of the {t} session", out)
            rc, out = run([kiln, "run", w("fn.onnx"), "--plugin", P, "-t", t, "--strict"])
            check(rc == 1 and "ScaledSwishFn" in out and f"no kernel for target {t}" in out,
                  f"{t}: --strict refuses the op without a {t} kernel", out)
        modes = [("", [])] if t != "cpu" else [("", []), ("_src", ["--cpu-target", "none"])]
        for tag, extra in modes:
            m = w(f"fn_{t}{tag}.kiln")
            rc, out = run([kiln, "compile", w("fn.onnx"), "--plugin", P, "-t", t, "-o", m] + extra)
            check(rc == 0, f"{t}{tag}: kiln compile with the cpu_fn plugin (rc {rc})", out)
            o = w(f"out_{t}{tag}")
            rc, out = run([a.rt_run, m, "--plugin", P, "--input", "x=" + w("x.npy"), "--output", o])
            check(rc == 0 and close(os.path.join(o, "y.npy"), expected),
                  f"{t}{tag}: kiln-rt-run --plugin runs the module through the function (rc {rc})", out)
            rc, out = run([a.rt_run, m, "--plugin", a.plugin_nofn, "--input", "x=" + w("x.npy")])
            check(rc != 0 and "com.kiln.example/ScaledSwishFn" in out and os.path.basename(a.plugin_nofn) in out
                  and "without a CPU function" in out and "node '" in out,
                  f"{t}{tag}: the module with a plugin whose op has no cpu_fn is refused naming op, plugin, node",
                  out)

    if "vulkan" in targets:
        B = a.bad_plugin
        for n, ok in ((240, True), (70000, False)):
            nodes = [h.make_node("LoopHeavy", ["x"], ["y"], domain="com.kiln.bad")]
            g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, n])],
                             [h.make_tensor_value_info("y", T.FLOAT, None)])
            onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.kiln.bad", 1)]),
                      w(f"loop_{n}.onnx"))
            rc, out = run([a.kiln, "run", w(f"loop_{n}.onnx"), "--plugin", B, "-t", "vulkan", "--strict",
                           "--check-ref"])
            if ok:
                check(rc == 0 and "check y" in out,
                      f"vulkan: LoopHeavy over {n} elements (declared loop count {n}) runs (rc {rc})", out)
            else:
                check(rc == 1 and "com.kiln.bad/LoopHeavy" in out and "70000 loop iterations" in out and
                      "65535" in out and "glsl_loop_trips" in out,
                      f"vulkan: LoopHeavy over {n} elements is refused on lavapipe, naming the op (rc {rc})", out)

    if a.python_package:
        script = f"""
import ctypes, sys, numpy as np
sys.path.insert(0, {a.python_package!r})
import kiln
from kiln import _lib
kiln.load_plugin({P!r})
# one load serves both libraries: libkiln_rt's registry has the ops
rt = _lib.rt
rt.kiln_custom_op_find.restype = ctypes.c_void_p
rt.kiln_custom_op_find.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
assert rt.kiln_custom_op_find(b"com.kiln.example", b"ScaledSwishFn"), "libkiln_rt does not see the plugin"
m = kiln.compile({w("fn.onnx")!r}, target="cpu")
(y,) = m.session("cpu").run({{"x": np.load({w("x.npy")!r})}})
assert np.allclose(y, np.load({w("expected.npy")!r}), rtol=1e-4, atol=1e-5), "mismatch"
print("python ok")
"""
        env = dict(os.environ, KILN_LIBRARY_PATH=a.lib_dir or "")
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
        check(p.returncode == 0 and "python ok" in p.stdout,
              "python: one kiln.load_plugin serves kiln.compile and the session (cpu_fn model)",
              p.stdout + p.stderr)
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
