"""End-to-end test of the example plugin (examples/plugin) on every target.

Exports with the onnx helper two models that compute the same thing:
  plain:  Conv -> BatchNormalization -> Relu -> x * Sigmoid(1.5 x), then a
          strided, grouped, dilated Conv without bias -> BatchNormalization -> Relu
  plugin: the same chains, the activation as com.kiln.example ScaledSwish
          (the Conv -> BN -> Relu chains become FusedConvBNReLU through the
          plugin's pattern)
and checks, on each target built (--strict: no fallback):
  - the plugin model matches onnxruntime on the plain model and kiln's
    reference executor (which runs the plugin's reference kernels), and the
    generated code holds the plugin kernels (the pattern fired twice);
  - ScaledSwish on f16 tensors against its reference kernel;
  - a module written with the plugin records its ops: kiln-rt-run refuses it
    without --plugin, naming them, and runs it with --plugin;
  - plugin errors: kernels no compiler accepts, an op without a kernel for
    the target (an error on the CPU and under --strict; on a GPU target it
    runs on the CPU of the same session, also from a module through
    kiln-rt-run), a model using plugin ops without the plugin, --plugin
    without a path.
Run by ctest (tests/plugin_tests.cmake).
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from plugin_run import run

DOMAIN = "com.kiln.example"
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def cbr(nodes, inits, rng, x, y, cin, cout, name, **conv):
    bias = conv.pop("bias", True)
    group = conv.get("group", 1)
    w = (rng.standard_normal((cout, cin // group, 3, 3)) * 0.3).astype(np.float32)
    inits.append(nh.from_array(w, name + "_w"))
    ins = [x, name + "_w"]
    if bias:
        inits.append(nh.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32), name + "_b"))
        ins.append(name + "_b")
    for p, v in (("scale", rng.standard_normal(cout)), ("bias", rng.standard_normal(cout) * 0.2),
                 ("mean", rng.standard_normal(cout) * 0.1), ("var", rng.random(cout) + 0.5)):
        inits.append(nh.from_array(v.astype(np.float32), f"{name}_{p}"))
    nodes += [h.make_node("Conv", ins, [name + "_c"], **conv),
              h.make_node("BatchNormalization", [name + "_c"] + [f"{name}_{p}" for p in ("scale", "bias", "mean", "var")],
                          [name + "_bn"], epsilon=1e-3),
              h.make_node("Relu", [name + "_bn"], [y])]


def model(plugin):
    rng = np.random.default_rng(7)
    nodes, inits = [], []
    cbr(nodes, inits, rng, "x", "r1", 4, 8, "b1", pads=[1, 1, 1, 1])
    if plugin:
        nodes.append(h.make_node("ScaledSwish", ["r1"], ["s1"], domain=DOMAIN, beta=1.5))
    else:
        inits.append(nh.from_array(np.array(1.5, np.float32), "beta"))
        nodes += [h.make_node("Mul", ["r1", "beta"], ["rb"]), h.make_node("Sigmoid", ["rb"], ["sg"]),
                  h.make_node("Mul", ["r1", "sg"], ["s1"])]
    cbr(nodes, inits, rng, "s1", "y", 8, 6, "b2", bias=False, strides=[2, 2], group=2, dilations=[2, 2],
        pads=[2, 2, 2, 2])
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 17, 17])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    ops = [h.make_opsetid("", 17)] + ([h.make_opsetid(DOMAIN, 1)] if plugin else [])
    return h.make_model(g, opset_imports=ops)


def one_op_model(domain, op, dtype=T.FLOAT, **attrs):
    """x -> Cast(dtype) -> op -> Cast(f32) -> y"""
    nodes = [h.make_node("Cast", ["x"], ["xc"], to=dtype), h.make_node(op, ["xc"], ["yc"], domain=domain, **attrs),
             h.make_node("Cast", ["yc"], ["y"], to=T.FLOAT)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 40])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(domain, 1)])


def minmax_model(dtype):
    """x, y -> Cast(dtype) -> com.kiln.bad MinMax -> Cast(f32) -> lo, hi: two inputs, two outputs"""
    nodes = [h.make_node("Cast", ["x"], ["xc"], to=dtype), h.make_node("Cast", ["y"], ["yc"], to=dtype),
             h.make_node("MinMax", ["xc", "yc"], ["l", "h"], domain="com.kiln.bad"),
             h.make_node("Cast", ["l"], ["lo"], to=T.FLOAT), h.make_node("Cast", ["h"], ["hi"], to=T.FLOAT)]
    vi = lambda n: h.make_tensor_value_info(n, T.FLOAT, [3, 50])
    g = h.make_graph(nodes, "g", [vi("x"), vi("y")], [h.make_tensor_value_info(n, T.FLOAT, None) for n in ("lo", "hi")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.kiln.bad", 1)])


def epilogue_model(plugin):
    """Conv -> BN -> Relu -> Sigmoid -> x*sigmoid(1.5x) -> LeakyRelu(0.2): with the plugin,
    FusedConvBNReLU with the Sigmoid fused in, ScaledSwish with the LeakyRelu fused in"""
    rng = np.random.default_rng(11)
    nodes, inits = [], []
    cbr(nodes, inits, rng, "x", "r", 4, 8, "e", pads=[1, 1, 1, 1])
    nodes.append(h.make_node("Sigmoid", ["r"], ["sg1"]))
    if plugin:
        nodes.append(h.make_node("ScaledSwish", ["sg1"], ["s"], domain=DOMAIN, beta=1.5))
    else:
        inits.append(nh.from_array(np.array(1.5, np.float32), "beta"))
        nodes += [h.make_node("Mul", ["sg1", "beta"], ["rb"]), h.make_node("Sigmoid", ["rb"], ["sg"]),
                  h.make_node("Mul", ["sg1", "sg"], ["s"])]
    nodes.append(h.make_node("LeakyRelu", ["s"], ["y"], alpha=0.2))
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 17, 17])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    ops = [h.make_opsetid("", 17)] + ([h.make_opsetid(DOMAIN, 1)] if plugin else [])
    return h.make_model(g, opset_imports=ops)


def mixed_model():
    """x -> Conv -> ScaledSwish (plugin) -> Conv -> Add -> y: kiln kernels around a plugin kernel"""
    rng = np.random.default_rng(5)
    inits = [nh.from_array((rng.standard_normal((8, 4, 3, 3)) * 0.3).astype(np.float32), "w1"),
             nh.from_array((rng.standard_normal((4, 8, 1, 1)) * 0.3).astype(np.float32), "w2"),
             nh.from_array(rng.standard_normal((1, 4, 1, 1)).astype(np.float32), "b")]
    nodes = [h.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             h.make_node("ScaledSwish", ["c1"], ["s"], domain=DOMAIN, beta=0.5),
             h.make_node("Conv", ["s", "w2"], ["c2"]), h.make_node("Add", ["c2", "b"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [1, 4, 17, 17])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(DOMAIN, 1)])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--rt-run", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--bad-plugin", required=True)
    ap.add_argument("--targets", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--python-package", help="python/ of the checkout: also check kiln.load_plugin there")
    ap.add_argument("--lib-dir", help="where libkiln.so and libkiln_rt.so are (--python-package)")
    a = ap.parse_args()
    targets = [t for t in a.targets.split(",") if t]
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    w = lambda *p: os.path.join(a.work, *p)
    onnx.save(model(False), w("plain.onnx"))
    onnx.save(model(True), w("plugin.onnx"))
    x = np.random.default_rng(1).standard_normal((1, 4, 17, 17)).astype(np.float32)
    np.save(w("x.npy"), x)
    expected = ort.InferenceSession(w("plain.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.save(w("expected.npy"), expected)
    check(0 < (expected > 0).mean() < 1, "the Relu zeroes some outputs and keeps others")

    onnx.save(epilogue_model(False), w("epi_plain.onnx"))
    onnx.save(epilogue_model(True), w("epi_plugin.onnx"))
    epi_expected = ort.InferenceSession(w("epi_plain.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.save(w("epi_expected.npy"), epi_expected)

    kiln, P = a.kiln, a.plugin
    for t in targets:
        d = w("dump_" + t)
        os.makedirs(d)
        rc, out = run([kiln, "run", w("plugin.onnx"), "--plugin", P, "-t", t, "--strict", "--input", "x=" + w("x.npy"),
                       "--compare", w("expected.npy"), "--check-ref", "--dump", d])
        check(rc == 0 and "compare y" in out and "check y" in out, f"{t}: plugin model matches onnxruntime and the "
              f"reference kernels (rc {rc})" + ("" if rc == 0 else "\n" + out))
        ext = {"cpu": "c", "opencl": "cl", "vulkan": "comp"}.get(t, t)
        src = open(os.path.join(d, "kernels." + ext)).read() if os.path.exists(os.path.join(d, "kernels." + ext)) else ""
        check(src.count("plugin op com.kiln.example/FusedConvBNReLU") == 2 and
              src.count("plugin op com.kiln.example/ScaledSwish") == 1,
              f"{t}: the generated code holds 2 FusedConvBNReLU and 1 ScaledSwish kernels")

        onnx.save(one_op_model(DOMAIN, "ScaledSwish", T.FLOAT16, beta=-0.75), w("half.onnx"))
        rc, out = run([kiln, "run", w("half.onnx"), "--plugin", P, "-t", t, "--strict", "--check-ref",
                       "--rtol", "1e-3", "--atol", "1e-3"])
        check(rc == 0 and "check y" in out, f"{t}: ScaledSwish on f16 matches its reference kernel (rc {rc})"
              + ("" if rc == 0 else "\n" + out))

        d = w("dump_epi_" + t)
        os.makedirs(d)
        rc, out = run([kiln, "run", w("epi_plugin.onnx"), "--plugin", P, "-t", t, "--strict", "--input",
                       "x=" + w("x.npy"), "--compare", w("epi_expected.npy"), "--check-ref", "--dump", d])
        src = open(os.path.join(d, "kernels." + ext)).read() if os.path.exists(os.path.join(d, "kernels." + ext)) else ""
        check(rc == 0 and "compiled 2 kernels" in out and "#define KILN_EPILOGUE0(v) (1.0" in src and
              "#define KILN_EPILOGUE0(v) ((v) >= 0.0" in src,
              f"{t}: Sigmoid and LeakyRelu fused into the plugin kernels as epilogues, matching onnxruntime (rc {rc})"
              + ("" if rc == 0 else "\n" + out))

        onnx.save(mixed_model(), w("mixed.onnx"))
        rc, out = run([kiln, "run", w("mixed.onnx"), "--plugin", P, "-t", t, "--precision", "fp16", "--check-ref",
                       "--rtol", "1e-2", "--atol", "1e-2"])
        check(rc == 0 and "check y" in out, f"{t}: --precision fp16 with a plugin op between kiln kernels (the "
              f"plugin kernel keeps its f32 tensors) (rc {rc})" + ("" if rc == 0 else "\n" + out))

        m = w(f"model_{t}.kiln")
        rc, out = run([kiln, "compile", w("plugin.onnx"), "--plugin", P, "-t", t, "-o", m])
        check(rc == 0, f"{t}: kiln compile -o with the plugin (rc {rc})" + ("" if rc == 0 else "\n" + out))
        rc, out = run([a.rt_run, m, "--input", "x=" + w("x.npy")])
        check(rc != 0 and "FusedConvBNReLU version 1" in out and "ScaledSwish version 1" in out and
              "not loaded" in out, f"{t}: kiln-rt-run refuses the module without the plugin, naming its ops")
        rc, out = run([kiln, "run", m])
        check(rc != 0 and "FusedConvBNReLU" in out, f"{t}: kiln run refuses the module without the plugin")
        o = w("out_" + t)
        rc, out = run([a.rt_run, m, "--plugin", P, "--input", "x=" + w("x.npy"), "--output", o])
        ok = rc == 0 and os.path.exists(os.path.join(o, "y.npy"))
        if ok:
            got = np.load(os.path.join(o, "y.npy"))
            ok = got.shape == expected.shape and np.allclose(got, expected, rtol=1e-4, atol=1e-5)
        check(ok, f"{t}: kiln-rt-run --plugin runs the module and matches onnxruntime (rc {rc})"
              + ("" if rc == 0 else "\n" + out))

        for dt, dn in ((T.FLOAT, "f32"), (T.INT8, "i8")):
            onnx.save(minmax_model(dt), w("minmax.onnx"))
            rng = np.random.default_rng(3)
            for n in ("x", "y"):
                np.save(w(n + ".mm.npy"), (rng.standard_normal((3, 50)) * 30).astype(np.float32))
            xs, ys = np.load(w("x.mm.npy")), np.load(w("y.mm.npy"))
            if dt == T.INT8:
                xs, ys = xs.astype(np.int8).astype(np.float32), ys.astype(np.int8).astype(np.float32)
            np.save(w("lo.npy"), np.minimum(xs, ys))
            np.save(w("hi.npy"), np.maximum(xs, ys))
            rc, out = run([kiln, "run", w("minmax.onnx"), "--plugin", a.bad_plugin, "-t", t, "--strict",
                           "--input", "x=" + w("x.mm.npy"), "--input", "y=" + w("y.mm.npy"), "--check-ref",
                           "--compare", "lo=" + w("lo.npy"), "--compare", "hi=" + w("hi.npy")])
            check(rc == 0 and "compare hi" in out, f"{t}: a plugin op with two inputs and two outputs, {dn} (rc {rc})"
                  + ("" if rc == 0 else "\n" + out))

        # errors naming the plugin, the op and the reason
        onnx.save(one_op_model("com.kiln.bad", "BadKernel"), w("bad_kernel.onnx"))
        rc, out = run([kiln, "run", w("bad_kernel.onnx"), "--plugin", a.bad_plugin, "-t", t, "--strict"])
        check(rc == 1 and "com.kiln.bad/BadKernel" in out and os.path.basename(a.bad_plugin) in out,
              f"{t}: a plugin kernel that fails to build is an error naming the plugin and the op (rc {rc})"
              + ("" if rc == 1 else "\n" + out))
        other = "ClOnly" if t == "cpu" else "CpuOnly"
        onnx.save(one_op_model("com.kiln.bad", other), w("no_kernel.onnx"))
        rc, out = run([kiln, "run", w("no_kernel.onnx"), "--plugin", a.bad_plugin, "-t", t, "--strict"])
        check(rc == 1 and f"com.kiln.bad/{other}" in out and f"no kernel for target {t}" in out and
              (t == "cpu" or ("--strict" in out and f"the {t} target cannot run it" in out)),
              f"{t}: an op without a kernel for the target is an error naming both (--strict)" + "\n" + out)
        if t == "cpu":
            rc, out = run([kiln, "run", w("no_kernel.onnx"), "--plugin", a.bad_plugin, "-t", t])
            check(rc == 1 and f"no kernel for target {t}" in out,
                  f"{t}: without --strict too (the CPU has no device to fall back to)")
        else:
            # heterogeneous execution: the op runs on the CPU of the same session
            np.save(w("x.no_kernel.npy"), np.random.default_rng(3).standard_normal((2, 3, 40)).astype(np.float32))
            rc, out = run([kiln, "run", w("no_kernel.onnx"), "--plugin", a.bad_plugin, "-t", t,
                           "--input", "x=" + w("x.no_kernel.npy"), "--check-ref", "--profile"])
            check(rc == 0 and f"fallback: node" in out and f"com.kiln.bad/{other}" in out and "check y" in out and
                  "heterogeneous:" in out and "[cpu]" in out,
                  f"{t}: a plugin op with only a CPU kernel runs on the CPU in the {t} session, matching its "
                  f"reference kernel, and the profile says where (rc {rc})" + ("" if rc == 0 else "\n" + out))
            m = w(f"no_kernel_{t}.kiln")
            rc, out = run([kiln, "compile", w("no_kernel.onnx"), "--plugin", a.bad_plugin, "-t", t, "-o", m])
            check(rc == 0 and "fallback: node" in out and "heterogeneous:" in out,
                  f"{t}: kiln compile prints a line per fallback (rc {rc})" + ("" if rc == 0 else "\n" + out))
            o = w("out_no_kernel_" + t)
            rc, out = run([a.rt_run, m, "--plugin", a.bad_plugin, "--input", "x=" + w("x.no_kernel.npy"),
                           "--output", o])
            ok = rc == 0 and os.path.exists(os.path.join(o, "y.npy"))
            if ok:
                got = np.load(os.path.join(o, "y.npy"))
                ok = np.array_equal(got, np.load(w("x.no_kernel.npy")))  # CpuOnly copies its input
            check(ok, f"{t}: kiln-rt-run runs the heterogeneous module ({t} and the CPU) (rc {rc})"
                  + ("" if rc == 0 else "\n" + out))
        if t != "cpu":
            onnx.save(one_op_model("com.kiln.bad", "BadLaunch"), w("bad_launch.onnx"))
            rc, out = run([kiln, "run", w("bad_launch.onnx"), "--plugin", a.bad_plugin, "-t", t, "--strict"])
            check(rc == 1 and "com.kiln.bad/BadLaunch" in out and "launch function failed" in out and
                  "always fails" in out, f"{t}: a failing launch function is an error naming the op and its reason")

    if a.python_package:
        script = f"""
