"""Prefill on one GPU type, decode on another, priced: capacity under the SLO per dollar.

Reads the sweep of ``scenarios/pd-hetero.yaml`` (a ``config`` axis of colocated and split
configurations on H100, A100 and L40S GPUs, each on a load grid of its own saturation)
and, for each configuration and SLO (:data:`analysis.pd_capacity.SLOS`), reads the
capacity off its curve with its 95 % interval (:mod:`analysis.capacity`). Each
configuration's price per hour is the sum of its GPUs' list prices (the catalog's, through
the run's own scenario: :meth:`des.scenario.Scenario.price_book`) and its board power the
sum of its GPUs'. At capacity: requests per second per dollar-hour, dollars per million
output tokens (``price / (capacity × mean output tokens × 3600) × 10^6``) and kWh per
million output tokens at board power (an upper bound: :mod:`des.catalog.prices`).

The report's part is :func:`facts` filled into ``analysis/templates/pd_hetero.md``
(:func:`section`), with a figure of capacity against price per hour (:func:`draw`).

    python -m analysis.pd_hetero results/pd-hetero --out reports/pd_hetero.png
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from analysis import capacity
from analysis.common import CONFIG, Sweep, save, style
from analysis.markdown import render
from analysis.pd_capacity import SLO_TEXT, SLOS
from des.scenario import load_scenario

STUDY = "pd-hetero"


KEYS = ["variant", CONFIG]


def prices(sweep: Sweep) -> pd.DataFrame:
    """Per workload and configuration: GPUs, price per hour (USD), board power (W), mean
    output tokens (the workload's law)."""
    runs = sweep.runs.drop_duplicates(KEYS)
    rows = []
    for _, run in runs.iterrows():
        sc = load_scenario(sweep.scenario(str(run["run_id"])))
        book = sc.price_book()
        pools = sc.layout.pools
        per_hour = 0.0
        for p in pools:
            price = book[p.gpu.name]
            if price is None:
                raise SystemExit(f"{p.gpu.name} has no price in the catalog: give it one with prices: in the study")
            per_hour += price * p.num_gpus
        power = sum((p.gpu.board_power_w or 0.0) * p.num_gpus for p in pools)
        lengths = sc.workload.output_tokens
        assert lengths is not None, "the study draws its answers' lengths"
        mean_out = lengths.moments()[0]
        rows.append(
            {"variant": run["variant"], CONFIG: run[CONFIG], "gpus": sc.layout.num_gpus, "usd_per_hour": per_hour,
             "watts": power, "output_tokens": mean_out}
        )  # fmt: skip
    return pd.DataFrame(rows).set_index(KEYS)


def table(sweep: Sweep) -> pd.DataFrame:
    """One row per configuration and SLO: capacity (req/s, with its interval), and at capacity
    req/s per dollar-hour, USD and kWh per million output tokens."""
    cost = prices(sweep)
    frames = []
    for name, slo in SLOS.items():
        caps = capacity.capacities(sweep.points, dict(slo), by=KEYS).set_index(KEYS)
        caps["slo"] = name
        frames.append(caps.join(cost))
    out = pd.concat(frames).reset_index()
    mid = out.apply(capacity.middle, axis=1).astype(float)
    out["capacity_mid"] = mid
    out["per_dollar_hour"] = mid / out["usd_per_hour"]
    tokens_per_hour = mid * out["output_tokens"] * 3600
    out["usd_per_million"] = out["usd_per_hour"] / tokens_per_hour * 1e6
    out["kwh_per_million"] = out["watts"] / 1000 / tokens_per_hour * 1e6
    return out


def draw(rows: pd.DataFrame) -> plt.Figure:
    """Capacity against price per hour, one panel per workload and SLO, a point per
    configuration with its interval; lines of equal requests per dollar-hour."""
    style()
    slos = list(SLOS)
    workloads = list(dict.fromkeys(rows["variant"]))
    fig, grid = plt.subplots(len(workloads), len(slos), figsize=(11, 4.3 * len(workloads)), squeeze=False)
    for (workload, name), ax in zip(((w, n) for w in workloads for n in slos), grid.ravel(), strict=True):
        sub = rows[(rows["slo"] == name) & (rows["variant"] == workload)]
        top = float(np.nanmax(sub[["capacity_mid", "ci_high"]].to_numpy(dtype=float))) * 1.15
        right = float(sub["usd_per_hour"].max()) * 1.15
        for value in (2, 4, 6, 8, 10):  # lines of equal capacity per dollar-hour, to where they leave the box
            end = min(right, top / value)
            ax.plot([0, end], [0, value * end], color="0.85", lw=0.8, zorder=0)
            ax.text(end, value * end, f"{value}", fontsize=7, color="0.55", va="top", ha="right")
        seen: dict[float, int] = {}  # configurations already labelled at a price: the next label goes lower
        for _, r in sub.iterrows():
            split = "+" in str(r[CONFIG])
            colour = "#2ca02c" if split else "#1f77b4"
            lo = r["ci_low"] if r["ci_low"] == r["ci_low"] else r["capacity_mid"]
            hi = r["ci_high"] if r["ci_high"] == r["ci_high"] else r["capacity_mid"]
            ax.errorbar(
                r["usd_per_hour"], r["capacity_mid"],
                yerr=[[max(r["capacity_mid"] - lo, 0)], [max(hi - r["capacity_mid"], 0)]],
                fmt="o" if split else "s", color=colour, ms=6, capsize=3,
            )  # fmt: skip
            if r["capacity_mid"] != r["capacity_mid"]:
                continue
            near = sum(n for x, n in seen.items() if abs(x - r["usd_per_hour"]) < 0.45)
            seen[r["usd_per_hour"]] = seen.get(r["usd_per_hour"], 0) + 1
            ax.annotate(str(r[CONFIG]), (r["usd_per_hour"], r["capacity_mid"]), fontsize=7,
                        xytext=(4, 3 - 9 * near), textcoords="offset points")  # fmt: skip
        ax.set_title(f"{workload}: {SLO_TEXT[name]}", fontsize=10)
        ax.set_xlabel("list price, USD per hour")
        ax.set_xlim(0, right)
        ax.set_ylim(0, top)
    for ax in grid[:, 0]:
        ax.set_ylabel("capacity under the SLO (req/s)")
    fig.suptitle("Llama-3.1-8B: colocated (squares) and split (circles) on H100, A100, L40S; grey: req/s per $/h")
    fig.tight_layout()
    return fig


def _rate(r: pd.Series) -> str:
    """The capacity as :mod:`analysis.capacity` labels it (a bracket where the grid only
    brackets it), with its 95 % interval (an end the grid leaves open: "open")."""

    def end(x: float) -> str:
        return "open" if x != x else f"{x:.1f}"

    label = capacity.estimate(r, digits=1)
    return "none" if label is None else f"{label} [{end(r['ci_low'])}, {end(r['ci_high'])}]"


def facts(rows: pd.DataFrame, replications: int) -> dict[str, Any]:
    """The part's tables (one per workload) and the figures its sentences quote."""
    out: dict[str, Any] = {"hetero_replications": replications}
    for workload in dict.fromkeys(rows["variant"]):
        lines = [
            "| configuration | GPUs | $/hour | capacity, default SLO (req/s) | req/s per $/h | $ per M tokens "
            "| capacity, tight TPOT | $ per M tokens | kWh per M tokens |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        mine = rows[rows["variant"] == workload]
        default = mine[mine["slo"] == "default"].set_index(CONFIG)
        tight = mine[mine["slo"] == "tight TPOT"].set_index(CONFIG)
        for config, r in default.iterrows():
            t = tight.loc[config]
            tight_cost = f"${t['usd_per_million']:.3f}" if t["capacity_mid"] > 0 else "-"  # NaN compares False
            lines.append(
                f"| {config} | {r['gpus']:.0f} | ${r['usd_per_hour']:.2f} | {_rate(r)} | {r['per_dollar_hour']:.2f} "
                f"| ${r['usd_per_million']:.3f} | {_rate(t)} | {tight_cost} | {r['kwh_per_million']:.3f} |"
            )
        best, best_tight = default["per_dollar_hour"].idxmax(), tight["per_dollar_hour"].idxmax()
        splits = default[default.index.str.contains("P+", regex=False)]
        best_split = splits["per_dollar_hour"].idxmax()
        out |= {
            f"hetero_{workload}_table": "\n".join(lines),
            f"hetero_{workload}_best": best,
            f"hetero_{workload}_best_cost": f"{default.loc[best, 'usd_per_million']:.3f}",
            f"hetero_{workload}_best_tight": best_tight,
            f"hetero_{workload}_best_tight_cost": f"{tight.loc[best_tight, 'usd_per_million']:.3f}",
            f"hetero_{workload}_h100_cost": f"{default.loc['2xH100', 'usd_per_million']:.3f}",
            f"hetero_{workload}_h100_tight_cost": f"{tight.loc['2xH100', 'usd_per_million']:.3f}",
            f"hetero_{workload}_best_split": best_split,
            f"hetero_{workload}_best_split_cost": f"{default.loc[best_split, 'usd_per_million']:.3f}",
        }
    return out


def section(res: Path, out: Path) -> tuple[str, dict[str, Path]]:
    """The heterogeneous part of the P/D section (Markdown) and its figure."""
    sweep = Sweep(res / STUDY)
    rows = table(sweep)
    figure = save(draw(rows), out / "pd_hetero.png")
    return render("pd_hetero", facts(rows, int(sweep.study.get("replications", 1)))), {"hetero": figure}


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="the pd-hetero sweep's folder")
    ap.add_argument("--out", type=Path, default=Path("reports/pd_hetero.png"))
    args = ap.parse_args(argv)
    sweep = Sweep(args.results)
    rows = table(sweep)
    text = facts(rows, int(sweep.study.get("replications", 1)))
    for key in sorted(k for k in text if k.endswith("_table")):
        print(key, text[key], sep="\n")
    return save(draw(rows), args.out)


if __name__ == "__main__":
    print(main())
