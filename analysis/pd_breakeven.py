"""Break-even of a prefill/decode split over prompt length x load: where colocated serving
meets an SLO, where the split does, where both or neither.

Reads the sweep of ``scenarios/pd-breakeven.yaml``: two colocated continuous-batching
replicas against 1 prefill + 1 decode instance (a ``config`` axis) at mean prompt
lengths of 256 to 8,192 tokens (``workload.prompt_tokens.mean``), each from light load
to near its own saturation. At each prompt length each configuration's SLO capacity per
GPU is read off its curve (:func:`analysis.pd_capacity.capacity_table`): it meets the
SLO below that load and not above. Between the prompt lengths simulated, capacities are
interpolated linearly in log(length) and log(load). The map shades, for each SLO, the
region each configuration alone meets, the region both meet and the region neither
does, with both capacity curves and their 95 % bands on top. :func:`breakeven_table`
says, per prompt length, which configuration carries more and whether their intervals
separate.

    python -m analysis.pd_breakeven results/pd-breakeven --out reports/pd_breakeven.png
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Patch
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from analysis.common import CONFIG, SPLIT, Sweep, config_style, plain_log_axis, save, style
from analysis.pd_capacity import SLO_TEXT, bounds, capacity_table, verdict, with_gpus

PROMPT = "workload.prompt_tokens.mean"
#: Region colours: only the colocated configuration, only the split, both, neither.
REGIONS = {"colocated": "#c6dbef", "split": "#c7e9c0", "both": "#eeeeee", "neither": "#ffffff"}


def _pair(table: pd.DataFrame) -> tuple[str, str]:
    """The colocated and the split configuration of a break-even table."""
    configs = list(dict.fromkeys(table[CONFIG]))
    split = [c for c in configs if SPLIT.match(str(c))]
    colocated = [c for c in configs if not SPLIT.match(str(c))]
    if len(split) != 1 or len(colocated) != 1:
        raise SystemExit(f"a break-even needs one colocated and one split configuration, got {configs}")
    return colocated[0], split[0]


def breakeven_table(table: pd.DataFrame) -> pd.DataFrame:
    """Per SLO and prompt length: each configuration's capacity per GPU, their ratio
    (split / colocated) and the verdict: ``split`` or ``colocated`` when its interval lies
    wholly above the other's, ``tie`` when they overlap, ``neither`` when no load meets
    the SLO for either. ``table`` is :func:`analysis.pd_capacity.capacity_table`'s."""
    colocated, split = _pair(table)
    rows = []
    for (slo, length), g in table.groupby(["slo", PROMPT], sort=False):
        by = g.set_index(CONFIG)
        c, c_lo, c_hi = bounds(by.loc[colocated])
        s, s_lo, s_hi = bounds(by.loc[split])
        rows.append(
            {
                "slo": slo,
                PROMPT: length,
                "colocated": c,
                "colocated_lo": c_lo,
                "colocated_hi": c_hi,
                "split": s,
                "split_lo": s_lo,
                "split_hi": s_hi,
                "ratio": s / c if c > 0 else (math.inf if s > 0 else math.nan),
                "verdict": verdict(by.loc[colocated], by.loc[split], ("colocated", "split")),
            }
        )
    return pd.DataFrame(rows)


def _interp(x: np.ndarray, xs: np.ndarray, ys: np.ndarray, floor: float) -> np.ndarray:
    """``ys`` at ``xs`` interpolated linearly in log-log at ``x``; 0 (no load) stays at ``floor``."""
    logs = np.log(np.maximum(ys, floor))
    return np.exp(np.interp(np.log(x), np.log(xs), logs))


