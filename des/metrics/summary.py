"""The run's summary: a flat dict of counts, rates, latency percentiles and levels.

Measurement window: ``[warmup, end]`` where ``end`` is ``horizon.duration`` when set,
otherwise the time the run ended. Latency statistics cover completed requests that
arrived inside the window; throughput counts completions and emitted tokens inside
it; ``gpu_busy_fraction`` and ``mean_batch_size`` (time-weighted over busy time) use
the part of each step inside it; ``mean_in_system`` and ``mean_queue_length`` are
time averages over it of the requests present (arrived, not finished) and waiting
(arrived, not yet scheduled). Counts (``num_*``, ``preemptions``) cover the whole
run, so that ``num_completed + num_rejected + num_unfinished == num_requests``.

With per-request SLOs (``slo: {ttft, tpot, e2e}``, seconds), ``slo_attainment`` is the
share of measured completed requests meeting all of them and ``goodput_rps`` the rate
of those completions. ``mser_truncation`` and ``drifting`` come from MSER-5 on the
measured requests' end-to-end latencies (see :mod:`des.metrics.steady`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from des.metrics.stability import backlog_trend
from des.metrics.steady import drift

LATENCIES = ("ttft", "tpot", "e2e", "queue_delay")
PERCENTILES = (50, 90, 95, 99)


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _time_average(begin: np.ndarray, finish: np.ndarray, start: float, end: float) -> float | None:
    """Time-average over ``[start, end]`` of how many intervals ``[begin, finish)`` cover
    the instant (NaN ``finish``: still open at the end), by summing their overlaps."""
    if not end > start:
        return None
    stop = np.where(np.isnan(finish), end, finish)
    overlap = np.clip(np.minimum(stop, end) - np.maximum(begin, start), 0.0, None)
    return _finite(overlap.sum() / (end - start))


def summarize(
    requests: pd.DataFrame,
    steps: pd.DataFrame,
    *,
    warmup: float,
    end: float,
    replicas: int,
    kv_capacity_tokens: int,
    max_batch: int,
    slo: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Summary metrics; seconds, requests/s, tokens/s. NaN metrics become None (JSON null)."""
    status = requests["status"]
    arrival = requests["arrival_time"].to_numpy()
    finish = requests["finish_time"].to_numpy()
    window = max(end - warmup, 0.0)
    measured = (arrival >= warmup) & (arrival <= end)
    completed = (status == "completed").to_numpy()
    out: dict[str, Any] = {
        "num_requests": int(len(requests)),
        "num_completed": int(completed.sum()),
        "num_rejected": int((status == "rejected").sum()),
        "num_unfinished": int((status == "unfinished").sum()),
        "num_measured": int((measured & completed).sum()),
    }
    in_window = completed & (finish >= warmup) & (finish <= end)
    s_start = steps["start"].to_numpy()
    s_dur = steps["duration"].to_numpy()
    s_end = s_start + s_dur
    overlap = np.clip(np.minimum(s_end, end) - np.maximum(s_start, warmup), 0.0, None)
    tokens_in = steps["tokens_emitted"].to_numpy()[(s_end >= warmup) & (s_end <= end)].sum()
    out["offered_rps"] = _finite(measured.sum() / window) if window > 0 else None
    out["throughput_rps"] = _finite(in_window.sum() / window) if window > 0 else None
    out["output_tokens_per_s"] = _finite(tokens_in / window) if window > 0 else None
    sel = requests.loc[measured & completed]
    for name in LATENCIES:
        values = sel[name].to_numpy()
        values = values[np.isfinite(values)]
        out[f"{name}_mean"] = _finite(values.mean()) if values.size else None
        qs = np.percentile(values, PERCENTILES) if values.size else [math.nan] * len(PERCENTILES)
        for p, q in zip(PERCENTILES, qs, strict=True):
            out[f"{name}_p{p}"] = _finite(q)
    if slo:
        ok = np.ones(len(sel), bool)
        for name, limit in slo.items():
            ok &= ~(sel[name].to_numpy() > limit)  # NaN (tpot of one-token outputs) passes
        out["slo_attainment"] = _finite(ok.mean()) if len(sel) else None
        met = sel.loc[ok, "finish_time"].to_numpy()
        out["goodput_rps"] = _finite(((met >= warmup) & (met <= end)).sum() / window) if window > 0 else None
    else:
        out["slo_attainment"] = out["goodput_rps"] = None
    busy = overlap.sum()
    out["gpu_busy_fraction"] = _finite(busy / (window * replicas)) if window > 0 else None
    out["mean_batch_size"] = _finite((steps["batch_size"].to_numpy() * overlap).sum() / busy) if busy > 0 else None
    out["slot_utilization"] = _finite(out["mean_batch_size"] / max_batch) if out["mean_batch_size"] else None
    out["preemptions"] = int(requests["preemptions"].sum())
    out["kv_capacity_tokens"] = int(kv_capacity_tokens)
    out["num_steps"] = int(len(steps))
    out["makespan"] = _finite(float(np.nanmax(finish)) if completed.any() else 0.0)
    admitted = (status != "rejected").to_numpy()
    sched = requests["scheduled_time"].to_numpy()
    out["mean_in_system"] = _time_average(arrival[admitted], finish[admitted], warmup, end)
    out["mean_queue_length"] = _time_average(arrival[admitted], sched[admitted], warmup, end)
    growth, growing = backlog_trend(arrival[admitted], finish[admitted], warmup, end)
    out["backlog_growth"] = growth
    out["stable"] = not growing
    e2e_in_order = sel.sort_values("arrival_time")["e2e"].to_numpy()
    dropped, drifting = drift(e2e_in_order)
    out["mser_truncation"] = int(dropped)
    out["drifting"] = bool(drifting)
    return out
