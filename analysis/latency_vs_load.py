"""The headline figure: latency percentiles against load, one colour per scheduler.

Reads a sweep over ``workload.arrival.rate`` (and optionally ``workload.arrival.cv``),
typically a ``load`` grid giving each scheduler its own rates (both axes are then
logarithmic), and draws p50 / p90 / p99 of TTFT, TPOT and end-to-end latency (rows) for each
arrival burstiness (columns), each line the mean over replications with its 95 %
confidence band. Points where a replication was unstable (the backlog grew) are left
out: past capacity a latency "percentile" only measures how long the run was.

    python -m analysis.latency_vs_load results/headline --out reports/latency_vs_load.png
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import FuncFormatter

from analysis.common import CV, PALETTE, RATE, points_figure_main, slo_line, style

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
                    ax.fill_between(
                        g[RATE], g[f"{col}_lo"], g[f"{col}_hi"], color=PALETTE.get(variant), alpha=0.15, lw=0
                    )
            slo_line(ax, (slo or {}).get(metric))
            ax.set_yscale("log")
            if points[RATE].max() > 10 * points[RATE].min():
                ax.set_xscale("log")  # each scheduler's grid spans its own range of loads
                ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
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
        or "Latency against load, each scheduler from light load to past its own saturation "
        "(mean of replications with 95 % CI; unstable points omitted)",
        fontsize=11,
    )
    fig.tight_layout()
    return fig


def main(argv=None) -> Path:
    return points_figure_main(__doc__, "reports/latency_vs_load.png", draw, argv)


if __name__ == "__main__":
    print(main())
