"""The run over time: a row per window of ``metrics.window`` seconds (windows.parquet), and
what the run paid for (GPU-hours, cost).

A run whose load changes (a rate schedule, an autoscaler) has no single steady state to
summarise: its answer is how each stretch of it went. Windows ``[k W, (k + 1) W)`` tile
the run from t = 0 to its end (the last one shorter when the run ends inside it: a run
that drains ends at its last completion, the makespan: when its last token reaches the
client, :func:`~des.metrics.result.build_result`), a row
each; but a stretch of two or more windows in which nothing happens (no request arrives or
finishes, no step ends, no instance starts, serves or stops) is one row from the first's
start to the last's end. Its rates and instance counts are those of each window it stands
for (no request, the same instances throughout) and its GPU-hours and cost their sum, so
nothing is lost, and the table's size follows the traffic, not the clock: a trace of epoch
timestamps, or a day replayed a billion times slower, is a few rows, not millions:

- ``arrived``, ``offered_rps``: requests arriving in the window; ``rejected`` and
  ``unfinished``: those of them rejected, or not done when the run stopped;
- ``completed``, ``throughput_rps``: requests finishing in the window (their
  ``finish_time``: the last token at the client, the front-end's way out after its step),
  per second of it; ``output_tokens_per_s``: tokens emitted by the steps that end in the
  window (the engine's time, not the client's), per second of it;
- latency percentiles (``ttft_p50`` … ``e2e_p99``) and ``slo_attainment`` (the share
  meeting every limit of ``slo``) of the completed requests that *arrived* in the window,
  as the summary's; ``slo_met``: the attainment reaches ``slo.attainment`` (None without SLOs
  or without such requests);
- ``instances_serving``, ``instances_paying`` (time averages over the window, summed over
  pools; per pool of a split too, ``{role}_serving`` / ``{role}_paying``),
  ``gpu_hours`` (GPUs paid for × hours) and ``cost`` (USD, where every pool's GPU has a price).

GPU-hours of the run are the exact integral of each pool's paying instances (a fixed pool:
all of them, from t = 0 to the run's end; an autoscaled pool: its
:class:`~des.engine.autoscaler.Timeline`) times its GPUs per instance, over 3600.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from des.metrics._window import finite, overlap

if TYPE_CHECKING:
    from des.engine.topology import PoolFacts

#: Default window length, seconds.
DEFAULT_WINDOW = 300.0


def paying_seconds(pool: PoolFacts, lo: float, hi: float, field: str = "paying") -> float:
    """Instance-seconds of ``pool`` paid for (``field="serving"``: serving) inside ``[lo, hi]``."""
    line = pool.timeline
    if line is None:
        return pool.instances * max(hi - lo, 0.0)
    times = np.frombuffer(line.times, dtype=float)
    counts = np.frombuffer(getattr(line, field), dtype=np.int64).astype(float)
    ends = np.append(times[1:], max(hi, times[-1]))
    return float((overlap(times, ends, lo, hi) * counts).sum())


def mean_paying(pool: PoolFacts, lo: float, hi: float) -> float:
    """Instances of ``pool`` paid for on average over ``[lo, hi]``: all of a fixed pool's."""
    if pool.timeline is None or not hi > lo:
        return float(pool.instances)
    return paying_seconds(pool, lo, hi) / (hi - lo)


def gpu_hours(pools: Sequence[PoolFacts], lo: float, hi: float) -> float:
    """GPU-hours paid for inside ``[lo, hi]`` (seconds), every pool's GPUs counted."""
    return sum(paying_seconds(p, lo, hi) * p.gpus_per_instance for p in pools) / 3600.0


def cost(pools: Sequence[PoolFacts], prices: Mapping[str, float | None], lo: float, hi: float) -> float | None:
    """USD paid inside ``[lo, hi]`` at ``prices`` (USD per GPU-hour by GPU name); None when a
    pool's GPU has no price."""
    total = 0.0
    for p in pools:
        price = prices.get(p.gpu)
        if price is None:
            return None
        total += paying_seconds(p, lo, hi) * p.gpus_per_instance / 3600.0 * price
    return total


def rows(busy: np.ndarray, n: int) -> np.ndarray:
    """The first window of each row of a run of ``n`` windows, where the windows ``busy``
    (indices, sorted and unique) each have a row of their own and every stretch of others
    between them is one row: ``[0, b, b + 1, …]`` for each busy ``b``, at most
    ``2 len(busy) + 1`` rows whatever ``n``."""
    after = busy + 1
    return np.union1d(np.union1d(busy, after[after < n]), np.zeros(1, dtype=np.int64))


