"""Latency against burstiness, one line per GPU count (or per rate).

Reads a sweep over ``workload.arrival.cv`` (gamma-renewal arrivals; cv 1 is Poisson):
``scenarios/burstiness.yaml`` runs continuous batching on 1, 2, 4 and 8 GPUs at the
same load per GPU, one variant per GPU count (a sweep with a rate grid instead gets
one line per rate). Draws p50 and p99 of TTFT, TPOT and end-to-end latency against the
coefficient of variation of the gaps, with 95 % bands; hollow markers: a replication
was unstable. A round-robin router hands GPU k of n every n-th request, so the gaps a
GPU sees are sums of n gaps, whose cv is cv / sqrt(n): the same stream is far less
bursty for each of 8 GPUs than for one.

    python -m analysis.burstiness results/burstiness --out reports/burstiness.png
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from analysis.common import CV, RATE, points_figure_main, slo_line, style

PANELS = (("ttft", "time to first token (s)"), ("tpot", "time per output token (s)"), ("e2e", "end-to-end latency (s)"))


def _lines(points: pd.DataFrame) -> tuple[str, list, dict]:
    """The column that tells the lines apart (variant, else rate), its values, their labels."""
    if points["variant"].nunique() > 1:
        variants = list(dict.fromkeys(points["variant"]))
        return "variant", variants, {v: str(v).replace("-", " ") for v in variants}
    rates = sorted(points[RATE].unique())
    return RATE, rates, {r: f"{r:g} req/s" for r in rates}


def draw(points: pd.DataFrame, slo: dict | None = None):
    style()
    key, lines, labels = _lines(points)
    colours = dict(zip(lines, sns.color_palette("viridis", len(lines)), strict=True))
    fig, axes = plt.subplots(1, len(PANELS), figsize=(5.2 * len(PANELS), 4.6), squeeze=False)
    for ax, (metric, label) in zip(axes[0], PANELS, strict=True):
        for line in lines:
            g = points[points[key] == line].sort_values(CV)
            for pct, ls in (("p50", "-"), ("p99", ":")):
                col = f"{metric}_{pct}"
                ax.plot(g[CV], g[col], ls=ls, color=colours[line], label=f"{labels[line]} {pct}")
                ax.fill_between(g[CV], g[f"{col}_lo"], g[f"{col}_hi"], color=colours[line], alpha=0.12, lw=0)
                st = g["all_stable"].astype(bool)
                ax.scatter(g.loc[st, CV], g.loc[st, col], color=colours[line], s=16, zorder=3)
                ax.scatter(
                    g.loc[~st, CV], g.loc[~st, col], facecolors="white", edgecolors=colours[line], s=20, zorder=3
                )
        slo_line(ax, (slo or {}).get(metric))
        ax.axvline(1.0, color="grey", lw=1, ls="--")
        ax.set(yscale="log", xlabel="cv of the inter-arrival gaps (1 = Poisson)", ylabel=label)
    handles, texts = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, texts, loc="lower center", ncol=len(lines), frameon=False, bbox_to_anchor=(0.5, -0.1))
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
