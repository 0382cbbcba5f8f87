"""What ``stable`` cannot say by itself: a closed loop's saturation, and which pool of a split is overloaded.

``stable`` answers one question, did the backlog grow (:mod:`des.metrics.stability`).
Two kinds of run answer it in a way that misleads when read as "healthy":

- A *closed loop* (``process: closed``): its users wait for each answer before sending
  the next, so the backlog never exceeds their number and cannot grow, however long
  requests wait: ``stable`` holds by construction. ``closed_loop`` says the run is one;
  ``saturated`` says whether its users mostly wait: more than half of the requests in
  the system waiting outside a running batch (``waiting_share``). Beyond saturation
  throughput is flat and every added user only lengthens the wait. Judge such a run
  against its SLO (``slo_attainment``), not by ``stable``. ``saturated`` is False for
  open arrivals, whose overload is what ``stable`` catches.
- A *split* (disaggregated prefill and decode): the decode pool's full cache stalls the
  KV links, whose transfers hold prefill blocks, which stalls prefill admission. An
  overloaded decode pool therefore shows as a growing *prefill* queue (TTFT and queue
  delay), with the decode pool's own population capped. ``decode_overloaded`` and
  ``prefill_overloaded`` name the pool the backlog grew behind, for an unstable split
  (or a saturated closed-loop one): the decode pool when it held requests back (its
  blocks or its batch full) for at least half the arrival window
  (``decode_full_share``, :mod:`des.metrics.pools`), else the prefill pool. Both are
  False for a stable open split and for colocated serving (booleans rather than a
  pool's name or None, so that a study's tables keep them out of the per-point means).
  A stable split's decode pool can still be often full: its transfers then wait for
  blocks (or its transferred requests for a slot), and the wait lands in the first
  decode gap (TPOT), not in the backlog.

``waiting_share`` (every run with arrivals in its window): the share of the admitted
requests in the system that wait outside a running batch (never scheduled, preempted,
between a split's pools, or transferred and waiting for a decode slot), the mean of the
waiting queue over the mean backlog at the instants the stability check samples them.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from des.metrics._window import finite
from des.metrics.stability import queue_share, serving_from_steps
from des.workload.arrivals import scheduled

#: A closed loop is saturated when its requests spend more than this share of their time waiting.
SATURATED_WAITING = 0.5
#: An unstable split's decode pool is the overloaded one when it held requests back this share of the window.
DECODE_FULL = 0.5
#: A stable split's printed verdict notes a decode pool full this share of the window (light load: a few per cent).
DECODE_FULL_NOTE = 0.1


def waiting_share(requests: pd.DataFrame, steps: pd.DataFrame, start: float, end: float) -> float | None:
    """The share of the admitted requests in the system over the arrival window ``[start, end]``
    that wait outside a running batch (:func:`~des.metrics.stability.queue_share`)."""
    admitted = (requests["status"] != "rejected").to_numpy()
    serving = serving_from_steps(
        steps["instance"].to_numpy(), steps["start"].to_numpy(), steps["duration"].to_numpy(),
        steps["batch_size"].to_numpy(),
    )  # fmt: skip
    share = queue_share(
        requests["arrival_time"].to_numpy()[admitted], requests["finish_time"].to_numpy()[admitted], serving, start, end
    )
    return None if share is None else finite(share)


def verdict_notes(
    summary: dict[str, Any], requests: pd.DataFrame, steps: pd.DataFrame, closed: bool, split: bool
) -> dict[str, Any]:
    """``closed_loop``, ``waiting_share``, ``saturated``, ``prefill_overloaded`` and
    ``decode_overloaded`` of a run whose ``summary`` already holds its arrival window,
    ``stable`` and ``decode_full_share``."""
    share = waiting_share(requests, steps, summary["arrival_window_start"], summary["arrival_window_end"])
    saturated = closed and share is not None and share > SATURATED_WAITING
    overloaded = split and (summary["stable"] is False or saturated)
    full = summary.get("decode_full_share")
    decode = overloaded and full is not None and full >= DECODE_FULL
    return {
        "closed_loop": closed,
        "waiting_share": share,
        "saturated": saturated,
        "prefill_overloaded": overloaded and not decode,
        "decode_overloaded": decode,
    }


def stationarity(summary: dict[str, Any], windows: pd.DataFrame, arrival: Any) -> dict[str, Any]:
    """``stationary`` (False when the arrival rate follows a schedule: the run has no single
    steady state, ``stable`` is then None and the windows say how each stretch went),
    ``windows``, ``windows_breached`` (windows whose requests missed ``slo.attainment``; None
    without SLOs) and ``first_breach_time`` (the start of the first, seconds; None: none)."""
    met = windows["slo_met"]
    judged = met.notna()
    breached = judged & (met == False)  # noqa: E712 (a column of True, False and None)
    first = windows.loc[breached, "start"]
    out: dict[str, Any] = {
        "stationary": not scheduled(arrival),
        "windows": int(len(windows)),
        "windows_breached": int(breached.sum()) if judged.any() else None,
        "first_breach_time": float(first.iloc[0]) if len(first) else None,
    }
    if not out["stationary"]:
        out["stable"] = None
    return out
