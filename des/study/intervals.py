"""95 % intervals of a design point's metrics, and the method behind each.

A point's replications give one value of each summary metric per run. An interval over
those values alone rests on as many numbers as there are replications: three values of
a p99 put the log-scale (Cox) interval's lower end far below anything a run can produce
(``tpot_p99 0.027 [0.00968, 0.0791]`` under a 16 ms decode floor). The latency metrics
(``{ttft,tpot,e2e,queue_delay}_{mean,p50,p90,p95,p99}``) are therefore estimated from
the measured requests themselves (each run's ``latencies.parquet``, in arrival order):

- **batch means** (:func:`batch_interval`): each replication's requests are cut into
  ``b`` consecutive batches, ``b = MAX_BATCHES // R`` (8 batches in all for 1, 2 or 4
  replications, 6 for 3, one per replication from 5 on) and fewer when a batch would
  hold under :data:`MIN_BATCH` requests. A mean gets the interval of
  :func:`interval` over the batches' means (positive and skewed:
  the modified Cox interval, ``K - 1`` degrees of freedom for ``K`` batches). A
  percentile ``q`` is the pooled requests' percentile ``x_q``; each batch gives the
  share of its requests at or below ``x_q``, their Student-t interval ``q ± d`` is
  inverted through the pooled requests' distribution: ``[x_(q-d), x_(q+d)]``, two
  measured latencies, so the interval never leaves what the runs produced. When the
  batches are too few requests to bound a tail percentile from above (``q + d`` past
  the largest request), the upper end is the replications' own interval (Cox over
  their percentiles) or the largest latency measured, whichever is higher. Batches of
  one run are correlated where requests queue behind each other; few, long batches
  keep that correlation from shrinking the interval (Schmeiser, Oper. Res. 30(3),
  1982: 10 to 30 batches at most; on M/M/1 sojourn times at 80 % load, 6 batches of 3
  runs cover the mean 95 % of the time, 12 batches 93 %).
- **replications** (:func:`metric_interval`) for every other metric
  (rates, levels, counts): their values over the replications.
- **replay bootstrap** (:func:`replay_interval`) for a trace replay, whose replications
  after the first replay block-bootstrap resamples of the trace
  (:mod:`des.study.resample`): the recorded trace's value, plus or minus
  ``t_{R-2}`` times the resamples' standard deviation (on the log scale for latencies).
  The spread is not divided by the square root of the number of resamples: they are
  draws of what another trace of this traffic might have been, and the recorded trace is
  one such draw. With fewer than two resamples a replay's latencies get batch means of
  the recorded replay, its other metrics no interval.

- **model uncertainty** (:func:`model_interval`) when the runs draw the step-time
  model's error (``model_uncertainty``, :mod:`des.cost.uncertainty`): batches of one run
  all share its draw, so they cannot see the model's error; only the spread across
  replications does. Every metric then gets a *prediction* interval for what the real
  system would show over such a run, from the ``R`` replications' values:
  ``ȳ ± t_{R-1} · s · sqrt(1 + 1/R)`` (Student-t prediction interval for one more draw
  of the same law), on the log scale for latencies (the drawn multipliers are
  lognormal), its ends clipped to the metric's support. It is not divided by
  ``sqrt(R)``: the real system is one more draw of the model's error and of the
  traffic, not their mean. A replay's too: its recorded trace and resamples are draws
  of the traffic, each run with its own draw of the model's error, so the point is their
  mean (centring on the recorded run's value, itself one draw of the model's error,
  would leave the interval short by a factor of about sqrt(2)).

Every latency interval holds its point estimate and, but for a prediction interval
(the real system may be faster than every run), stays at or above the smallest
latency any of the point's runs measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from des.metrics.summary import LATENCIES, PERCENTILES

#: Batches per point across its replications (at most), and the fewest requests a batch holds.
MAX_BATCHES = 8
MIN_BATCH = 10
LEVEL = 0.95

BATCH_MEANS = "batch means"
REPLICATIONS = "replications"
REPLAY = "replay bootstrap"
MODEL = "replications with model error"
NONE = "none"


@dataclass(frozen=True)
class Estimate:
    """A metric at a point: its value, a 95 % interval and how the interval was made."""

    value: float
    low: float
    high: float
    method: str


def interval(
    values: np.ndarray, level: float = 0.95, upper: float | None = None, log: bool = True
) -> tuple[float, float, float]:
    """(mean, low, high): the replications' mean and a ``level`` interval for it in the metric's support.

    - ``log`` and all values > 0 (latencies): the modified Cox interval for the mean of
      a lognormal law (Olsson, J. Stat. Educ. 13(1), 2005). With ``y`` the logs' mean
      and ``s²`` their variance, ``exp(y + s²/2 ± t_{n-1} · sqrt(s²/n + s⁴/(2(n-1))))``:
      positive, asymmetric like the data, and the Student-t interval again when the
      spread is small. It is widened to hold the mean should it fall outside.
    - Otherwise Student-t, ``mean ± t_{n-1} · sd / sqrt(n)``, its lower end clipped at 0
      when no value is negative (rates, counts).
    - ``upper`` clips the high end (1 for shares). NaN bounds with fewer than 2 values.
    """
    values = values[np.isfinite(values)]
    n = values.size
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = float(values.mean())
    if n < 2:
        return mean, math.nan, math.nan
    t = float(stats.t.ppf(0.5 + level / 2, n - 1))
    if log and (values > 0).all():
        logs = np.log(values)
        s2 = float(logs.var(ddof=1))
        if s2 == 0:
            return mean, mean, mean
        centre = float(logs.mean()) + s2 / 2
        half = t * math.sqrt(s2 / n + s2**2 / (2 * (n - 1)))
        lo, hi = min(math.exp(centre - half), mean), max(math.exp(centre + half), mean)
    else:
        half = t * float(values.std(ddof=1)) / math.sqrt(n)
        lo, hi = mean - half, mean + half
        if (values >= 0).all():
            lo = max(lo, 0.0)
    if upper is not None:
        hi = min(hi, max(upper, mean))
    return mean, lo, hi


#: Summary metrics that are shares of a whole: their intervals end at 1.
SHARES = ("gpu_busy_fraction", "slot_utilization", "slo_attainment")
#: Latencies (positive, right-skewed across replications) get the log-scale interval; rates
#: and counts, averages of many requests, Student-t. (Goodput collapsing towards 0 spans
#: orders of magnitude across three replications, where a lognormal interval explodes.)
SKEWED = ("ttft_", "tpot_", "e2e_", "queue_delay_")


def metric_interval(metric: str, values: np.ndarray) -> tuple[float, float, float]:
    """:func:`interval` with the support of the summary metric ``metric``."""
    return interval(values, upper=1.0 if metric in SHARES else None, log=metric.startswith(SKEWED))


def latency_stat(metric: str) -> tuple[str, str] | None:
    """``("ttft", "p99")`` for a latency metric the measured requests give, else None."""
    for name in LATENCIES:
        if metric.startswith(name + "_"):
            stat = metric[len(name) + 1 :]
            if stat == "mean" or stat in {f"p{p}" for p in PERCENTILES}:
                return name, stat
    return None


def batches_per_run(replications: int, sizes: Sequence[int]) -> int:
    """How many batches each replication's requests are cut into (see the module)."""
    b = max(1, MAX_BATCHES // max(replications, 1))
    smallest = min(sizes) if sizes else 0
    while b > 1 and smallest < b * MIN_BATCH:
        b -= 1
    return b


def batch_interval(stat: str, series: Sequence[np.ndarray], point: float) -> Estimate:
    """The interval of ``stat`` (``mean`` or ``pNN``) from batches of the runs' request
    latencies ``series`` (finite, in arrival order, one array per replication); ``point``
    is the value reported (the replications' mean), which the interval is made to hold."""
    series = [np.asarray(x, float) for x in series]
    series = [x[np.isfinite(x)] for x in series]
    series = [x for x in series if x.size]
    if not series or not math.isfinite(point):
        return Estimate(point, math.nan, math.nan, NONE)
    b = batches_per_run(len(series), [x.size for x in series])
    parts = [p for x in series for p in np.array_split(x, b) if p.size]
    k = len(parts)
    if k < 2:
        return Estimate(point, math.nan, math.nan, NONE)
    pooled = np.sort(np.concatenate(series))
    if stat == "mean":
        _, lo, hi = interval(np.array([p.mean() for p in parts]), LEVEL)
    else:
        q = float(stat[1:]) / 100
        lo, hi = _quantile_interval(q, parts, pooled)
        if not math.isfinite(hi):  # the batches cannot bound this tail from above
            per_run = np.array([np.percentile(x, 100 * q) for x in series])
            cox_hi = interval(per_run, LEVEL)[2] if len(series) > 1 else math.nan
            hi = max(float(pooled[-1]), cox_hi) if math.isfinite(cox_hi) else math.nan
    lo, hi = _hold(point, lo, hi, float(pooled[0]))
    return Estimate(point, lo, hi, BATCH_MEANS)


def _quantile_interval(q: float, parts: Sequence[np.ndarray], pooled: np.ndarray) -> tuple[float, float]:
    """``[x_(q-d), x_(q+d)]``: the batches' shares at or below the pooled ``q``-quantile,
    their Student-t half-width ``d``, inverted through the pooled (sorted) values; an
    upper end past the largest value is NaN."""
    k = len(parts)
    x_q = float(np.quantile(pooled, q))
    shares = np.array([np.count_nonzero(p <= x_q) / p.size for p in parts])
    d = float(stats.t.ppf(0.5 + LEVEL / 2, k - 1)) * float(shares.std(ddof=1)) / math.sqrt(k)
    lo = float(np.quantile(pooled, q - d, method="inverted_cdf")) if q - d > 0 else float(pooled[0])
    hi = float(np.quantile(pooled, q + d, method="inverted_cdf")) if q + d < 1 else math.nan
    return lo, hi


def _hold(point: float, lo: float, hi: float, floor: float) -> tuple[float, float]:
    """The interval widened to hold ``point``, its low end at least ``floor``."""
    lo = max(min(lo, point), floor) if math.isfinite(lo) else lo
    hi = max(hi, point) if math.isfinite(hi) else hi
    return lo, hi


def replay_interval(
    metric: str, values: np.ndarray, floor: float | None = None, upper: float | None = None
) -> Estimate:
    """A trace replay's interval: ``values[0]`` is the recorded trace's value, the rest
    its resamples'; ``floor`` (the smallest latency measured) bounds a latency's low end,
    ``upper`` a share's high end."""
    x0 = float(values[0])
    ys = values[1:][np.isfinite(values[1:])]
    if not math.isfinite(x0) or ys.size < 2:
        return Estimate(x0, math.nan, math.nan, NONE)
    t = float(stats.t.ppf(0.5 + LEVEL / 2, ys.size - 1))
    if latency_stat(metric) is not None and x0 > 0 and (ys > 0).all():
        half = t * float(np.log(ys).std(ddof=1))
        lo, hi = x0 * math.exp(-half), x0 * math.exp(half)
    else:
        half = t * float(ys.std(ddof=1))
        lo, hi = x0 - half, x0 + half
        if x0 >= 0 and (ys >= 0).all():
            lo = max(lo, 0.0)
    if upper is not None:
        hi = min(hi, max(upper, x0))
    if floor is not None and math.isfinite(floor):
        lo = max(lo, min(floor, x0))
    return Estimate(x0, lo, hi, REPLAY)


def model_interval(metric: str, values: np.ndarray, upper: float | None = None) -> Estimate:
    """The replications' mean and the 95 % prediction interval of one more run's value
    (see the module): log scale for latencies, Student-t otherwise (clipped at 0 when no
    value is negative); ``upper`` clips the high end (shares)."""
    values = np.asarray(values, float)
    values = values[np.isfinite(values)]
    n = values.size
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, NONE)
    mean = float(values.mean())
    if n < 2:
        return Estimate(mean, math.nan, math.nan, NONE)
    t = float(stats.t.ppf(0.5 + LEVEL / 2, n - 1)) * math.sqrt(1 + 1 / n)
    if metric.startswith(SKEWED) and (values > 0).all():
        logs = np.log(values)
        half = t * float(logs.std(ddof=1))
        lo, hi = math.exp(float(logs.mean()) - half), math.exp(float(logs.mean()) + half)
    else:
        half = t * float(values.std(ddof=1))
        lo, hi = mean - half, mean + half
        if (values >= 0).all():
            lo = max(lo, 0.0)
    if upper is not None:
        hi = min(hi, max(upper, mean))
    return Estimate(mean, min(lo, mean), max(hi, mean), MODEL)


