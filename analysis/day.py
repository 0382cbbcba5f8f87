"""A day of traffic on RTX 4090s: a cluster fixed for the peak against autoscaling, in cost
and in SLO attainment over the day.

Reads the sweep of ``scenarios/day-4090.yaml`` (variants of one diurnal day, each
replicated with common random numbers) and draws, for the first replication of each
variant, the run over time from its ``windows.parquet``: the offered rate and the
schedule behind it, the instances paid for, and the p99 time to first token of each
window, the windows missing the SLO marked (:func:`draw`). The table (:func:`facts`) gives
per variant the GPU-hours and cost of the day, the cost per million output tokens, the
share of windows meeting the SLO and of requests meeting it, each a mean over replications
with its 95 % interval.

The report's section is :func:`facts` filled into ``analysis/templates/day.md`` by
:func:`section`.

    python -m analysis.day results/day-4090 --out reports/day.png
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis.common import Sweep, save, style
from analysis.markdown import render
from des.workload.schedule import Diurnal

STUDY = "day-4090"
BURST = "burst-4090"
HOUR = 3600.0
#: The variants drawn over the day, and their colours.
DRAWN = {
    "fixed-peak": "#1f77b4",
    "fixed-1": "#d62728",
    "autoscaled": "#2ca02c",
    "autoscaled-cold-600s": "#ff7f0e",
}


def order(sweep: Sweep) -> list[str]:
    """The study's variants in the order its file lists them."""
    return list(sweep.study.get("variants") or {})


def windows(sweep: Sweep, variant: str, replication: int = 0) -> pd.DataFrame:
    """The windows of one run of ``variant``."""
    runs = sweep.runs
    rid = runs.loc[(runs["variant"] == variant) & (runs["replication"] == replication), "run_id"].iloc[0]
    return pd.read_parquet(sweep.run_folder(str(rid)) / "windows.parquet")


def schedule(sweep: Sweep) -> Diurnal:
    """The study's diurnal rate schedule."""
    return Diurnal.model_validate(sweep.study["set"]["workload"]["arrival"]["schedule"])


def draw(sweep: Sweep, slo_ttft: float) -> plt.Figure:
    """Offered rate, instances paid for and p99 TTFT per window over the day, per variant."""
    style()
    fig, (ax_rate, ax_inst, ax_ttft) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    sched = schedule(sweep)
    first = windows(sweep, next(iter(DRAWN)))
    mid = (first["start"] + first["end"]) / 2 / HOUR
    t = np.linspace(0, float(first["end"].iloc[-1]), 600)
    ax_rate.plot(t / HOUR, sched.rate_at(t), color="0.3", lw=1.2, label="scheduled rate")
    ax_rate.step(first["start"] / HOUR, first["offered_rps"], where="post", color="0.6", lw=1, label="arrived")
    ax_rate.set_ylabel("requests / s")
    ax_rate.legend(loc="upper left", frameon=False)
    ax_rate.set_title("A day on RTX 4090s serving Qwen2.5-7B: diurnal load, fixed cluster against autoscaling")
    present = set(sweep.runs["variant"])
    for variant, colour in DRAWN.items():
        if variant not in present:
            continue
        w = windows(sweep, variant)
        x = (w["start"] + w["end"]) / 2 / HOUR
        ax_inst.step(w["start"] / HOUR, w["instances_paying"], where="post", color=colour, lw=1.4, label=variant)
        ax_ttft.plot(x, w["ttft_p99"], color=colour, lw=1.2, label=variant)
        missed = w["slo_met"] == False  # noqa: E712 (True, False and None)
        ax_ttft.plot(x[missed], w.loc[missed, "ttft_p99"], "o", ms=3.5, color=colour)
        if variant == "autoscaled":
            for _, row in w[missed].iterrows():
                ax_ttft.axvspan(row["start"] / HOUR, row["end"] / HOUR, color=colour, alpha=0.12, lw=0)
    ax_inst.set_ylabel("instances paid for")
    ax_inst.set_ylim(0.5, 2.9)
    ax_inst.legend(loc="upper left", frameon=False, ncols=4)
    ax_ttft.axhline(slo_ttft, color="0.2", ls="--", lw=1)
    ax_ttft.text(0.2, slo_ttft * 1.08, f"SLO: TTFT {slo_ttft:g} s", fontsize=8, color="0.2")
    ax_ttft.set_yscale("log")
    ax_ttft.set_ylabel("p99 TTFT of the window (s)")
    ax_ttft.set_xlabel("hour of the day (windows of 15 min; dots: SLO missed; shaded: missed by autoscaled)")
    ax_ttft.set_xlim(0, math.ceil(float(mid.iloc[-1])))
    ax_ttft.set_xticks(range(0, 25, 3))
    fig.tight_layout()
    return fig


