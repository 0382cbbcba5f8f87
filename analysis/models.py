"""What one RTX 4090 can serve: capacity under the SLO of the models people run on it.

Reads the sweep of ``scenarios/models-4090.yaml`` (a variant per model and weight format,
each on a load grid of its own saturation throughput) and draws, per model, the p99 time
to first token and the median time per output token against load (mean over
replications, 95 % band; hollow: a replication was unstable) with the SLO's limits, and
the capacity under the SLO with its 95 % interval beside the saturation throughput.
Weights and KV cache come from each variant's memory plan (:meth:`des.scenario.Scenario.memory_plan`),
rebuilt from the run's own scenario file.

The report's section is :func:`facts` (its numbers) filled into
``analysis/templates/models.md`` (its words) by :func:`section`.

The section's second part reads ``scenarios/speculative.yaml`` (one 4090 serving
Qwen2.5-7B without speculation and with n-gram or draft-model proposers, on one grid of
rates): median TPOT and mean end-to-end latency against load (:func:`draw_speculation`),
and where each proposer stops paying (:func:`crossover`: the first rate at which its mean
end-to-end latency exceeds the plain engine's).

    python -m analysis.models results/models-4090 --out reports/models.png
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from analysis import capacity
from analysis.common import RATE, Sweep, plain_log_axis, save, slo_line, slo_metrics, slo_text, style
from analysis.markdown import render, rows
from des.catalog.quantization import WEIGHT_ONLY_COMPUTE
from des.scenario import load_scenario

STUDY = "models-4090"
SPEC = "speculative"
GiB = 2**30
#: The variant without speculation that the others are set against.
PLAIN = "off"


def _f(x: Any) -> str:
    return "open" if x is None or x != x else f"{x:.2f}"


def order(sweep: Sweep) -> list[str]:
    """The study's variants in the order its file lists them."""
    return list(sweep.study.get("variants") or {})


def variants(sweep: Sweep) -> pd.DataFrame:
    """One row per variant: its model, weight format, weights and KV cache on the GPU
    (GiB, tokens), from the memory plan of its first run's scenario."""
    runs = sweep.runs
    out = []
    for variant in order(sweep):
        g = runs[runs["variant"] == variant]
        scenario = load_scenario(sweep.scenario(str(g["run_id"].iloc[0])))
        plan = scenario.memory_plan()
        model = scenario.model
        out.append(
            {
                "variant": variant,
                "model": model.name,
                "weights": scenario.precision.weights,
                "active": model.active_params,
                "params": model.num_params,
                "weights_gib": plan.weights / GiB,
                "kv_tokens": plan.kv_capacity_tokens,
            }
        )
    return pd.DataFrame(out).set_index("variant")


#: The y-axis label of each latency a panel draws.
LABELS = {
    "ttft_p99": "p99 time to first token (s)",
    "tpot_p50": "median time per output token (s)",
    "e2e_mean": "mean end-to-end latency (s)",
}


def _curves(ax, points: pd.DataFrame, metric: str, colours: dict, slo: dict[str, float], names: dict[str, str]) -> None:
    """One panel: ``metric`` against offered load, a line per variant (in ``colours``' order,
    named by ``names`` or as itself) with its 95 % band, hollow where a replication was
    unstable, and the SLO's limit where it bounds ``metric``; log scale."""
    for variant, c in colours.items():
        g = points[points["variant"] == variant].sort_values(RATE)
        ax.plot(g[RATE], g[metric], color=c, lw=1.5, label=names.get(variant, variant))
        ax.fill_between(g[RATE], g[f"{metric}_lo"], g[f"{metric}_hi"], color=c, alpha=0.12, lw=0)
        stable = g["all_stable"].astype(bool)
        ax.scatter(g.loc[stable, RATE], g.loc[stable, metric], color=c, s=14, zorder=3)
        ax.scatter(g.loc[~stable, RATE], g.loc[~stable, metric], facecolors="white", edgecolors=c, s=20, zorder=3)
    if metric in slo:
        slo_line(ax, slo[metric], slo_text(metric, slo[metric]), boxed=True)
    ax.set_yscale("log")
    plain_log_axis(ax.yaxis)
    ax.set(xlabel="offered load (requests / s)", ylabel=LABELS[metric])


