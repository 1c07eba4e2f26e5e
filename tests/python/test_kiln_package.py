"""The Python package (python/kiln) against onnxruntime's outputs.

Run by tests/python/run_pytest.sh in a fresh venv where `pip install ./python`
put the package; KILN_TEST_MODELS is the folder make_models.py wrote.
"""
import ctypes
import os

import numpy as np
import pytest

import kiln

MODELS = os.environ["KILN_TEST_MODELS"]
ONNX = os.path.join(MODELS, "small.onnx")


def ref(name, n):
    return np.load(os.path.join(MODELS, f"small_{name}_b{n}.npy"))


@pytest.fixture(scope="module")
def module():
    return kiln.compile(ONNX, target="cpu")


def test_version():
    assert kiln.__version__.count(".") == 2


def test_run_matches_onnxruntime(module):
    assert [i["name"] for i in module.inputs] == ["input"]
    assert [o["name"] for o in module.outputs] == ["logits", "probs"]
    assert module.inputs[0]["shape"] == (1, 3, 12, 12)  # N bound to 1
    s = module.session()
    logits, probs = s.run({"input": ref("input", 1)})
    np.testing.assert_allclose(logits, ref("logits", 1), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(probs, ref("probs", 1), rtol=1e-4, atol=1e-6)
    # the same session again, inputs as a list
    again = s.run([ref("input", 1)])
    np.testing.assert_array_equal(again[0], logits)


def test_dims_option():
    m = kiln.compile(ONNX, target="cpu", dims={"N": 2})
    assert m.inputs[0]["shape"] == (2, 3, 12, 12)
    logits, _ = m.session().run({"input": ref("input", 2)})
    np.testing.assert_allclose(logits, ref("logits", 2), rtol=1e-4, atol=1e-5)


def test_save_load(module, tmp_path):
    path = tmp_path / "small.kiln"
    module.save(str(path))
    loaded = kiln.load(str(path))
    assert loaded.data == module.data
    assert loaded.info["target"] == "cpu"
    out = loaded.session("cpu").run({"input": ref("input", 1)})
    np.testing.assert_allclose(out[0], ref("logits", 1), rtol=1e-4, atol=1e-5)


def test_report(module):
    rep = module.report
    figures = {(r["section"], r["key"]): r["value"] for r in rep if r["key"] != "line"}
    assert figures[("passes", "nodes_before")] >= figures[("passes", "nodes_after")] > 0
    assert figures[("fusion", "kernels_after")] <= figures[("fusion", "kernels_before")]
    assert figures[("plan", "kernels")] == figures[("fusion", "kernels_after")]
    assert figures[("timing", "codegen_ms")] >= 0
    assert any(r["text"].startswith("compiled ") for r in rep if r["section"] == "plan")


def test_fp16():
    m = kiln.compile(ONNX, target="cpu", precision="fp16", fp16_arith=False)
    assert m.info["precision"] == "fp16"
    logits, _ = m.session().run({"input": ref("input", 1)})
    np.testing.assert_allclose(logits, ref("logits", 1), rtol=1e-2, atol=1e-2)
    assert any(r["section"] == "warning" for r in m.report)  # no fp16 arithmetic: storage only


def test_profile(module):
    s = module.session(profile=True)
    for _ in range(3):
        s.run({"input": ref("input", 1)})
    prof = s.profile()
    assert prof and all(set(p) >= {"kernel", "node", "op", "total_s", "last_s", "flops", "bytes"} for p in prof)
    assert {p["node"] for p in prof} & {"conv", "fc"}
    assert all(p["total_s"] >= 0 for p in prof)
    assert all(p["device"] == "cpu" for p in prof)  # the struct's last field: the stride matches the C one
    assert module.session().profile() == []  # profiling off


def test_devices():
    devs = kiln.devices()
    cpu = [d for d in devs if d.get("name") == "cpu:0"]
    assert cpu and cpu[0]["description"]
    for d in devs:
        assert ("error" in d) != ("name" in d)


@pytest.mark.parametrize("api", ["opencl", "vulkan"])
def test_gpu_targets(api):
    if not any(d.get("api") == api and "name" in d for d in kiln.devices()):
        pytest.skip(f"no {api} device")
    m = kiln.compile(ONNX, target=api)
    logits, probs = m.session(f"{api}:0").run({"input": ref("input", 1)})
    np.testing.assert_allclose(logits, ref("logits", 1), rtol=1e-3, atol=1e-4)


def test_errors(module, tmp_path):
    with pytest.raises(kiln.KilnError, match="nope.onnx"):
        kiln.compile(str(tmp_path / "nope.onnx"))
    with pytest.raises(kiln.KilnError, match="target='tpu'"):
        kiln.compile(ONNX, target="tpu")
    with pytest.raises(kiln.KilnError, match="precision='fp8'"):
        kiln.compile(ONNX, precision="fp8")
    with pytest.raises(kiln.KilnError, match="unknown option 'bogus'"):
        kiln.compile(ONNX, bogus=1)
    with pytest.raises(kiln.KilnError, match="no dimension named 'M'"):
        kiln.compile(ONNX, dims={"M": 3})
    bad = tmp_path / "bad.kiln"
    bad.write_bytes(b"not a module at all")
    with pytest.raises(kiln.KilnError) as e:
        kiln.load(str(bad))
    assert e.value.code == "PARSE_ERROR" and "bad.kiln" in e.value.message
    s = module.session()
    x = ref("input", 1)
    with pytest.raises(kiln.KilnError, match="dtype float64"):
        s.run({"input": x.astype(np.float64)})
    with pytest.raises(kiln.KilnError, match="missing input"):
        s.run({})
    with pytest.raises(kiln.KilnError, match="no module input named"):
        s.run({"input": x, "other": x})
    with pytest.raises(kiln.KilnError, match="input"):  # wrong shape: the runtime names the input
        s.run({"input": np.zeros((2, 3, 12, 12), np.float32)})
    with pytest.raises(kiln.KilnError):
        kiln.Session(module, "nosuchapi")


DETECTOR = os.path.join(MODELS, "detector.onnx")
DETECTOR_OUTPUTS = ["boxes_out", "top", "strong", "topsum", "sel"]


def detector_run(r):
    inputs = {n: np.load(os.path.join(MODELS, f"detector_{n}_r{r}.npy")) for n in ("boxes", "scores")}
    expect = [np.load(os.path.join(MODELS, f"detector_{n}_r{r}.npy")) for n in DETECTOR_OUTPUTS]
    return inputs, expect


def test_staged_detector_matches_onnxruntime():
    """NonMaxSuppression, NonZero, a TopK with a run-time K, If and Loop: a StagedModel whose
    stages compile per shape met, against onnxruntime's outputs on three inputs."""
    m = kiln.compile(DETECTOR, target="cpu")
    assert isinstance(m, kiln.StagedModel)
    assert m.host_nodes >= 5  # nms, nz, topk, if, loop
    staged = [r["text"] for r in m.report if r["section"] == "staged" and r["key"] == "line"]
    assert any("'nms' (NonMaxSuppression) runs on the host" in t for t in staged)
    assert any("'sum_top' (Loop)" in t for t in staged)
    assert [i["name"] for i in m.inputs] == ["boxes", "scores"]
    assert [o["name"] for o in m.outputs] == DETECTOR_OUTPUTS
    assert m.inputs[0]["shape"] == (1, 8, 4) and m.outputs[0]["shape"][1] == 4
    assert m.outputs[0]["shape"][0] is None  # how many boxes NMS keeps: known after a run
    s = m.session()
    for r in (0, 1, 2, 0):
        inputs, expect = detector_run(r)
        got = s.run(inputs)
        for name, g, e in zip(DETECTOR_OUTPUTS, got, expect):
            assert g.shape == e.shape and g.dtype == e.dtype, (r, name, g.shape, e.shape)
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6, err_msg=f"run {r} output {name}")
    st = s.stats()
    assert st["host_nodes"] == m.host_nodes and st["compiles"] > 0 and st["reuses"] > 0
    compiles = st["compiles"]
    s.run(detector_run(1)[0])  # sizes met before: nothing compiled again
    assert s.stats()["compiles"] == compiles
    s.close()


