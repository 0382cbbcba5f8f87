"""Latency against burstiness at fixed load.

Reads a sweep over ``workload.arrival.cv`` (gamma-renewal arrivals; cv 1 is Poisson)
at one or more fixed rates and draws p50 and p99 of TTFT and end-to-end latency
against the coefficient of variation of the gaps, one colour per rate, with 95 %
bands. Hollow markers: a replication was unstable.

    python analysis/burstiness.py results/burstiness --out reports/burstiness.png
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from analysis.common import CV, RATE, points_figure_main, style  # noqa: E402

PANELS = (("ttft", "time to first token (s)"), ("tpot", "time per output token (s)"), ("e2e", "end-to-end latency (s)"))


def draw(points: pd.DataFrame, slo: dict | None = None):
    style()
    rates = sorted(points[RATE].unique())
    colours = dict(zip(rates, sns.color_palette("viridis", len(rates)), strict=True))
    fig, axes = plt.subplots(1, len(PANELS), figsize=(5 * len(PANELS), 4.2), squeeze=False)
    for ax, (metric, label) in zip(axes[0], PANELS, strict=True):
        for rate in rates:
            g = points[points[RATE] == rate].sort_values(CV)
            for pct, ls in (("p50", "-"), ("p99", ":")):
                col = f"{metric}_{pct}"
                ax.plot(g[CV], g[col], ls=ls, color=colours[rate], label=f"{rate:g} req/s {pct}")
                ax.fill_between(
                    g[CV], g[f"{col}_lo"].clip(lower=g[col] / 20), g[f"{col}_hi"], color=colours[rate], alpha=0.15, lw=0
                )
                st = g["all_stable"]
                ax.scatter(g.loc[st, CV], g.loc[st, col], color=colours[rate], s=16, zorder=3)
                ax.scatter(
                    g.loc[~st, CV], g.loc[~st, col], facecolors="white", edgecolors=colours[rate], s=20, zorder=3
                )
        if slo and metric in slo:
            ax.axhline(slo[metric], color="black", lw=1, alpha=0.6)
        ax.axvline(1.0, color="grey", lw=1, ls="--")
        ax.set(yscale="log", xlabel="coefficient of variation of inter-arrival gaps (1 = Poisson)", ylabel=label)
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(
        "Latency against burstiness at fixed load (continuous batching, one RTX 4090; mean of replications, 95 % CI)",
        fontsize=11,
    )
    fig.tight_layout()
    return fig


def main(argv=None) -> Path:
    return points_figure_main(__doc__, "reports/burstiness.png", draw, argv)


if __name__ == "__main__":
    print(main())
