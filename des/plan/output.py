"""What ``des plan`` writes: ``plan.json``, ``candidates.parquet``, the winner's scenario
file, and a Pareto figure (cost per hour against each SLO metric, with intervals).

``plan.json`` holds the question (rate, SLOs, replications, GPUs, prices and their
sources), ``winner`` (``gpu``, ``num_gpus``, ``tp``, ``pp``, ``dp``, ``scheduler``,
``prefill_instances``, ``decode_instances``, ``max_num_seqs``, ``max_num_batched_tokens``,
``cost_per_hour``, ``cost_per_million_tokens``, ``scenario`` (its file, relative to the
folder) and ``launch`` (the ``vllm serve`` commands), its SLO metrics with intervals),
``runners_up``, ``cheaper`` (every cheaper candidate and why it failed), and, when nothing
passes, ``closest`` (the candidate nearest to the SLOs, with its margin).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from des.plan.planner import Outcome, Plan

#: Why candidates were pruned, by the start of their reason.
PRUNED = {
    "refused": "refused",
    "cannot carry the rate": "cannot carry",
    "costlier than the answer": "costlier than",
    "no price": "no price",
}


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _mean_output(p: Plan) -> float | None:
    from des.plan.planner import mean_output

    for o in p.outcomes:
        if o.scenario is not None:
            return mean_output(o.scenario)
    return None


def table(p: Plan) -> pd.DataFrame:
    """One row per candidate (``candidates.parquet``)."""
    out = _mean_output(p)
    return pd.DataFrame([o.row(p.slos, p.rate, out) for o in p.outcomes])


def _entry(o: Outcome, p: Plan, launch: list[Any] | None = None, scenario: str | None = None) -> dict[str, Any]:
    row = {k: _clean(v) for k, v in o.row(p.slos, p.rate, _mean_output(p)).items()}
    entry = {
        k: row[k]
        for k in (
            "name", "gpu", "num_gpus", "tp", "pp", "dp", "scheduler", "replicas", "prefill_instances",
            "decode_instances", "decode_gpu", "variant", "max_num_seqs", "max_num_batched_tokens", "cost_per_hour",
            "cost_per_million_tokens", "kwh_per_million_tokens", "verdict", "reason",
        )
    }  # fmt: skip
    entry["slo_metrics"] = {
        t.metric: {"mean": row[t.metric], "low": row[f"{t.metric}_lo"], "high": row[f"{t.metric}_hi"]} for t in p.slos
    }
    entry["margin"] = _clean(o.margin(p.slos))
    if o.capacity is not None:
        entry["capacity"] = {"value": row["capacity"], "low": row["capacity_lo"], "high": row["capacity_hi"]}
    if scenario is not None:
        entry["scenario"] = scenario
    if launch is not None:
        entry["launch"] = launch
    return entry


def plan_json(p: Plan, folder: Path, launch: list[Any] | None, prices: dict[str, Any]) -> dict[str, Any]:
    """The answer as plain data, the winner's scenario written beside it."""
    win = p.winner
    body: dict[str, Any] = {
        "rate": p.rate,
        "load": {"param": p.param, "value": p.load},
        "slos": [str(t) for t in p.slos],
        "replications": p.replications,
        "prices": prices,
        "candidates": len(p.outcomes),
        "simulated": sum(o.evaluation is not None for o in p.outcomes),
        "verdicts": {v: sum(o.verdict == v for o in p.outcomes) for v in ("pass", "marginal", "fail", "pruned")},
        "pruned": {
            why: sum(o.verdict == "pruned" and o.reason.startswith(start) for o in p.outcomes)
            for why, start in PRUNED.items()
        },
    }
    if win is None:
        body["winner"] = None
        close = p.closest()
        body["closest"] = _entry(close, p) if close is not None else None
        body["answer"] = "no configuration meets the SLOs" + (
            f"; the closest is {close.candidate.name} (margin {close.margin(p.slos):+.1%})" if close else ""
        )
        return body
    path = folder / "winner.yaml"
    path.write_text(yaml.safe_dump(win.scenario.resolved() if win.scenario else {}, sort_keys=False))
    body["winner"] = _entry(win, p, launch, path.name)
    body["runners_up"] = [_entry(o, p) for o in p.passing[1 : 1 + 3]]
    cheaper = [
        o for o in p.outcomes
        if o.verdict in ("fail", "marginal") and (o.usd_per_hour or 0) <= (win.usd_per_hour or 0) and o is not win
    ]  # fmt: skip
    body["cheaper"] = [_entry(o, p) for o in sorted(cheaper, key=lambda o: o.usd_per_hour or 0)]
    body["answer"] = (
        f"{win.candidate.name}: ${win.usd_per_hour:.2f} per hour meets {', '.join(str(t) for t in p.slos)} "
        f"at {p.rate:g} req/s"
    )
    return body


