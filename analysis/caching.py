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

    python -m analysis.caching results --out reports/caching.png
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from analysis import capacity
from analysis.common import RATE, Sweep, plain_log_axis, save, slo_line, style

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
    """Cached capacity over uncached (NaN when either meets the SLO at no load)."""
    on, off = caps.loc["cached", "capacity"], caps.loc["uncached", "capacity"]
    if pd.isna(on) or pd.isna(off) or off <= 0:
        return math.nan
    return float(on) / float(off)


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


def section(res: Path, out: Path) -> tuple[list[str], dict[str, Path]]:
    """The report's section on prefix caching and the figure drawn for it."""
    sweeps = {name: Sweep(res / name) for name, _, _ in STUDIES}
    points = {name: s.points for name, s in sweeps.items()}
    figure = save(draw(points), out / "caching.png")
    sys_caps, chat_caps = (capacities(points[name]) for name, _, _ in STUDIES)
    sys_pts, chat_pts = points["caching-system-prompt"], points["caching-chat"]
    hit = sys_pts[sys_pts["variant"] == "cached"]["prefix_cache_hit_rate"]
    chat_hit = chat_pts[chat_pts["variant"] == "cached"].sort_values(RATE)["prefix_cache_hit_rate"]
    reps = {name: int(s.study.get("replications", 1)) for name, s in sweeps.items()}

    def cap(caps: pd.DataFrame, variant: str) -> str:
        row = caps.loc[variant]
        if pd.isna(row["capacity"]):
            return f"none (fails at {row['lowest_rate']:g})"
        low = "below the grid" if pd.isna(row["ci_low"]) else f"{row['ci_low']:.2f}"
        high = "above the grid" if pd.isna(row["ci_high"]) else f"{row['ci_high']:.2f}"
        return f"{row['capacity']:.2f} [{low}, {high}]"

    lines = [
        "## Prefix caching",
        "",
        "vLLM keeps the KV blocks of finished requests and reuses them for any later prompt that",
        "starts with the same tokens (automatic prefix caching, on by default); des does the same with",
        "block-hash chains, LRU eviction and the engine's rule that the last prompt token is always",
        "computed. Two workloads on one RTX 4090 serving Qwen2.5-7B, the cache on and off",
        f"(`scenarios/caching-system-prompt.yaml`, {reps['caching-system-prompt']} replications;",
        f"`scenarios/caching-chat.yaml`, {reps['caching-chat']} replications), same SLO as above:",
        "",
        "| workload | capacity, caching on | caching off | gain |",
        "|---|---|---|---|",
        f"| 4 system prompts of 1024 tokens + 256 own, 128 out (req/s) | {cap(sys_caps, 'cached')} | "
        f"{cap(sys_caps, 'uncached')} | {gain(sys_caps):.1f}x |",
        f"| multi-turn chat (conversations/s) | {cap(chat_caps, 'cached')} | {cap(chat_caps, 'uncached')} | "
        f"{gain(chat_caps):.1f}x |",
        "",
        f"Behind shared system prompts the cache serves {_share(hit)} of the prompt tokens at every load:",
        "each prompt computes only its own ~256 tokens, so prefill work falls by four fifths and the",
        f"GPU carries {gain(sys_caps):.1f} times the traffic within the SLO. In chat, every turn re-sends the",
        "conversation so far, whose blocks are often still cached from the turn before when the user",
        f"comes back: {_share(chat_hit.iloc[:1])} of the prompt tokens hit at the lightest load and",
        f"{_share(chat_hit.iloc[-1:])} at the heaviest, where the KV cache is full of running requests and",
        "evicts idle conversations' blocks while their users think (15 s on average). The gain is smaller",
        "than behind a system prompt: answers (decode, which no cache saves) are a larger share of the work.",
        "",
        "![prefix caching](caching.png)",
        "",
    ]
    return lines, {"caching": figure}


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="the folder holding caching-system-prompt/ and caching-chat/")
    ap.add_argument("--out", type=Path, default=Path("reports/caching.png"))
    args = ap.parse_args(argv)
    points = {name: Sweep(args.results / name).points for name, _, _ in STUDIES}
    for name, _, unit in STUDIES:
        caps = capacities(points[name])
        for variant, row in caps.iterrows():
            print(f"{name} {variant}: {row['capacity']:.2f} {unit} [{row['ci_low']:.2f}, {row['ci_high']}]")
    return save(draw(points), args.out)


if __name__ == "__main__":
    print(main())
