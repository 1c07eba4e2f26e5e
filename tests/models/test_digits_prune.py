#!/usr/bin/env python3
"""`kiln prune` on the digits models (train_digits.py): the pruned models pass
onnx.checker, load in onnxruntime, and kiln runs each on every target given
with --targets (ref, cpu and whichever GPU targets are built) matching
onnxruntime's output of the same pruned model; at several ratios and with each
importance method, plus --flops, --tolerance and --analyze. Also the bad
inputs: a ratio outside [0, 1), a budget below what removing every prunable
channel reaches, a --keep layer that does not exist, a Reshape that mixes
channels (left unpruned and named).

  test_digits_prune.py --kiln BUILD/kiln --out DIR [--targets ref,cpu,opencl] [--device-checks]

Without --device-checks (the quick default test): ref and cpu only, no
latency measurement. With it (a `slow` test): every target given at ratio
0.5, the latency-aware rounding, --latency-ms and --analyze, which compile
and time the model on the CPU several times.

Exit status 0 when every check passed.
"""

import argparse
import os
import re
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def kiln(args, *rest):
    r = subprocess.run([args.kiln, *rest], capture_output=True, text=True, timeout=600)
    return r.returncode, r.stdout + r.stderr


def ort_run(path, x):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def prune_and_check(args, model, out, flags, x, y, targets, what):
    rc, log = kiln(args, "prune", model, "-o", out, *flags)
    prune_log = log
    check(rc == 0, f"{what}: kiln prune {' '.join(flags)} ({log.strip().splitlines()[-1] if log.strip() else ''})")
    if rc:
        print(log)
        return None
    import onnx
    try:
        onnx.checker.check_model(onnx.load(out), full_check=True)
        check(True, f"{what}: onnx.checker")
    except Exception as e:  # noqa: BLE001 - report any checker failure
        check(False, f"{what}: onnx.checker: {e}")
    logits = ort_run(out, x)
    acc = float((logits.argmax(1) == y).mean())
    print(f"      {what}: top-1 in onnxruntime {100 * acc:.2f}%")
    one = os.path.join(args.out, "x1.npy")
    want = os.path.join(args.out, "want1.npy")
    np.save(one, x[:1])
    np.save(want, ort_run(out, x[:1]))
    for t in targets:
        rc, log = kiln(args, "run", out, "-t", t, "--input", f"input={one}", "--compare", want,
                       "--rtol", "1e-3", "--atol", "1e-4")
        check(rc == 0 and "outside" in log and " 0 of " in log, f"{what}: kiln -t {t} matches onnxruntime")
        if rc:
            print(log[-2000:])
    return prune_log, acc


