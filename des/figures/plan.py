"""The figure of ``des plan`` (``pareto.png``): what each simulated candidate costs against
what it achieves on each SLO metric (:func:`pareto`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from des.plan.planner import Plan


#: How far (a factor) from the values shown an SLO's limit is still drawn on a log axis;
#: farther, the axis would span hundreds of decades (matplotlib's margins overflow near 1e308).
LOG_REACH = 1e6


def _on_scale(limit: float, values: np.ndarray, log: bool) -> bool:
    """Whether the limit can be drawn beside ``values`` (on a log axis: positive, and within
    :data:`LOG_REACH` of them, or of 1 s when none is shown)."""
    if not log:
        return True
    finite = values[np.isfinite(values) & (values > 0)]
    low, high = (finite.min(), finite.max()) if finite.size else (1.0, 1.0)
    return bool(limit > 0 and low / LOG_REACH <= limit <= high * LOG_REACH)


def pareto(p: Plan, path: Path, fmt: str = "png") -> Path:
    """Cost per hour against each SLO metric (mean and interval) of the simulated candidates
    (their rows of ``candidates.parquet``, :func:`des.plan.output.table`), coloured by
    verdict, the winner ringed, the limit dashed; with a panel of the capacities against
    the target rate (req/s) when some were searched, in ``fmt``. Returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from des.plan.output import table
    from des.study.capacity import is_latency

    rows = table(p)
    if rows.empty:  # no candidate at all: the panels, empty
        metrics = [c for t in p.slos for c in (t.metric, f"{t.metric}_lo", f"{t.metric}_hi")]
        rows = pd.DataFrame(columns=["name", "usd_per_hour", "verdict", "capacity", *metrics])
    slos, rate, win = p.slos, p.rate, p.winner
    sim = rows[rows["verdict"].isin(["pass", "fail", "marginal"])]
    caps = rows[rows["capacity"].notna()]
    n = max(1, len(slos)) + (1 if len(caps) else 0)
    fig, axes = plt.subplots(1, n, figsize=(5.2 * n, 4.2), squeeze=False)
    if len(caps):
        ax = axes[0][-1]
        y = caps["capacity"].to_numpy(float)
        lo = np.nan_to_num(y - caps["capacity_lo"].to_numpy(float), nan=0.0).clip(0)
        hi = np.nan_to_num(caps["capacity_hi"].to_numpy(float) - y, nan=0.0).clip(0)
        ax.errorbar(caps["usd_per_hour"], y, yerr=[lo, hi], fmt="o", color="#2ca02c", capsize=3)
        for _, r in caps.iterrows():
            ax.annotate(str(r["name"]), (r["usd_per_hour"], r["capacity"]), fontsize=7, xytext=(4, 3),
                        textcoords="offset points")  # fmt: skip
        ax.axhline(rate, color="0.3", ls="--", lw=1)
        ax.set_xlabel("USD per hour (list prices)")
        ax.set_ylabel("capacity under the SLOs (req/s)")
        ax.set_title("winner and runners-up: how much they carry", fontsize=9)
    colours = {"pass": "#2ca02c", "marginal": "#ff7f0e", "fail": "#d62728"}
    for ax, term in zip(axes[0][: len(slos)], slos, strict=True):
        for verdict, group in sim.groupby("verdict"):
            y = group[term.metric].to_numpy(float)
            lo = y - group[f"{term.metric}_lo"].to_numpy(float)
            hi = group[f"{term.metric}_hi"].to_numpy(float) - y
            err = [
                [max(v, 0) if math.isfinite(v) else 0 for v in lo],
                [max(v, 0) if math.isfinite(v) else 0 for v in hi],
            ]
            ax.errorbar(group["usd_per_hour"], y, yerr=err, fmt="o", ms=5, capsize=2, color=colours[str(verdict)],
                        label=str(verdict), alpha=0.85)  # fmt: skip
        if win is not None:
            w = rows[rows["name"] == win.candidate.name].iloc[0]
            ax.plot(
                w["usd_per_hour"], w[term.metric], "o", ms=13, mfc="none", mec="black", label=f"winner: {w['name']}"
            )
        latency = is_latency(term.metric)
        shown = sim[term.metric].to_numpy(float) if len(sim) else np.array([])
        if _on_scale(term.limit, shown, latency):
            ax.axhline(term.limit, color="0.3", ls="--", lw=1)
        else:
            ax.set_title(f"limit {term.op}{term.limit:g} off the scale", fontsize=8)
        ax.set_xlabel("USD per hour (list prices)")
        ax.set_ylabel(f"{term.metric} (s)" if latency else term.metric)
        if latency:
            ax.set_yscale("log")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, frameon=False, loc="best")
        else:
            ax.text(0.5, 0.5, "no candidate simulated", ha="center", va="center", transform=ax.transAxes, color="0.4")
    where = "\n" if n == 1 else " "  # one panel is too narrow for the title on one line
    fig.suptitle(f"des plan: {rate:g} req/s;{where}every simulated configuration, mean and 95 % interval")
    fig.tight_layout()
    fig.savefig(path, dpi=120, format=fmt)  # the format given: a staged file's name ends .tmp
    plt.close(fig)
    return path