def estimate(
    metric: str,
    values: np.ndarray,
    series: Sequence[np.ndarray] | None = None,
    replay: bool = False,
    upper: float | None = None,
    model: bool = False,
) -> Estimate:
    """The value and 95 % interval of ``metric`` at a point.

    ``values`` are the replications' summary values (the recorded replay's first for a
    ``replay``); ``series`` each replication's measured requests' latency of the metric
    (in arrival order), when it is a latency (:func:`latency_stat`); ``model``: the runs
    drew the step-time model's error (:func:`model_interval`).
    """
    values = np.asarray(values, float)
    if model:
        return model_interval(metric, values, upper)
    latency = latency_stat(metric)
    floor = _smallest(series) if latency is not None and series is not None else None
    if replay:
        if values.size >= 3:
            return replay_interval(metric, values, floor, upper)
        if latency is not None and series is not None and len(series):
            return batch_interval(latency[1], series[:1], float(values[0]))
        return Estimate(float(values[0]) if values.size else math.nan, math.nan, math.nan, NONE)
    if latency is not None and series is not None and len(series):
        finite = values[np.isfinite(values)]
        return batch_interval(latency[1], series, float(finite.mean()) if finite.size else math.nan)
    mean, lo, hi = metric_interval(metric, values)
    return Estimate(mean, lo, hi, REPLICATIONS if math.isfinite(lo) else NONE)


def _smallest(series: Sequence[np.ndarray]) -> float | None:
    values = [float(np.nanmin(x)) for x in series if np.isfinite(x).any()]
    return min(values) if values else None


def describe(replications: int, sizes: Sequence[int], replay: bool, model: bool = False) -> str:
    """The methods of a point's intervals, in words (the ``interval_method`` column)."""
    if model:
        resampled = ", all but the first replaying a resample of the trace" if replay else ""
        return (
            f"{MODEL}: 95 % prediction interval of the real system's value from the spread of {replications} "
            f"replication(s), each drawing the step-time model's error{resampled} (latencies on the log scale)"
        )
    if replay:
        if replications >= 3:
            return (
                f"{REPLAY}: the recorded trace's value ± t x the spread of {replications - 1} resampled traces "
                f"(latencies on the log scale)"
            )
        b = batches_per_run(1, sizes[:1])
        return f"{BATCH_MEANS} of the recorded replay ({b} batches) for latencies; no interval for other metrics"
    b = batches_per_run(replications, sizes)
    return (
        f"latencies: {BATCH_MEANS} of the measured requests, {replications} replication(s) x {b} batch(es); "
        f"other metrics: {REPLICATIONS}"
    )
