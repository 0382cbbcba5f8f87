"""Inter-token latency and the second token's latency, from the runs' gap logs.

``itl_{mean,p50,p90,p95,p99}`` (seconds): every gap between consecutive tokens a client
receives (one per step a request emits in, after its first token: :mod:`des.engine.itl`),
over the gaps that ended in the measurement window ``[warmup, end]``; percentiles of the
weighted gaps by the inverse of their distribution (the smallest gap with at least that
share of gaps at or below it). ``second_token_{mean,p50,p90,p95,p99}`` (seconds): the measured
requests' time from their first token to their second, the gap that holds a
disaggregated request's KV transfer. None where there is none.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from des.engine.itl import ItlLog
from des.metrics._window import finite
from des.metrics.summary import PERCENTILES

#: The statistics of each, as of the other latencies (:data:`des.metrics.summary.PERCENTILES`).
ITL_STATS = SECOND_STATS = ("mean", "p50", "p90", "p95", "p99")


def weighted_percentiles(values: np.ndarray, weights: np.ndarray, qs: Iterable[float]) -> list[float]:
    """The smallest value with at least ``q`` percent of the weight at or below it, for each ``q``."""
    order = np.argsort(values, kind="stable")
    v, cum = values[order], np.cumsum(weights[order])
    total = cum[-1]
    return [float(v[min(int(np.searchsorted(cum, q / 100 * total, side="left")), len(v) - 1)]) for q in qs]


def itl_metrics(logs: Iterable[ItlLog], warmup: float, end: float) -> dict[str, Any]:
    """``itl_*`` over the gaps of every instance's log that ended in ``[warmup, end]``."""
    parts = []
    for g in logs:
        if len(g):
            parts.append(g.ordinary())
            if g.time:
                parts.append((np.frombuffer(g.time), np.frombuffer(g.gap), np.ones(len(g.time), dtype=np.int64)))
    out: dict[str, Any] = {f"itl_{s}": None for s in ITL_STATS}
    if not parts:
        return out
    time, gap, weight = (np.concatenate(x) for x in zip(*parts, strict=True))
    sel = (time >= warmup) & (time <= end) & (weight > 0)
    if not sel.any():
        return out
    gap, weight = gap[sel], weight[sel].astype(float)
    out["itl_mean"] = finite(float((gap * weight).sum() / weight.sum()))
    for q, value in zip(PERCENTILES, weighted_percentiles(gap, weight, PERCENTILES), strict=True):
        out[f"itl_p{q}"] = finite(value)
    return out


def second_token_metrics(measured: pd.DataFrame) -> dict[str, Any]:
    """``second_token_*`` over the measured requests that received a second token."""
    gap = (measured["second_token_time"] - measured["first_token_time"]).to_numpy()
    gap = gap[np.isfinite(gap)]
    if gap.size == 0:
        return {f"second_token_{s}": None for s in SECOND_STATS}
    out = {"second_token_mean": finite(float(gap.mean()))}
    for q, value in zip(PERCENTILES, np.percentile(gap, PERCENTILES), strict=True):
        out[f"second_token_p{q}"] = finite(float(value))
    return out
