#!/usr/bin/env python3
"""bench/plot.py and bench/models_peers.py on synthetic inputs (ctest label "bench").

  test_bench_plot.py [--keep DIR]

1. A synthetic `kiln bench --json` file with every suite -> plot.py -> the PNGs exist,
   are valid PNG files of non-trivial size, and summary.md has a row per case.
2. The same with only some suites (elementwise + softmax, no gemm/conv): plot.py
   skips the charts it has no cases for and still succeeds.
3. models_peers.py against a fake `kiln` (a script printing what `kiln run` prints)
   on examples/tinycnn.onnx, PyTorch off: its JSON, then plot.py --models-json.
4. plot.py rejects a JSON that cannot be read (exit 2, no traceback).
Exits 77 (ctest SKIP_RETURN_CODE) when matplotlib is not importable. Runs in a few
seconds; --keep DIR leaves the outputs there to look at.
"""

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLOT = os.path.join(ROOT, "bench", "plot.py")
PEERS = os.path.join(ROOT, "bench", "models_peers.py")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}")


def case(suite, name, shape, flops, nbytes, ms, peak, bw, peer=None):
    ms = max(ms, nbytes / (bw * 1e6), flops / (peak * 1e6))  # never above the roof
    gflops = flops / ms / 1e6
    gbs = nbytes / ms / 1e6
    intensity = flops / nbytes
    bound = "compute" if intensity >= peak / bw else "memory"
    pct = 100 * (gflops / peak if bound == "compute" else gbs / bw)
    c = {"suite": suite, "name": name, "shape": shape, "ms": ms, "gflops": gflops, "gbs": gbs,
         "pct_peak": pct, "bound": bound, "intensity": intensity, "target": "cpu"}
    if peer:
        c["peer"] = peer
    return c


def synthetic(suites=None):
    """Plausible numbers for a 2-core AVX2 machine: 150 GFLOP/s, 20 GB/s."""
    peak, bw = 150.0, 20.0
    cases = []
    for n in (64, 128, 256, 512, 1024, 2048, 4096):
        flops, nbytes = 2.0 * n ** 3, 4.0 * 3 * n * n
        eff_k = min(0.8, 0.15 * (n / 64) ** 0.5)
        eff_o = min(0.9, 0.2 * (n / 64) ** 0.5)
        cases.append(case("gemm", f"sgemm {n}", f"{n}x{n}x{n}", flops, nbytes,
                          flops / (eff_k * peak * 1e6), peak, bw))
        cases.append(case("gemm", f"sgemm {n}", f"{n}x{n}x{n}", flops, nbytes,
                          flops / (eff_o * peak * 1e6), peak, bw, peer="openblas"))
    for name, (m, n, k) in {"resnet fc": (1, 1000, 512), "bert qkv": (128, 2304, 768),
                            "bert ffn1": (128, 3072, 768)}.items():
        flops, nbytes = 2.0 * m * n * k, 4.0 * (m * k + k * n + m * n)
        cases.append(case("gemm", name, f"{m}x{n}x{k}", flops, nbytes, flops / (0.4 * peak * 1e6),
                          peak, bw))
    convs = [("resnet18 conv1", 3, 64, 112, 7, 2), ("resnet18 layer1 3x3", 64, 64, 56, 3, 1),
             ("resnet18 layer2 3x3 s2", 64, 128, 28, 3, 2), ("resnet18 layer2 3x3", 128, 128, 28, 3, 1),
             ("resnet18 layer2 down 1x1", 64, 128, 28, 1, 2), ("resnet18 layer3 3x3", 256, 256, 14, 3, 1),
             ("resnet18 layer4 3x3", 512, 512, 7, 3, 1), ("mobilenet_v2 expand 1x1", 24, 144, 56, 1, 1),
             ("mobilenet_v2 project 1x1", 144, 24, 56, 1, 1), ("mobilenet_v2 last 1x1", 320, 1280, 7, 1, 1)]
    for j, (name, ci, co, hw, k, s) in enumerate(convs):
        flops = 2.0 * co * hw * hw * ci * k * k
        nbytes = 4.0 * (ci * (hw * s) ** 2 + co * hw * hw + co * ci * k * k)
        cases.append(case("conv", name, f"1x{ci}x{hw * s}x{hw * s} k{k} s{s} -> {co}", flops, nbytes,
                          flops / ((0.2 + 0.05 * j) * peak * 1e6), peak, bw))
    for name, c, hw, s in [("mobilenet_v2 dw 3x3 s1", 144, 56, 1), ("mobilenet_v2 dw 3x3 s2", 144, 28, 2),
                           ("mobilenet_v2 dw 960", 960, 7, 1)]:
        flops, nbytes = 2.0 * c * hw * hw * 9, 4.0 * (c * (hw * s) ** 2 + c * hw * hw)
        cases.append(case("dwconv", name, f"1x{c}x{hw * s}x{hw * s} k3 s{s}", flops, nbytes,
                          nbytes / (0.5 * bw * 1e6), peak, bw))
    for name, flop_per, bytes_per in [("add", 1, 12), ("relu", 1, 8), ("mul_add", 2, 16),
                                      ("gelu", 10, 8)]:
        n = 1 << 22
        cases.append(case("elementwise", name, [n], flop_per * n, bytes_per * n,
                          bytes_per * n / (0.7 * bw * 1e6), peak, bw))
    cases.append(case("reduce", "sum rows", "4096x4096", 4096.0 ** 2, 4 * 4096.0 ** 2 + 4 * 4096,
                      4 * 4096.0 ** 2 / (0.6 * bw * 1e6), peak, bw))
    cases.append(case("softmax", "softmax 128x4096", "128x4096", 5 * 128 * 4096.0, 8 * 128 * 4096.0,
                      8 * 128 * 4096.0 / (0.3 * bw * 1e6), peak, bw))
    cases.append(case("layernorm", "layernorm 128x768", "128x768", 8 * 128 * 768.0, 8 * 128 * 768.0,
                      8 * 128 * 768.0 / (0.25 * bw * 1e6), peak, bw))
    # As kiln bench writes them: a failed case has an error and no figures, and kiln
    # rows carry "peer": null and no "target".
    cases.append({"suite": "softmax", "name": "softmax.broken", "peer": None, "shape": "1x1",
                  "error": "CPU backend: compile failed"})
    for c in cases[:4]:
        c.pop("target")
        c["peer"] = c.get("peer")
    if suites:
        cases = [c for c in cases if c["suite"] in suites]
    return {"machine": {"peak_gflops": peak, "peak_gbs": bw, "threads": 2,
                        "cpu": "Synthetic CPU @ 3.0GHz"}, "cases": cases}


