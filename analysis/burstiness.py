"""Latency against burstiness, one line per GPU count (or per rate).

Reads a sweep over ``workload.arrival.cv`` (gamma-renewal arrivals; cv 1 is Poisson):
``scenarios/burstiness.yaml`` runs continuous batching on 1, 2, 4 and 8 GPUs at the
same load per GPU, one variant per GPU count (a sweep with a rate grid instead gets
one line per rate). Draws the median (top row) and the p99 (bottom row) of TTFT, TPOT
and end-to-end latency against the coefficient of variation of the gaps, with 95 %
bands; hollow markers: a replication was unstable. Each SLO line is drawn on the panel
of the statistic it bounds (the p99 of TTFT, the median of TPOT), never among another
statistic's curves. A round-robin router hands GPU k of n every n-th request, so the
gaps a GPU sees are sums of n gaps, whose cv is cv / sqrt(n): the same stream is far
less bursty for each of 8 GPUs than for one.

    python -m analysis.burstiness results/burstiness --out reports/burstiness.png
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from analysis.common import (
    CV,
    RATE,
    STATISTIC_NAME,
    plain_log_axis,
    points_figure_main,
    slo_line,
    slo_metrics,
    slo_text,
    style,
)

PANELS = (("ttft", "time to first token"), ("tpot", "time per output token"), ("e2e", "end-to-end latency"))
#: The rows: the statistics drawn, one panel row each.
STATISTICS = ("p50", "p99")


def _lines(points: pd.DataFrame) -> tuple[str, list, dict]:
    """The column that tells the lines apart (variant, else rate), its values, their labels."""
    if points["variant"].nunique() > 1:
        variants = list(dict.fromkeys(points["variant"]))
        return "variant", variants, {v: str(v).replace("-", " ") for v in variants}
    rates = sorted(points[RATE].unique())
    return RATE, rates, {r: f"{r:g} req/s" for r in rates}


def draw(points: pd.DataFrame, slo: dict | None = None):
    """Rows :data:`STATISTICS`, columns :data:`PANELS`; ``slo``: the study's limits
    (``{ttft: 2, tpot: 0.1}``), each drawn on the panel of the statistic it bounds."""
    style()
    key, lines, labels = _lines(points)
    colours = dict(zip(lines, sns.color_palette("viridis", len(lines)), strict=True))
    limits = slo_metrics(slo)
    fig, axes = plt.subplots(
        len(STATISTICS), len(PANELS), figsize=(5.2 * len(PANELS), 3.5 * len(STATISTICS)), sharex=True, sharey="col",
        squeeze=False,
    )  # fmt: skip
    for i, pct in enumerate(STATISTICS):
        for ax, (metric, label) in zip(axes[i], PANELS, strict=True):
            col = f"{metric}_{pct}"
            for line in lines:
                g = points[points[key] == line].sort_values(CV)
                ax.plot(g[CV], g[col], color=colours[line], label=labels[line])
                ax.fill_between(g[CV], g[f"{col}_lo"], g[f"{col}_hi"], color=colours[line], alpha=0.12, lw=0)
                st = g["all_stable"].astype(bool)
                ax.scatter(g.loc[st, CV], g.loc[st, col], color=colours[line], s=16, zorder=3)
                ax.scatter(
                    g.loc[~st, CV], g.loc[~st, col], facecolors="white", edgecolors=colours[line], s=20, zorder=3
                )
            if col in limits:
                slo_line(ax, limits[col], slo_text(col, limits[col]), at=0.07)  # right of the cv 1 line
            ax.axvline(1.0, color="grey", lw=1, ls="--")
            ax.set_yscale("log")
            plain_log_axis(ax.yaxis)
            ax.set_title(f"{STATISTIC_NAME[pct]} {label}", fontsize=10)
            if i == len(STATISTICS) - 1:
                ax.set_xlabel("cv of the inter-arrival gaps (1 = Poisson)")
            if metric == PANELS[0][0]:
                ax.set_ylabel(f"{STATISTIC_NAME[pct]} (s)")
    handles, texts = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, texts, loc="lower center", ncol=len(lines), frameon=False, bbox_to_anchor=(0.5, -0.04))
    per_gpu = " at the same load per GPU" if key == "variant" else ""
    fig.suptitle(
        f"Latency against burstiness{per_gpu}: continuous batching, round-robin router "
        "(mean of replications, 95 % CI; hollow: unstable)",
        fontsize=11,
    )
    fig.tight_layout()
    return fig


def main(argv=None) -> Path:
    return points_figure_main(__doc__, "reports/burstiness.png", draw, argv)


if __name__ == "__main__":
    print(main())
