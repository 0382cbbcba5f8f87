"""Did the backlog grow through the run? The rule behind the summary's ``stable``.

The backlog ``B(t)`` is the number of admitted requests that have arrived by ``t`` and
not yet finished. Over the measurement window ``[warmup, end]`` we sample it at 50
equally spaced instants and fit a least-squares line. Its rise over the window,
divided by the number of arrivals in the window, is ``backlog_growth``: about 0 for a
stable system (the backlog fluctuates around a level) and ``1 - capacity / load`` for
an overloaded one (a fixed share of arrivals piles up). The run is called unstable
when ``backlog_growth > 0.05``: more than 5 % of the offered requests accumulated.
"""

from __future__ import annotations

import numpy as np

GROWTH_LIMIT = 0.05
SAMPLES = 50


def backlog_growth(arrival: np.ndarray, finish: np.ndarray, start: float, end: float) -> float:
    """Fitted backlog rise over ``[start, end]`` per request arrived in it.

    ``arrival`` and ``finish`` are the admitted requests' times (``finish`` NaN or inf
    when unfinished). Returns 0 when the window is empty.
    """
    if not end > start:
        return 0.0
    arrivals_sorted = np.sort(arrival)
    done = np.sort(np.where(np.isfinite(finish), finish, np.inf))
    t = np.linspace(start, end, SAMPLES)
    backlog = np.searchsorted(arrivals_sorted, t, side="right") - np.searchsorted(done, t, side="right")
    n_window = np.searchsorted(arrivals_sorted, end, side="right") - np.searchsorted(arrivals_sorted, start, side="left")
    if n_window == 0:
        return 0.0
    slope = np.polyfit(t, backlog.astype(float), 1)[0]
    return float(slope * (end - start) / n_window)


def is_stable(growth: float) -> bool:
    return growth <= GROWTH_LIMIT