def test_staged_errors(tmp_path):
    m = kiln.compile(DETECTOR, target="cpu")
    with pytest.raises(kiln.KilnError, match="'nms'.*no staged module.*reads 'sel'") as e:
        m.save(str(tmp_path / "detector.kiln"))
    assert e.value.code == "UNSUPPORTED"
    s = m.session("cpu")
    inputs, _ = detector_run(0)
    with pytest.raises(kiln.KilnError, match="dtype float64"):
        s.run({"boxes": inputs["boxes"].astype(np.float64), "scores": inputs["scores"]})
    with pytest.raises(kiln.KilnError, match="boxes"):  # wrong shape: named by the runner
        s.run({"boxes": np.zeros((1, 9, 4), np.float32), "scores": inputs["scores"]})
    with pytest.raises(kiln.KilnError, match="missing input"):
        s.run({"boxes": inputs["boxes"]})
    with pytest.raises(kiln.KilnError, match="nosuchapi"):
        m.session("nosuchapi")
    with pytest.raises(kiln.KilnError, match="fp32 or fp16"):
        kiln.compile(DETECTOR, precision="auto")
    np.testing.assert_allclose(s.run(inputs)[1], detector_run(0)[1][1], rtol=1e-6)  # still runs


STAGED = os.path.join(MODELS, "staged.onnx")
STAGED_OUTPUTS = ["sel", "nz", "r"]


