"""SLO capacity per GPU of serving configurations, with 95 % intervals: colocated against
disaggregated prefill/decode serving.

Reads the sweeps of the prefill/decode studies (``scenarios/pd-compare.yaml`` on two
RTX 4090s, ``pd-split.yaml`` on four), whose grid has a ``config`` axis of named
configurations (``static-x2``, ``continuous-x2``, ``1P+1D``, ...) and, per variant
(workload), a load grid from light load to past each configuration's saturation. For
each curve (variant x grid point) and each SLO, the capacity is read off the curve as
:mod:`analysis.capacity` does (interpolated where the mean metrics cross their limits,
the interval from where they surely hold to where they surely fail) and divided by the
configuration's GPU count, from its scenario.

Two SLOs (:data:`SLOS`): the report's default (p99 TTFT ≤ 2 s, median TPOT ≤ 100 ms)
and a tight-TPOT one (p99 TTFT ≤ 2 s, p99 TPOT ≤ 40 ms). The default's median TPOT
cannot see the stalls a long prefill puts into the decodes of a colocated instance;
the tight SLO asks that 99 % of requests stream at 25 tokens/s or faster, about 2.4
times one 4090's unloaded decode step for a 7B model (17 ms): the tail a prefill/decode
split is built to protect. des's TPOT is a request's mean gap, ``(finish - first token)
/ (output_tokens - 1)``, so a short answer's TPOT is its few gaps, the first of which
(when disaggregated) includes its KV transfer.

Draws a forest plot: capacity per GPU with its interval, one row per configuration
(grouped by GPU count), one panel per workload and SLO.

    python -m analysis.pd_capacity results/pd-compare results/pd-split --out reports/pd_capacity.png
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis import capacity
from analysis.common import CONFIG, RATE, Sweep, config_style, num_gpus, save, style

SLOS: dict[str, dict[str, float]] = {
    "default": {"ttft_p99": 2.0, "tpot_p50": 0.1},
    "tight TPOT": {"ttft_p99": 2.0, "tpot_p99": 0.04},
}
SLO_TEXT = {
    "default": "p99 TTFT ≤ 2 s, median TPOT ≤ 100 ms",
    "tight TPOT": "p99 TTFT ≤ 2 s, p99 TPOT ≤ 40 ms",
}
#: Columns holding rates (req/s) that :func:`per_gpu` divides by the GPU count.
RATES = ("capacity", "capacity_high", "ci_low", "ci_high", "max_throughput", "lowest_rate", "saturation")


def curve_keys(sweep: Sweep) -> list[str]:
    """What tells a sweep's curves apart: the variant and every grid axis but the load."""
    grid = sweep.study.get("grid") or {}
    return ["variant", *[k for k in grid if k != RATE]]


def with_gpus(sweep: Sweep) -> pd.DataFrame:
    """The sweep's points with a ``gpus`` column (each point's GPU count, from its scenario)."""
    points, runs = sweep.points, sweep.runs
    keys = curve_keys(sweep)
    first = runs.drop_duplicates(keys).set_index(keys)["run_id"]
    gpus = {k: num_gpus(sweep.scenario(rid)) for k, rid in first.items()}
    index = points.set_index(keys).index
    return points.assign(gpus=[gpus[k] for k in index])


def capacity_table(
    points: pd.DataFrame, keys: list[str], slos: Mapping[str, Mapping[str, float]] = SLOS
) -> pd.DataFrame:
    """One row per curve and SLO: capacity, interval and highest throughput, per GPU (req/s).

    ``points`` needs a ``gpus`` column (:func:`with_gpus`). ``capacity`` is NaN when no
    load meets the SLO; where the grid only brackets it (``interpolated`` false), it lies
    between ``capacity`` and ``capacity_high`` (:func:`analysis.capacity.capacities`);
    ``ci_low`` is NaN when the SLO does not surely hold even at the lowest load;
    ``ci_high`` is NaN with ``ci_high_open`` when the grid ends before the SLO surely
    fails, and NaN without it when it surely fails at the lowest load.
    """
    frames = []
    gpus = points.groupby(keys, sort=False)["gpus"].first()
    for name, slo in slos.items():
        caps = capacity.capacities(points, dict(slo), by=keys)
        caps["ci_high_open"] = caps["ci_high"].isna() & caps["capacity"].notna()
        caps = caps.astype({c: float for c in ("capacity", "capacity_high", "ci_low", "ci_high")})
        caps.insert(len(keys), "slo", name)
        caps.insert(len(keys) + 1, "gpus", [gpus[k] for k in caps.set_index(keys).index])
        frames.append(caps)
    table = pd.concat(frames, ignore_index=True)
    for c in RATES:
        table[c] = table[c] / table["gpus"]
    return table


def bounds(row: Mapping) -> tuple[float, float, float]:
    """(capacity, low, high) per GPU of a :func:`capacity_table` row, as numbers: "no load
    meets the SLO" is 0, an interval end below the grid 0, one above it infinity, and an
    upper end the SLO surely fails by at the lowest load that load."""
    cap = row["capacity"] if row["capacity"] == row["capacity"] else 0.0
    low = row["ci_low"] if row["ci_low"] == row["ci_low"] else 0.0
    if row["ci_high"] == row["ci_high"]:
        high = row["ci_high"]
    else:
        high = math.inf if row["ci_high_open"] else row["lowest_rate"]
    return float(cap), float(low), float(high)


def verdict(a: Mapping, b: Mapping, names: tuple[str, str]) -> str:
    """Which of two :func:`capacity_table` rows carries more: the name of the one whose
    interval lies wholly above the other's, ``tie`` when they overlap, ``neither`` when
    no load meets the SLO for either."""
    ca, la, ha = bounds(a)
    cb, lb, hb = bounds(b)
    if ca == 0 and cb == 0:
        return "neither"
    if la > hb:
        return names[0]
    if lb > ha:
        return names[1]
    return "tie"


