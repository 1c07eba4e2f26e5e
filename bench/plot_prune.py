#!/usr/bin/env python3
"""PNG of `kiln prune --analyze --csv FILE`: the output error of each prunable
channel group pruned alone, against the ratio, one line per group (labelled
with its measured latency share), log error axis.

  plot_prune.py ANALYZE.csv -o SENSITIVITY.png

Exit status 2 when the CSV cannot be read or has no rows.
"""

import argparse
import csv
import sys


def load(tool):
    """The command line (CSV -o PNG) and the CSV's rows, for plot_prune.py and
    plot_eval.py; None when the CSV cannot be read or is empty (said on
    stderr)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args()
    try:
        with open(args.csv) as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        print(f"{tool}: {args.csv}: {e}", file=sys.stderr)
        return args, None
    if not rows:
        print(f"{tool}: {args.csv}: no rows", file=sys.stderr)
        return args, None
    return args, rows


def main():
    args, rows = load("plot_prune.py")
    if rows is None:
        return 2
    import matplotlib
    matplotlib.use("Agg")  # no display on benchmark machines
    import matplotlib.pyplot as plt
    groups = {}
    for r in rows:
        groups.setdefault(r["group"], []).append(r)
    total_ms = sum(float(g[0]["latency_ms"]) for g in groups.values()) or 1.0
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, g in groups.items():
        x = [float(r["ratio"]) for r in g]
        y = [max(float(r["error"]), 1e-6) for r in g]
        share = 100 * float(g[0]["latency_ms"]) / total_ms
        ax.plot(x, y, marker="o", label=f"{name} ({g[0]['channels']} ch, {share:.0f}% of layer time)")
    ax.set_yscale("log")
    ax.set_xlabel("ratio of the group's channels removed")
    ax.set_ylabel("output error / largest output")
    ax.set_title("kiln prune --analyze: sensitivity per channel group")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
