#!/usr/bin/env python3
"""PNG charts and a markdown summary of kiln's benchmark results.

  plot.py --json KERNELS.json [--models-json MODELS.json] --out DIR

KERNELS.json is what `kiln bench --json` writes:
  {"machine": {"peak_gflops", "peak_gbs", "threads", "cpu"},
   "cases": [{"suite", "name", "shape", "ms", "gflops", "gbs", "pct_peak", "bound",
              "intensity", "peer" (absent or null for kiln, e.g. "openblas"), "target",
              "error" (a case that failed: no figures)}]}
  (a case without "target" takes machine.target, else "cpu")
MODELS.json is what bench/models_peers.py --json writes. Either may be given alone.

Writes into DIR (each chart only when its cases are present; a missing suite is
reported and skipped, never an error):
  gemm_sweep.png  GFLOP/s vs size of the square GEMM sweep, one line per target and
                  per peer, log-2 size axis, measured peak as a dashed line
  roofline.png    roofline: FLOP/byte vs GFLOP/s (log-log), the two roofs from the
                  machine's measured peaks, every case a point coloured by suite,
                  the cases furthest below their roof annotated
  conv.png        % of peak of every conv / depthwise conv case (horizontal bars)
  models.png      whole-model batch-1 latency per runtime (grouped bars)
  summary.md      markdown tables of every case (and every model), plus image links
Exit status: 0 when at least one input was read, 2 on a bad command line or a JSON
that cannot be read.
"""

import argparse
import json
import math
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")  # no display on benchmark machines
import matplotlib.pyplot as plt  # noqa: E402

# Fixed colours so a suite keeps its colour across charts and runs.
SUITE_COLOURS = {
    "gemm": "tab:blue", "conv": "tab:orange", "dwconv": "tab:green",
    "elementwise": "tab:red", "reduce": "tab:purple", "softmax": "tab:brown",
    "layernorm": "tab:pink",
}
SUITE_ORDER = list(SUITE_COLOURS)
RUNTIME_COLOURS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:gray"]
N_ANNOTATE = 5  # roofline: how many of the worst cases get a label


