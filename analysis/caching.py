"""What prefix caching is worth: capacity and latency with the cache on and off.

Reads the sweeps of the two caching studies (``scenarios/caching-system-prompt.yaml``:
requests behind one of 4 system prompts of 1024 tokens, a load grid per variant;
``scenarios/caching-chat.yaml``: multi-turn conversations, a grid of conversations per
second), each with variants ``cached`` and ``uncached``. Draws, for each study, the
p99 time to first token against load (mean over replications, 95 % band; hollow: a
replication was unstable) with the SLO's limit, and, in a third panel, the share of
prompt tokens the cache served against the offered requests per second. Capacities
come from :func:`analysis.capacity.capacities` under the studies' SLO (p99 TTFT ≤ 2 s,
median TPOT ≤ 100 ms); for the chat study they are in conversations per second.

The report's section on prefix caching is :func:`facts` (its numbers) filled into
``analysis/templates/caching.md`` (its words) by :func:`section`.

    python -m analysis.caching results --out reports/caching.png
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from analysis import capacity
from analysis.common import RATE, Sweep, plain_log_axis, save, slo_line, style
from analysis.markdown import render

#: The two studies: results folder name, panel title, unit of the grid's rate.
STUDIES = (
    ("caching-system-prompt", "behind 4 system prompts of 1024 tokens", "requests / s"),
    ("caching-chat", "multi-turn chat (5 turns, 15 s think time)", "conversations / s"),
)
COLOURS = {"cached": "#1f77b4", "uncached": "#ff7f0e"}


def capacities(points: pd.DataFrame, slo: dict[str, float] = capacity.DEFAULT_SLO) -> pd.DataFrame:
    """Capacity (in the grid's rate unit) per variant, with its 95 % interval."""
    return capacity.capacities(points, slo, by=["variant"]).set_index("variant")


def gain(caps: pd.DataFrame) -> float:
    """Cached capacity over uncached (NaN when either meets the SLO at no load); a capacity
    the grid only brackets counts at its bracket's middle (:func:`analysis.capacity.middle`)."""
    on, off = (capacity.middle(caps.loc[v]) for v in ("cached", "uncached"))
    if pd.isna(on) or pd.isna(off) or off <= 0:
        return math.nan
    return float(on) / float(off)


def gain_text(caps: pd.DataFrame) -> str:
    """:func:`gain` as the section prints it: ``2.5``, or ``2.5–2.8`` when a capacity the
    grid only brackets leaves the ratio between two numbers (each bracket's ends set
    against the other capacity's)."""
    ratio = gain(caps)
    on, off = caps.loc["cached"], caps.loc["uncached"]
    ends = []
    for row in (on, off):
        high = row.get("capacity_high")
        bracketed = capacity.is_bracket(row) and high is not None and high == high
        ends.append((float(row["capacity"]), float(high) if bracketed else float(row["capacity"])))
    (on_lo, on_hi), (off_lo, off_hi) = ends
    if ratio != ratio or min(off_lo, off_hi) <= 0:
        return f"{ratio:.1f}"
    low, high = f"{on_lo / off_hi:.1f}", f"{on_hi / off_lo:.1f}"
    return low if low == high else f"{low}–{high}"


def _share(rates: pd.Series) -> str:
    """Hit rates as a percentage, or a range of them."""
    low, high = round(100 * float(rates.min())), round(100 * float(rates.max()))
    return f"{low} %" if low == high else f"{low}–{high} %"


def draw(sweeps: dict[str, pd.DataFrame], slo: float | None = 2.0):
    """``sweeps``: the points of each study of :data:`STUDIES` by folder name."""
    style()
    fig, axes = plt.subplots(1, 3, figsize=(16.5, 4.6))
    for ax, (name, title, unit) in zip(axes[:2], STUDIES, strict=True):
        points = sweeps[name]
        for variant, g in points.groupby("variant", sort=False):
            g = g.sort_values(RATE)
            colour = COLOURS.get(str(variant), "0.4")
            ax.plot(
                g[RATE],
                g["ttft_p99"],
                color=colour,
                lw=1.5,
                label=f"prefix caching {'on' if variant == 'cached' else 'off'}",
            )
            ax.fill_between(g[RATE], g["ttft_p99_lo"], g["ttft_p99_hi"], color=colour, alpha=0.12, lw=0)
            stable = g["all_stable"].astype(bool)
            ax.scatter(g.loc[stable, RATE], g.loc[stable, "ttft_p99"], color=colour, s=16, zorder=3)
            ax.scatter(
                g.loc[~stable, RATE], g.loc[~stable, "ttft_p99"], facecolors="white", edgecolors=colour, s=22, zorder=3
            )
        slo_line(ax, slo)
        ax.set_yscale("log")
        plain_log_axis(ax.yaxis)
        ax.set(xlabel=f"offered load ({unit})", ylabel="p99 time to first token (s)")
        ax.set_title(title, fontsize=10)
        ax.legend(loc="upper left", fontsize=8, frameon=False, bbox_to_anchor=(0.0, 0.93))
    ax = axes[2]
    for (name, title, _unit), marker, colour in zip(STUDIES, ("o", "s"), ("#6a3d9a", "#33a02c"), strict=True):
        g = sweeps[name]
        g = g[g["variant"] == "cached"].sort_values("offered_rps")
        ax.plot(g["offered_rps"], 100 * g["prefix_cache_hit_rate"], marker=marker, ms=4, color=colour, label=title)
    ax.set(xlabel="offered load (requests / s)", ylabel="prompt tokens served from the cache (%)", ylim=(0, 100))
    ax.set_title("cache hits (caching on)", fontsize=10)
    ax.legend(loc="lower left", fontsize=8, frameon=False)
    fig.suptitle(
        "Prefix caching on one RTX 4090 serving Qwen2.5-7B (mean of replications, 95 % CI; hollow: unstable)",
        fontsize=11,
    )
    fig.tight_layout()
    return fig


def capacity_text(caps: pd.DataFrame, variant: str) -> str:
    """A variant's capacity with its 95 % interval, as the section's table prints it."""
    row = caps.loc[variant]
    if pd.isna(row["capacity"]):
        return f"none (fails at {row['lowest_rate']:g})"
    low = "below the grid" if pd.isna(row["ci_low"]) else f"{row['ci_low']:.2f}"
    high = "above the grid" if pd.isna(row["ci_high"]) else f"{row['ci_high']:.2f}"
    return capacity.cell(row, low, high)


def facts(points: Mapping[str, pd.DataFrame], reps: Mapping[str, int]) -> dict[str, Any]:
    """The section's numbers (analysis/templates/caching.md): each study's capacities with
    the cache on and off and their ratio, and the share of prompt tokens the cache served.
    ``points`` and ``reps``: each study's points and replications by folder name."""
    sys_caps, chat_caps = (capacities(points[name]) for name, _, _ in STUDIES)
    sys_pts, chat_pts = points["caching-system-prompt"], points["caching-chat"]
    hit = sys_pts[sys_pts["variant"] == "cached"]["prefix_cache_hit_rate"]
    chat_hit = chat_pts[chat_pts["variant"] == "cached"].sort_values(RATE)["prefix_cache_hit_rate"]
    return {
        "reps_system": reps["caching-system-prompt"],
        "reps_chat": reps["caching-chat"],
        "system_cached": capacity_text(sys_caps, "cached"),
        "system_uncached": capacity_text(sys_caps, "uncached"),
        "system_gain": gain(sys_caps),
        "system_gain_text": gain_text(sys_caps),
        "chat_cached": capacity_text(chat_caps, "cached"),
        "chat_uncached": capacity_text(chat_caps, "uncached"),
        "chat_gain": gain(chat_caps),
        "chat_gain_text": gain_text(chat_caps),
        "system_hits": _share(hit),
        "chat_hits_light": _share(chat_hit.iloc[:1]),
        "chat_hits_heavy": _share(chat_hit.iloc[-1:]),
    }


def section(res: Path, out: Path) -> tuple[str, dict[str, Path]]:
    """The report's section on prefix caching (Markdown) and the figure drawn for it."""
    sweeps = {name: Sweep(res / name) for name, _, _ in STUDIES}
    points = {name: s.points for name, s in sweeps.items()}
    figure = save(draw(points), out / "caching.png")
    reps = {name: int(s.study.get("replications", 1)) for name, s in sweeps.items()}
    return render("caching", facts(points, reps)), {"caching": figure}


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="the folder holding caching-system-prompt/ and caching-chat/")
    ap.add_argument("--out", type=Path, default=Path("reports/caching.png"))
    args = ap.parse_args(argv)
    points = {name: Sweep(args.results / name).points for name, _, _ in STUDIES}
    for name, _, unit in STUDIES:
        caps = capacities(points[name])
        for variant, row in caps.iterrows():
            ci = f"[{capacity._f(row['ci_low'])}, {capacity._f(row['ci_high'])}]"
            print(f"{name} {variant}: {capacity.estimate(row, unit)} {ci}")
    return save(draw(points), args.out)


if __name__ == "__main__":
    print(main())
