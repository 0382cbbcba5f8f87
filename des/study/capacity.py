"""Capacity under SLOs: the highest value of a parameter at which every SLO holds.

Every candidate value is simulated with ``R`` replications (seeds ``r = 0..R-1``, the
same at every value: common random numbers). For each SLO ``metric <= limit`` the
replications give a mean and a Student-t 95 % interval. At a value the SLOs

- *hold* when every mean is within its limit and every replication is stable;
- *surely hold* when every interval's upper end is within its limit (and all stable);
- *surely fail* when some interval's lower end is beyond its limit, or a replication
  is unstable.

Bisection on "hold" gives the capacity; two more bisections, on "surely hold" below
it and on "surely fail" above it, give its confidence interval: the last value at
which the SLOs surely hold and the first at which they surely fail. The same search
over ``cluster.replicas`` (integers, at a fixed rate) gives the fewest replicas that
carry a target load.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from des.dotted import deep_copy, get_dotted, set_dotted
from des.errors import ScenarioError
from des.scenario import load_scenario
from des.study.aggregate import t_interval
from des.study.spec import replication_seed

SLO_PATTERN = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(<=|>=)\s*(\S+)\s*$")


@dataclass(frozen=True)
class SLOTerm:
    """``metric <= limit`` (latencies) or ``metric >= limit`` (attainment, goodput)."""

    metric: str
    limit: float
    op: str = "<="

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.limit:g}"

    def within(self, x: float) -> bool:
        return x <= self.limit if self.op == "<=" else x >= self.limit

    def verdicts(self, mean: float, low: float, high: float) -> tuple[bool, bool, bool]:
        """(holds, surely holds, surely fails) from a mean and its interval."""
        worst, best = (high, low) if self.op == "<=" else (low, high)
        return self.within(mean), self.within(worst), not self.within(best)


def parse_slo(text: str, known: Sequence[str]) -> SLOTerm:
    m = SLO_PATTERN.match(text)
    if not m:
        raise ScenarioError(("--slo", f"expected METRIC<=VALUE or METRIC>=VALUE, got {text!r}"))
    metric, op, raw = m.group(1), m.group(2), m.group(3)
    if metric not in known:
        raise ScenarioError(("--slo", f"unknown metric {metric!r}; valid: {', '.join(known)}"))
    try:
        limit = float(raw)
    except ValueError:
        raise ScenarioError(("--slo", f"{raw!r} is not a number")) from None
    if not math.isfinite(limit):
        raise ScenarioError(("--slo", f"limit must be finite (got {raw!r})"))
    return SLOTerm(metric, limit, op)


@dataclass
class Evaluation:
    value: float
    metrics: dict[str, tuple[float, float, float]]  # metric -> (mean, low, high)
    stable: bool
    holds: bool
    surely_holds: bool
    surely_fails: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "holds": self.holds,
            "surely_holds": self.surely_holds,
            "surely_fails": self.surely_fails,
            "stable": self.stable,
            "metrics": {k: {"mean": v[0], "low": v[1], "high": v[2]} for k, v in self.metrics.items()},
        }


Summaries = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]


@dataclass
class Search:
    """Memoised evaluations of one scenario along one parameter."""

    base: dict[str, Any]
    param: str
    slos: list[SLOTerm]
    replications: int
    run: Summaries
    integer: bool = False
    seed: int = 0
    cache: dict[float, Evaluation] = field(default_factory=dict)
    on_eval: Callable[[Evaluation], None] | None = None

    def evaluate(self, value: float) -> Evaluation:
        value = int(round(value)) if self.integer else float(value)
        if value in self.cache:
            return self.cache[value]
        scenarios = []
        for r in range(self.replications):
            s = deep_copy(self.base)
            set_dotted(s, self.param, value)
            s["seed"] = replication_seed(self.seed, r)
            scenarios.append(s)
        summaries = self.run(scenarios)
        stable = all(s["stable"] for s in summaries)
        metrics, verdicts = {}, []
        for slo in self.slos:
            vals = np.array([np.nan if s.get(slo.metric) is None else s[slo.metric] for s in summaries], float)
            if np.isfinite(vals).all():
                mean, lo, hi = t_interval(vals)
                if self.replications < 2:
                    lo = hi = mean
                metrics[slo.metric] = (mean, lo, hi)
                verdicts.append(slo.verdicts(mean, lo, hi))
            else:  # the metric could not be measured (no completed request): a failure
                metrics[slo.metric] = (math.nan, math.nan, math.nan)
                verdicts.append((False, False, True))
        ev = Evaluation(
            value,
            metrics,
            stable,
            stable and all(v[0] for v in verdicts),
            stable and all(v[1] for v in verdicts),
            (not stable) or any(v[2] for v in verdicts),
        )
        self.cache[value] = ev
        if self.on_eval:
            self.on_eval(ev)
        return ev


def _bisect(
    search: Search, lo: float, hi: float, ok: Callable[[Evaluation], bool], rel_tol: float
) -> tuple[float, float]:
    """Narrow ``[lo, hi]`` (``ok`` at lo, not at hi) until it is ``rel_tol`` of ``hi`` wide."""
    while True:
        if search.integer:
            if hi - lo <= 1:
                return lo, hi
            mid = (lo + hi) // 2
        else:
            if hi - lo <= rel_tol * hi:
                return lo, hi
            mid = (lo + hi) / 2
        if ok(search.evaluate(mid)):
            lo = mid
        else:
            hi = mid


def find_capacity(search: Search, low: float | None, high: float | None, rel_tol: float = 0.02) -> dict[str, Any]:
    """The highest value at which the SLOs hold, with its confidence interval."""
    start = get_dotted(search.base, search.param)
    lo = low if low is not None else (1 if search.integer else start / 8)
    hi = high if high is not None else start
    if not search.evaluate(lo).holds:
        return _report(search, None, None, None, lo, hi, "the SLOs fail at the lowest value tried")
    # grow the bracket until the SLOs fail
    grow = 0
    while search.evaluate(hi).holds:
        lo, hi = hi, hi * 2
        grow += 1
        if grow > 12:
            return _report(search, hi, None, None, lo, hi, "the SLOs still hold at the highest value tried")
    lo, hi = _bisect(search, lo, hi, lambda e: e.holds, rel_tol)
    capacity = lo
    # confidence interval: last value surely holding below, first surely failing above
    holds_sure = [v for v, e in search.cache.items() if e.surely_holds and v <= capacity]
    fails_sure = [v for v, e in search.cache.items() if e.surely_fails and v >= hi]
    ci_lo = max(holds_sure) if holds_sure else None
    if ci_lo is not None and ci_lo < capacity and not search.evaluate(capacity).surely_holds:
        ci_lo, _ = _bisect(search, ci_lo, capacity, lambda e: e.surely_holds, rel_tol)
    elif search.evaluate(capacity).surely_holds:
        ci_lo = capacity
    ci_hi = min(fails_sure) if fails_sure else None
    if ci_hi is None:
        top = hi
        while not search.evaluate(top).surely_fails and top < 64 * hi:
            top *= 1.25 if not search.integer else 2
        ci_hi = top if search.evaluate(top).surely_fails else None
    if ci_hi is not None and ci_hi > hi:
        _, ci_hi = _bisect(search, hi, ci_hi, lambda e: not e.surely_fails, rel_tol)
    elif ci_hi is not None:
        ci_hi = hi if search.evaluate(hi).surely_fails else ci_hi
    return _report(search, capacity, ci_lo, ci_hi, lo, hi, None)


def find_min_replicas(search: Search, start: int = 1, limit: int = 1024) -> dict[str, Any]:
    """The fewest replicas at which the SLOs hold (and at which they surely hold)."""
    n = max(start, 1)
    if search.evaluate(n).holds:
        need = n
    else:
        lo = n
        while not search.evaluate(n).holds:
            lo, n = n, n * 2
            if n > limit:
                return _report(search, None, None, None, lo, n, f"the SLOs fail even with {limit} replicas")
        # lo fails, n holds: bisect for the smallest that holds
        _, upper = _bisect(search, lo, n, lambda e: not e.holds, 0)
        need = int(upper)
    sure = need
    while not search.evaluate(sure).surely_holds and sure < limit:
        sure += 1
    return _report(search, need, need, sure, need, need, None, kind="replicas")


def _report(search, value, lo, hi, b_lo, b_hi, note, kind="capacity") -> dict[str, Any]:
    evals = sorted(search.cache.values(), key=lambda e: e.value)
    return {
        "param": search.param,
        kind: value,
        "ci_low": lo,
        "ci_high": hi,
        "bracket": [b_lo, b_hi],
        "slos": [str(s) for s in search.slos],
        "replications": search.replications,
        "note": note,
        "evaluations": [e.as_dict() for e in evals],
    }


class SummaryPool:
    """Runs scenario dicts in parallel on one process pool kept for a whole search;
    ``pool(scenarios)`` returns their summaries in order."""

    def __init__(self, workers: int):
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> SummaryPool:
        if self.workers > 1:
            import multiprocessing as mp

            ctx = mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx)
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)

    def __call__(self, scenarios: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self._pool is None or len(scenarios) <= 1:
            return [_summary(s) for s in scenarios]
        return list(self._pool.map(_summary, scenarios))


def _summary(scenario: dict[str, Any]) -> dict[str, Any]:
    from des.simulation import simulate

    return simulate(load_scenario(scenario)).summary


def metric_names() -> list[str]:
    """Summary metrics an SLO may name (numeric ones)."""
    from des.metrics.summary import LATENCIES, PERCENTILES

    names = [f"{m}_{s}" for m in LATENCIES for s in ("mean", *(f"p{p}" for p in PERCENTILES))]
    return names + ["throughput_rps", "goodput_rps", "slo_attainment", "gpu_busy_fraction", "mean_queue_length"]
