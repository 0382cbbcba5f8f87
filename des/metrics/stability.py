"""Did the backlog grow through the run? The rule behind the summary's ``stable``.

The backlog ``B(t)`` is the number of admitted requests that have arrived by ``t`` and
not yet finished. Over the arrival window ``[warmup, end]`` we sample it at 50 equally
spaced instants and fit a least-squares line. Its rise over the window is measured two
ways:

- ``backlog_growth``, the rise divided by the requests that arrived in the window:
  about 0 for a stable system (the backlog fluctuates around a level) and
  ``1 - capacity / load`` for an overloaded one (a fixed share of arrivals piles up);
- ``backlog_growth_of_level``, the rise divided by the backlog's mean level: a queue
  that doubles over the window scores 2/3 whatever the arrivals. A system just past
  capacity piles up only a few per cent of a long run's arrivals, yet its queue (and
  every latency) keeps growing; this measure catches it.

The run is called unstable when the rise is material by either measure — more than
5 % of the arrivals, or more than half the backlog's level — and larger than the
backlog's own fluctuations, three standard deviations of the samples around the line,
so that a short, quiet or bursty run is not condemned by a handful of requests.
"""

from __future__ import annotations

import numpy as np

GROWTH_LIMIT = 0.05
LEVEL_LIMIT = 0.5
NOISE_SDS = 3.0
SAMPLES = 50


def backlog_trend(arrival: np.ndarray, finish: np.ndarray, start: float, end: float) -> tuple[float, float, bool]:
    """(backlog growth per request arrived in ``[start, end]``, growth as a share of the
    backlog's mean level, whether the growth is material).

    ``arrival`` and ``finish`` are the admitted requests' times (``finish`` NaN when
    unfinished). An empty window gives (0, 0, False).
    """
    if not end > start:
        return 0.0, 0.0, False
    arrivals_sorted = np.sort(arrival)
    done = np.sort(np.where(np.isfinite(finish), finish, np.inf))
    t = np.linspace(start, end, SAMPLES)
    backlog = (np.searchsorted(arrivals_sorted, t, side="right") - np.searchsorted(done, t, side="right")).astype(float)
    n_window = np.searchsorted(arrivals_sorted, end, side="right") - np.searchsorted(
        arrivals_sorted, start, side="left"
    )
    if n_window == 0:
        return 0.0, 0.0, False
    slope, intercept = np.polyfit(t, backlog, 1)
    rise = slope * (end - start)
    noise = float(np.std(backlog - (slope * t + intercept)))
    growth = float(rise / n_window)
    of_level = float(rise / max(backlog.mean(), 1.0))
    material = growth > GROWTH_LIMIT or of_level > LEVEL_LIMIT
    return growth, of_level, bool(material and rise > NOISE_SDS * noise)
