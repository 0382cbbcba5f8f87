"""The headline figure: latency percentiles against load, one colour per scheduler.

Reads a sweep over ``workload.arrival.rate`` (and optionally ``workload.arrival.cv``),
typically a ``load`` grid giving each scheduler its own rates (both axes are then
logarithmic), and draws p50 / p90 / p99 of TTFT, TPOT and end-to-end latency (rows) for each
arrival burstiness (columns), each line the mean over replications with its 95 %
confidence band. Points where a replication was unstable (the backlog grew) are left
out: past capacity a latency "percentile" only measures how long the run was. The
panels show several percentiles, so each SLO line names the statistic it bounds (the
p99 of TTFT, the median of TPOT). A note on the TPOT panel explains static batching's
p99 of seconds per token: with ``release_on: batch_end`` (des's default) a request's
tokens all come out when its batch ends, after the batch's longest output, so a short
answer's few gaps span the rest of the batch.

    python -m analysis.latency_vs_load results/headline --out reports/latency_vs_load.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from analysis.common import (
    CV,
    PALETTE,
    RATE,
    Sweep,
    plain_log_axis,
    save,
    slo_line,
    slo_metrics,
    slo_text,
    style,
)

METRICS = (
    ("ttft", "time to first token (s)"),
    ("tpot", "time per output token (s)"),
    ("e2e", "end-to-end latency (s)"),
)
PCTS = (("p50", "-", "o"), ("p90", "--", "s"), ("p99", ":", "^"))


def static_note(points: pd.DataFrame, release_on: str | None) -> str | None:
    """Why static batching's p99 TPOT is seconds per token, for the TPOT panel: None
    without a static variant, or when its results are released at each request's own end."""
    static = points[(points["variant"] == "static") & points["all_stable"].astype(bool)]
    if static.empty or release_on != "batch_end":
        return None
    return (
        f"static p99 TPOT, up to {static['tpot_p99'].max():.1f} s\n"
        "per token: release_on: batch_end\n"
        "returns a request's tokens when\n"
        "its batch ends, after the batch's\n"
        "longest output (rows padded to it),\n"
        "so a short answer's few gaps span\n"
        "the rest of the batch"
    )


def _note(ax, points: pd.DataFrame, text: str) -> None:
    """``text`` in the panel's empty upper right, pointing at static batching's highest p99 TPOT."""
    static = points[(points["variant"] == "static") & points["all_stable"].astype(bool)]
    top = static.loc[static["tpot_p99"].idxmax()]
    ax.annotate(
        text,
        (top[RATE], top["tpot_p99"]),
        xytext=(0.97, 0.78),
        textcoords="axes fraction",
        ha="right",
        va="top",
        multialignment="left",
        fontsize=7,
        color=PALETTE["static"],
        bbox={"boxstyle": "round,pad=0.3", "fc": "white", "ec": "0.8", "lw": 0.6},
        arrowprops={"arrowstyle": "->", "color": PALETTE["static"], "lw": 0.8},
        gid="static-note",
    )


def draw(points: pd.DataFrame, slo: dict | None = None, title: str = "", release_on: str | None = "batch_end"):
    """Rows :data:`METRICS`, columns the burstiness; ``slo``: the study's limits (``{ttft: 2,
    tpot: 0.1}``); ``release_on``: the static variant's setting, for the note on its TPOT."""
    style()
    limits = slo_metrics(slo)
    note = static_note(points, release_on)
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
            for col, limit in limits.items():
                if col.startswith(f"{metric}_"):
                    slo_line(ax, limit, slo_text(col, limit), boxed=True)
            if metric == "tpot" and j == 0 and note:
                _note(ax, sub, note)
            ax.set_yscale("log")
            plain_log_axis(ax.yaxis)
            if points[RATE].max() > 10 * points[RATE].min():
                ax.set_xscale("log")  # each scheduler's grid spans its own range of loads
                plain_log_axis(ax.xaxis)
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
        handles,
        labels,
        loc="lower center",
        ncol=len(labels) if len(labels) <= 4 else len(labels) // 2,  # one row for a single curve's percentiles
        frameon=False,
        bbox_to_anchor=(0.5, -0.04),
    )
    fig.suptitle(
        title
        or "Latency against load, each scheduler from light load to past its own saturation "
        "(mean of replications with 95 % CI; unstable points omitted)",
        fontsize=11,
    )
    fig.tight_layout()
    return fig


def release_on(sweep: Sweep) -> str | None:
    """When the sweep's static variant releases its results (``batch_end``, des's default,
    or ``finish``); None without a static variant."""
    runs = sweep.runs
    static = runs[runs["variant"] == "static"]
    if static.empty:
        return None
    return sweep.scenario(static["run_id"].iloc[0])["scheduler"].get("release_on", "batch_end")


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="a results folder (des sweep --out, or des run --out)")
    ap.add_argument("--out", type=Path, default=Path("reports/latency_vs_load.png"))
    args = ap.parse_args(argv)
    sweep = Sweep(args.results)
    slo = sweep.study.get("set", {}).get("slo")
    return save(draw(sweep.points, slo, release_on=release_on(sweep)), args.out)


if __name__ == "__main__":
    print(main())
