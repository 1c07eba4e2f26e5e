#!/usr/bin/env python3
"""The Python package's overhead over the C runner on one module (issue 26: <= 3% on ResNet-18).

  python_overhead.py --build build --model DIR/resnet18.onnx [--runs 30] [--trials 5] [--device cpu]

Compiles the model once with kiln.compile, saves the module, then alternates
trials of
  C:       build/kiln-rt-run M.kiln --runs N --device D   (zero inputs; its own
           timer around the N runs after the session is made)
  Python:  kiln.load(M.kiln).session(D).run({...zeros...}) N times, timed the
           same way (the session is made before the timer starts)
and prints the median per-run times and the overhead. kiln-rt-run pipelines
its runs through two slots; the Python loop runs them one after another, so
the figure includes what pipelining hides. On a loaded machine the two
timings drift apart by more than the overhead; the second figure is robust
to that: within the Python runs, the time spent in kiln_session_run (the C
call, timed by wrapping it) against the whole Session.run, i.e. what the
package adds (argument checks, array descriptors, output copies). ResNet-18 comes from
tests/models/export_models.py (--models resnet18).

Run it with the test Python (.venv/bin/python), from the checkout: the
package is imported from python/ and finds the libraries in --build.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--model", required=True)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    os.environ["KILN_LIBRARY_PATH"] = os.path.abspath(a.build)
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import numpy as np
    import kiln

    target = a.device.split(":")[0]
    m = kiln.compile(a.model, target=target)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "m.kiln")
        m.save(path)
        runner = os.path.join(a.build, "kiln-rt-run")
        c_ms, py_ms = [], []
        inside = [0.0]
        c_run = kiln.rt.kiln_session_run

        def timed_run(*args):
            t = time.perf_counter()
            r = c_run(*args)
            inside[0] += time.perf_counter() - t
            return r

        kiln.rt.kiln_session_run = timed_run  # Session.run looks it up per call
        in_c = []
        for _ in range(a.trials):
            out = subprocess.run([runner, path, "--runs", str(a.runs), "--device", a.device],
                                 check=True, capture_output=True, text=True).stdout
            c_ms.append(float(re.search(r"\(([0-9.]+) ms/run", out).group(1)))
            mod = kiln.load(path)
            s = mod.session(a.device, slots=2)
            feed = {i["name"]: np.zeros(i["shape"], i["dtype"]) for i in mod.inputs}
            inside[0] = 0.0
            t0 = time.perf_counter()
            for _ in range(a.runs):
                s.run(feed)
            py_ms.append((time.perf_counter() - t0) * 1e3 / a.runs)
            in_c.append(inside[0] * 1e3 / a.runs)
            s.close()
    c, p = statistics.median(c_ms), statistics.median(py_ms)
    name = os.path.splitext(os.path.basename(a.model))[0]
    print(f"{name} on {a.device}, {a.runs} runs x {a.trials} trials: C runner {c:.2f} ms/run (min {min(c_ms):.2f}), "
          f"Python {p:.2f} ms/run (min {min(py_ms):.2f}): overhead {100 * (p - c) / c:+.1f}% "
          f"(min to min {100 * (min(py_ms) - min(c_ms)) / min(c_ms):+.1f}%)")
    added = [x - y for x, y in zip(py_ms, in_c)]
    print(f"  in the Python runs: {statistics.median(in_c):.2f} ms/run inside kiln_session_run, "
          f"{statistics.median(added) * 1e3:.0f} us/run added by the package: "
          f"{100 * statistics.median([d / y for d, y in zip(added, in_c)]):.2f}%")


if __name__ == "__main__":
    main()