def _ci(p: pd.Series, key: str, fmt: str) -> str:
    lo, hi = p.get(f"{key}_lo"), p.get(f"{key}_hi")
    text = format(p[key], fmt)
    if lo is None or hi is None or not (np.isfinite(lo) and np.isfinite(hi)) or lo == hi:
        return text
    return f"{text} [{format(lo, fmt)}, {format(hi, fmt)}]"


def facts(sweep: Sweep) -> dict[str, Any]:
    """The section's numbers: the table of variants and the sentences' figures."""
    points = sweep.points.set_index("variant").reindex(order(sweep))
    reps = int(sweep.study.get("replications", 1))
    lines = [
        "| variant | GPU-hours | cost of the day | $ per million output tokens | windows meeting the SLO "
        "| requests meeting it | instances started |",
        "|---|---|---|---|---|---|---|",
    ]
    for variant, p in points.iterrows():
        met = 1 - p["windows_breached"] / p["windows"]
        lo = 1 - p["windows_breached_hi"] / p["windows"]
        hi = 1 - p["windows_breached_lo"] / p["windows"]
        share = (
            f"{met:.1%}" if not (np.isfinite(lo) and np.isfinite(hi)) or lo == hi else f"{met:.1%} [{lo:.1%}, {hi:.1%}]"
        )
        lines.append(
            f"| {variant} | {_ci(p, 'gpu_hours', '.1f')} | ${_ci(p, 'cost', '.2f')} "
            f"| ${_ci(p, 'cost_per_million_tokens', '.3f')} | {share} "
            f"| {_ci(p, 'slo_attainment', '.4f')} | {p['scale_ups']:.0f} |"
        )
    peak, auto = points.loc["fixed-peak"], points.loc["autoscaled"]
    sched = schedule(sweep)
    return {
        "day_table": "\n".join(lines),
        "day_replications": reps,
        "day_mean": f"{sched.mean:g}",
        "day_peak": f"{sched.peak:.1f}",
        "day_trough": f"{sched.mean * (1 - sched.amplitude):.1f}",
        "day_requests": f"{points['num_requests'].mean():,.0f}",
        "day_saving": f"{1 - auto['cost'] / peak['cost']:.0%}",
        "day_peak_cost": f"{peak['cost']:.2f}",
        "day_auto_cost": f"{auto['cost']:.2f}",
        "day_auto_breached": f"{auto['windows_breached']:.1f}",
        "day_windows": f"{auto['windows']:.0f}",
        "day_one_breached": f"{points.loc['fixed-1', 'windows_breached']:.1f}",
    }


#: The burst study's variants drawn, and their colours.
BURST_DRAWN = {
    "fixed-peak": "#1f77b4",
    "autoscaled-cold-20s": "#9467bd",
    "autoscaled": "#2ca02c",
    "autoscaled-cold-600s": "#ff7f0e",
    "autoscaled-queue": "#8c564b",
}