def fmt_capacity(row: Mapping, short: bool = False) -> str:
    """A capacity per GPU with its interval, as the report prints it (``short``: for a table
    cell); ``≥ a [lo, b]`` where the grid only brackets it between a and b
    (:func:`analysis.capacity.cell`)."""
    cap, lo, hi = row["capacity"], row["ci_low"], row["ci_high"]
    if cap != cap:
        if short:
            return f"none (fails from {row['lowest_rate']:.2g})"
        return f"none (fails at {row['lowest_rate']:.2g}, the lowest load tried)"
    low = f"{lo:.2f}" if lo == lo else "—"
    high = f"{hi:.2f}" if hi == hi else ("above the grid" if row.get("ci_high_open") else "—")
    return capacity.cell(row, low, high)


def _label(row: Mapping) -> str:
    return f"{config_style(str(row[CONFIG]))[0]} ({int(row['gpus'])} GPUs)"


def draw(table: pd.DataFrame, title: str = ""):
    """Forest plot of capacity per GPU: rows configurations, columns workloads, one figure
    row per SLO. A capacity interpolated between two loads is a dot; one the grid only
    brackets is a thick bar from the last load that held to the first that failed (or the
    saturation throughput), labelled "a–b"; the thin line is its 95 % interval."""
    style()
    variants = list(dict.fromkeys(table["variant"]))
    slos = list(dict.fromkeys(table["slo"]))
    configs = table.drop_duplicates(["gpus", CONFIG]).sort_values("gpus", kind="stable")
    labels = [_label(r) for _, r in configs.iterrows()]
    ypos = {lab: i for i, lab in enumerate(labels)}
    fig, axes = plt.subplots(
        len(slos), len(variants), figsize=(6.2 * len(variants), 0.42 * len(labels) * len(slos) + 2.4), squeeze=False
    )
    for i, slo in enumerate(slos):
        for j, variant in enumerate(variants):
            ax = axes[i, j]
            sub = table[(table["slo"] == slo) & (table["variant"] == variant)]
            top = float(np.nanmax(sub[["capacity", "ci_high", "saturation"]].to_numpy(float)))
            for _, r in sub.iterrows():
                y = ypos[_label(r)]
                color = config_style(str(r[CONFIG]))[1]
                ax.plot([r["saturation"]], [y], marker="|", ms=12, color="0.55", mew=1.5)
                if r["capacity"] == r["capacity"]:
                    lo = r["ci_low"] if r["ci_low"] == r["ci_low"] else 0.0
                    hi = r["ci_high"] if r["ci_high"] == r["ci_high"] else (top * 1.05 if r["ci_high_open"] else lo)
                    ax.plot([lo, hi], [y, y], color=color, lw=1.3, gid="ci")
                    if capacity.is_bracket(r):
                        end = r.get("capacity_high")
                        end = end if end == end and end is not None else top * 1.05
                        ax.plot([r["capacity"], end], [y, y], color=color, lw=7, alpha=0.75, solid_capstyle="butt",
                                gid="bracket")  # fmt: skip
                        x = (r["capacity"] + end) / 2
                    else:
                        ax.plot([r["capacity"]], [y], marker="o", ms=7, color=color, gid="estimate")
                        x = r["capacity"]
                    ax.annotate(capacity.estimate(r), (x, y), xytext=(0, 7), textcoords="offset points", ha="center",
                                fontsize=8, color=color)  # fmt: skip
                else:
                    ax.plot([0], [y], marker="x", ms=8, mew=2, color=color, clip_on=False)
                    ax.annotate("no load meets the SLO", (0, y), xytext=(8, -3), textcoords="offset points",
                                fontsize=8, color=color)  # fmt: skip
            ax.set_yticks(range(len(labels)), labels if j == 0 else [""] * len(labels))
            ax.set_ylim(len(labels) - 0.5, -0.6)
            ax.set_xlim(0, top * 1.08)
            ax.set_title(f"{variant}: {SLO_TEXT.get(slo, slo)}", fontsize=10)
            if i == len(slos) - 1:
                ax.set_xlabel("requests / s per GPU")
            for k in range(1, len(labels)):  # a rule between GPU counts
                if configs.iloc[k]["gpus"] != configs.iloc[k - 1]["gpus"]:
                    ax.axhline(k - 0.5, color="0.3", lw=0.8)
    fig.suptitle(
        title
        or "SLO capacity per GPU: dot, interpolated between two loads tried; thick bar a–b, between the last load "
        "tried that held and the\nfirst that failed (or the saturation), nothing tried between; thin line: 95 % CI. "
        "Grey tick: saturation throughput per GPU (every batch full)",
        fontsize=10.5,
    )
    fig.tight_layout()
    return fig


def tables(folders: list[Path]) -> pd.DataFrame:
    """The capacity tables of several prefill/decode sweeps, one after the other."""
    out = []
    for folder in folders:
        sweep = Sweep(folder)
        t = capacity_table(with_gpus(sweep), curve_keys(sweep))
        out.append(t.assign(study=folder.name))
    return pd.concat(out, ignore_index=True)


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, nargs="+", help="sweeps of prefill/decode studies (a config axis)")
    ap.add_argument("--out", type=Path, default=Path("reports/pd_capacity.png"))
    args = ap.parse_args(argv)
    table = tables(args.results)
    for _, r in table.iterrows():
        print(f"{r['variant']:6} {_label(r):34} {r['slo']:11} {fmt_capacity(r)}")
    return save(draw(table), args.out)


if __name__ == "__main__":
    print(main())
