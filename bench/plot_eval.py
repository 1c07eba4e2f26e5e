#!/usr/bin/env python3
"""PNG of `kiln eval --csv FILE`: latency against accuracy (or agreement with
fp32), one labelled point per variant, marker size by weight bytes.

  plot_eval.py EVAL.csv -o EVAL.png

Exit status 2 when the CSV cannot be read or has no rows.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plot_prune import load  # noqa: E402  (the shared CSV command line)


def main():
    args, rows = load("plot_eval.py")
    if rows is None:
        return 2
    import matplotlib
    matplotlib.use("Agg")  # no display on benchmark machines
    import matplotlib.pyplot as plt
    acc_key = "top1" if "top1" in rows[0] else "top1_agreement"
    wmax = max(float(r["weights_bytes"]) for r in rows) or 1.0
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for r in rows:
        x, y = float(r["latency_ms"]), float(r[acc_key])
        ax.scatter([x], [y], s=30 + 270 * float(r["weights_bytes"]) / wmax, alpha=0.6)
        ax.annotate(f"{r['variant']} ({float(r['weights_bytes']) / 1e3:.0f} KB)", (x, y), fontsize=8,
                    xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("latency per run (ms, median)")
    ax.set_ylabel("top-1 %" if acc_key == "top1" else "top-1 agreement with fp32 %")
    ax.set_title("kiln eval: speed / size / accuracy per variant")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