def write(p: Plan, folder: Path, launch: list[Any] | None, prices: dict[str, Any]) -> dict[str, Any]:
    """Write the plan's files into ``folder``; returns ``plan.json``'s content."""
    from des.output import json_text, parquet_writer

    folder.mkdir(parents=True, exist_ok=True)
    body = plan_json(p, folder, launch, prices)
    parquet_writer(table(p))(folder / "candidates.parquet")
    (folder / "plan.json").write_text(json_text(body))
    figure(p, folder / "pareto.png")
    return body


def figure(p: Plan, path: Path) -> Path:
    """Cost per hour against each SLO metric (mean and interval) of the simulated candidates,
    passing ones filled, the winner ringed, the limit dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = table(p)
    sim = rows[rows["verdict"].isin(["pass", "fail", "marginal"])]
    caps = rows[rows["capacity"].notna()]
    n = max(1, len(p.slos)) + (1 if len(caps) else 0)
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
        ax.axhline(p.rate, color="0.3", ls="--", lw=1)
        ax.set_xlabel("USD per hour (list prices)")
        ax.set_ylabel("capacity under the SLOs (req/s)")
        ax.set_title("winner and runners-up: how much they carry", fontsize=9)
    colours = {"pass": "#2ca02c", "marginal": "#ff7f0e", "fail": "#d62728"}
    win = p.winner
    for ax, term in zip(axes[0][: len(p.slos)], p.slos, strict=True):
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
        ax.axhline(term.limit, color="0.3", ls="--", lw=1)
        ax.set_xlabel("USD per hour (list prices)")
        latency = term.metric.split("_")[0] in ("ttft", "tpot", "e2e", "itl", "queue", "second")
        ax.set_ylabel(f"{term.metric} (s)" if latency else term.metric)
        if latency:
            ax.set_yscale("log")
        ax.legend(fontsize=7, frameon=False, loc="best")
    where = "\n" if n == 1 else " "  # one panel is too narrow for the title on one line
    fig.suptitle(f"des plan: {p.rate:g} req/s;{where}every simulated configuration, mean and 95 % interval")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def answer_text(body: dict[str, Any]) -> str:
    """The answer in a few lines for the terminal."""
    lines = [body["answer"]]
    win = body.get("winner")
    if win is not None:
        for t, m in win["slo_metrics"].items():
            lines.append(f"  {t}: {m['mean']:.4g} [{m['low']:.4g}, {m['high']:.4g}]")
        lines.append(
            f"  ${win['cost_per_million_tokens']:.4f} and at most {win['kwh_per_million_tokens']:.3g} kWh "
            "(board power) per million output tokens at the target rate"
        )
        for cmd in win.get("launch") or []:
            if "error" in cmd:
                lines.append(f"  launch: none: {cmd['error']}")
                continue
            role = f"{cmd['instances']} x " + ("" if cmd["role"] == "colocated" else f"{cmd['role']}: ")
            lines.append(f"  launch {role}{cmd['text']}")
        for o in body.get("runners_up", []):
            lines.append(f"runner-up: {o['name']} at ${o['cost_per_hour']:.2f} per hour")
        for o in body.get("cheaper", [])[:8]:
            lines.append(f"cheaper, {o['verdict']}: {o['name']} at ${o['cost_per_hour']:.2f}: {o['reason']}")
    v = body["verdicts"]
    why = ", ".join(f"{n} {k}" for k, n in body["pruned"].items() if n)
    lines.append(
        f"{body['candidates']} candidates: {v['pass']} pass, {v['marginal']} marginal, {v['fail']} fail, "
        f"{v['pruned']} pruned{f' ({why})' if why else ''}; {body['simulated']} simulated"
    )
    return "\n".join(lines)


def dumps(body: dict[str, Any]) -> str:
    return json.dumps(body, indent=2, default=float)
