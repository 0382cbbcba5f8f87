"""Did the backlog grow through the run? The rule behind the summary's ``stable``.

The backlog ``B(t)`` is the number of admitted requests that have arrived by ``t`` and
not yet finished; the waiting queue ``Q(t)`` those not yet scheduled. Over the arrival
window ``[warmup, end]`` we sample both at 50 equally spaced instants and fit a
least-squares line to each. Two measures of growth come out:

- ``backlog_growth``, the backlog's rise divided by the requests that arrived in the
  window: about 0 for a stable system (the backlog fluctuates around a level) and
  ``1 - capacity / load`` for an overloaded one (a fixed share of arrivals piles up);
- ``backlog_growth_of_level``, the waiting queue's rise divided by the backlog's mean
  level. A system just past capacity piles up only a few per cent of a long run's
  arrivals, yet its queue (and every latency) keeps growing against everything in the
  system: this measure catches it. It looks at the queue, not the whole backlog,
  because the running batch follows the arrivals' own swings (bursty traffic on a
  large cluster moves it by half its level within minutes) while a queue that keeps
  growing is what overload is.

The run is called unstable when either growth is material — more than 5 % of the
arrivals, or more than half the backlog's level — and larger than its series' own
fluctuations, three standard deviations of the samples around the line, so that a
short, quiet or bursty run is not condemned by a handful of requests.
"""

from __future__ import annotations

import numpy as np

GROWTH_LIMIT = 0.05
LEVEL_LIMIT = 0.5
NOISE_SDS = 3.0
SAMPLES = 50


def _level(times: np.ndarray, t: np.ndarray) -> np.ndarray:
    """How many of the sorted ``times`` are <= each instant of ``t``."""
    return np.searchsorted(times, t, side="right").astype(float)


def _trend(t: np.ndarray, series: np.ndarray) -> tuple[float, float]:
    """(rise of the least-squares line over ``t``, standard deviation around it)."""
    slope, intercept = np.polyfit(t, series, 1)
    return float(slope * (t[-1] - t[0])), float(np.std(series - (slope * t + intercept)))


def backlog_trend(
    arrival: np.ndarray, scheduled: np.ndarray, finish: np.ndarray, start: float, end: float
) -> tuple[float, float, bool]:
    """(backlog growth per request arrived in ``[start, end]``, the waiting queue's growth
    as a share of the backlog's mean level, whether either growth is material).

    ``arrival``, ``scheduled`` and ``finish`` are the admitted requests' times (NaN when
    it did not happen). An empty window gives (0, 0, False).
    """
    if not end > start:
        return 0.0, 0.0, False
    arrived = np.sort(arrival)
    t = np.linspace(start, end, SAMPLES)
    n_window = np.searchsorted(arrived, end, side="right") - np.searchsorted(arrived, start, side="left")
    if n_window == 0:
        return 0.0, 0.0, False
    came = _level(arrived, t)
    backlog = came - _level(np.sort(np.where(np.isfinite(finish), finish, np.inf)), t)
    queue = came - _level(np.sort(np.where(np.isfinite(scheduled), scheduled, np.inf)), t)
    rise, noise = _trend(t, backlog)
    q_rise, q_noise = _trend(t, queue)
    growth = rise / n_window
    of_level = q_rise / max(float(backlog.mean()), 1.0)
    piling = growth > GROWTH_LIMIT and rise > NOISE_SDS * noise
    queueing = of_level > LEVEL_LIMIT and q_rise > NOISE_SDS * q_noise
    return growth, of_level, bool(piling or queueing)
