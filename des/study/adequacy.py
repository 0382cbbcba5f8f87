"""Are a run's warm-up and horizon long enough to judge it by?

A run starts empty. Until the requests in it reach their steady number, its backlog
rises, and the stability check (:mod:`des.metrics.stability`) cannot tell that rise
from overload: the review's nine L40S at 50 req/s, 120 s with 20 s of warm-up, were
"unstable" (backlog growth 0.055 against the limit 0.05) while the system was still
filling with long answers; at 600 s with 100 s of warm-up they are stable. Two checks
say when a run is too short to judge:

- **the fill-up left** (``fill``): a system of ample servers starting empty holds, at
  time ``t``, ``λ ∫_0^t P(S > u) du`` requests, ``S`` the time a request is served
  (``e2e - queue_delay``: what overload does not stretch). Over the arrival window
  ``[W, A]`` its backlog therefore still rises by ``(E[(S − W)+] − E[(S − A)+]) / (A − W)``
  of the window's arrivals, estimated from the measured requests: the share of arrivals
  by which the backlog would rise without any overload, in the unit of
  ``backlog_growth``. It is short when that share passes :data:`FILL_LIMIT` (a fifth of
  the stability limit). Batching and queueing make a real system fill more slowly than
  this, so it is a lower bound of the transient. (Not for closed-loop users, whose
  number in the system is fixed.)
- **MSER-5** (the summary's ``mser_truncation`` and ``drifting``,
  :mod:`des.metrics.steady`): it finds the latencies never settle, or it would drop
  more than :data:`MSER_SHARE` of the measured requests as warm-up *and* dropping them
  moves the measured requests' mean ``e2e`` by more than :data:`BIAS_LIMIT`. (On a few
  hundred requests, or on latencies that swing widely at any time, MSER-5 often
  truncates a few per cent of them to no effect on the mean; that is no short warm-up.)

A run that is unstable although its queue did not grow against its level, with a
backlog growth within the limit plus twice its fill-up (:data:`FILL_SLACK`), is unstable
*perhaps only because it is filling*: :func:`Adequacy.explains`. ``des capacity`` then runs the value again with
horizon and warm-up doubled (up to :data:`MAX_EXTENSIONS` times) and, if the runs are
still too short, does not count that instability as a sure failure; ``des sweep`` marks
the point "unsure" and says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from des.metrics.stability import GROWTH_LIMIT, LEVEL_LIMIT, judged_unstable

#: The fill-up left (share of the window's arrivals) above which a warm-up or horizon is short.
FILL_LIMIT = 0.2 * GROWTH_LIMIT
#: How many times its ample-server fill-up a start-up may raise a run's backlog growth:
#: batching, queueing and a short window's noise make a real system's rise larger than
#: the estimate (the review's nine L40S: fill-up 0.025, growth 0.055).
FILL_SLACK = 2.0
#: The share of measured requests MSER-5 may drop, and how far (relatively) dropping them
#: may move their mean e2e, before the warm-up is called short.
MSER_SHARE = 0.05
BIAS_LIMIT = 0.05
#: How many times ``des capacity`` doubles a value's horizon and warm-up, at most.
MAX_EXTENSIONS = 2


@dataclass(frozen=True)
class Adequacy:
    """One run's warm-up and horizon checks (see the module).

    ``unstable``: the run was judged unstable; ``transient``: an instability its start-up
    may explain (:meth:`explains`). A run unstable for another reason is overloaded, and
    latencies that never settle say so rather than that its warm-up was short.
    """

    fill: float | None
    mser_share: float
    drifting: bool
    stay_p99: float | None = None
    mser_bias: float = 0.0
    unstable: bool = False
    transient: bool = False

    @property
    def mser_short(self) -> bool:
        return self.mser_share > MSER_SHARE and abs(self.mser_bias) > BIAS_LIMIT

    @property
    def flagged(self) -> bool:
        """Some check fails, whatever the run's stability."""
        return (self.fill is not None and self.fill > FILL_LIMIT) or self.mser_short or self.drifting

    @property
    def short(self) -> bool:
        """Too short to judge by: a check fails and the run is not plainly overloaded."""
        return self.flagged and (not self.unstable or self.transient)

    def explains(self, summary: Mapping[str, Any]) -> bool:
        """Whether this run's instability may be its start-up transient, not overload."""
        return self.transient


