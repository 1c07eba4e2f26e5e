#!/usr/bin/env python3
"""Fine-tune a model `kiln prune` wrote, on the digits training split, and
write the result as an ONNX model with the same graph and new weights.

  finetune_pruned.py PRUNED.onnx -o TUNED.onnx [--epochs 5] [--lr 1e-3]

The training split is train_digits.py's (load_split: scikit-learn's bundled
digits, the same seed and held-out share, so the held-out images are never
trained on). The ONNX graph is
run in torch by a small interpreter of the ops the digits models use (Conv,
BatchNormalization, Relu, MaxPool, AveragePool, GlobalAveragePool, Flatten,
Reshape, Gemm, MatMul, Add, Mul): every float initializer becomes a trainable
parameter, Adam with a seeded shuffle, cross-entropy on the logits, torch on
one thread. Prints the held-out top-1 before and after.
"""

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "models"))


def attrs(node):
    import onnx
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def run_graph(torch, graph, params, consts, x):
    F = torch.nn.functional
    env = {graph.input[0].name: x}
    env.update(consts)
    env.update(params)
    for n in graph.node:
        a = attrs(n)
        i = [env[t] if t else None for t in n.input]
        op = n.op_type
        if op == "Conv":
            pads = a.get("pads", [0, 0, 0, 0])
            if pads[:2] != pads[2:]:
                raise SystemExit(f"node {n.name}: asymmetric pads are not supported here")
            y = F.conv2d(i[0], i[1], i[2] if len(i) > 2 else None, stride=a.get("strides", [1, 1]),
                         padding=pads[:2], dilation=a.get("dilations", [1, 1]), groups=a.get("group", 1))
        elif op == "BatchNormalization":
            y = F.batch_norm(i[0], i[3], i[4], i[1], i[2], False, 0.0, a.get("epsilon", 1e-5))
        elif op == "Relu":
            y = F.relu(i[0])
        elif op == "MaxPool":
            y = F.max_pool2d(i[0], a["kernel_shape"], a.get("strides", a["kernel_shape"]), a.get("pads", [0, 0])[:2])
        elif op == "AveragePool":
            y = F.avg_pool2d(i[0], a["kernel_shape"], a.get("strides", a["kernel_shape"]), a.get("pads", [0, 0])[:2])
        elif op == "GlobalAveragePool":
            y = i[0].mean(dim=(2, 3), keepdim=True)
        elif op == "Flatten":
            y = torch.flatten(i[0], a.get("axis", 1))
        elif op == "Reshape":
            shape = [int(v) for v in i[1].tolist()]
            shape = [x.shape[0] if (k == 0 and v == 0) else v for k, v in enumerate(shape)]
            y = i[0].reshape(shape)
        elif op == "Gemm":
            w = i[1].t() if a.get("transB", 0) else i[1]
            y = a.get("alpha", 1.0) * (i[0] @ w)
            if len(i) > 2 and i[2] is not None:
                y = y + a.get("beta", 1.0) * i[2]
        elif op == "MatMul":
            y = i[0] @ i[1]
        elif op == "Add":
            y = i[0] + i[1]
        elif op == "Mul":
            y = i[0] * i[1]
        else:
            raise SystemExit(f"node {n.name}: op {op} is not supported by this fine-tuning script")
        env[n.output[0]] = y
    return env[graph.output[0].name]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()

    import onnx
    import torch
    from onnx import numpy_helper
    from train_digits import SEED, load_split
    torch.manual_seed(SEED)
    torch.set_num_threads(1)

    m = onnx.load(args.model)
    g = m.graph
    params, consts = {}, {}
    bn_stats = {n.input[k] for n in g.node if n.op_type == "BatchNormalization" for k in (3, 4)}
    for t in g.initializer:
        v = torch.from_numpy(numpy_helper.to_array(t).copy())
        if v.dtype == torch.float32 and t.name not in bn_stats:
            params[t.name] = torch.nn.Parameter(v)
        else:
            consts[t.name] = v
    xtr, ytr, xte, yte = load_split()
    flat = len(g.input[0].type.tensor_type.shape.dim) == 2
    if flat:
        xtr, xte = xtr.reshape(len(xtr), -1), xte.reshape(len(xte), -1)
    xtr, ytr, xte, yte = map(torch.from_numpy, (xtr, ytr, xte, yte))

    def top1():
        with torch.no_grad():
            return float((run_graph(torch, g, params, consts, xte).argmax(1) == yte).float().mean())

    before = top1()
    opt = torch.optim.Adam(params.values(), lr=args.lr)
    gen = torch.Generator().manual_seed(SEED)
    for _ in range(args.epochs):
        perm = torch.randperm(len(xtr), generator=gen)
        for s in range(0, len(perm), args.batch):
            idx = perm[s:s + args.batch]
            loss = torch.nn.functional.cross_entropy(run_graph(torch, g, params, consts, xtr[idx]), ytr[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    after = top1()
    for t in g.initializer:
        if t.name in params:
            t.CopyFrom(numpy_helper.from_array(params[t.name].detach().numpy(), t.name))
    onnx.save(m, args.out)
    print(f"held-out top-1 {100 * before:.2f}% -> {100 * after:.2f}% after {args.epochs} epochs; wrote {args.out}")


if __name__ == "__main__":
    main()
