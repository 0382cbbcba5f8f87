"""Did the backlog grow through the run? The rule behind the summary's ``stable``.

The backlog ``B(t)`` is the number of admitted requests that have arrived by ``t`` and
not yet finished; the waiting queue ``Q(t)`` those of them not in the batch of a step
running at ``t``: waiting to be scheduled, preempted, or between a split's pools (queued
for the decode pool's blocks, in transfer, waiting for a decode slot). Over the arrival
window ``[warmup, end]`` we sample both at the middles of 50 equal slices and fit a
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
  growing is what overload is. Counting every request outside a running batch, not
  only those never scheduled, catches a split whose decode pool is the one overloaded.

The run is called unstable when either growth is material — more than 5 % of the
arrivals, or more than half the backlog's level — and larger than its series' own
fluctuations, three standard deviations of the samples around the line, so that a
short, quiet or bursty run is not condemned by a handful of requests.

:func:`queue_share` gives the queue's mean over the backlog's at the same instants. What
the verdict does not say by itself (a closed loop cannot grow; which pool of a split
is the overloaded one) is in :mod:`des.metrics.verdict`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from numpy.exceptions import RankWarning

GROWTH_LIMIT = 0.05
LEVEL_LIMIT = 0.5
NOISE_SDS = 3.0
SAMPLES = 50


def judged_unstable(summary: Mapping[str, Any]) -> bool:
    """Whether a run's summary says it was unstable: ``stable`` False. None (the rule does
    not apply: a run whose arrival rate follows a schedule has no single steady state,
    :func:`des.metrics.verdict.stationarity`) and NaN (a table's missing value) are not
    an instability, and count as no verdict wherever runs are judged."""
    stable = summary.get("stable")
    return stable is not None and stable == stable and not bool(stable)


def _level(times: np.ndarray, t: np.ndarray) -> np.ndarray:
    """How many of the sorted ``times`` are <= each instant of ``t``."""
    return np.searchsorted(times, t, side="right").astype(float)


def _trend(t: np.ndarray, series: np.ndarray) -> tuple[float, float]:
    """(rise of the least-squares line over ``t``, standard deviation around it).

    ``np.polyfit`` on the instants themselves, unless it would warn (instants near 1e300 s
    overflow its squares; instants the clock no longer tells apart make it rank-deficient):
    then the same line is fitted against the instants' positions in the window, which its
    rise and scatter do not depend on, in closed form.
    """
    try:
        with warnings.catch_warnings(), np.errstate(over="raise", divide="raise", invalid="raise"):
            warnings.simplefilter("error", RankWarning)
            slope, intercept = np.polyfit(t, series, 1)
            return float(slope * (t[-1] - t[0])), float(np.std(series - (slope * t + intercept)))
    except (RankWarning, FloatingPointError, np.linalg.LinAlgError):
        pass
    span = t[-1] - t[0]
    x = (t - t[0]) / span if span > 0 else np.zeros_like(t)
    dx, dy = x - x.mean(), series - series.mean()
    sxx = float(np.dot(dx, dx))
    slope = float(np.dot(dx, dy)) / sxx if sxx > 0 else 0.0
    return slope * float(x[-1] - x[0]), float(np.std(dy - slope * dx))


def _instants(start: float, end: float) -> np.ndarray:
    """The middles of the :data:`SAMPLES` equal slices of ``[start, end]``."""
    return start + (np.arange(SAMPLES) + 0.5) * (end - start) / SAMPLES


def unresolved(start: float, end: float) -> bool:
    """Whether the clock cannot tell the sampling instants of ``[start, end]`` apart (doubles
    near 1e16 s are 2 s apart): the backlog is then sampled at fewer instants than meant,
    and the trend fitted to it is unreliable."""
    return end > start and not bool(np.all(np.diff(_instants(start, end)) > 0))


Serving = Callable[[np.ndarray], np.ndarray]


def serving_from_steps(instance: np.ndarray, start: np.ndarray, duration: np.ndarray, batch: np.ndarray) -> Serving:
    """Requests in service at each instant: the batch sizes of the steps running then
    (the steps' ``instance``, ``start`` and ``duration`` in seconds, ``batch`` size)."""
    per_instance = []
    for i in np.unique(instance):
        mine = instance == i
        order = np.argsort(start[mine], kind="stable")
        s0 = start[mine][order]
        per_instance.append((s0, s0 + duration[mine][order], batch[mine][order]))

    def serving(t: np.ndarray) -> np.ndarray:
        total = np.zeros(len(t))
        for s0, e0, b in per_instance:
            k = np.searchsorted(s0, t, side="right") - 1  # the last step begun by t
            on = (k >= 0) & (e0[np.maximum(k, 0)] > t)
            total += np.where(on, b[np.maximum(k, 0)], 0)
        return total

    return serving


def _series(
    arrival: np.ndarray, finish: np.ndarray, serving: Serving, t: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the sorted arrivals, the backlog and the waiting queue at the instants ``t``)."""
    arrived = np.sort(arrival)
    backlog = _level(arrived, t) - _level(np.sort(np.where(np.isfinite(finish), finish, np.inf)), t)
    return arrived, backlog, backlog - serving(t)


def backlog_trend(
    arrival: np.ndarray, finish: np.ndarray, serving: Serving, start: float, end: float
) -> tuple[float, float, bool]:
    """(backlog growth per request arrived in ``[start, end]``, the waiting queue's growth
    as a share of the backlog's mean level, whether either growth is material).

    ``arrival`` and ``finish`` are the admitted requests' times (NaN when it did not
    happen); ``serving(t)`` counts the requests in service at instants ``t``. An empty
    window gives (0, 0, False).
    """
    if not end > start:
        return 0.0, 0.0, False
    t = _instants(start, end)
    arrived, backlog, queue = _series(arrival, finish, serving, t)
    n_window = np.searchsorted(arrived, end, side="right") - np.searchsorted(arrived, start, side="left")
    if n_window == 0:
        return 0.0, 0.0, False
    rise, noise = _trend(t, backlog)
    q_rise, q_noise = _trend(t, queue)
    growth = rise / n_window
    of_level = q_rise / max(float(backlog.mean()), 1.0)
    piling = growth > GROWTH_LIMIT and rise > NOISE_SDS * noise
    queueing = of_level > LEVEL_LIMIT and q_rise > NOISE_SDS * q_noise
    return growth, of_level, bool(piling or queueing)


def queue_share(arrival: np.ndarray, finish: np.ndarray, serving: Serving, start: float, end: float) -> float | None:
    """The waiting queue's mean over the backlog's, at the instants the trend is sampled at:
    the share of the requests in the system that wait outside a running batch (arguments as
    for :func:`backlog_trend`). None for an empty window or one the backlog never enters."""
    if not end > start:
        return None
    _, backlog, queue = _series(arrival, finish, serving, _instants(start, end))
    total = float(backlog.sum())
    return float(queue.sum()) / total if total > 0 else None