def mixing_model(path):
    """conv(4) -> Reshape [N, 2, -1] mixes channel pairs -> Relu -> output."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 1, 3, 3)).astype(np.float32), "W")
    shp = numpy_helper.from_array(np.array([1, 2, -1], np.int64), "shape")
    nodes = [helper.make_node("Conv", ["input", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Reshape", ["c", "shape"], ["r"], name="mix"),
             helper.make_node("Relu", ["r"], ["logits"], name="relu")]
    g = helper.make_graph(nodes, "mix", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, 8, 8])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)], [w, shp])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)


def setup(args):
    os.makedirs(args.out, exist_ok=True)
    r = subprocess.run([sys.executable, os.path.join(HERE, "train_digits.py"), "--out", args.out])
    if r.returncode:
        print("FAIL  train_digits.py")
        return None
    d = args.out
    return (np.load(os.path.join(d, "test_images.npy")), np.load(os.path.join(d, "test_labels.npy")),
            os.path.join(d, "digits_cnn.onnx"), os.path.join(d, "calib_cnn"))


def device_checks(args, targets):
    data = setup(args)
    if data is None:
        return 1
    x, y, cnn, calib = data
    d = args.out
    prune_and_check(args, cnn, os.path.join(d, "cnn_dev_0.5.onnx"), ["--ratio", "0.5", "--no-round"], x, y,
                    targets, "cnn --ratio 0.5")
    # Latency-aware rounding on the CPU (measured): the written model still matches.
    res = prune_and_check(args, cnn, os.path.join(d, "cnn_round.onnx"), ["--ratio", "0.5", "--reps", "5"], x, y,
                          ["cpu"], "cnn --ratio 0.5 with latency rounding")
    if res:
        check("rounding /0/Conv" in res[0], "cnn: each group's count rounded by measured latency")

    # --analyze with a CSV.
    csv = os.path.join(d, "analyze.csv")
    rc, log = kiln(args, "prune", cnn, "--analyze", "--calibrate", calib, "--csv", csv, "--reps", "3")
    rows = open(csv).read().splitlines() if os.path.exists(csv) else []
    check(rc == 0 and len(rows) == 1 + 3 * 3 and rows[0].startswith("group,channels"),
          "cnn --analyze: 3 groups x 3 ratios in the CSV")
    png = os.path.join(d, "analyze.png")
    r = subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "bench", "plot_prune.py"), csv, "-o", png])
    check(r.returncode == 0 and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n", "bench/plot_prune.py: a PNG of the CSV")

    # kiln eval: fp32 and prune:0.5 compiled for the CPU; their top-1 on the
    # labelled digits equals onnxruntime's run of the same models.
    ecsv = os.path.join(d, "eval.csv")
    rc, log = kiln(args, "eval", cnn, "--variants", "fp32,fp16,prune:0.5", "--data", os.path.join(d, "test_images.npy"),
                   "--labels", os.path.join(d, "test_labels.npy"), "--reps", "5", "--csv", ecsv)
    rows = {r.split(",")[0]: r.split(",") for r in open(ecsv).read().splitlines()[1:]} if rc == 0 else {}
    pruned = os.path.join(d, "cnn_eval_0.5.onnx")
    kiln(args, "prune", cnn, "-o", pruned, "--ratio", "0.5", "--no-round")
    want = {"fp32": 100 * float((ort_run(cnn, x).argmax(1) == y).mean()),
            "prune:0.5": 100 * float((ort_run(pruned, x).argmax(1) == y).mean())}
    for v, acc in want.items():
        check(v in rows and abs(float(rows[v][4]) - acc) < 0.01, f"kiln eval {v}: top-1 {rows.get(v, ['', '', '', '', '?'])[4]} = onnxruntime's {acc:.2f}")
    check("fp16" in rows and int(rows["fp16"][2]) < int(rows["fp32"][2]), "kiln eval: fp16 weights smaller than fp32")
    if rc:
        print(log)
    png = os.path.join(d, "eval.png")
    r = subprocess.run([sys.executable, os.path.join(HERE, "..", "..", "bench", "plot_eval.py"), ecsv, "-o", png])
    check(r.returncode == 0 and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n", "bench/plot_eval.py: a PNG of the CSV")

    out = os.path.join(d, "bad.onnx")
    rc, log = kiln(args, "prune", cnn, "-o", out, "--latency-ms", "0.0000001", "--reps", "2")
    check(rc != 0 and "below what removing every prunable channel" in log, "bad input --latency-ms 1e-7")

    print(f"{len(failures)} failed")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--targets", default="ref,cpu")
    ap.add_argument("--device-checks", action="store_true")
    args = ap.parse_args()
    targets = args.targets.split(",")
    if args.device_checks:
        return device_checks(args, targets)
    data = setup(args)
    if data is None:
        return 1
    x, y, cnn, calib = data
    d = args.out
    base = float((ort_run(cnn, x).argmax(1) == y).mean())
    print(f"      fp32 top-1 {100 * base:.2f}%")

    # Ratios x methods; the GPU targets on one ratio (each compile costs seconds there).
    accs = {}
    for ratio in ("0.25", "0.5", "0.75"):
        for method in ("l1", "l2", "bn") if ratio == "0.5" else ("l1",):
            t = ["ref", "cpu"] if method == "l1" else ["ref"]
            res = prune_and_check(args, cnn, os.path.join(d, f"cnn_{method}_{ratio}.onnx"),
                                  ["--ratio", ratio, "--method", method, "--no-round"], x, y, t,
                                  f"cnn --ratio {ratio} --method {method}")
            if res:
                accs[(method, ratio)] = res[1]
    check(accs.get(("l1", "0.25"), 0) >= accs.get(("l1", "0.75"), 1) - 0.02,
          "cnn: pruning more does not help accuracy (l1 0.25 vs 0.75)")


    # --flops: half the FLOPs or fewer.
    rc, log = kiln(args, "prune", cnn, "-o", os.path.join(d, "cnn_flops.onnx"), "--flops", "0.5", "--no-round")
    m = re.search(r"FLOPs (\d+) -> (\d+)", log)
    check(rc == 0 and m and int(m.group(2)) <= 0.5 * int(m.group(1)), "cnn --flops 0.5: at most half the FLOPs")

    # --tolerance: the measured error within the tolerance.
    rc, log = kiln(args, "prune", cnn, "-o", os.path.join(d, "cnn_tol.onnx"), "--calibrate", calib,
                   "--tolerance", "0.1", "--no-round")
    m = re.search(r"output error on \d+ calibration samples: ([0-9.e+-]+)", log)
    check(rc == 0 and m and float(m.group(1)) <= 0.1, "cnn --tolerance 0.1: error within it")
    if rc:
        print(log)


    # The MLP (Gemm chain).
    prune_and_check(args, os.path.join(d, "digits_mlp.onnx"), os.path.join(d, "mlp_05.onnx"),
                    ["--ratio", "0.5", "--no-round"], x.reshape(len(x), 64), y, ["ref", "cpu"], "mlp --ratio 0.5")

    # Bad inputs.
    out = os.path.join(d, "bad.onnx")
    for bad, needle in ((["--ratio", "1"], "expected a number in [0, 1)"),
                        (["--ratio", "-0.1"], "expected a number in [0, 1)"),
                        (["--flops", "1000"], "below what removing every prunable channel"),
                        (["--ratio", "0.5", "--keep", "nosuch"], "no node named 'nosuch'"),
                        (["--ratio", "0.5", "--keep", "/1/Relu"], "is not a prunable layer"),
                        (["--tolerance", "0.1"], "--tolerance needs --calibrate")):
        rc, log = kiln(args, "prune", cnn, "-o", out, "--no-round", *bad)
        check(rc != 0 and needle in log and "Sanitizer" not in log, f"bad input {' '.join(bad)}: '{needle}'")
    # kiln eval's bad inputs (refused before anything compiles).
    yfile = os.path.join(d, "test_labels.npy")
    xfile = os.path.join(d, "test_images.npy")
    np.save(os.path.join(d, "labels_short.npy"), y[:10])
    for bad, needle in ((["--variants", "fp32,bogus"], "'bogus': expected fp32, fp16, int8, auto or prune:R"),
                        (["--variants", "prune:1.5"], "expected prune:R with R in [0, 1)"),
                        (["--variants", "int8"], "--variants int8 needs --calibrate DIR"),
                        (["--variants", "fp32", "--labels", yfile], "--labels needs --data"),
                        (["--variants", "fp32", "--data", xfile, "--labels", os.path.join(d, "labels_short.npy")],
                         f"expected {len(y)} integer labels"),
                        (["--variants", "fp32", "--data", yfile], "holds no samples of input 'input'")):
        rc, log = kiln(args, "eval", cnn, *bad)
        check(rc != 0 and needle in log and "Sanitizer" not in log, f"kiln eval bad input {' '.join(bad[:2])}: '{needle}'")
    mix = os.path.join(d, "mix.onnx")
    mixing_model(mix)
    rc, log = kiln(args, "prune", mix, "-o", out, "--ratio", "0.5", "--no-round")
    check(rc == 0 and "unpruned: Reshape node 'mix' mixes channels" in log, "Reshape mixing channels: named, left whole")

    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
