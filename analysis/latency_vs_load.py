"""The headline figure: latency percentiles against load, one colour per scheduler.

Reads a sweep over ``workload.arrival.rate`` (and optionally ``workload.arrival.cv``)
and draws p50 / p90 / p99 of TTFT, TPOT and end-to-end latency (rows) for each
arrival burstiness (columns), each line the mean over replications with its 95 %
confidence band. Points where a replication was unstable (the backlog grew) are left
out: past capacity a latency "percentile" only measures how long the run was.

    python analysis/latency_vs_load.py results/headline --out reports/latency_vs_load.png
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.common import CV, PALETTE, RATE, points_figure_main, style  # noqa: E402

METRICS = (
    ("ttft", "time to first token (s)"),
    ("tpot", "time per output token (s)"),
    ("e2e", "end-to-end latency (s)"),
)
PCTS = (("p50", "-", "o"), ("p90", "--", "s"), ("p99", ":", "^"))


def draw(points: pd.DataFrame, slo: dict | None = None, title: str = ""):
    style()
    cvs = sorted(points[CV].unique()) if CV in points else [None]
    fig, axes = plt.subplots(
        len(METRICS), len(cvs), figsize=(5.2 * len(cvs), 3.4 * len(METRICS)), sharex=True, sharey="row", squeeze=False
    )
    for j, cv in enumerate(cvs):
        sub = points if cv is None else points[points[CV] == cv]
        for i, (metric, label) in enumerate(METRICS):
            ax = axes[i, j]
            for variant, g in sub.groupby("variant", sort=False):
                g = g[g["all_stable"]].sort_values(RATE)
                for pct, ls, marker in PCTS:
                    col = f"{metric}_{pct}"
                    ax.plot(
                        g[RATE],
                        g[col],
                        ls=ls,
                        marker=marker,
                        ms=4,
                        color=PALETTE.get(variant),
                        label=f"{variant} {pct}",
                    )
                    # a 3-replication t-interval can reach below zero: clip it for the log axis
                    lo = g[f"{col}_lo"].clip(lower=g[col] / 20)
                    ax.fill_between(g[RATE], lo, g[f"{col}_hi"], color=PALETTE.get(variant), alpha=0.15, lw=0)
            if slo and metric in slo:
                ax.axhline(slo[metric], color="black", lw=1, alpha=0.6)
                ax.annotate(
                    f"SLO {slo[metric]:g} s",
                    (0.01, slo[metric]),
                    xycoords=("axes fraction", "data"),
                    xytext=(2, 3),
                    textcoords="offset points",
                    fontsize=8,
                )
            ax.set_yscale("log")
            if i == 0:
                ax.set_title(
                    "Poisson arrivals (cv 1)"
                    if cv == 1
                    else f"bursty arrivals (gamma, cv {cv:g})"
                    if cv is not None
                    else ""
                )
            if i == len(METRICS) - 1:
                ax.set_xlabel("offered load (requests / s)")
            if j == 0:
                ax.set_ylabel(label)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(
        handles, labels, loc="lower center", ncol=len(labels) // 2 or 1, frameon=False, bbox_to_anchor=(0.5, -0.04)
    )
    fig.suptitle(
        title
        or "Latency against load (mean of replications with 95 % CI, clipped at 1/20 of the mean "
        "on the log axis; unstable points omitted)",
        fontsize=11,
    )
    fig.tight_layout()
    return fig


def main(argv=None) -> Path:
    return points_figure_main(__doc__, "reports/latency_vs_load.png", draw, argv)


if __name__ == "__main__":
    print(main())
