"""Throughput and goodput against offered load, one colour per scheduler.

Throughput counts completed requests per second; goodput only those that met every
per-request SLO of the study's scenarios (``slo: {ttft, tpot}``). Each line is the mean
over replications with its 95 % band; hollow markers are points where a replication
was unstable. The diagonal is "everything offered is served".

    python -m analysis.throughput results/headline --out reports/throughput.png
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import FuncFormatter

from analysis.common import CV, PALETTE, RATE, points_figure_main, style


def draw(points: pd.DataFrame, slo: dict | None = None):
    style()
    cvs = sorted(points[CV].unique()) if CV in points else [None]
    fig, axes = plt.subplots(1, len(cvs), figsize=(5.5 * len(cvs), 4.2), sharey=True, squeeze=False)
    top, bottom = points[RATE].max(), points[RATE].min()
    for j, cv in enumerate(cvs):
        ax = axes[0, j]
        sub = points if cv is None else points[points[CV] == cv]
        ax.plot([bottom, top], [bottom, top], color="grey", lw=1, ls="--", label="offered")
        for variant, g in sub.groupby("variant", sort=False):
            g = g.sort_values(RATE)
            c = PALETTE.get(variant)
            for metric, ls, name in (("throughput_rps", "-", "throughput"), ("goodput_rps", ":", "goodput")):
                if g[metric].isna().all():
                    continue
                ax.plot(g[RATE], g[metric], ls=ls, color=c, label=f"{variant} {name}")
                ax.fill_between(g[RATE], g[f"{metric}_lo"], g[f"{metric}_hi"], color=c, alpha=0.15, lw=0)
                stable = g["all_stable"]
                ax.scatter(g.loc[stable, RATE], g.loc[stable, metric], color=c, s=18, zorder=3)
                ax.scatter(
                    g.loc[~stable, RATE], g.loc[~stable, metric], facecolors="white", edgecolors=c, s=22, zorder=3
                )
        if points[RATE].max() > 10 * points[RATE].min():
            ax.set_xscale("log")  # each scheduler's grid spans its own range of loads
            # goodput falls to 0 past the knee: a log axis with a linear stretch at the bottom
            ax.set_yscale("symlog", linthresh=0.01, linscale=0.5)
            ax.set_yticks([t for t in (0.01, 0.1, 1, 10, 100, 1000) if t <= 2 * top])
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.set(
            xlabel="offered load (requests / s)",
            title="Poisson arrivals (cv 1)"
            if cv == 1
            else f"bursty arrivals (gamma, cv {cv:g})"
            if cv is not None
            else "",
        )
        if j == 0:
            ax.set_ylabel("requests / s")
    slo_text = " and ".join(f"{k} ≤ {v:g} s" for k, v in (slo or {}).items())
    fig.suptitle(
        "Throughput and goodput"
        + (f" (goodput: requests meeting {slo_text})" if slo_text else "")
        + "; hollow: unstable",
        fontsize=11,
    )
    axes[0, -1].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


def main(argv=None) -> Path:
    return points_figure_main(__doc__, "reports/throughput.png", draw, argv)


if __name__ == "__main__":
    print(main())
