"""The run's summary: a flat dict of counts, rates, latency percentiles, levels and stability.

Two windows, whose bounds the summary carries (``arrival_window_start``,
``arrival_window_end``, ``measure_window_end``, seconds):

- the *arrival window* ``[warmup, arrivals_end]``, where ``arrivals_end`` is
  ``horizon.duration`` when set, otherwise the last arrival (a trace's end, or the
  ``num_requests``-th request). Offered load, throughput, output tokens/s and goodput
  are rates over it, and the stability check looks at the backlog inside it: what a
  run does while requests keep coming, not while it drains.
- the *measurement window* ``[warmup, end]``, where ``end`` is ``horizon.duration``
  when set, otherwise the time the run ended. ``gpu_busy_fraction`` and
  ``mean_batch_size`` (time-weighted over busy time) use the part of each step inside
  it; ``mean_in_system`` and ``mean_queue_length`` are time averages over it of the
  requests present (arrived, not finished) and waiting (arrived, not yet scheduled).

Beside the window rates, ``served_rps`` and ``served_tokens_per_s`` say what the GPUs
achieved over the whole run: completed requests (and their output tokens) over the
makespan, from t = 0 to the last completion. A short replay that the GPUs drain long
after its last arrival completes few requests inside its arrival window, however
fast they serve; the served rate says how fast. When no request arrives inside the
arrival window (a warm-up as long as the arrivals), ``stable`` is None: there is
nothing to judge by.

Latency statistics cover the *measured requests* (:func:`measured_mask`): completed
requests that arrived inside ``[warmup, end]``. Counts (``num_*``, ``preemptions``)
cover the whole run, so that ``num_completed + num_rejected + num_unfinished ==
num_requests``.

With per-request SLOs (``slo: {ttft, tpot, e2e}``, seconds), ``slo_attainment`` is the
share of measured requests meeting all of them and ``goodput_rps`` the rate of those
completions. The stability keys come from :mod:`des.metrics.stability` (the backlog's
trend) and :mod:`des.metrics.steady` (MSER-5 on the measured end-to-end latencies).

Each part is a function of arrays returning a dict; :func:`summarize` merges them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from des.metrics._window import finite, overlap
from des.metrics.stability import Serving, backlog_trend, serving_from_steps, unresolved
from des.metrics.steady import drift

LATENCIES = ("ttft", "tpot", "e2e", "queue_delay")
PERCENTILES = (50, 90, 95, 99)


def _per_second(count: float, start: float, end: float) -> float | None:
    """``count`` per second of ``[start, end]``; None for an empty window."""
    return finite(count / (end - start)) if end > start else None


def _time_average(begin: np.ndarray, finish: np.ndarray, start: float, end: float) -> float | None:
    """Time-average over ``[start, end]`` of how many intervals ``[begin, finish)`` cover
    the instant (NaN ``finish``: still open at the end), by summing their overlaps."""
    if not end > start:
        return None
    stop = np.where(np.isnan(finish), end, finish)
    return finite(overlap(begin, stop, start, end).sum() / (end - start))


def measured_mask(requests: pd.DataFrame, warmup: float, end: float) -> np.ndarray:
    """The measured requests: completed, and arrived inside ``[warmup, end]`` (seconds)."""
    arrival = requests["arrival_time"].to_numpy()
    return (requests["status"] == "completed").to_numpy() & (arrival >= warmup) & (arrival <= end)


def arrival_window_end(requests: pd.DataFrame, duration: float | None) -> float:
    """End of the arrival window: ``duration`` when set, else the last arrival (0 if none)."""
    if duration is not None:
        return float(duration)
    return float(requests["arrival_time"].max()) if len(requests) else 0.0


def counts(status: np.ndarray, measured: np.ndarray, preemptions: np.ndarray) -> dict[str, Any]:
    """How many requests arrived, completed, were rejected, were left unfinished, were measured."""
    return {
        "num_requests": int(len(status)),
        "num_completed": int((status == "completed").sum()),
        "num_rejected": int((status == "rejected").sum()),
        "num_unfinished": int((status == "unfinished").sum()),
        "num_measured": int(measured.sum()),
        "preemptions": int(preemptions.sum()),
    }


def rejections(requests: pd.DataFrame) -> dict[str, int]:
    """Rejected requests by reason, most frequent first (not part of the flat summary)."""
    reasons = requests.loc[requests["status"] == "rejected", "reason"].fillna("unknown")
    return {str(k): int(v) for k, v in reasons.value_counts().items() if v}


def rates(
    arrival: np.ndarray,
    finish: np.ndarray,
    completed: np.ndarray,
    step_end: np.ndarray,
    tokens_emitted: np.ndarray,
    start: float,
    end: float,
) -> dict[str, Any]:
    """Offered load, throughput (req/s) and output tokens/s over the arrival window ``[start, end]``."""
    offered = ((arrival >= start) & (arrival <= end)).sum()
    served = (completed & (finish >= start) & (finish <= end)).sum()
    tokens = tokens_emitted[(step_end >= start) & (step_end <= end)].sum()
    return {
        "offered_rps": _per_second(offered, start, end),
        "throughput_rps": _per_second(served, start, end),
        "output_tokens_per_s": _per_second(tokens, start, end),
    }


def served(finish: np.ndarray, completed: np.ndarray, output_tokens: np.ndarray) -> dict[str, Any]:
    """What the GPUs achieved over the whole run: completed requests and their output
    tokens per second of the makespan (t = 0 to the last completion), whatever the windows."""
    span = float(np.nanmax(finish)) if completed.any() else 0.0
    return {
        "served_rps": _per_second(int(completed.sum()), 0.0, span),
        "served_tokens_per_s": _per_second(int(output_tokens[completed].sum()), 0.0, span),
    }


def latencies(measured: pd.DataFrame) -> dict[str, Any]:
    """Mean and percentiles (seconds) of each latency of the measured requests."""
    out: dict[str, Any] = {}
    for name in LATENCIES:
        values = measured[name].to_numpy()
        values = values[np.isfinite(values)]
        out[f"{name}_mean"] = finite(values.mean()) if values.size else None
        qs = np.percentile(values, PERCENTILES) if values.size else [math.nan] * len(PERCENTILES)
        for p, q in zip(PERCENTILES, qs, strict=True):
            out[f"{name}_p{p}"] = finite(q)
    return out


def slo_metrics(measured: pd.DataFrame, limits: dict[str, float] | None, start: float, end: float) -> dict[str, Any]:
    """Share of measured requests meeting every per-request limit, and the rate of those
    completions over the arrival window ``[start, end]``; None without limits."""
    if not limits:
        return {"slo_attainment": None, "goodput_rps": None}
    ok = np.ones(len(measured), bool)
    for name, limit in limits.items():
        ok &= ~(measured[name].to_numpy() > limit)  # NaN (tpot of one-token outputs) passes
    met = measured.loc[ok, "finish_time"].to_numpy()
    return {
        "slo_attainment": finite(ok.mean()) if len(measured) else None,
        "goodput_rps": _per_second(((met >= start) & (met <= end)).sum(), start, end),
    }


def levels(
    steps: pd.DataFrame,
    arrival: np.ndarray,
    scheduled: np.ndarray,
    finish: np.ndarray,
    start: float,
    end: float,
    replicas: float,
    max_batch: int,
) -> dict[str, Any]:
    """Time-weighted levels over the measurement window ``[start, end]``: GPU busy share,
    mean batch, its share of the batch cap, requests in the system and waiting.

    ``arrival``, ``scheduled`` and ``finish`` are the admitted requests' times.
    """
    s_start = steps["start"].to_numpy()
    s_end = s_start + steps["duration"].to_numpy()
    inside = overlap(s_start, s_end, start, end)
    busy = inside.sum()
    window = end - start
    mean_batch = finite((steps["batch_size"].to_numpy() * inside).sum() / busy) if busy > 0 else None
    return {
        "gpu_busy_fraction": finite(busy / (window * replicas)) if window > 0 else None,
        "mean_batch_size": mean_batch,
        "slot_utilization": finite(mean_batch / max_batch) if mean_batch else None,
        "mean_in_system": _time_average(arrival, finish, start, end),
        "mean_queue_length": _time_average(arrival, scheduled, start, end),
    }


def stability(
    arrival: np.ndarray,
    finish: np.ndarray,
    serving: Serving,
    e2e_in_order: np.ndarray,
    start: float,
    end: float,
) -> dict:
    """Did the backlog and queue of admitted requests (``arrival``, ``finish``; ``serving``
    counts those in a running batch) grow over the arrival window, and do the measured
    latencies (in arrival order) settle?"""
    growth, of_level, growing = backlog_trend(arrival, finish, serving, start, end)
    dropped, drifting = drift(e2e_in_order)
    watched = end > start and bool(((arrival >= start) & (arrival <= end)).any())
    return {
        "backlog_growth": growth,
        "stable": not growing if watched else None,  # None: no arrival in the window to judge by
        "mser_truncation": int(dropped),
        "drifting": bool(drifting),
        "backlog_growth_of_level": of_level,
        "backlog_trend_unreliable": unresolved(start, end),
    }


def summarize(
    requests: pd.DataFrame,
    steps: pd.DataFrame,
    *,
    warmup: float,
    end: float,
    arrivals_end: float,
    replicas: float,
    kv_capacity_tokens: int,
    max_batch: int,
    slo: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Summary metrics; seconds, requests/s, tokens/s. NaN metrics become None (JSON null).

    ``end`` closes the measurement window and ``arrivals_end`` the arrival window (see the
    module's docstring; :func:`arrival_window_end` computes the latter).
    """
    status = requests["status"].to_numpy()
    arrival = requests["arrival_time"].to_numpy()
    finish = requests["finish_time"].to_numpy()
    completed = status == "completed"
    admitted = status != "rejected"
    measured = measured_mask(requests, warmup, end)
    sel = requests.loc[measured]
    step_end = (steps["start"] + steps["duration"]).to_numpy()
    out = counts(status, measured, requests["preemptions"].to_numpy())
    out |= {"arrival_window_start": float(warmup), "arrival_window_end": float(arrivals_end)}
    out["measure_window_end"] = float(end)
    out |= rates(arrival, finish, completed, step_end, steps["tokens_emitted"].to_numpy(), warmup, arrivals_end)
    out |= served(finish, completed, requests["output_tokens"].to_numpy())
    out |= latencies(sel)
    out |= slo_metrics(sel, slo, warmup, arrivals_end)
    scheduled = requests["scheduled_time"].to_numpy()
    out |= levels(
        steps,
        arrival[admitted],
        scheduled[admitted],
        finish[admitted],
        warmup,
        end,
        replicas,
        max_batch,
    )
    out["kv_capacity_tokens"] = int(kv_capacity_tokens)
    out["num_steps"] = int(len(steps))
    out["makespan"] = finite(float(np.nanmax(finish)) if completed.any() else 0.0)
    e2e_in_order = sel.sort_values("arrival_time")["e2e"].to_numpy()
    serving = serving_from_steps(
        steps["instance"].to_numpy(), steps["start"].to_numpy(), steps["duration"].to_numpy(),
        steps["batch_size"].to_numpy(),
    )  # fmt: skip
    out |= stability(arrival[admitted], finish[admitted], serving, e2e_in_order, warmup, arrivals_end)
    return out
