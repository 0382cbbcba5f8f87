"""Is a run's measured part in steady state? MSER-5 on the requests' latencies.

MSER-5 (White, 1997) picks the truncation point ``d`` of an output series that
minimises the squared standard error of the mean of what is left: the series is cut
into batch means of 5 consecutive values ``m_1..m_k``, and
``d* = argmin_d  sum_{i > d} (m_i - mean(m_{>d}))^2 / (k - d)^2`` over ``d <= k/2``.
Applied to the end-to-end latencies of the measured requests in arrival order, ``d* > 0``
says the first ``5 d*`` of them still carried the initial transient (the scenario's
``warmup`` was too short); a ``d*`` at the edge of the search (the last 10 % of it)
says the series never settles within the run: it is still drifting.
"""

from __future__ import annotations

import math

import numpy as np

BATCH = 5


def mser5(series: np.ndarray) -> int:
    """MSER-5 truncation point, as a number of values to drop from the front."""
    k = len(series) // BATCH
    if k < 4:
        return 0
    m = series[: k * BATCH].reshape(k, BATCH).mean(axis=1)
    top = float(np.max(np.abs(m)))
    if top > 1e150:  # squares would overflow: rescale by a power of 2 (exact), which moves no argmin
        m = m / 2.0 ** math.frexp(top)[1]
    # suffix sums give every tail's mean and sum of squares in O(k)
    rev = m[::-1]
    n = np.arange(1, k + 1, dtype=float)
    s1 = np.cumsum(rev)[::-1]
    s2 = np.cumsum(rev**2)[::-1]
    count = n[::-1]
    sse = s2 - s1**2 / count
    stat = sse / count**2
    half = k // 2
    return int(np.argmin(stat[: half + 1])) * BATCH


def drift(series: np.ndarray) -> tuple[int, bool]:
    """(values MSER-5 would drop, whether the series is still drifting)."""
    k = len(series) // BATCH
    d = mser5(series)
    if k < 4:
        return d, False
    return d, d >= 0.9 * (k // 2) * BATCH
