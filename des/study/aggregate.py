"""A study's tables: one row per run, and per design point the mean and 95 % interval
of every metric, plus percentiles of the pooled requests.

The intervals are :mod:`des.study.intervals`'s: latencies from batches of the measured
requests of every replication (so that they rest on more than the replications' few
values, and never leave what a run produced), other metrics over the replications
(independent, whatever each run's internal autocorrelation), each inside the metric's
support (:func:`~des.study.intervals.interval`): latencies and rates are positive and
right-skewed, and a Student-t interval over three of them routinely reaches below zero.
The column ``interval_method`` says which method made a point's intervals. A p99 "of the
point" can mean two things: the mean of the replications' p99s (``ttft_p99``, with its
interval) or the p99 of all the point's requests pooled (``pooled_ttft_p99``); both are
given. ``runs_short`` counts the replications whose warm-up or horizon is too short to
judge them by (:mod:`des.study.adequacy`, ``adequacy`` says why), ``unstable_transient``
the unstable ones whose instability their start-up may explain (the sweep calls such a
point's stability "unsure", not "NO"); ``stability_applies`` is false where no run's
stability was judged (arrivals that follow a schedule: ``stable`` null, and ``all_stable``
then true, as nothing found them unstable). A trace replay's point is its recorded trace's
run (the replications after it replay resamples of the trace,
:mod:`des.study.resample`). When the runs draw the step-time model's error
(``model_uncertainty``), every interval is a prediction interval from the spread across
replications (:func:`des.study.intervals.model_interval`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from des.metrics.stability import judged_unstable
from des.study.adequacy import check, is_closed
from des.study.adequacy import describe as describe_short
from des.study.intervals import SHARES, describe, estimate, latency_stat
from des.study.runner import run_dir
from des.study.spec import RunSpec, is_replay, uses_model_uncertainty

NOT_METRICS = {"run", "replication", "seed"}
POOLED = ("ttft", "tpot", "e2e", "queue_delay")
POOLED_Q = (50, 90, 95, 99)


def cell(value: Any) -> Any:
    """Grid values as table cells: scalars stay, anything else becomes JSON text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return json.dumps(value, sort_keys=True)


def runs_table(rows: Sequence[dict[str, Any]], grid_keys: Sequence[str]) -> pd.DataFrame:
    frame = pd.DataFrame(sorted(rows, key=lambda r: r["run"]))
    for c in frame.columns:  # a metric null in every run (no arrival window: no rates) is still a number
        if frame[c].dtype == object and frame[c].isna().all():
            frame[c] = frame[c].astype(float)
    for k in grid_keys:
        frame[k] = [cell(v) for v in frame[k]]
    return frame


def points_table(runs: pd.DataFrame, specs: Sequence[RunSpec], grid_keys: Sequence[str], root: Path) -> pd.DataFrame:
    """A row per variant and grid point; ``root`` holds the runs' folders (for the measured requests)."""
    groups: dict[tuple, list[RunSpec]] = {}
    for spec in specs:
        groups.setdefault((spec.variant, tuple(cell(v) for _, v in spec.point)), []).append(spec)
    metrics = [
        c
        for c in runs.columns
        if c not in NOT_METRICS
        and c not in grid_keys
        and c not in ("run_id", "variant")
        and pd.api.types.is_numeric_dtype(runs[c])
        and not pd.api.types.is_bool_dtype(runs[c])
    ]
    by_run = runs.set_index("run")
    out = []
    for (variant, values), members in groups.items():
        sub = by_run.loc[[s.index for s in members]]
        row: dict[str, Any] = {"variant": variant, **dict(zip(grid_keys, values, strict=True)), "n": len(members)}
        frames = [measured_requests(root, s) for s in members]
        replay = is_replay(members[0].scenario)
        model = uses_model_uncertainty(members[0].scenario)
        for m in metrics:
            latency = latency_stat(m)
            series = [f[latency[0]].to_numpy(dtype=float) for f in frames] if latency else None
            e = estimate(m, sub[m].to_numpy(dtype=float), series, replay, 1.0 if m in SHARES else None, model)
            row[m], row[f"{m}_lo"], row[f"{m}_hi"] = e.value, e.low, e.high
        row["interval_method"] = describe(len(members), [len(f) for f in frames], replay, model)
        row["all_stable"] = bool(sub["stable"].all())
        row["stability_applies"] = bool(sub["stable"].notna().any())  # not to a schedule's runs (stable: null)
        row["any_drifting"] = bool(sub["drifting"].any())
        summaries = sub.to_dict("records")
        closed = is_closed(members[0].scenario)
        checks = [check(r, f, closed) for r, f in zip(summaries, frames, strict=True)]
        row["unstable_runs"] = sum(judged_unstable(r) for r in summaries)
        row["runs_short"] = sum(c.short for c in checks)
        row["unstable_transient"] = sum(c.explains(r) for c, r in zip(checks, summaries, strict=True))
        row["adequacy"] = describe_short(checks, summaries)
        pooled = pd.concat(frames)
        for name in POOLED:
            v = pooled[name].to_numpy(dtype=float)
            v = v[np.isfinite(v)]
            qs = np.percentile(v, POOLED_Q) if v.size else [math.nan] * len(POOLED_Q)
            for q, x in zip(POOLED_Q, qs, strict=True):
                row[f"pooled_{name}_p{q}"] = float(x)
        row["pooled_requests"] = int(len(pooled))
        out.append(row)
    return pd.DataFrame(out)


def measured_requests(root: Path, spec: RunSpec) -> pd.DataFrame:
    """A run's measured requests (its ``latencies.parquet``), in arrival order."""
    frame = pd.read_parquet(run_dir(root, spec) / "latencies.parquet")
    return frame.sort_values("arrival_time", kind="stable").reset_index(drop=True)
