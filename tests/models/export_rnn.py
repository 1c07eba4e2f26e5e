#!/usr/bin/env python3
"""Recurrent-layer models (LSTM, GRU, RNN) with onnxruntime reference outputs,
and a runner that checks kiln against them.

  export_rnn.py export --out DIR
  export_rnn.py check --out DIR --kiln KILN --target ref|cpu|opencl|vulkan [-O0|-O1]

export writes, for each case NAME, into DIR/rnn/:
  NAME.onnx                  the model
  NAME.in.K.npy              input K (float32; sequence_lens int32)
  NAME.ort.K.npy             onnxruntime's output K (CPUExecutionProvider)
  cases.txt                  one line per case: NAME n_inputs input names...

The cases are
  - torch nn.LSTM and nn.GRU exported by torch.onnx (opset 14): two layers,
    bidirectional, batch_first False and True (the exporter adds the
    transposes), seeded random weights (torch.manual_seed) and inputs
    (numpy default_rng), seq 12, batch 3, input 16, hidden 24;
  - single nodes built with onnx.helper for what torch never exports:
    sequence_lens (forward, reverse, bidirectional), initial_h / initial_c,
    peepholes, clip, input_forget, GRU linear_before_reset 0/1, every
    activation of the ONNX list with alphas/betas, reverse direction, Y_h /
    Y_c only;
  - layout 1 (batch-major) twins of bidirectional cases with sequence_lens
    and initial states: onnxruntime has no layout 1, so their outputs are
    its layout-0 outputs on the transposed inputs, transposed back.

check runs `kiln run` on every case with --compare against the onnxruntime
outputs (rtol 1e-4, atol 1e-5; the CLI exits 3 outside them) and prints the
max error per case (absolute, relative where |value| > 1: some activation
mixes grow the state to O(1e4)); it fails when any case fails. Exports are skipped
when up to date (newer than this script).
"""

import argparse
import os
import subprocess
import sys

import numpy as np

OPSET = 14
SEQ, BATCH, INPUT, HIDDEN = 12, 3, 16, 24


def save(path, a):
    tmp = path + ".tmp.npy"
    np.save(tmp, a)
    os.replace(tmp, path)


def torch_cases():
    import torch

    cases = []
    for cell in ("LSTM", "GRU"):
        for batch_first in (False, True):
            torch.manual_seed(0)
            m = getattr(torch.nn, cell)(INPUT, HIDDEN, num_layers=2, bidirectional=True,
                                         batch_first=batch_first).eval()

            class Wrap(torch.nn.Module):
                def __init__(self, rnn):
                    super().__init__()
                    self.rnn = rnn

                def forward(self, x):
                    y, h = self.rnn(x)
                    if isinstance(h, tuple):
                        return y, h[0], h[1]
                    return y, h

            rng = np.random.default_rng(1)
            shape = (BATCH, SEQ, INPUT) if batch_first else (SEQ, BATCH, INPUT)
            x = rng.standard_normal(shape).astype(np.float32)
            name = "torch_%s_%s" % (cell.lower(), "bf" if batch_first else "sf")
            cases.append((name, Wrap(m), x))
    return cases


def export_torch(out_dir, lines):
    import torch

    for name, model, x in torch_cases():
        path = os.path.join(out_dir, name + ".onnx")
        outs = ["y", "h", "c"] if "lstm" in name else ["y", "h"]
        tmp = path + ".tmp"
        with torch.no_grad():
            torch.onnx.export(model, torch.from_numpy(x), tmp, opset_version=OPSET,
                              input_names=["x"], output_names=outs)
        os.replace(tmp, path)
        save(os.path.join(out_dir, name + ".in.0.npy"), x)
        lines.append((name, ["x"], False))


def node_model(op, inputs, n_out, attrs):
    """One-node model; inputs: list of (name, array or None for omitted)."""
    from onnx import TensorProto, helper

    vi, names = [], []
    for nm, a in inputs:
        names.append(nm if a is not None else "")
        if a is None:
            continue
        et = TensorProto.INT32 if a.dtype == np.int32 else TensorProto.FLOAT
        vi.append(helper.make_tensor_value_info(nm, et, list(a.shape)))
    while names and names[-1] == "":
        names.pop()
    outs = ["Y", "Y_h", "Y_c"][:3 if op == "LSTM" else 2]
    used = [o if k in n_out else "" for k, o in enumerate(outs)]
    while used and used[-1] == "":
        used.pop()
    node = helper.make_node(op, names, used, **attrs)
    ovi = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in used if o]
    g = helper.make_graph([node], op.lower(), vi, ovi)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])


