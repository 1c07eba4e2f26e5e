#!/usr/bin/env python3
"""Issue 21's accuracy check: top-1 on the held-out digits of the fp32 model,
of kiln's post-training int8 (`kiln quantize`, the QDQ model run by
onnxruntime) and of onnxruntime's own quantize_static of the same model and
calibration data, side by side, per calibration method.

  int8_digits.py --kiln build/kiln [--out DIR] [--methods minmax,percentile,entropy]
                 [--json FILE]

DIR (default build/digits) receives the models tests/models/train_digits.py
trains (seeded CNN and MLP on sklearn's bundled 8x8 digits, 539 held-out
images, 100 calibration images); an earlier export is reused. Both int8
models use u8 activations per tensor and i8 weights per output channel, QDQ
format. Besides top-1, the SQNR of the logits against fp32 on the
calibration images: "spec" runs the Q/DQ nodes as the ONNX spec defines
them (onnxruntime with graph optimizations off, what kiln's report
simulates); "fused" is onnxruntime's default, its int8 kernels.

The "kiln run" columns are kiln itself running its QDQ model on
--kiln-target (default cpu): top-1 and the logits SQNR on the calibration
images. For minmax, kiln's in-memory path (`kiln run MODEL --precision int8
--calibrate DIR`, no QDQ file) is checked to give the same top-1.

With --models DIR (what tests/models/export_models.py writes: random-weight
resnet18.onnx and mobilenet_v2.onnx), the same logits SQNR (minmax) is
printed for those networks too, on 8 seeded N(0,1) calibration inputs.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models"))
from test_digits_quant import calib_inputs, kiln_top1, logits, ort_quantize, sqnr, top1  # noqa: E402

def imagenet_sqnr(kiln, models, rows):
    """Logits SQNR of kiln's and onnxruntime's int8 on the random-weight
    ImageNet networks; True when a run failed."""
    import numpy as np
    failed = False
    print(f"\n{'model':<13} {'logits SQNR dB (8 seeded inputs): kiln spec/fused':>50}  {'ORT spec/fused':>14}")
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        calib = rng.standard_normal((8, 1, 3, 224, 224)).astype(np.float32)
        for k, x in enumerate(calib):
            os.makedirs(os.path.join(tmp, "calib", f"{k}"))
            np.save(os.path.join(tmp, "calib", f"{k}", "input.npy"), x)
        x = calib.reshape(8, 3, 224, 224)
        for name in ("resnet18", "mobilenet_v2"):
            model = os.path.join(models, f"{name}.onnx")
            if not os.path.exists(model):
                print(f"{name:<13} not exported (tests/models/export_models.py)")
                continue
            kq, oq = os.path.join(tmp, f"{name}.kiln.onnx"), os.path.join(tmp, f"{name}.ort.onnx")
            r = subprocess.run([kiln, "quantize", model, "--calibrate", os.path.join(tmp, "calib"),
                                "-o", kq, "--quiet"], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{name}: kiln quantize failed: {r.stderr.strip()}")
                failed = True
                continue
            ort_quantize(model, x, oq)
            ref = logits(model, x)
            row = {"model": name, "kiln_sqnr_spec": sqnr(ref, logits(kq, x, fuse=False)),
                   "kiln_sqnr_fused": sqnr(ref, logits(kq, x)),
                   "ort_sqnr_spec": sqnr(ref, logits(oq, x, fuse=False)),
                   "ort_sqnr_fused": sqnr(ref, logits(oq, x))}
            rows.append(row)
            print(f"{name:<13} {row['kiln_sqnr_spec']:43.1f} / {row['kiln_sqnr_fused']:4.1f}  "
                  f"{row['ort_sqnr_spec']:7.1f} / {row['ort_sqnr_fused']:4.1f}")
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "build", "digits"))
    ap.add_argument("--methods", default="minmax,percentile,entropy")
    ap.add_argument("--models", help="folder with resnet18.onnx, mobilenet_v2.onnx (optional)")
    ap.add_argument("--kiln-target", default="cpu", help="target of the kiln run columns (default cpu)")
    ap.add_argument("--json")
    args = ap.parse_args()
    import numpy as np
    subprocess.run([sys.executable, os.path.join(HERE, "..", "tests", "models", "train_digits.py"),
                    "--out", args.out], check=True, stdout=subprocess.DEVNULL)
    xte = np.load(os.path.join(args.out, "test_images.npy"))
    yte = np.load(os.path.join(args.out, "test_labels.npy"))
    rows = []
    failed = False
    hdr = (f"{'model':<11} {'method':<11} {'fp32':>7} {'kiln int8':>10} {'ORT int8':>9}   "
           f"{'logits SQNR dB: kiln spec/fused':>31}  {'ORT spec/fused':>14}   "
           f"{'kiln run: top-1':>15} {'SQNR':>5}")
    print(f"top-1 % on {len(yte)} held-out digits; int8 models run by onnxruntime, and by kiln "
          f"-t {args.kiln_target} (kiln run)")
    print(hdr)
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("cnn", "mlp"):
            model = os.path.join(args.out, f"digits_{name}.onnx")
            calib_dir = os.path.join(args.out, f"calib_{name}")
            x = xte if name == "cnn" else xte.reshape(len(xte), 64)
            calib = calib_inputs(calib_dir)
            ref = logits(model, calib)
            fp32 = top1(model, x, yte)
            for method in args.methods.split(","):
                kq = os.path.join(tmp, f"{name}.{method}.kiln.onnx")
                oq = os.path.join(tmp, f"{name}.{method}.ort.onnx")
                r = subprocess.run([args.kiln, "quantize", model, "--calibrate", calib_dir, "-o", kq,
                                    "--method", method, "--quiet"], capture_output=True, text=True)
                if r.returncode != 0:
                    print(f"digits_{name} {method}: kiln quantize failed: {r.stderr.strip()}")
                    failed = True
                    continue
                ort_quantize(model, calib, oq, method)
                row = {"model": f"digits_{name}", "method": method, "fp32": fp32,
                       "kiln_int8": top1(kq, x, yte), "ort_int8": top1(oq, x, yte),
                       "kiln_sqnr_spec": sqnr(ref, logits(kq, calib, fuse=False)),
                       "kiln_sqnr_fused": sqnr(ref, logits(kq, calib)),
                       "ort_sqnr_spec": sqnr(ref, logits(oq, calib, fuse=False)),
                       "ort_sqnr_fused": sqnr(ref, logits(oq, calib))}
                # kiln itself running its QDQ model
                acc, _, _ = kiln_top1(args.kiln, kq, args.kiln_target, x, yte, tmp)
                _, _, klog = kiln_top1(args.kiln, kq, args.kiln_target, calib, np.zeros(len(calib)), tmp)
                if acc is None or klog is None:
                    print(f"digits_{name} {method}: kiln run -t {args.kiln_target} failed")
                    failed = True
                    continue
                row["kiln_run_int8"] = acc
                row["kiln_run_sqnr"] = sqnr(ref, klog)
                if method == "minmax":
                    macc, _, _ = kiln_top1(args.kiln, model, args.kiln_target, x, yte, tmp,
                                           ("--precision", "int8", "--calibrate", calib_dir))
                    if macc != acc:
                        print(f"digits_{name}: kiln run --precision int8 gave {macc} % top-1, its QDQ file {acc} %")
                        failed = True
                rows.append(row)
                print(f"{row['model']:<11} {method:<11} {fp32:7.2f} {row['kiln_int8']:10.2f} "
                      f"{row['ort_int8']:9.2f}   {row['kiln_sqnr_spec']:24.1f} / "
                      f"{row['kiln_sqnr_fused']:4.1f}  {row['ort_sqnr_spec']:7.1f} / "
                      f"{row['ort_sqnr_fused']:4.1f}   {acc:15.2f} {row['kiln_run_sqnr']:5.1f}")
    if args.models:
        failed = imagenet_sqnr(args.kiln, args.models, rows) or failed
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
