#!/usr/bin/env python3
"""Train a small CNN and an MLP on scikit-learn's bundled 8x8 handwritten
digits (sklearn.datasets.load_digits: 1,797 images, nothing downloaded),
seeded, and export both to ONNX (opset 13) for the int8 accuracy checks
(issue 21: kiln quantize, bench/int8_digits.py).

  train_digits.py --out DIR [--force]

Writes into DIR:
  digits_cnn.onnx, digits_mlp.onnx   input "input" (f32[N,1,8,8] / f32[N,64],
                                     pixels scaled to [0,1]), output "logits"
                                     (f32[N,10]); the batch dim N is symbolic
  test_images.npy, test_labels.npy   the held-out 30% (f32[539,1,8,8], i64[539])
  calib_cnn/NNN/input.npy,           calibration inputs in the folder format of
  calib_mlp/NNN/input.npy            `kiln quantize --calibrate` and `--precision
                                     auto --calibrate`: one subfolder per sample
                                     (f32[1,1,8,8] / f32[1,64]), 100 training images
  digits.json                        fp32 top-1 on the held-out split per model

and prints the fp32 top-1 of each model. Runs in a few seconds on two cores
(torch on one thread). An export newer than this script is reused
unless --force.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

from model_files import save_npy, up_to_date

OPSET = 13
SEED = 0
TEST_SHARE = 0.3
CALIB = 100
MODELS = ("digits_cnn", "digits_mlp")


def load_split():
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = d.target.astype(np.int64)
    perm = np.random.default_rng(SEED).permutation(len(y))
    n_test = int(round(len(y) * TEST_SHARE))
    test, train = perm[:n_test], perm[n_test:]
    return x[train], y[train], x[test], y[test]


def build(torch, name):
    nn = torch.nn
    if name == "digits_cnn":
        return nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(16 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10))
    return nn.Sequential(
        nn.Flatten(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(),
        nn.Linear(64, 10))


def model_input(name, x):
    return x if name == "digits_cnn" else x.reshape(len(x), 64)


def train(torch, name, xtr, ytr, epochs=15):
    torch.manual_seed(SEED)
    net = build(torch, name)
    opt = torch.optim.Adam(net.parameters(), lr=5e-3)
    xt = torch.from_numpy(model_input(name, xtr))
    yt = torch.from_numpy(ytr)
    g = torch.Generator().manual_seed(SEED)
    for _ in range(epochs):
        order = torch.randperm(len(yt), generator=g)
        for i in range(0, len(order), 64):
            idx = order[i:i + 64]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(xt[idx]), yt[idx])
            loss.backward()
            opt.step()
    return net.eval()


def export(torch, net, name, path):
    dummy = torch.zeros((1, 1, 8, 8) if name == "digits_cnn" else (1, 64))
    tmp = path + ".tmp"
    torch.onnx.export(net, dummy, tmp, opset_version=OPSET, input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}})
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    files = [os.path.join(args.out, f) for f in
             ("digits_cnn.onnx", "digits_mlp.onnx", "test_images.npy", "test_labels.npy",
              "digits.json", "calib_cnn/099/input.npy", "calib_mlp/099/input.npy")]
    if not args.force and up_to_date(files, __file__):
        with open(files[4]) as f:
            acc = json.load(f)
        for name in MODELS:
            print(f"{name}: fp32 top-1 {acc[name]:.2f}% (exported before)")
        return 0

    import torch
    torch.set_num_threads(1)  # tiny layers: threads only spin on a busy machine
    t0 = time.time()
    xtr, ytr, xte, yte = load_split()
    acc = {}
    for name in MODELS:
        net = train(torch, name, xtr, ytr)
        with torch.no_grad():
            pred = net(torch.from_numpy(model_input(name, xte))).argmax(1).numpy()
        acc[name] = float((pred == yte).mean() * 100)
        export(torch, net, name, os.path.join(args.out, name + ".onnx"))
        calib = os.path.join(args.out, "calib_" + name.split("_")[1])
        for k in range(CALIB):
            os.makedirs(os.path.join(calib, f"{k:03d}"), exist_ok=True)
            save_npy(os.path.join(calib, f"{k:03d}", "input.npy"),
                     np.ascontiguousarray(model_input(name, xtr[k:k + 1])))
        print(f"{name}: fp32 top-1 {acc[name]:.2f}% on {len(yte)} held-out digits")
    save_npy(os.path.join(args.out, "test_images.npy"), np.ascontiguousarray(xte))
    save_npy(os.path.join(args.out, "test_labels.npy"), yte)
    with open(files[4] + ".tmp", "w") as f:
        json.dump(acc, f)
    os.replace(files[4] + ".tmp", files[4])
    print(f"trained and exported in {time.time() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