def node_cases():
    rng = np.random.default_rng(2)
    T, B, I, H = 5, 3, 4, 6

    def r(*s, scale=0.5):
        return (rng.standard_normal(s) * scale).astype(np.float32)

    acts = ["Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh",
            "HardSigmoid", "Elu", "Softsign", "Softplus"]
    lens = np.array([5, 2, 3], dtype=np.int32)
    cases = []
    for op, G in (("LSTM", 4), ("GRU", 3), ("RNN", 1)):
        for dirn in ("forward", "reverse", "bidirectional"):
            D = 2 if dirn == "bidirectional" else 1
            base = [("X", r(T, B, I, scale=1.0)), ("W", r(D, G * H, I)), ("R", r(D, G * H, H)),
                    ("B", r(D, 2 * G * H)), ("sequence_lens", lens), ("initial_h", r(D, B, H))]
            if op == "LSTM":
                base += [("initial_c", r(D, B, H)), ("P", r(D, 3 * H))]
            n_out = (0, 1, 2)
            attrs = {"hidden_size": H, "direction": dirn}
            cases.append(("%s_%s_full" % (op.lower(), dirn), op, base, n_out, attrs))
            # No bias, no lens, no initial state; only Y_h (and Y_c).
            bare = [base[0], base[1], base[2]]
            cases.append(("%s_%s_bare" % (op.lower(), dirn), op, bare, (1, 2),
                          {"hidden_size": H, "direction": dirn}))
        # clip, and the op's own switches
        extra = {"clip": 0.4}
        if op == "LSTM":
            extra["input_forget"] = 1
        full = [("X", r(T, B, I, scale=2.0)), ("W", r(1, G * H, I)), ("R", r(1, G * H, H)),
                ("B", r(1, 2 * G * H)), ("sequence_lens", lens)]
        cases.append(("%s_clip" % op.lower(), op, full, (0, 1, 2),
                      dict(hidden_size=H, **extra)))
        if op == "GRU":
            for lbr in (0, 1):
                cases.append(("gru_lbr%d_bidir" % lbr, op,
                              [("X", r(T, B, I, scale=1.0)), ("W", r(2, G * H, I)),
                               ("R", r(2, G * H, H)), ("B", r(2, 2 * G * H))], (0, 1),
                              {"hidden_size": H, "direction": "bidirectional",
                               "linear_before_reset": lbr}))
        # every activation, in turns through the op's activation slots
        n_act = {"LSTM": 3, "GRU": 2, "RNN": 1}[op]
        for k in range(0, len(acts), n_act):
            names = [acts[(k + q) % len(acts)] for q in range(n_act)]
            alphas = [0.3 + 0.1 * q for q in range(n_act)]
            betas = [0.2 + 0.1 * q for q in range(n_act)]
            W = [("X", r(T, B, I, scale=1.0)), ("W", r(1, G * H, I)), ("R", r(1, G * H, H)),
                 ("B", r(1, 2 * G * H))]
            cases.append(("%s_act_%s" % (op.lower(), "_".join(n.lower() for n in names)), op, W,
                          (0, 1), {"hidden_size": H, "activations": names,
                                   "activation_alpha": alphas, "activation_beta": betas}))
    return cases


def layout1_cases():
    """Batch-major (layout 1) twins of full cases: onnxruntime has no layout 1,
    so its outputs come from the layout-0 model on transposed inputs."""
    rng = np.random.default_rng(3)
    T, B, I, H = 4, 3, 5, 6
    lens = np.array([4, 1, 3], dtype=np.int32)

    def r(*s):
        return (rng.standard_normal(s) * 0.5).astype(np.float32)

    cases = []
    for op, G in (("LSTM", 4), ("GRU", 3), ("RNN", 1)):
        D = 2
        ins = [("X", r(T, B, I)), ("W", r(D, G * H, I)), ("R", r(D, G * H, H)),
               ("B", r(D, 2 * G * H)), ("sequence_lens", lens), ("initial_h", r(D, B, H))]
        if op == "LSTM":
            ins += [("initial_c", r(D, B, H)), ("P", r(D, 3 * H))]
        cases.append(("%s_layout1_bidir" % op.lower(), op, ins,
                      {"hidden_size": H, "direction": "bidirectional"}))
    return cases


def export_layout1(out_dir, lines):
    import onnx
    import onnxruntime as ort

    for name, op, ins, attrs in layout1_cases():
        n_out = (0, 1, 2)
        ref = node_model(op, ins, n_out, attrs)
        # X [T,B,I] -> [B,T,I]; initial states [D,B,H] -> [B,D,H]
        tr = {"X": (1, 0, 2), "initial_h": (1, 0, 2), "initial_c": (1, 0, 2)}
        ins1 = [(nm, np.ascontiguousarray(a.transpose(tr[nm])) if nm in tr else a)
                for nm, a in ins]
        m = node_model(op, ins1, n_out, dict(attrs, layout=1))
        path = os.path.join(out_dir, name + ".onnx")
        onnx.save(m, path + ".tmp")
        os.replace(path + ".tmp", path)
        for k, (nm, a) in enumerate(ins1):
            save(os.path.join(out_dir, "%s.in.%d.npy" % (name, k)), a)
        sess = ort.InferenceSession(ref.SerializeToString(), providers=["CPUExecutionProvider"])
        outs = sess.run(None, {nm: a for nm, a in ins})
        # Y [T,D,B,H] -> [B,T,D,H]; Y_h, Y_c [D,B,H] -> [B,D,H]
        outs = [o.transpose(2, 0, 1, 3) if o.ndim == 4 else o.transpose(1, 0, 2) for o in outs]
        for k, o in enumerate(outs):
            save(os.path.join(out_dir, "%s.ort.%d.npy" % (name, k)), np.ascontiguousarray(o))
        lines.append((name, [nm for nm, _ in ins1], True))


