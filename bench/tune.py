#!/usr/bin/env python3
"""Tuned vs default latency in the same run (issue 24).

  tune.py --kiln build/kiln --models DIR [--names resnet18,mobilenet_v2]
          [--targets opencl,vulkan,cpu] [--budget 10m] [--repeat 20] [--rounds 3]
          [--threads 2] [--out DIR]

Per model and target:
  1. `kiln tune MODEL -t T --budget B --cache OUT/tune-NAME-T.tsv` on a fresh cache; its wall
     time is the tuning time, checked against the budget (+5%).
  2. The model compiled twice into modules, `--no-tuning-cache` (the defaults) and
     `--tuning-cache OUT/tune-NAME-T.tsv` (the tuned points), so the rounds below time runs,
     not compiles (kiln compile|run read the cache folder's tuning.tsv unless told not to;
     GPU modules are compiled with --device none: no program binary, the driver builds and
     caches the program at the first run).
  3. --rounds rounds of `kiln run MODULE --repeat R --profile`, default then tuned, interleaved,
     so both see the same machine load. Latency: the median of the rounds' medians, and the
     minimum of all runs; the median over the rounds of each `kiln run` process's CPU seconds
     (user + sys: module load, session and the R runs; what a loaded machine's waits for a
     core leave out).
     Re-measurement per kernel: every node with a kernel the tuned module marks `[tuned: ...]`
     has its kernels' ms/run summed, per round, in both modules; a node whose median over the
     rounds is higher tuned than default counts as slower (and separately when more than 5%
     slower, the noise band of a loaded machine). The noise itself: each round runs the
     default module a second time, after the tuned one, and the same nodes are compared
     between the two runs of the one module ("identical modules: K of N more than 5%
     slower"); a count of tuned nodes slower than default is only a finding beyond that.
Prints a table: default and tuned batch-1 latency, speed-up, tuning time against the budget
(the whole `kiln tune` process's wall time) with the tune's own account of where it went,
kernels improved / reverted by `kiln tune` itself (on the CPU with --threads 1 also its
whole-model process CPU time default -> tuned), tuned nodes re-measured and how many of them
were slower than their default, and the load average (1 minute) after the tune and the runs.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def run(cmd, cpu=None):
    """(exit status, output); the process's CPU seconds (user + sys) appended to |cpu|."""
    with tempfile.TemporaryFile(mode="w+") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, text=True)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        if cpu is not None:
            cpu.append(ru.ru_utime + ru.ru_stime)
        f.seek(0)
        return p.returncode, f.read()


def latency(out, what="median"):
    m = re.search(r"latency: median ([0-9.]+) ms, min ([0-9.]+) ms", out)
    return float(m.group(1 if what == "median" else 2)) if m else None


ROW = re.compile(r"^  ~?(\S+)\s+(\S+)\s+([0-9.]+)\s+[0-9.]+%\s+[0-9.]+\s+[0-9.]+\s+(\S+)(.*)$")


def profile(out):
    """{node: ms/run summed over its kernels}, and the set of nodes with a tuned kernel."""
    per, tuned = {}, set()
    for line in out.splitlines():
        m = ROW.match(line)
        if not m:
            continue
        node, ms, rest = m.group(1), float(m.group(3)), m.group(5)
        per[node] = per.get(node, 0.0) + ms
        if "[tuned:" in rest:
            tuned.add(node)
    return per, tuned