def num(v):
    """A finite float, or None (missing, null, NaN, a string)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def runtime_of(case):
    """Legend label of the line/point a case belongs to: the peer, or 'kiln <target>'."""
    if case.get("peer"):
        return str(case["peer"])
    label = f"kiln {case.get('target') or 'cpu'}"
    dtype = case.get("dtype")
    if dtype and dtype != "f32":
        label += f" {dtype}"
    return label


def shape_text(shape):
    if shape is None:
        return ""
    if isinstance(shape, (list, tuple)):
        return "x".join(str(d) for d in shape)
    if isinstance(shape, dict):
        return " ".join(f"{k}={v}" for k, v in shape.items())
    return str(shape)


def square_size(case):
    """N of a square M=N=K GEMM case, else None. The shape may be a dict with m/n/k,
    a list, or a string such as '512x512x512' or 'M=512 N=512 K=512' (a leading batch
    of 1 is ignored); a single number counts when the name says 'square'."""
    shape = case.get("shape")
    dims = None
    if isinstance(shape, dict):
        low = {str(k).lower(): v for k, v in shape.items()}
        if all(k in low for k in "mnk"):
            dims = [low["m"], low["n"], low["k"]]
    elif isinstance(shape, (list, tuple)):
        dims = list(shape)
    elif isinstance(shape, (int, float)):
        dims = [shape]
    elif isinstance(shape, str):
        dims = [int(t) for t in re.findall(r"\d+", shape)]
    if not dims:
        return None
    try:
        dims = [int(d) for d in dims]
    except (TypeError, ValueError):
        return None
    if len(dims) == 4 and dims[0] == 1:
        dims = dims[1:]
    if len(dims) == 3 and dims[0] == dims[1] == dims[2]:
        return dims[0]
    if len(dims) == 1 and "square" in str(case.get("name", "")).lower():
        return dims[0]
    return None


def intensity_of(case):
    i = num(case.get("intensity"))
    if i is None:
        g, b = num(case.get("gflops")), num(case.get("gbs"))
        if g is not None and b:
            i = g / b
    return i


def roof(intensity, peak_gflops, peak_gbs):
    return min(peak_gflops, intensity * peak_gbs)


def by_suite(cases):
    suites = sorted({c.get("suite", "?") for c in cases},
                    key=lambda s: (SUITE_ORDER.index(s) if s in SUITE_ORDER else 99, s))
    return suites


def suite_colour(suite, others={}):
    if suite in SUITE_COLOURS:
        return SUITE_COLOURS[suite]
    # Unknown suites (a later target's) get stable extra colours.
    extra = ["tab:olive", "tab:cyan", "tab:gray", "black"]
    return others.setdefault(suite, extra[len(others) % len(extra)])


def machine_text(machine):
    parts = []
    if machine.get("cpu"):
        parts.append(str(machine["cpu"]))
    if machine.get("threads"):
        parts.append(f"{machine['threads']} threads")
    return ", ".join(parts)


def plot_gemm_sweep(cases, machine, path):
    lines = {}
    for c in cases:
        if c.get("suite") != "gemm":
            continue
        n, g = square_size(c), num(c.get("gflops"))
        if n is None or g is None:
            continue
        lines.setdefault(runtime_of(c), {})[n] = g
    if not lines:
        return "no square gemm cases"
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, (label, pts) in enumerate(sorted(lines.items(), key=lambda kv: kv[0].startswith("kiln") is False)):
        xs = sorted(pts)
        peer = not label.startswith("kiln")
        ax.plot(xs, [pts[x] for x in xs], marker="s" if peer else "o",
                linestyle="--" if peer else "-", label=label,
                color=RUNTIME_COLOURS[i % len(RUNTIME_COLOURS)])
    peak = num(machine.get("peak_gflops"))
    if peak:
        ax.axhline(peak, color="black", linestyle=":", linewidth=1,
                   label=f"measured peak {peak:.0f} GFLOP/s")
    ax.set_xscale("log", base=2)
    sizes = sorted({x for pts in lines.values() for x in pts})
    ax.set_xticks(sizes)
    ax.set_xticklabels([str(s) for s in sizes])
    ax.set_ylim(bottom=0)
    ax.set_xlabel("matrix size N (M = N = K)")
    ax.set_ylabel("GFLOP/s (higher is better)")
    title = "Square SGEMM: GFLOP/s vs size"
    if machine_text(machine):
        title += f"\n{machine_text(machine)}"
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def plot_roofline(cases, machine, path):
    peak, bw = num(machine.get("peak_gflops")), num(machine.get("peak_gbs"))
    if not peak or not bw:
        return "machine.peak_gflops / peak_gbs missing"
    pts = []
    for c in cases:
        i, g = intensity_of(c), num(c.get("gflops"))
        if i and g and i > 0 and g > 0:
            pts.append((c, i, g))
    if not pts:
        return "no case with both FLOP/byte and GFLOP/s"
    ridge = peak / bw
    lo = min(min(i for _, i, _ in pts) / 2, ridge / 8)
    hi = max(max(i for _, i, _ in pts) * 2, ridge * 8)
    fig, ax = plt.subplots(figsize=(10, 6.5))
    xs = [lo * (hi / lo) ** (k / 200) for k in range(201)]
    ax.plot(xs, [roof(x, peak, bw) for x in xs], color="black", linewidth=2, zorder=1)
    ax.axvline(ridge, color="gray", linestyle=":", linewidth=1, zorder=0)
    kiln_pts = [p for p in pts if not p[0].get("peer")]
    peer_pts = [p for p in pts if p[0].get("peer")]
    for suite in by_suite([p[0] for p in pts]):
        sp = [p for p in kiln_pts if p[0].get("suite", "?") == suite]
        if sp:
            ax.scatter([i for _, i, _ in sp], [g for _, _, g in sp], s=28,
                       color=suite_colour(suite), label=suite, zorder=3, alpha=0.85)
    for peer in sorted({p[0]["peer"] for p in peer_pts}):
        pp = [p for p in peer_pts if p[0]["peer"] == peer]
        ax.scatter([i for _, i, _ in pp], [g for _, _, g in pp], s=40, marker="x",
                   color=[suite_colour(p[0].get("suite", "?")) for p in pp],
                   label=f"{peer} (peer)", zorder=3)
    # The kiln cases furthest below the roof they could reach are the ones to work on:
    # numbered on the chart and listed in a box (labels beside the points collide).
    worst = sorted(kiln_pts, key=lambda p: p[2] / roof(p[1], peak, bw))[:N_ANNOTATE]
    listing = []
    for k, (c, i, g) in enumerate(worst):
        ax.annotate(str(k + 1), (i, g), xytext=(4, 4), textcoords="offset points", fontsize=9,
                    fontweight="bold")
        listing.append(f"{k + 1}. {c.get('suite', '?')} {c.get('name', '?')}: "
                       f"{100 * g / roof(i, peak, bw):.2g}% of roof")
    if listing:
        ax.text(0.01, 0.99, "furthest below the roof:\n" + "\n".join(listing),
                transform=ax.transAxes, fontsize=8, va="top", ha="left",
                bbox=dict(boxstyle="round", facecolor="white", alpha=0.85, edgecolor="gray"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ymin = min(min(g for _, _, g in pts) / 3, roof(lo, peak, bw))
    ax.set_ylim(ymin, peak * 3)
    ax.text(hi / 1.1, peak * 1.1, f"compute roof {peak:.1f} GFLOP/s", fontsize=9,
            ha="right", va="bottom")
    # The memory-roof label follows the slope, which in display space depends on limits.
    fig.canvas.draw()
    x0 = max(lo * 2, ridge / 50)
    p0, p1 = ax.transData.transform([(x0, x0 * bw), (x0 * 4, x0 * 4 * bw)])
    angle = math.degrees(math.atan2(p1[1] - p0[1], p1[0] - p0[0]))
    ax.text(x0 * 1.3, x0 * 1.3 * bw * 1.3, f"memory roof {bw:.1f} GB/s", fontsize=9,
            rotation=angle, rotation_mode="anchor", ha="left", va="bottom")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("performance (GFLOP/s)")
    title = "Roofline: every kernel case vs the measured peaks"
    if machine_text(machine):
        title += f"\n{machine_text(machine)}"
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(loc="lower right", fontsize=9, title="suite")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def plot_conv(cases, machine, path):
    cs = [c for c in cases if c.get("suite") in ("conv", "dwconv") and not c.get("peer")
          and num(c.get("pct_peak")) is not None]
    if not cs:
        return "no conv / dwconv cases"
    labels = [f"{c.get('name', '?')}  {shape_text(c.get('shape'))}" for c in cs]
    vals = [num(c["pct_peak"]) for c in cs]
    fig, ax = plt.subplots(figsize=(10, 1.5 + 0.24 * len(cs)))
    ys = list(range(len(cs)))[::-1]  # first case at the top
    ax.barh(ys, vals, color=[suite_colour(c["suite"]) for c in cs], height=0.7)
    for y, v in zip(ys, vals):
        ax.text(v, y, f" {v:.0f}%", va="center", fontsize=7)
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_ylim(-0.6, len(cs) - 0.4)
    ax.set_xlim(0, max(100, max(vals) * 1.15))
    ax.set_xlabel("% of the machine's measured peak (compute or bandwidth, whichever bounds)")
    suites = [s for s in ("conv", "dwconv") if any(c["suite"] == s for c in cs)]
    handles = [plt.Rectangle((0, 0), 1, 1, color=suite_colour(s)) for s in suites]
    ax.legend(handles, suites, loc="lower right", fontsize=9)
    title = "Convolutions: % of peak per layer"
    if machine_text(machine):
        title += f" ({machine_text(machine)})"
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def plot_models(models, path):
    rows = [m for m in models.get("models", []) if m.get("latency_ms")]
    if not rows:
        return "no model latencies"
    runtimes = []
    for m in rows:
        for r, v in m["latency_ms"].items():
            if num(v) is not None and r not in runtimes:
                runtimes.append(r)
    width = 0.8 / max(1, len(runtimes))
    fig, ax = plt.subplots(figsize=(max(6, 2.2 * len(rows) + 2), 5))
    for k, r in enumerate(runtimes):
        xs, vs = [], []
        for j, m in enumerate(rows):
            v = num(m["latency_ms"].get(r))
            if v is not None:
                xs.append(j + (k - (len(runtimes) - 1) / 2) * width)
                vs.append(v)
        bars = ax.bar(xs, vs, width=width, label=r, color=RUNTIME_COLOURS[k % len(RUNTIME_COLOURS)])
        ax.bar_label(bars, labels=[f"{v:.3g}" for v in vs], fontsize=8, padding=2)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([m["name"] for m in rows])
    ax.set_ylabel("batch-1 latency, median (ms, lower is better)")
    ax.set_ylim(0, max(num(v) or 0 for m in rows for v in m["latency_ms"].values()) * 1.15)
    title = "Whole-model latency per runtime"
    bits = ["batch 1"]
    if models.get("threads"):
        t = models["threads"]
        bits.append(f"{t} thread{'s' if t != 1 else ''}")
    if models.get("repeat"):
        bits.append(f"median of {models['repeat']} runs")
    cpu = (models.get("machine") or {}).get("cpu")
    title += "\n" + ", ".join(bits + ([cpu] if cpu else []))
    ax.set_title(title, fontsize=11)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def fmt(v, spec):
    v = num(v)
    return "–" if v is None else format(v, spec)


def cell(text):
    return str(text).replace("|", "\\|")


def summary(kernels, models, images, path):
    out = []
    if kernels is not None:
        m = kernels.get("machine", {})
        out.append("### Kernels\n")
        bits = [machine_text(m)] if machine_text(m) else []
        if num(m.get("peak_gflops")):
            bits.append(f"measured peak {num(m['peak_gflops']):.1f} GFLOP/s")
        if num(m.get("peak_gbs")):
            bits.append(f"{num(m['peak_gbs']):.1f} GB/s")
        if bits:
            out.append("Machine: " + ", ".join(bits) + ".\n")
        out.append("| suite | name | shape | runtime | ms | GFLOP/s | GB/s | % peak | bound |")
        out.append("|---|---|---|---|--:|--:|--:|--:|---|")
        for c in kernels.get("cases", []):
            out.append(f"| {cell(c.get('suite', '?'))} | {cell(c.get('name', '?'))} "
                       f"| {cell(shape_text(c.get('shape')))} | {cell(runtime_of(c))} "
                       f"| {fmt(c.get('ms'), '.3f')} | {fmt(c.get('gflops'), '.1f')} "
                       f"| {fmt(c.get('gbs'), '.1f')} | {fmt(c.get('pct_peak'), '.1f')} "
                       f"| {cell(c.get('bound') or '')}"
                       f"{cell(' error: ' + str(c['error'])) if c.get('error') else ''} |")
        out.append("")
    if models is not None:
        rows = models.get("models", [])
        runtimes = []
        for r in rows:
            for k in r.get("latency_ms", {}):
                if k not in runtimes:
                    runtimes.append(k)
        out.append("### Models\n")
        head = f"batch 1, {models.get('threads', '?')} threads, median of {models.get('repeat', '?')} runs"
        out.append(head + ".\n")
        out.append("| model | " + " | ".join(f"{r} ms" for r in runtimes) + " | kiln compile s |")
        out.append("|---|" + "--:|" * len(runtimes) + "--:|")
        for r in rows:
            lat = r.get("latency_ms", {})
            out.append(f"| {cell(r.get('name', '?'))} | "
                       + " | ".join(fmt(lat.get(k), ".2f") for k in runtimes)
                       + f" | {fmt(r.get('compile_s'), '.2f')} |")
        for note in models.get("notes", []):
            out.append(f"\n_{note}_")
        out.append("")
    for title, name in images:
        out.append(f"![{title}]({name})")
    with open(path, "w") as f:
        f.write("\n".join(out).rstrip() + "\n")


def load(path, what):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        print(f"plot.py: cannot read {what} {path}: {e}", file=sys.stderr)
        return None
    if not isinstance(data, dict):
        print(f"plot.py: {what} {path}: expected a JSON object", file=sys.stderr)
        return None
    return data


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--json", help="kernel results (kiln bench --json)")
    ap.add_argument("--models-json", help="model results (bench/models_peers.py --json)")
    ap.add_argument("--out", required=True, help="folder for the PNGs and summary.md")
    args = ap.parse_args(argv)
    if not args.json and not args.models_json:
        ap.error("give --json and/or --models-json")
    kernels = load(args.json, "kernel results") if args.json else None
    models = load(args.models_json, "model results") if args.models_json else None
    if kernels is None and models is None:
        return 2
    os.makedirs(args.out, exist_ok=True)

    charts = []
    if kernels is not None:
        cases = kernels.get("cases")
        cases = [c for c in cases if isinstance(c, dict)] if isinstance(cases, list) else []
        kernels["cases"] = cases
        machine = kernels.get("machine")
        machine = kernels["machine"] = machine if isinstance(machine, dict) else {}
        for c in cases:  # kiln bench names the target once, in "machine"
            c.setdefault("target", machine.get("target") or "cpu")
        charts += [("GEMM sweep", "gemm_sweep.png", lambda p: plot_gemm_sweep(cases, machine, p)),
                   ("Roofline", "roofline.png", lambda p: plot_roofline(cases, machine, p)),
                   ("Convolutions, % of peak", "conv.png", lambda p: plot_conv(cases, machine, p))]
    if models is not None:
        charts.append(("Model latency", "models.png", lambda p: plot_models(models, p)))
    images = []
    for title, name, draw in charts:
        path = os.path.join(args.out, name)
        why = draw(path)
        if why:
            print(f"plot.py: skipped {name}: {why}")
        else:
            images.append((title, name))
            print(f"plot.py: wrote {path}")
    spath = os.path.join(args.out, "summary.md")
    summary(kernels, models, images, spath)
    print(f"plot.py: wrote {spath}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