def export_nodes(out_dir, lines):
    import onnx

    for name, op, inputs, n_out, attrs in node_cases():
        m = node_model(op, inputs, n_out, attrs)
        path = os.path.join(out_dir, name + ".onnx")
        onnx.save(m, path + ".tmp")
        os.replace(path + ".tmp", path)
        present = [(nm, a) for nm, a in inputs if a is not None]
        for k, (nm, a) in enumerate(present):
            save(os.path.join(out_dir, "%s.in.%d.npy" % (name, k)), a)
        lines.append((name, [nm for nm, _ in present], False))


def export(out_dir):
    import onnxruntime as ort

    out_dir = os.path.join(out_dir, "rnn")
    os.makedirs(out_dir, exist_ok=True)
    manifest = os.path.join(out_dir, "cases.txt")
    script = os.path.getmtime(os.path.abspath(__file__))
    if os.path.isfile(manifest) and os.path.getmtime(manifest) > script:
        print("rnn models up to date in", out_dir)
        return 0
    lines = []
    export_torch(out_dir, lines)
    export_nodes(out_dir, lines)
    export_layout1(out_dir, lines)
    for name, inputs, done in lines:
        if done:
            continue
        sess = ort.InferenceSession(os.path.join(out_dir, name + ".onnx"),
                                    providers=["CPUExecutionProvider"])
        feeds = {nm: np.load(os.path.join(out_dir, "%s.in.%d.npy" % (name, k)))
                 for k, nm in enumerate(inputs)}
        for k, o in enumerate(sess.run(None, feeds)):
            save(os.path.join(out_dir, "%s.ort.%d.npy" % (name, k)), o)
    with open(manifest + ".tmp", "w") as f:
        for name, inputs, _ in lines:
            f.write(" ".join([name] + inputs) + "\n")
    os.replace(manifest + ".tmp", manifest)
    print("exported %d rnn cases into %s" % (len(lines), out_dir))
    return 0


def check(out_dir, kiln, target, opt):
    out_dir = os.path.join(out_dir, "rnn")
    with open(os.path.join(out_dir, "cases.txt")) as f:
        cases = [ln.split() for ln in f if ln.strip()]
    failed = []
    worst = 0.0
    for parts in cases:
        name, inputs = parts[0], parts[1:]
        res = os.path.join(out_dir, "out_%s_%s%s" % (target, name, opt))
        cmd = [kiln, "run", os.path.join(out_dir, name + ".onnx"), "--target", target,
               "--output", res]
        if target != "ref":
            cmd += ["--strict", opt]
        for k, nm in enumerate(inputs):
            cmd += ["--input", "%s=%s" % (nm, os.path.join(out_dir, "%s.in.%d.npy" % (name, k)))]
        k = 0
        refs = []
        while os.path.isfile(os.path.join(out_dir, "%s.ort.%d.npy" % (name, k))):
            refs.append(os.path.join(out_dir, "%s.ort.%d.npy" % (name, k)))
            cmd += ["--compare", refs[-1]]
            k += 1
        cmd += ["--rtol", "1e-4", "--atol", "1e-5"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        err = float("nan")
        if p.returncode == 0:
            outs = sorted(os.listdir(res))
            # kiln writes DIR/<output name>.npy; compare by the graph's output order
            import onnx
            m = onnx.load(os.path.join(out_dir, name + ".onnx"), load_external_data=False)
            err = 0.0
            for o, ref in zip([o.name for o in m.graph.output], refs):
                got = np.load(os.path.join(res, o.replace("/", "_") + ".npy"))
                want = np.load(ref)
                if got.size:
                    # abs error, relative to the value where |value| > 1
                    d = np.abs(got - want) / np.maximum(1.0, np.abs(want))
                    err = max(err, float(np.max(d)))
            worst = max(worst, err)
            del outs
        print("%-44s %s  max err %.3g" % (name, "ok" if p.returncode == 0 else "FAIL", err))
        if p.returncode != 0:
            failed.append(name)
            sys.stdout.write(p.stdout[-3000:] + p.stderr[-3000:])
    print("%d cases on %s %s: %d failed; max error %.3g (abs, relative where |value| > 1)" %
          (len(cases), target, opt, len(failed), worst))
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["export", "check"])
    ap.add_argument("--out", required=True)
    ap.add_argument("--kiln")
    ap.add_argument("--target", default="cpu")
    ap.add_argument("-O", dest="opt", default="1", choices=["0", "1"])
    a = ap.parse_args()
    if a.mode == "export":
        return export(a.out)
    if not a.kiln:
        ap.error("check needs --kiln")
    return check(a.out, a.kiln, a.target, "-O" + a.opt)


if __name__ == "__main__":
    sys.exit(main())