def test_staged_module_save(tmp_path):
    """A StagedModel whose stages have fixed sizes (NMS and NonZero between them) has the staged
    module `kiln compile` writes: save() writes it, kiln.load runs it on libkiln_rt, and its
    outputs equal onnxruntime's and the runner's."""
    m = kiln.compile(STAGED, target="cpu")
    assert isinstance(m, kiln.StagedModel) and m.host_nodes == 2
    assert any(r["section"] == "staged" and "staged: module of" in r["text"] for r in m.report)
    path = str(tmp_path / "staged.kiln")
    m.save(path)
    loaded = kiln.load(path)
    assert [i["name"] for i in loaded.inputs] == ["boxes", "scores"]
    assert [o["name"] for o in loaded.outputs] == STAGED_OUTPUTS
    with open(path, "rb") as f:
        assert f.read() == m.data
    s, mine, runner = loaded.session(), m.module().session(), m.session()
    for r in (0, 1, 2):
        inputs, _ = detector_run(r)
        want = [np.load(os.path.join(MODELS, f"staged_{n}_r{r}.npy")) for n in STAGED_OUTPUTS]
        for got in (s.run(inputs), mine.run(inputs), runner.run(inputs)):
            for name, g, e in zip(STAGED_OUTPUTS, got, want):
                assert g.dtype == e.dtype and g.shape == e.shape, (r, name, g.shape, e.shape)
                np.testing.assert_array_equal(g, e, err_msg=f"run {r} output {name}")


def test_lowbit_io():
    """int4 in and out as int8 arrays of one value a byte, float8 out as uint8 codes; the module
    keeps the int4 / float8 dtypes (an int8 array is passed as the module's int4)."""
    m = kiln.compile(os.path.join(MODELS, "lowbit.onnx"), target="cpu")
    assert m.inputs[0]["dtype"] == np.int8 and m.inputs[0]["kiln_dtype"] == 17
    assert [o["kiln_dtype"] for o in m.outputs] == [1, 17, 15]
    x = np.load(os.path.join(MODELS, "lowbit_x.npy"))
    y, q, h = m.session().run({"x": x})
    for name, got in (("y", y), ("q", q), ("h", h)):
        want = np.load(os.path.join(MODELS, f"lowbit_{name}.npy"))
        assert got.dtype == want.dtype and np.array_equal(got, want), name
    with pytest.raises(kiln.KilnError):
        m.session().run({"x": x.astype(np.uint8)})


def test_session_options_layout():
    # kiln_session_options_default fills the whole C struct: a ctypes mirror
    # shorter than it (a field added in C only) lets it write past the
    # Python object, which corrupted the heap before dim_reserve was added here
    n = ctypes.sizeof(kiln._lib.SessionOptions)
    buf = (ctypes.c_uint8 * (n + 64))(*([0xA5] * (n + 64)))
    kiln._lib.rt.kiln_session_options_default(ctypes.cast(buf, ctypes.POINTER(kiln._lib.SessionOptions)))
    assert list(buf[n:]) == [0xA5] * 64
