"""Throughput and goodput against offered load, one colour per scheduler.

Throughput counts completed requests per second; goodput only those that met every
per-request SLO of the study's scenarios (``slo: {ttft, tpot}``). Each line is the mean
over replications with its 95 % band; hollow markers are points where a replication
was unstable. The diagonal is "everything offered is served".

    python analysis/throughput.py results/headline --out reports/throughput.png
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from analysis.common import CV, PALETTE, RATE, points_figure_main, style  # noqa: E402


def draw(points: pd.DataFrame, slo: dict | None = None):
    style()
    cvs = sorted(points[CV].unique()) if CV in points else [None]
    fig, axes = plt.subplots(1, len(cvs), figsize=(5.5 * len(cvs), 4.2), sharey=True, squeeze=False)
    top = points[RATE].max()
    for j, cv in enumerate(cvs):
        ax = axes[0, j]
        sub = points if cv is None else points[points[CV] == cv]
        ax.plot([0, top], [0, top], color="grey", lw=1, ls="--", label="offered")
        for variant, g in sub.groupby("variant", sort=False):
            g = g.sort_values(RATE)
            c = PALETTE.get(variant)
            for metric, ls, name in (("throughput_rps", "-", "throughput"), ("goodput_rps", ":", "goodput")):
                if g[metric].isna().all():
                    continue
                ax.plot(g[RATE], g[metric], ls=ls, color=c, label=f"{variant} {name}")
                ax.fill_between(g[RATE], g[f"{metric}_lo"].clip(lower=0), g[f"{metric}_hi"], color=c, alpha=0.15, lw=0)
                stable = g["all_stable"]
                ax.scatter(g.loc[stable, RATE], g.loc[stable, metric], color=c, s=18, zorder=3)
                ax.scatter(
                    g.loc[~stable, RATE], g.loc[~stable, metric], facecolors="white", edgecolors=c, s=22, zorder=3
                )
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