def draw_burst(sweep: Sweep, slo_ttft: float) -> plt.Figure:
    """Instances paid for and p99 TTFT per minute around a burst, per variant (first replication)."""
    style()
    fig, (ax_inst, ax_ttft) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True)
    present = set(sweep.runs["variant"])
    for k, (variant, colour) in enumerate(BURST_DRAWN.items()):
        if variant not in present:
            continue
        w = windows(sweep, variant)
        minutes = (w["start"] + w["end"]) / 2 / 60
        width = 4.0 - 0.7 * k  # the later lines thinner: where they coincide, every one shows
        ax_inst.step(w["start"] / 60, w["instances_paying"], where="post", color=colour, lw=width, label=variant)
        ax_ttft.plot(minutes, w["ttft_p99"], color=colour, lw=1.2)
        missed = w["slo_met"] == False  # noqa: E712 (True, False and None)
        ax_ttft.plot(minutes[missed], w.loc[missed, "ttft_p99"], "o", ms=3, color=colour)
    for ax in (ax_inst, ax_ttft):
        ax.axvspan(30, 60, color="0.85", alpha=0.5, lw=0)
    ax_inst.set_ylabel("instances paid for")
    ax_inst.set_ylim(0.5, 3.6)
    ax_inst.legend(loc="upper right", frameon=False, ncols=2, fontsize=8)
    ax_inst.set_title("A burst (4 -> 20 -> 4 req/s, shaded) on RTX 4090s: what the cold start costs")
    ax_ttft.axhline(slo_ttft, color="0.2", ls="--", lw=1)
    ax_ttft.set_yscale("log")
    ax_ttft.set_ylabel("p99 TTFT of the minute (s)")
    ax_ttft.set_xlabel("minute (dots: SLO missed)")
    ax_ttft.set_xlim(0, 120)
    fig.tight_layout()
    return fig


def burst_facts(sweep: Sweep) -> dict[str, Any]:
    """The burst study's table and figures for the sentences."""
    points = sweep.points.set_index("variant").reindex(list(sweep.study.get("variants") or {}))
    lines = [
        "| variant | minutes missing the SLO | requests meeting it | p99 TTFT | GPU-hours | instances started |",
        "|---|---|---|---|---|---|",
    ]
    for variant, p in points.iterrows():
        lines.append(
            f"| {variant} | {_ci(p, 'windows_breached', '.1f')} | {_ci(p, 'slo_attainment', '.3f')} "
            f"| {p['ttft_p99']:.2f} s | {_ci(p, 'gpu_hours', '.2f')} | {p['scale_ups']:.1f} |"
        )
    minutes = points["windows_breached"]
    return {
        "burst_table": "\n".join(lines),
        "burst_replications": int(sweep.study.get("replications", 1)),
        "burst_auto_minutes": f"{minutes['autoscaled']:.1f}",
        "burst_fast_minutes": f"{minutes['autoscaled-cold-20s']:.1f}",
        "burst_slow_minutes": f"{minutes['autoscaled-cold-600s']:.1f}",
        "burst_queue_minutes": f"{minutes['autoscaled-queue']:.1f}",
        "burst_queue_starts": f"{points.loc['autoscaled-queue', 'scale_ups']:.1f}",
        "burst_saving": f"{1 - points.loc['autoscaled', 'gpu_hours'] / points.loc['fixed-peak', 'gpu_hours']:.0%}",
    }


def section(res: Path, out: Path) -> tuple[str, dict[str, Path]]:
    """The report's section on a day of traffic and a burst (Markdown), and their figures."""
    sweep = Sweep(res / STUDY)
    slo = float(sweep.study["set"]["slo"]["ttft"])
    figure = save(draw(sweep, slo), out / "day.png")
    burst = Sweep(res / BURST)
    burst_figure = save(draw_burst(burst, float(burst.study["set"]["slo"]["ttft"])), out / "burst.png")
    return render("day", facts(sweep) | burst_facts(burst)), {"day": figure, "burst": burst_figure}


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="the day-4090 sweep's folder")
    ap.add_argument("--out", type=Path, default=Path("reports/day.png"))
    args = ap.parse_args(argv)
    sweep = Sweep(args.results)
    print(facts(sweep)["day_table"])
    return save(draw(sweep, float(sweep.study["set"]["slo"]["ttft"])), args.out)


if __name__ == "__main__":
    print(main())