def draw(table: pd.DataFrame, title: str = ""):
    """One region map per SLO, from :func:`breakeven_table`."""
    style()
    slos = list(dict.fromkeys(table["slo"]))
    fig, axes = plt.subplots(1, len(slos), figsize=(6.6 * len(slos), 6.0), squeeze=False, sharey=True)
    positive = table[["colocated", "split", "colocated_lo", "split_lo"]].to_numpy(float)
    positive = positive[positive > 0]
    floor = float(positive.min()) / 3
    ceiling = float(table[["colocated", "split"]].to_numpy(float).max()) * 4
    labels = {"colocated": "two colocated replicas", "split": "1 prefill + 1 decode"}
    for ax, slo in zip(axes[0], slos, strict=True):
        g = table[table["slo"] == slo].sort_values(PROMPT)
        xs = g[PROMPT].to_numpy(float)
        x = np.geomspace(xs.min(), xs.max(), 400)
        c = _interp(x, xs, g["colocated"].to_numpy(float), floor)
        s = _interp(x, xs, g["split"].to_numpy(float), floor)
        lo, hi = np.minimum(c, s), np.maximum(c, s)
        # the verdict of the simulated prompt length nearest each x (in log length): a region
        # one configuration alone meets is shaded solid where its interval lies wholly above
        # the other's, hatched where they overlap
        nearest = np.abs(np.log(x)[:, None] - np.log(xs)[None, :]).argmin(axis=1)
        sure = g["verdict"].to_numpy()[nearest]
        ax.fill_between(x, floor, lo, color=REGIONS["both"], lw=0)
        for key, mine in (("colocated", c >= s), ("split", s > c)):
            solid = mine & (sure == key)
            ax.fill_between(x, lo, hi, where=solid, color=REGIONS[key], lw=0, interpolate=True)
            ax.fill_between(x, lo, hi, where=mine & ~solid, facecolor="white", edgecolor=REGIONS[key],
                            hatch="////", lw=0, interpolate=True)  # fmt: skip
        for key, config, shift in (("colocated", "continuous-x2", 0.97), ("split", "1P+1D", 1.03)):
            color = config_style(config)[1]
            ax.plot(x, _interp(x, xs, g[key].to_numpy(float), floor), color=color, lw=2)
            cap = np.maximum(g[key].to_numpy(float), floor)
            low = np.maximum(g[f"{key}_lo"].to_numpy(float), floor)
            high = np.clip(g[f"{key}_hi"].to_numpy(float), floor, ceiling)
            ax.errorbar(xs * shift, cap, yerr=[cap - low, high - cap], fmt="o", ms=5, color=color, capsize=3,
                        elinewidth=1.2)  # fmt: skip
        for _, r in g.iterrows():  # the verdict of the intervals, at each prompt length simulated
            ax.annotate(r["verdict"], (r[PROMPT], ceiling), xytext=(0, -5), textcoords="offset points",
                        ha="center", va="top", fontsize=8.5, color="0.2",
                        bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": "0.75", "lw": 0.6})  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(xs.min() / 1.15, xs.max() * 1.15)
        ax.set_ylim(floor, ceiling)
        ax.xaxis.set_major_locator(FixedLocator(xs))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
        ax.xaxis.set_minor_locator(NullLocator())
        plain_log_axis(ax.yaxis)
        ax.set_xlabel("mean prompt length (tokens; outputs: 128 on average)")
        ax.set_title(f"{slo} SLO: {SLO_TEXT.get(slo, slo)}", fontsize=10)
    axes[0, 0].set_ylabel("offered load per GPU (requests / s)")
    handles = [
        Patch(color=REGIONS["colocated"], label=f"only {labels['colocated']} meet the SLO"),
        Patch(color=REGIONS["split"], label=f"only {labels['split']} meet it"),
        Patch(facecolor="white", edgecolor="0.6", hatch="////", label="… by the estimates; the intervals overlap"),
        Patch(color=REGIONS["both"], label="both meet it"),
        Patch(facecolor=REGIONS["neither"], edgecolor="0.7", label="neither (above both curves)"),
        plt.Line2D(
            [],
            [],
            color=config_style("continuous-x2")[1],
            lw=2,
            marker="o",
            label="SLO capacity, colocated (bars: 95 % CI)",
        ),
        plt.Line2D([], [], color=config_style("1P+1D")[1], lw=2, marker="o", label="SLO capacity, 1P+1D (95 % CI)"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=4, frameon=False, bbox_to_anchor=(0.5, 0.0), fontsize=9)
    fig.suptitle(
        title
        or "Where a prefill/decode split pays on 2 x RTX 4090 (Qwen2.5-7B): the loads each configuration "
        "carries within the SLO\n(labels: which one's capacity interval lies wholly above the other's; "
        "tie: they overlap)",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="the sweep of scenarios/pd-breakeven.yaml")
    ap.add_argument("--out", type=Path, default=Path("reports/pd_breakeven.png"))
    args = ap.parse_args(argv)
    sweep = Sweep(args.results)
    table = breakeven_table(capacity_table(with_gpus(sweep), ["variant", CONFIG, PROMPT]))
    print(table.to_string(index=False))
    return save(draw(table), args.out)


if __name__ == "__main__":
    print(main())