def run(args, **kw):
    return subprocess.run([sys.executable] + args, capture_output=True, text=True, timeout=60, **kw)


def check_png(path):
    ok = os.path.isfile(path)
    check(ok, f"{path} exists")
    if not ok:
        return
    with open(path, "rb") as f:
        head = f.read(24)
    check(head[:8] == PNG_MAGIC, f"{path} starts with the PNG signature")
    check(head[12:16] == b"IHDR", f"{path} has an IHDR chunk")
    w, h = struct.unpack(">II", head[16:24])
    check(w >= 400 and h >= 300, f"{path} is at least 400x300 (is {w}x{h})")
    check(os.path.getsize(path) > 10_000, f"{path} is over 10 kB ({os.path.getsize(path)} bytes)")


def test_all_suites(tmp):
    data = synthetic()
    js = os.path.join(tmp, "kernels.json")
    with open(js, "w") as f:
        json.dump(data, f)
    out = os.path.join(tmp, "all")
    p = run([PLOT, "--json", js, "--out", out])
    check(p.returncode == 0, f"plot.py on all suites exits 0 ({p.returncode}: {p.stderr})")
    for name in ("gemm_sweep.png", "roofline.png", "conv.png"):
        check_png(os.path.join(out, name))
    with open(os.path.join(out, "summary.md")) as f:
        md = f.read()
    rows = [l for l in md.splitlines() if l.startswith("| ") and not l.startswith("| suite")]
    check(len(rows) == len(data["cases"]), f"summary.md has {len(data['cases'])} rows ({len(rows)})")
    check("| gemm | sgemm 1024 | 1024x1024x1024 | openblas |" in md, "summary.md has the openblas row")
    check("| layernorm | layernorm 128x768 |" in md, "summary.md has the layernorm row")
    check("![Roofline](roofline.png)" in md, "summary.md links the roofline")
    check("| softmax | softmax.broken | 1x1 | kiln cpu | – | – | – | – |  error: CPU backend: "
          "compile failed |" in md, "summary.md shows the failed case's error")
    check("| gemm | sgemm 64 | 64x64x64 | kiln cpu |" in md, "a case without target is kiln cpu")