import sys, numpy as np
sys.path.insert(0, {a.python_package!r})
import kiln
kiln.load_plugin({P!r})
m = kiln.compile({w("plugin.onnx")!r}, target="cpu")
(y,) = m.session("cpu").run({{"x": np.load({w("x.npy")!r})}})
assert np.allclose(y, np.load({w("expected.npy")!r}), rtol=1e-4, atol=1e-5), "mismatch"
print("python ok")
"""
        env = dict(os.environ, KILN_LIBRARY_PATH=a.lib_dir or "")
        p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
        check(p.returncode == 0 and "python ok" in p.stdout,
              "python: kiln.load_plugin, kiln.compile and a session run the plugin model" +
              ("" if p.returncode == 0 else "\n" + p.stdout + p.stderr))
    rc, out = run([kiln, "ops", "--plugin", P])
    check(rc == 0 and "Conv\n" in out and "com.kiln.example/FusedConvBNReLU version 1" in out,
          "kiln ops --plugin lists the plugin's ops after kiln's")
    rc, out = run([kiln, "run", w("plugin.onnx"), "-t", "ref"])
    check(rc == 1 and "ScaledSwish" in out and "unsupported" in out,
          "without the plugin its op is unsupported, by name")
    rc, out = run([kiln, "run", w("plugin.onnx"), "--plugin"])
    check(rc == 2 and "--plugin needs" in out, "--plugin without a path is a usage error")
    rc, out = run([kiln, "run", w("plugin.onnx"), "--plugin", w("x.npy")])
    check(rc == 1 and "x.npy" in out and "cannot load" in out, "--plugin of a file that is no library")
    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