def draw(points: pd.DataFrame, slo: dict[str, float], caps: pd.DataFrame):
    """Three panels: p99 TTFT and median TPOT against offered load per variant, and each
    variant's capacity under ``slo`` (95 % interval) against its saturation throughput."""
    style()
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8))
    order = list(caps.index)
    colours = dict(zip(order, sns.color_palette("tab10", len(order)), strict=True))
    for ax, metric in zip(axes[:2], ("ttft_p99", "tpot_p50"), strict=True):
        _curves(ax, points, metric, colours, slo, {})
    axes[0].legend(loc="upper left", fontsize=8, frameon=False)
    ax = axes[2]
    y = np.arange(len(order))
    for i, variant in enumerate(order):
        row = caps.loc[variant]
        c = colours[variant]
        ax.barh(i, row["saturation"], color=c, alpha=0.25, height=0.6)
        cap = capacity.middle(row)
        if cap == cap:
            low = row["ci_low"] if row["ci_low"] == row["ci_low"] else cap
            high = row["ci_high"] if row["ci_high"] is not None and row["ci_high"] == row["ci_high"] else cap
            ax.errorbar(cap, i, xerr=[[cap - low], [high - cap]], fmt="o", color=c, capsize=4, ms=6)
    ax.set_yticks(y, order)
    ax.invert_yaxis()
    ax.set(xlabel="requests / s")
    ax.set_title("capacity under the SLO (dot, 95 % CI) and saturation (bar)", fontsize=10)
    fig.suptitle(
        "What one RTX 4090 can serve: chat-like Poisson traffic (mean of replications, 95 % CI; hollow: unstable)",
        fontsize=11,
    )
    fig.tight_layout()
    return fig


def facts(points: pd.DataFrame, info: pd.DataFrame, slo: dict[str, float], reps: int) -> dict[str, Any]:
    """The section's numbers (analysis/templates/models.md): a table row per variant with
    its weights, KV cache, saturation throughput and capacity under the SLO."""
    caps = capacities(points, slo).reindex(info.index)
    table = []
    for variant, row in caps.iterrows():
        v = info.loc[variant]
        known = row["capacity"] == row["capacity"]
        cap = capacity.cell(row, _f(row["ci_low"]), _f(row["ci_high"])) if known else "none"
        size = f"{v['params'] / 1e9:.1f}B"
        table.append(
            [
                f"{v['model']} ({v['weights']})",
                f"{v['active'] / 1e9:.1f}B of {size}" if v["active"] != v["params"] else size,
                f"{v['weights_gib']:.1f}",
                f"{v['kv_tokens']:,}",
                f"{row['saturation']:.2f}",
                cap,
            ]
        )
    best = caps.assign(mid=[capacity.middle(r) for _, r in caps.iterrows()])["mid"]
    return {
        "models_reps": reps,
        "models_table": rows(
            [
                [
                    "model (weights)",
                    "parameters (active)",
                    "weights (GiB)",
                    "KV cache (tokens)",
                    "saturation (req/s)",
                    "capacity under the SLO (req/s, 95 % CI)",
                ],
                ["---"] * 6,
                *table,
            ]
        ),  # fmt: skip
        "marlin_share": WEIGHT_ONLY_COMPUTE,
        "models_best": str(best.idxmax()),
        "models_best_capacity": float(best.max()),
        "models_moe_gain": best.get("qwen3-30b-a3b-awq", np.nan) / best.get("qwen2.5-7b", np.nan),
        "models_14b_share": best.get("qwen2.5-14b-awq", np.nan) / best.get("qwen2.5-7b", np.nan),
        "models_oss_gain": best.get("gpt-oss-20b-mxfp4", np.nan) / best.get("qwen2.5-7b", np.nan),
        "models_oss_kv": int(info["kv_tokens"].get("gpt-oss-20b-mxfp4", 0)),
        "models_oss_active": info["active"].get("gpt-oss-20b-mxfp4", np.nan) / 1e9,
        "models_dense_kv": int(info["kv_tokens"].get("qwen2.5-7b", 0)),
        "models_moe_weights": info["weights_gib"].get("qwen3-30b-a3b-awq", np.nan),
        "models_dense_weights": info["weights_gib"].get("qwen2.5-7b", np.nan),
    }


def capacities(points: pd.DataFrame, slo: dict[str, float]) -> pd.DataFrame:
    """Capacity (requests per second) per variant, with its 95 % interval."""
    return capacity.capacities(points, slo, by=["variant"]).set_index("variant")