def test_some_suites(tmp):
    js = os.path.join(tmp, "partial.json")
    with open(js, "w") as f:
        json.dump(synthetic({"elementwise", "softmax"}), f)
    out = os.path.join(tmp, "partial")
    p = run([PLOT, "--json", js, "--out", out])
    check(p.returncode == 0, f"plot.py on some suites exits 0 ({p.returncode}: {p.stderr})")
    check("skipped gemm_sweep.png" in p.stdout, "plot.py says it skipped the gemm sweep")
    check("skipped conv.png" in p.stdout, "plot.py says it skipped the conv chart")
    check_png(os.path.join(out, "roofline.png"))
    check(not os.path.exists(os.path.join(out, "gemm_sweep.png")), "no gemm_sweep.png without gemm")
    with open(os.path.join(out, "summary.md")) as f:
        md = f.read()
    check("| softmax | softmax 128x4096 |" in md, "partial summary.md has the softmax row")


FAKE_KILN = """#!/bin/sh
# Prints what `kiln run --repeat N` prints, for models_peers.py.
echo "compiled 7 kernels for cpu: lowering 1.0 ms, codegen 2.0 ms, 67.4 KB of code, 0.0 MB of weights"
echo "cpu: C compiler cc 300.0 ms (0.3 s of CPU, 2 parts on 2 jobs), loaded in 1.0 ms"
echo "latency: median 0.25 ms, min 0.20 ms over 5 runs"
"""


def test_models(tmp):
    try:
        import numpy as np
        import onnxruntime  # noqa: F401
    except ImportError:
        print("note: numpy/onnxruntime not importable, models_peers.py not tested")
        return
    models = os.path.join(tmp, "models")
    os.makedirs(models)
    shutil.copy(os.path.join(ROOT, "examples", "tinycnn.onnx"), models)
    import onnx
    m = onnx.load(os.path.join(models, "tinycnn.onnx"))
    inp = m.graph.input[0]
    dims = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
    np.save(os.path.join(models, "tinycnn_input.npy"),
            np.random.default_rng(0).standard_normal(dims).astype(np.float32))
    kiln = os.path.join(tmp, "kiln")
    with open(kiln, "w") as f:
        f.write(FAKE_KILN)
    os.chmod(kiln, 0o755)
    js = os.path.join(tmp, "models.json")
    p = run([PEERS, "--kiln", kiln, "--models", models, "--names", "tinycnn", "--threads", "1",
             "--repeat", "5", "--no-torch", "--json", js])
    check(p.returncode == 0, f"models_peers.py exits 0 ({p.returncode}: {p.stdout} {p.stderr})")
    check("[1/1] tinycnn" in p.stdout, "models_peers.py prints a progress line")
    if p.returncode != 0:
        return
    with open(js) as f:
        res = json.load(f)
    row = res["models"][0]
    check(row["name"] == "tinycnn", "models.json names the model")
    check(row["latency_ms"]["kiln cpu"] == 0.25, "models.json has kiln's parsed median")
    check(row["latency_ms"]["onnxruntime"] > 0, "models.json has an onnxruntime latency")
    check(abs(row["compile_s"] - 0.304) < 1e-9, "models.json has the parsed compile time")
    check(any("PyTorch" in n for n in res["notes"]), "models.json notes that PyTorch was skipped")
    out = os.path.join(tmp, "models-plots")
    p = run([PLOT, "--models-json", js, "--out", out])
    check(p.returncode == 0, f"plot.py --models-json exits 0 ({p.returncode}: {p.stderr})")
    check_png(os.path.join(out, "models.png"))
    with open(os.path.join(out, "summary.md")) as f:
        md = f.read()
    check("| tinycnn | 0.25 |" in md, "models summary has the tinycnn row")


def test_bad_json(tmp):
    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        f.write("{not json")
    p = run([PLOT, "--json", bad, "--out", os.path.join(tmp, "bad")])
    check(p.returncode == 2, f"plot.py on a broken JSON exits 2 ({p.returncode})")
    check("Traceback" not in p.stderr and "cannot read" in p.stderr,
          "plot.py names the unreadable file without a traceback")


def main():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("SKIP: matplotlib is not importable (apt-get install python3-matplotlib)")
        return 77
    keep = sys.argv[2] if len(sys.argv) > 2 and sys.argv[1] == "--keep" else None
    tmp = keep or tempfile.mkdtemp(prefix="kiln-bench-plot-")
    os.makedirs(tmp, exist_ok=True)
    try:
        for t in (test_all_suites, test_some_suites, test_models, test_bad_json):
            sub = os.path.join(tmp, t.__name__)
            shutil.rmtree(sub, ignore_errors=True)
            os.makedirs(sub)
            t(sub)
            print(f"{t.__name__}: {'ok' if not failures else 'see failures above'}")
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(failures)} failure(s)" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
