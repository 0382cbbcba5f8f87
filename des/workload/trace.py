"""What a trace replay measures: its rate and burstiness, the figures to fit a synthetic
arrival process to.

The readers of each trace format (des's own CSV and JSONL, Mooncake, Azure, BurstGPT,
``vllm bench serve`` results) live in :mod:`des.workload.formats`;
:class:`des.workload.arrivals.Trace` replays what they read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TraceStats:
    """Arrivals of a replay: ``requests`` over ``span`` seconds (first to last), their mean
    ``rate`` (gaps per second, ``(requests - 1) / span``) and ``cv``, the coefficient of
    variation of the gaps (1 for Poisson, above 1 bursty); None where undefined."""

    requests: int
    span: float
    rate: float | None
    cv: float | None


def trace_stats(times: np.ndarray) -> TraceStats:
    """:class:`TraceStats` of sorted arrival times (seconds)."""
    gaps = np.diff(times)
    span = float(times[-1] - times[0]) if len(times) else 0.0
    rate = (len(gaps) / span) if span > 0 else None
    mean = float(gaps.mean()) if len(gaps) else 0.0
    cv = float(gaps.std() / mean) if len(gaps) > 1 and mean > 0 else None
    return TraceStats(int(len(times)), span, rate, cv if cv is None or math.isfinite(cv) else None)