def crossover(points: pd.DataFrame, variant: str, metric: str = "e2e_mean") -> tuple[float, float] | None:
    """The rates between which ``variant``'s ``metric`` first exceeds the plain engine's
    (the last rate where it did not, the first where it did); None when it never does on
    a rate both ran stably."""
    plain = points[points["variant"] == PLAIN].set_index(RATE)
    mine = points[points["variant"] == variant].set_index(RATE)
    before = math.nan
    for rate in sorted(set(plain.index) & set(mine.index)):
        p, m = plain.loc[rate], mine.loc[rate]
        if not bool(p["all_stable"]):
            break
        if m[metric] > p[metric]:
            return before, float(rate)
        before = float(rate)
    return None


def draw_speculation(points: pd.DataFrame, slo: dict[str, float]):
    """Median TPOT and mean end-to-end latency against offered load, one line per variant
    (hollow: a replication was unstable)."""
    style()
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 4.6))
    order = list(dict.fromkeys(points["variant"]))
    colours = dict(zip(order, sns.color_palette("tab10", len(order)), strict=True))
    for ax, metric in zip(axes, ("tpot_p50", "e2e_mean"), strict=True):
        _curves(ax, points, metric, colours, slo, {PLAIN: "no speculation"})
    axes[0].legend(loc="lower right", fontsize=8, frameon=False)
    fig.suptitle(
        "Speculative decoding on one RTX 4090 serving Qwen2.5-7B, k = 3 "
        "(mean of replications, 95 % CI; hollow: unstable)",
        fontsize=11,
    )
    fig.tight_layout()
    return fig


def speculation_facts(points: pd.DataFrame, slo: dict[str, float], reps: int) -> dict[str, Any]:
    """The speculation part's numbers: per variant its median TPOT at the lightest load,
    where it stops paying (:func:`crossover`), and its capacity under ``slo``."""
    caps = capacities(points, slo)
    light = points[points[RATE] == points[RATE].min()].set_index("variant")
    order = list(dict.fromkeys(points["variant"]))
    table = []
    for variant in order:
        row = caps.loc[variant]
        known = row["capacity"] == row["capacity"]
        cap = capacity.cell(row, _f(row["ci_low"]), _f(row["ci_high"])) if known else "none"
        if variant == PLAIN:
            cross = "—"
        else:
            at = crossover(points, variant)
            cross = "never (up to saturation)" if at is None else f"{at[0]:g}–{at[1]:g}"
        name = "no speculation" if variant == PLAIN else variant
        table.append([name, f"{1e3 * light.loc[variant, 'tpot_p50']:.1f}", cross, cap])
    header = ["variant", "median TPOT at light load (ms)", "stops paying (req/s)", "capacity under the SLO (req/s)"]
    return {
        "spec_reps": reps,
        "spec_light": float(points[RATE].min()),
        "spec_table": rows([header, ["---"] * 4, *table]),
    }


def section(res: Path, out: Path) -> tuple[str, dict[str, Path]]:
    """The report's section on what a 4090 can serve, with what speculative decoding adds
    against load (Markdown), and the figures drawn for it."""
    sweep = Sweep(res / STUDY)
    points = sweep.points
    slo = slo_metrics(sweep.study["set"].get("slo"))
    caps = capacities(points, slo).reindex(order(sweep))
    figure = save(draw(points, slo, caps), out / "models.png")
    spec = Sweep(res / SPEC)
    spec_slo = slo_metrics(spec.study["set"].get("slo"))
    spec_figure = save(draw_speculation(spec.points, spec_slo), out / "speculative.png")
    facts_ = facts(points, variants(sweep), slo, int(sweep.study.get("replications", 1)))
    facts_ |= speculation_facts(spec.points, spec_slo, int(spec.study.get("replications", 1)))
    return render("models", facts_), {"models": figure, "speculative": spec_figure}


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="the models-4090 sweep's folder")
    ap.add_argument("--out", type=Path, default=Path("reports/models.png"))
    args = ap.parse_args(argv)
    sweep = Sweep(args.results)
    points = sweep.points
    slo = slo_metrics(sweep.study["set"].get("slo"))
    caps = capacities(points, slo).reindex(order(sweep))
    for _, row in caps.reset_index().iterrows():
        print(capacity.describe(row, slo))
    return save(draw(points, slo, caps), args.out)


if __name__ == "__main__":
    print(main())
