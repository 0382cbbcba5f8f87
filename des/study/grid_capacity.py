"""Capacity read off a load sweep's grid: the highest offered load at which the SLOs hold
(:func:`capacities`), apart from :mod:`des.study.capacity`, which searches for it by
bisection.

From ``points.parquet`` of a sweep over ``workload.arrival.rate``: for each variant
(and burstiness), walk up the grid; the SLOs *hold* at a point when every metric's
mean over replications is within its limit and every replication was stable. Between
the last point that holds and the first that fails, the crossing is interpolated
linearly in log(metric); the 95 % interval repeats this with the upper ends of the
metrics' intervals (the load at which the SLOs surely hold) and with their lower ends
(the load at which they surely fail). When the first failure is an unstable point,
whose latencies measure the run's length rather than the system, nothing is
interpolated: the capacity is then only known to lie *between* the last point that
holds and the unstable point, a bracket of the grid (``capacity`` and
``capacity_high``; the interval's lower end is at most the first, its upper end the
second). An interval's end that the grid does not reach is left open (None): the upper
end is never pinned at the top of the grid. A study with a ``load`` grid runs every
variant past its own saturation throughput ``S`` (measured by its probe, every batch
full): points offered more than ``S`` count as failing whatever their finite run's
stability check says (a slow overload can pass it), and no crossing is interpolated
towards them, so the capacity and its interval never exceed ``S``; a load grid that
ends below ``S`` with the SLOs still holding brackets the capacity between its top load
and ``S``, which is also its interval's upper end when the SLOs do not yet surely fail.
The interval always holds the estimate. :func:`is_bracket` tells an interpolated
capacity from a bracketed one; :mod:`des.render.study` words it as what it is.

A study's SLO is per-request limits (``slo: {ttft: 2, tpot: 0.1}``, seconds); a grid's
capacity is judged on the point columns they bound (:func:`slo_metrics`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from des.study.read import CV
from des.study.spec import RATE

#: The SLOs a grid's capacity is judged by when a study names none: p99 TTFT <= 2 s, median TPOT <= 0.1 s.
DEFAULT_SLO = {"ttft_p99": 2.0, "tpot_p50": 0.1}
#: How far above a load grid's saturation ``S`` a rate is overloaded: the grid's rates are
#: ``fraction x S`` rounded to 4 significant digits, so the point at ``1.0 x S`` may sit
#: up to 0.05 % above the ``S`` read back from them.
ROUNDING = 1e-3


def _bracket_top(r: float, saturation: float) -> float:
    """The upper end of a bracket that ends at the failing load ``r``: at most ``S``."""
    return float(min(r, saturation))


def _crossing(
    g: pd.DataFrame, slo: dict[str, float], suffix: str, upper: bool = False, saturation: float = math.inf
) -> float | None:
    """Interpolated load where the first SLO metric (column + suffix) crosses its limit;
    None if it fails at the lowest load, infinity if it never fails within the grid.

    A point that fails by instability (its latencies measure how long the run lasted, not
    the system, and may still be within the limits when the run is short), or is offered
    more than the ``saturation`` throughput (overloaded by construction), is not
    interpolated towards: the crossing is at the last point that holds, or, for the
    ``upper`` end of an interval (the first load at which the SLOs surely fail), at the
    failing point, and at most at ``saturation``."""
    value, failed = _walk(g, slo, suffix, saturation)
    if value is None or value == math.inf or failed is None:
        return value
    return _bracket_top(failed, saturation) if upper else value


def _walk(
    g: pd.DataFrame, slo: dict[str, float], suffix: str, saturation: float = math.inf
) -> tuple[float | None, float | None]:
    """(crossing, failing load): the crossing of :func:`_crossing` (None: fails at the
    lowest load; infinity: never fails within the grid) and, when it could not be
    interpolated and stays at the last load that holds, the first load that failed
    (None when interpolated, or when there is no crossing)."""
    rates = g[RATE].to_numpy(float)
    ok_prev = None
    for i, r in enumerate(rates):
        row = g.iloc[i]
        overloaded = r > saturation * (1 + ROUNDING)
        vals = {m: row[m + suffix] for m in slo}
        fine = (
            not overloaded
            and bool(row["all_stable"])
            and all(v == v and v <= lim for (m, lim), v in zip(slo.items(), vals.values(), strict=True))
        )
        if fine:
            ok_prev = i
            continue
        if ok_prev is None:
            return None, None
        lo_row, r0 = g.iloc[ok_prev], rates[ok_prev]
        crossings = []
        for m, lim in slo.items():
            a, b = lo_row[m + suffix], row[m + suffix]
            if not overloaded and row["all_stable"] and b == b and b > lim and a > 0 and b > 0:
                t = (math.log(lim) - math.log(a)) / (math.log(b) - math.log(a))
                crossings.append(r0 + (r - r0) * t)
        if crossings:
            return float(min(crossings)), None
        return float(r0), float(r)
    return math.inf, None  # holds everywhere: somewhere above the grid


def saturation_of(g: pd.DataFrame) -> float:
    """The saturation throughput (req/s) a load grid's rates are fractions of; infinity
    for a grid of plain rates."""
    if "load" not in g:
        return math.inf
    return float((g[RATE] / g["load"]).median())


def capacities(points: pd.DataFrame, slo: dict[str, float] = DEFAULT_SLO, by: list[str] | None = None) -> pd.DataFrame:
    """One row per curve (``by``; default: variant and cv): capacity estimate, CI, throughput
    ceiling, and the saturation throughput of a load grid (NaN for plain rates).

    ``capacity_high`` is the estimate's upper end: the capacity itself where it was
    interpolated between two loads; where the grid only brackets it, the first load at
    which the SLOs failed (an unstable or overloaded point, at most ``S``), or ``S`` for a
    load grid whose every load held; None where it is open (every rate of a plain grid
    held) or there is no capacity. ``interpolated`` tells the two apart."""
    if RATE not in points:
        raise SystemExit(f"capacity is read off a sweep over {RATE} (a rate grid, or a load grid)")
    keys = by or ["variant"] + ([CV] if CV in points else [])
    rows = []
    for key, g in points.groupby(keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        g = g.sort_values(RATE)
        row = dict(zip(keys, key, strict=True))
        top = float(g[RATE].max())
        sat = saturation_of(g)
        (capacity, failed), low = _walk(g, slo, "", saturation=sat), _crossing(g, slo, "_hi", saturation=sat)
        high = _crossing(g, slo, "_lo", upper=True, saturation=sat)
        row["holds_everywhere"] = capacity == math.inf
        row["capacity"] = top if capacity == math.inf else capacity
        row["interpolated"] = capacity is not None and capacity != math.inf and failed is None
        if capacity is None:
            row["capacity_high"] = None
        elif capacity == math.inf:
            row["capacity_high"] = sat if sat < math.inf else None  # S ends a load grid; a rate grid is open
        else:
            row["capacity_high"] = capacity if failed is None else _bracket_top(failed, sat)
        row["ci_low"] = top if low == math.inf else low
        row["ci_high"] = None if high == math.inf else high  # open: the grid ends before they surely fail
        if row["capacity"] is not None:  # the interval holds the estimate (a failure of stability alone
            if row["ci_low"] is not None:  # is not interpolated, a metric's bound beyond its limit is)
                row["ci_low"] = min(row["ci_low"], row["capacity"])
            if row["ci_high"] is not None:
                row["ci_high"] = max(row["ci_high"], row["capacity_high"] or row["capacity"])
        row["lowest_rate"] = float(g[RATE].min())
        first = g.iloc[0]
        row.update({f"at_lowest_{m}": float(first[m]) for m in slo})
        row["max_throughput"] = float(g["throughput_rps"].max())
        row["saturation"] = sat if sat < math.inf else math.nan
        if high == math.inf and sat < math.inf:  # a load grid that ends below S: S bounds it from above
            row["ci_high"] = max(sat, row["capacity"])
        rows.append(row)
    return pd.DataFrame(rows)


def is_bracket(row: Mapping[str, Any]) -> bool:
    """Whether a :func:`capacities` row's capacity is only bracketed by the grid: known to
    lie between ``capacity`` (a load that held) and ``capacity_high`` (one that failed, or
    ``S``) or above ``capacity`` (open), no load between them simulated."""
    cap = row.get("capacity")
    if cap is None or cap != cap:
        return False
    if "interpolated" in row:
        return not bool(row["interpolated"])
    return bool(row.get("holds_everywhere", False))  # a table from before the column: only "≥" was known


def middle(row: Mapping[str, Any]) -> float:
    """One number for a capacity, to rank or divide by: the estimate, or the middle of the
    bracket the grid puts it in (the lower end when open above); NaN without one."""
    cap = row.get("capacity")
    if cap is None or cap != cap:
        return math.nan
    high = row.get("capacity_high")
    if is_bracket(row) and high is not None and high == high:
        return (float(cap) + float(high)) / 2
    return float(cap)


#: The statistic of each latency that the report's SLOs bound (as :data:`DEFAULT_SLO`
#: reads a study's per-request limits ``slo: {ttft, tpot}``): the p99 of the time to first
#: token, the median of the time per output token.
SLO_STATISTIC = {"ttft": "p99", "tpot": "p50", "e2e": "p99"}


def slo_metrics(slo: Mapping[str, float] | None) -> dict[str, float]:
    """A study's SLO limits (``{ttft: 2, tpot: 0.1}``, seconds) as the columns they bound:
    ``{"ttft_p99": 2, "tpot_p50": 0.1}`` (:data:`SLO_STATISTIC`)."""
    return {f"{m}_{SLO_STATISTIC[m]}": float(v) for m, v in (slo or {}).items() if m in SLO_STATISTIC and v}