def budget_s(b):
    m = re.fullmatch(r"([0-9.]+)([smh]?)", b)
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", default="build/kiln")
    ap.add_argument("--models", default="build/models")
    ap.add_argument("--names", default="resnet18,mobilenet_v2")
    ap.add_argument("--targets", default="opencl,vulkan,cpu")
    ap.add_argument("--budget", default="10m")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out", default="build/bench-out")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    thr = ["--threads", str(a.threads)] if a.threads else []
    rows = []
    for name in a.names.split(","):
        model = os.path.join(a.models, name + ".onnx")
        for t in a.targets.split(","):
            cache = os.path.join(a.out, f"tune-{name}-{t}.tsv")
            if os.path.exists(cache):
                os.remove(cache)
            t0 = time.time()
            rc, out = run([a.kiln, "tune", model, "-t", t, "--budget", a.budget, "--cache", cache] + thr)
            took = time.time() - t0
            print(out.replace("\r", "\n"), flush=True)
            if rc != 0:
                rows.append((name, t, None, None, took, "tune failed: " + out.strip().splitlines()[-1]))
                continue
            m = re.search(r"(\d+) of (\d+) kernels improved, (\d+) reverted", out)
            improved, kernels, reverted = (m.group(1), m.group(2), m.group(3)) if m else ("?", "?", "?")
            # where the tune says its budget went, and (CPU, 1 thread) its own CPU-time verdict
            spent = re.search(r"^tune: budget .*$", out, re.M)
            spent = spent.group(0)[len("tune: "):] if spent else "no breakdown printed"
            mcpu = re.search(r"^model CPU time: ([0-9.]+) ms default, ([0-9.]+) ms tuned", out, re.M)
            load_tune = os.getloadavg()[0]
            within = took <= budget_s(a.budget) * 1.05
            mods = {}
            for kind, flag in (("default", ["--no-tuning-cache"]), ("tuned", ["--tuning-cache", cache])):
                mods[kind] = os.path.join(a.out, f"{kind}-{name}-{t}.kiln")
                # GPU modules without the device's program binary: its build launches every
                # kernel (minutes on PoCL here); runs build from source, which the drivers cache
                nodev = ["--device", "none"] if t == "opencl" else []
                rc, o = run([a.kiln, "compile", model, "-t", t, "-o", mods[kind]] + flag + thr + nodev)
                if rc:
                    print(o, flush=True)
                    mods = None
                    break
                if kind == "tuned":
                    print("\n".join(l for l in o.splitlines() if l.startswith("tuning:")), flush=True)
            if not mods:
                rows.append((name, t, None, None, took, "compile failed"))
                continue
            d, u, dmin, umin, pd, pu, pa, tuned_nodes = [], [], [], [], [], [], [], set()
            cpu = {"default": [], "tuned": [], "again": []}
            for r in range(a.rounds):
                res = {}
                for kind in ("default", "tuned", "again"):
                    mod = mods["default" if kind == "again" else kind]
                    trace = os.path.join(a.out, f"{kind}-{name}-{t}.trace.json")
                    rc, o = run([a.kiln, "run", mod, "-t", t, "--repeat", str(a.repeat), "--profile",
                                 "--trace", trace] + thr, cpu[kind])
                    if rc or latency(o) is None:
                        print(o, flush=True)
                        res = None
                        break
                    res[kind] = o
                if not res:
                    break
                d.append(latency(res["default"]))
                u.append(latency(res["tuned"]))
                dmin.append(latency(res["default"], "min"))
                umin.append(latency(res["tuned"], "min"))
                per_d, _ = profile(res["default"])
                per_u, tn = profile(res["tuned"])
                per_a, _ = profile(res["again"])
                tuned_nodes |= tn
                pd.append(per_d)
                pu.append(per_u)
                pa.append(per_a)
                print(f"round {r + 1}: default {d[-1]:.2f} ms (min {dmin[-1]:.2f}, process CPU "
                      f"{cpu['default'][-1]:.3f} s), tuned {u[-1]:.2f} ms (min {umin[-1]:.2f}, "
                      f"{cpu['tuned'][-1]:.3f} s)", flush=True)
            if not d:
                rows.append((name, t, None, None, took, "run failed"))
                continue
            slower, slower5, compared, noise5 = 0, 0, 0, 0
            for node in sorted(tuned_nodes):
                a_ = [p[node] for p in pd if node in p]
                b_ = [p[node] for p in pu if node in p]
                c_ = [p[node] for p in pa if node in p]
                if len(a_) != len(pd) or len(b_) != len(pu) or len(c_) != len(pa):
                    continue  # past the profile's 40 rows in some round
                compared += 1
                md, mu, ma = statistics.median(a_), statistics.median(b_), statistics.median(c_)
                if mu > md:
                    slower += 1
                    print(f"  slower tuned: {node} {md:.3f} -> {mu:.3f} ms (the default again: {ma:.3f} ms)",
                          flush=True)
                if mu > 1.05 * md:
                    slower5 += 1
                # the same module run again: slower by more than 5% is the noise
                if ma > 1.05 * md:
                    noise5 += 1
            md, mu = min(dmin), min(umin)
            cd, cu = statistics.median(cpu["default"]), statistics.median(cpu["tuned"])
            tune_cpu = (f"the tune's whole-model CPU time {float(mcpu.group(1)):.3f} -> {float(mcpu.group(2)):.3f} ms; "
                        if mcpu else "")
            rows.append((name, t, statistics.median(d), statistics.median(u), took,
                         f"min {md:.2f} -> {mu:.2f} ms ({md / mu:.2f}x); process CPU {cd:.3f} -> {cu:.3f} s "
                         f"({cd / cu:.2f}x); "
                         f"{improved} of {kernels} kernels improved, {reverted} reverted by the tune; "
                         f"re-measured {compared} tuned nodes: {slower} slower ({slower5} by more than 5%; "
                         f"identical modules: {noise5} of {compared} more than 5% slower); "
                         f"{tune_cpu}"
                         f"budget {'kept' if within else 'EXCEEDED'} ({100 * took / budget_s(a.budget):.0f}%: {spent}); "
                         f"load {load_tune:.1f} after the tune, {os.getloadavg()[0]:.1f} after the runs"))
    print(f"\nkiln tune, budget {a.budget} ({budget_s(a.budget):.0f} s), {a.rounds} x {a.repeat} runs "
          f"interleaved, threads {a.threads or 'all'}")
    print("| model | target | default ms (median) | tuned ms | speed-up | tuning s | notes |")
    print("|---|---|---|---|---|---|---|")
    for name, t, d, u, took, note in rows:
        if d is None:
            print(f"| {name} | {t} | | | | {took:.0f} | {note} |")
        else:
            print(f"| {name} | {t} | {d:.2f} | {u:.2f} | {d / u:.2f}x | {took:.0f} | {note} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