def windows_table(
    requests: pd.DataFrame,
    steps: pd.DataFrame,
    pools: Sequence[PoolFacts],
    end: float,
    window: float,
    slo: Mapping[str, float] | None = None,
    attainment: float | None = None,
    prices: Mapping[str, float | None] | None = None,
) -> pd.DataFrame:
    """A row per window of ``window`` seconds from 0 to ``end`` (seconds), a stretch of idle
    windows one row (see the module's docstring)."""
    n = max(1, math.ceil(end / window))

    def grid(t: np.ndarray) -> np.ndarray:
        return np.clip(np.nan_to_num(t, nan=0.0) // window, 0, n - 1).astype(np.int64)

    status = requests["status"].to_numpy()
    completed = status == "completed"
    arrived_at = grid(requests["arrival_time"].to_numpy())
    finished_at = grid(requests["finish_time"].to_numpy())
    step_end = (steps["start"] + steps["duration"]).to_numpy()
    stepped_at = grid(step_end)
    changes = [grid(np.frombuffer(p.timeline.times, dtype=float)) for p in pools if p.timeline is not None]
    busy = np.unique(np.concatenate([arrived_at, finished_at[completed], stepped_at, *changes]))
    first = rows(busy, n)
    last = np.append(first[1:] - 1, n - 1)  # the last window of each row
    m = len(first)
    starts = first * window
    ends = np.minimum(last * window + window, end) if end > 0 else starts + window
    span = ends - starts

    def row_of(at: np.ndarray) -> np.ndarray:
        return np.searchsorted(first, at, side="right") - 1

    def count(mask: np.ndarray, where: np.ndarray) -> np.ndarray:
        return np.bincount(where[mask], minlength=m)

    arrived_in, finished_in = row_of(arrived_at), row_of(finished_at)
    every = np.ones(len(requests), bool)
    out = pd.DataFrame({"start": starts.astype(float), "end": ends.astype(float)})
    out["arrived"] = count(every, arrived_in)
    out["offered_rps"] = out["arrived"] / span
    out["rejected"] = count(status == "rejected", arrived_in)
    out["unfinished"] = count(status == "unfinished", arrived_in)
    out["completed"] = count(completed, finished_in)
    out["throughput_rps"] = out["completed"] / span
    tokens = np.bincount(row_of(stepped_at), weights=steps["tokens_emitted"].to_numpy(), minlength=m)
    out["output_tokens_per_s"] = tokens / span
    done = requests.loc[completed, ["ttft", "tpot", "e2e"]].assign(window=arrived_in[completed])
    groups = done.groupby("window")
    for name, qs in (("ttft", (50, 90, 99)), ("tpot", (50, 99)), ("e2e", (50, 99))):
        for q in qs:
            out[f"{name}_p{q}"] = groups[name].quantile(q / 100).reindex(range(m)).to_numpy()
    if slo:
        ok = np.ones(len(done), bool)
        for name, limit in slo.items():
            ok &= ~(done[name].to_numpy() > limit)  # NaN (tpot of one-token outputs) passes
        share = pd.Series(ok, index=done.index).groupby(done["window"].to_numpy()).mean().reindex(range(m))
        out["slo_attainment"] = share.to_numpy()
        out["slo_met"] = [None if math.isnan(x) or attainment is None else bool(x >= attainment) for x in share]
    else:
        out["slo_attainment"] = np.nan
        out["slo_met"] = None

    def per_window(field: str, pool: PoolFacts) -> np.ndarray:
        if pool.timeline is None:  # paying_seconds of a fixed pool, row by row at once
            return pool.instances * np.maximum(ends - starts, 0.0)
        return np.array([paying_seconds(pool, lo, hi, field) for lo, hi in zip(starts, ends, strict=True)])

    out["instances_serving"] = sum(per_window("serving", p) for p in pools) / span
    out["instances_paying"] = sum(per_window("paying", p) for p in pools) / span
    if len(pools) > 1:
        for p in pools:
            out[f"{p.role}_serving"] = per_window("serving", p) / span
            out[f"{p.role}_paying"] = per_window("paying", p) / span
    out["gpu_hours"] = sum(per_window("paying", p) * p.gpus_per_instance for p in pools) / 3600.0
    out["cost"] = [None] * m
    if prices is not None and all(prices.get(p.gpu) is not None for p in pools):
        paid = np.zeros(m)  # cost()'s sum, row by row at once: the same terms in the same order
        for p in pools:
            paid = paid + per_window("paying", p) * p.gpus_per_instance / 3600.0 * float(prices[p.gpu] or 0.0)
        out["cost"] = paid.tolist()
    return out


def day_metrics(
    pools: Sequence[PoolFacts],
    end: float,
    output_tokens: float,
    prices: Mapping[str, float | None] | None,
) -> dict[str, Any]:
    """What the run paid for over ``[0, end]``: ``gpu_hours``, ``instances_paying_mean``,
    ``cost`` (USD; None without a price for every pool's GPU), ``cost_per_million_tokens``
    (USD per million output tokens of the completed requests), and the autoscalers'
    ``scale_ups`` and ``scale_downs``."""
    hours = gpu_hours(pools, 0.0, end)
    paid = cost(pools, prices, 0.0, end) if prices is not None else None
    return {
        "gpu_hours": hours,
        "instances_paying_mean": finite(sum(paying_seconds(p, 0.0, end) for p in pools) / end) if end > 0 else None,
        "cost": paid,
        "cost_per_million_tokens": finite(paid / output_tokens * 1e6) if paid is not None and output_tokens else None,
        "scale_ups": sum(p.scalings[0] for p in pools),
        "scale_downs": sum(p.scalings[1] for p in pools),
    }