def _transient(summary: Mapping[str, Any], fill: float | None) -> bool:
    """An unstable run whose queue did not grow against its level, and whose backlog grew
    within the limit plus :data:`FILL_SLACK` times its fill-up."""
    level = summary.get("backlog_growth_of_level") or 0.0
    growth = summary.get("backlog_growth") or 0.0
    return level <= LEVEL_LIMIT and growth <= GROWTH_LIMIT + FILL_SLACK * (fill or 0.0)


def check(summary: Mapping[str, Any], requests: pd.DataFrame, closed: bool = False) -> Adequacy:
    """The checks of one run from its summary and its measured ``requests`` (``e2e`` and
    ``queue_delay`` in seconds, in arrival order: the run's ``latencies.parquet``)."""
    e2e = requests["e2e"].to_numpy(float)
    served = e2e - requests["queue_delay"].to_numpy(float)
    served = served[np.isfinite(served)]
    start, end = summary.get("arrival_window_start"), summary.get("arrival_window_end")
    fill = None
    if not closed and served.size and start is not None and end is not None and end > start:
        left = np.maximum(served - start, 0.0).mean() - np.maximum(served - end, 0.0).mean()
        fill = float(left / (end - start))
    measured = summary.get("num_measured") or 0
    dropped = int(summary.get("mser_truncation") or 0)
    share = dropped / measured if measured else 0.0
    bias = 0.0
    finite = e2e[np.isfinite(e2e)]
    if 0 < dropped < finite.size and finite.mean() > 0:
        bias = float(finite[dropped:].mean() / finite.mean() - 1)
    p99 = float(np.percentile(served, 99)) if served.size else None
    unstable = judged_unstable(summary)  # False, not None (a schedule's run) or NaN
    checked = Adequacy(fill, float(share), bool(summary.get("drifting")), p99, bias, unstable)
    if unstable and checked.flagged and _transient(summary, fill):
        checked = Adequacy(fill, float(share), checked.drifting, p99, bias, True, True)
    return checked


def is_closed(scenario: Mapping[str, Any]) -> bool:
    return bool(scenario.get("workload", {}).get("arrival", {}).get("process") == "closed")


def describe(checks: Sequence[Adequacy], summaries: Sequence[Mapping[str, Any]]) -> str:
    """What is short, in words ("" when nothing is): how many replications, and why."""
    short = [c for c in checks if c.short]
    if not short:
        return ""
    fills = [c for c in short if c.fill is not None and c.fill > FILL_LIMIT]
    why = []
    if fills:
        start, end = summaries[0].get("arrival_window_start"), summaries[0].get("arrival_window_end")
        stay = max(c.stay_p99 or 0.0 for c in fills)
        fill = max(c.fill or 0.0 for c in fills)
        why.append(
            f"requests take up to {stay:.3g} s (p99) to serve, so a run starting empty is still filling after "
            f"a warm-up of {start:g} s: over the window [{start:g}, {end:g}] s its backlog would rise by "
            f"{fill:.2g} of arrivals without any overload (limit {FILL_LIMIT:g})"
        )
    mser = [c for c in short if c.mser_short]
    if mser:
        worst = max(mser, key=lambda c: abs(c.mser_bias))
        why.append(
            f"MSER-5 would drop {100 * worst.mser_share:.0f} % of the measured requests as warm-up, "
            f"moving their mean e2e by {100 * worst.mser_bias:+.0f} %"
        )
    if any(c.drifting for c in short):
        why.append("the latencies never settle (MSER-5)")
    return f"warm-up or horizon short in {len(short)} of {len(checks)} replications: {'; '.join(why)}"


def extended(scenario: Mapping[str, Any], scale: int) -> list[tuple[str, Any]]:
    """The settings that lengthen ``scenario``'s run ``scale`` times (its horizon, in
    seconds or requests, and its warm-up); none when it cannot be lengthened (a trace
    replay ends with its trace)."""
    if scale == 1 or scenario["workload"]["arrival"]["process"] == "trace":
        return []
    horizon = scenario["horizon"]
    out: list[tuple[str, Any]] = []
    if horizon.get("duration") is not None:
        out.append(("horizon.duration", float(horizon["duration"]) * scale))
    if horizon.get("num_requests") is not None:
        out.append(("horizon.num_requests", int(horizon["num_requests"]) * scale))
    if not out:
        return []
    return [*out, ("warmup", float(scenario.get("warmup") or 0.0) * scale)]
