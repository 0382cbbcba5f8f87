"""What ``des plan`` writes: ``plan.json``, ``candidates.parquet`` and the winner's scenario
file. The command adds a Pareto figure (cost per hour against each SLO metric, with
intervals: :func:`des.figures.plan.pareto`); its words for the terminal are
:mod:`des.render.plan`'s.

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
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

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


#: The winner's scenario file, beside ``plan.json`` (only when there is a winner).
WINNER = "winner.yaml"
#: The files a plan writes, besides those the command adds (its figure).
PLAN_FILES = ("plan.json", "candidates.parquet", WINNER)


def plan_json(p: Plan, launch: list[Any] | None, prices: dict[str, Any]) -> dict[str, Any]:
    """The answer as plain data (the winner's scenario is :data:`WINNER`, written beside it by :func:`write`)."""
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
    body["winner"] = _entry(win, p, launch, WINNER)
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


def write(
    p: Plan,
    folder: Path,
    launch: list[Any] | None,
    prices: dict[str, Any],
    extra: Mapping[str, Callable[[Path], object]] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Write the plan's files into ``folder``, and ``extra`` (name: a function writing it at
    the path given, such as the command's figure): all staged under temporary names, then
    moved into place together (:class:`des.output.Staged`), so a failure part-way leaves
    the folder's earlier plan whole; a plan without a winner removes an earlier
    :data:`WINNER`. Returns ``plan.json``'s content and the names of the files written."""
    from des.output import Staged, json_text, parquet_writer, remove_stale_staging

    extra = dict(extra or {})
    folder.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(folder, (*PLAN_FILES, *extra))
    body = plan_json(p, launch, prices)
    win = p.winner
    with Staged(folder) as staged:
        staged.write("plan.json", lambda path: path.write_text(json_text(body)))
        staged.write("candidates.parquet", parquet_writer(table(p)))
        if win is not None:
            text = yaml.safe_dump(win.scenario.resolved() if win.scenario else {}, sort_keys=False)
            staged.write(WINNER, lambda path: path.write_text(text))
        else:
            staged.drop(WINNER)  # an earlier plan's winner is no answer to this one
        for name, draw in extra.items():
            staged.write(name, draw)
        written = staged.commit()
    return body, [target.name for target in written]


def dumps(body: dict[str, Any]) -> str:
    return json.dumps(body, indent=2, default=float)
