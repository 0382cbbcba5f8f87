"""Latency against load: the report's headline figure and the what-if page's sweep.

:func:`latency_against_load` reads a sweep's points over ``workload.arrival.rate`` (and
optionally ``workload.arrival.cv``), typically a ``load`` grid giving each scheduler its
own rates (both axes are then logarithmic), and draws p50 / p90 / p99 of TTFT, TPOT and
end-to-end latency (rows) for each arrival burstiness (columns), each line the mean over
replications with its 95 % confidence band. Points where a replication was unstable (the
backlog grew) are left out: past capacity a latency "percentile" only measures how long
the run was. The panels show several percentiles, so each SLO line names the statistic
it bounds (the p99 of TTFT, the median of TPOT). A note on the TPOT panel explains static
batching's p99 of seconds per token: with ``release_on: batch_end`` (des's default) a
request's tokens all come out when its batch ends, after the batch's longest output, so a
short answer's few gaps span the rest of the batch. :func:`mark_capacity` marks a
capacity and its interval on such a figure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import pandas as pd

from des.figures.axes import plain_log_axis, slo_line, slo_text
from des.figures.style import PALETTE, style
from des.study.grid_capacity import slo_metrics
from des.study.read import CV
from des.study.spec import RATE

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

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


def _note(ax: Axes, points: pd.DataFrame, text: str) -> None:
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


def latency_against_load(
    points: pd.DataFrame, slo: Mapping[str, float] | None = None, title: str = "", release_on: str | None = "batch_end"
) -> Figure:
    """Rows :data:`METRICS`, columns the burstiness; ``slo``: the study's limits (``{ttft: 2,
    tpot: 0.1}``, seconds); ``release_on``: the static variant's setting, for the note on its
    TPOT. Sets seaborn's theme for the process (:func:`~des.figures.style.style`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


def mark_capacity(fig: Figure, capacity: float | None, low: float | None, high: float | None, label: str) -> None:
    """The capacity (req/s) on every panel of a figure against load: a dashed line at the
    estimate, its 95 % interval ``[low, high]`` shaded (when both ends are known), and
    ``capacity {label}`` written on the first panel; nothing without a capacity."""
    if capacity is None:
        return
    for i, ax in enumerate(fig.axes):
        ax.axvline(capacity, color="#2ca02c", ls="--", lw=1.2, label="capacity" if i == 0 else None)
        if low is not None and high is not None:
            ax.axvspan(low, high, color="#2ca02c", alpha=0.08, lw=0)
    fig.axes[0].annotate(
        f"capacity {label}",
        (capacity, 1.0),
        xycoords=("data", "axes fraction"),
        xytext=(3, -12),
        textcoords="offset points",
        fontsize=8,
        color="#2ca02c",
    )
