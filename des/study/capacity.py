"""Capacity under SLOs: the highest value of a parameter at which every SLO holds.

Every candidate value is simulated with ``R`` replications (seeds ``r = 0..R-1``, the
same at every value: common random numbers), each through the sweep's runner into its
own folder ``DIR/capacity/<value>/r<k>/``, so a search is resumable and its runs can be
read like a sweep's. For each SLO ``metric <= limit`` the replications give a mean and
a 95 % interval (:func:`des.study.intervals.estimate`: a latency's from batches of the
measured requests of every replication, another metric's over the replications; a
trace replay's from its resampled traces). At a value the SLOs

- *hold* when every mean is within its limit and every replication is stable;
- *surely hold* when every interval's far end is within its limit (and all stable);
- *surely fail* when some interval's near end is beyond its limit, or a replication
  is unstable (and its start-up transient cannot explain it, below).

Every value's runs are checked for a warm-up and horizon long enough to judge them by
(:mod:`des.study.adequacy`). Where some are too short, and the SLOs do not surely fail
anyway, the value is run again with horizon and warm-up doubled, into
``DIR/capacity/<value>/x2/r<k>/`` (then ``x4``); each value's log line says so. If the
runs are still too short, an instability their start-up transient may explain is not
taken for a sure failure: the SLOs then neither hold nor surely fail there.

The search brackets the capacity (doubling from the scenario's value until the SLOs
fail), bisects on "hold", then finds each edge of the confidence interval the same way
(:func:`_ci_edge`): the last value at which the SLOs surely hold below the capacity,
and the first at which they surely fail above it, extending the bracket until they
do. The same search over ``cluster.replicas`` (integers, at a fixed rate) gives the
fewest replicas that carry a target load.

With ``model_uncertainty`` every replication draws the step-time model's error, and the
intervals are prediction intervals from the replications' spread
(:func:`des.study.intervals.model_interval`): the SLOs surely hold where the real system
would meet them whatever the model's error within its stated sds, and the capacity's
interval covers that error as well as sampling error.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from des.config import PLAUSIBLE_LATENCY, parse_seconds, plausible_latency
from des.dotted import get_dotted
from des.engine.deployment import new_path
from des.errors import ScenarioError
from des.metrics.stability import judged_unstable
from des.output import Staged, remove_stale_staging
from des.scenario import Scenario, load_scenario
from des.study.adequacy import MAX_EXTENSIONS, Adequacy, check, extended, is_closed
from des.study.adequacy import describe as describe_short
from des.study.aggregate import measured_requests
from des.study.intervals import SHARES, estimate, latency_stat
from des.study.runner import CAPACITY, Backend, run_specs, sweep_lock
from des.study.spec import (
    MODEL_REPLICATIONS,
    RunSpec,
    is_replay,
    point_scenario,
    replication_seed,
    resamples,
    slug,
    uses_model_uncertainty,
)

SLO_PATTERN = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(<=|>=)\s*(\S+(?:\s+[a-zµ]+)?)\s*$")
QUOTE_HINT = "quote it in the shell, e.g. --slo 'ttft_p99<=2' (bash reads < and > as redirections)"
#: How far a search extends a bracket: doublings of the starting value, and CI-edge steps.
MAX_DOUBLINGS = 12
EDGE_STEP, EDGE_REACH = 1.25, 64.0


@dataclass(frozen=True)
class SLOTerm:
    """``metric <= limit`` (latencies) or ``metric >= limit`` (attainment, goodput)."""

    metric: str
    limit: float
    op: str = "<="
    note: str = ""  # a doubt about the limit as written (a latency in an implausible unit)

    def __str__(self) -> str:
        return f"{self.metric}{self.op}{self.limit:g}"

    def within(self, x: float) -> bool:
        return x <= self.limit if self.op == "<=" else x >= self.limit

    def verdicts(self, mean: float, low: float, high: float) -> tuple[bool, bool, bool]:
        """(holds, surely holds, surely fails) from a mean and its interval."""
        worst, best = (high, low) if self.op == "<=" else (low, high)
        return self.within(mean), self.within(worst), not self.within(best)


#: The latencies an SLO may bound (their statistics: ``ttft_p99``, ``itl_mean``, ...), in seconds.
LATENCIES = (*PLAUSIBLE_LATENCY, "itl", "second_token")
#: Metrics that only a scenario with an ``slo:`` section measures (its per-request limits).
NEEDS_SLO_SECTION = ("slo_attainment", "goodput_rps")


def is_latency(metric: str) -> bool:
    """Whether ``metric`` is a statistic of a latency (seconds)."""
    return metric.rsplit("_", 1)[0] in LATENCIES


def parse_slo(text: str, known: Sequence[str]) -> SLOTerm:
    """``METRIC<=VALUE`` or ``METRIC>=VALUE`` as an :class:`SLOTerm`; ScenarioError naming
    ``--slo`` for what is no objective: an unknown metric, a limit that is not a finite
    number, a lower bound on a latency (``ttft_p99>=2``), and a limit that every run meets or
    none can (a latency of 0 s or less, a share beyond [0, 1], a ``>=`` of 0 or less on a
    metric never negative). Both ``des plan`` and ``des capacity`` read their SLOs here."""
    m = SLO_PATTERN.match(text)
    if not m:
        raise ScenarioError(("--slo", f"expected METRIC<=VALUE or METRIC>=VALUE, got {text!r}; {QUOTE_HINT}"))
    metric, op, raw = m.group(1), m.group(2), m.group(3)
    if metric not in known:
        raise ScenarioError(("--slo", f"unknown metric {metric!r}; valid: {', '.join(known)}"))
    latency = is_latency(metric)  # a limit in seconds, or with a time unit
    try:
        limit, unit = parse_seconds(raw) if latency else (float(raw), False)
    except ValueError:
        what = "a number of seconds, or a duration such as 2s or 2000ms" if latency else "a number"
        raise ScenarioError(("--slo", f"{raw!r} is not {what}")) from None
    if not math.isfinite(limit):
        raise ScenarioError(("--slo", f"limit must be finite (got {raw!r})"))
    why = _no_objective(metric, op, limit)
    if why:
        raise ScenarioError(("--slo", f"{text.strip()}: {why}"))
    doubt = None if unit else plausible_latency(metric, limit)
    return SLOTerm(metric, limit, op, f"--slo {text.strip()}: {doubt}" if doubt else "")


def _no_objective(metric: str, op: str, limit: float) -> str | None:
    """Why ``metric op limit`` is no objective (None: it is one). Every metric is >= 0, a
    share (``slo_attainment``, ``gpu_busy_fraction``, ...) within [0, 1], and a latency > 0."""
    if is_latency(metric):
        if op == ">=":
            return f"a lower bound on a latency is not an SLO (an upper one is: {metric}<={limit:g})"
        if limit <= 0:
            return f"a latency limit must be > 0 s (no run has {metric} <= {limit:g} s)"
        return None
    share = metric in SHARES
    if op == ">=":
        if limit <= 0:
            return f"every run has {metric} >= {limit:g}: the limit must be > 0"
        if share and limit > 1:
            return f"{metric} is a share, at most 1: no run has it >= {limit:g}"
    else:
        if limit < 0:
            return f"{metric} is never negative: no run has it <= {limit:g}"
        if share and limit >= 1:
            return f"{metric} is a share, at most 1: every run has it <= {limit:g}"
    return None


def check_measured(slos: Sequence[SLOTerm], scenario: Scenario) -> None:
    """ScenarioError naming ``--slo`` when an SLO names a metric the scenario does not
    measure: ``slo_attainment`` and ``goodput_rps`` need its ``slo:`` section (the
    per-request limits they count against)."""
    if scenario.slo is not None and scenario.slo.limits():
        return
    for term in slos:
        if term.metric in NEEDS_SLO_SECTION:
            raise ScenarioError((
                "--slo",
                f"{term}: {term.metric} counts the requests that meet the scenario's per-request limits, and it has "
                "none: add them to the scenario, e.g. --set 'slo={ttft: 2, tpot: 0.1}'",
            ))  # fmt: skip


def metric_names() -> list[str]:
    """Summary metrics an SLO may name (numeric ones)."""
    from des.metrics.itl import ITL_STATS, SECOND_STATS
    from des.metrics.summary import LATENCIES, PERCENTILES

    names = [f"{m}_{s}" for m in LATENCIES for s in ("mean", *(f"p{p}" for p in PERCENTILES))]
    names += [f"itl_{s}" for s in ITL_STATS] + [f"second_token_{s}" for s in SECOND_STATS]
    return names + ["throughput_rps", "goodput_rps", "slo_attainment", "gpu_busy_fraction", "mean_queue_length"]


@dataclass
class Evaluation:
    """The replications at one value: each SLO metric's (mean, low, high), the verdicts and why."""

    value: float
    metrics: dict[str, tuple[float, float, float]]
    unstable: int
    holds: bool
    surely_holds: bool
    surely_fails: bool
    why: list[str] = field(default_factory=list)
    methods: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    scale: int = 1
    short: int = 0

    @property
    def stable(self) -> bool:
        return self.unstable == 0

    @property
    def verdict(self) -> str:
        if self.surely_holds:
            return "surely holds"
        if self.holds:
            return "holds"
        return "surely fails" if self.surely_fails else "fails"

    def as_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "holds": self.holds,
            "surely_holds": self.surely_holds,
            "surely_fails": self.surely_fails,
            "stable": self.stable,
            "why": self.why,
            "runs_short": self.short,
            "horizon_scale": self.scale,
            "notes": self.notes,
            "metrics": {
                k: {"mean": v[0], "low": v[1], "high": v[2], "method": self.methods.get(k)}
                for k, v in self.metrics.items()
            },
        }


def judge(
    value: float,
    slos: Sequence[SLOTerm],
    summaries: Sequence[dict[str, Any]],
    requests: Sequence[pd.DataFrame] | None = None,
    replay: bool = False,
    checks: Sequence[Adequacy] | None = None,
    model: bool = False,
) -> Evaluation:
    """The verdicts at ``value`` from its replications' summaries (and their measured
    ``requests``, in arrival order, for the latencies' intervals), with the reasons for a
    failure. ``replay``: the replications replay a trace, the first as recorded.
    ``checks``: the runs' warm-up and horizon checks; an instability a run's start-up
    transient may explain keeps the SLOs from holding but is no sure failure. ``model``:
    the runs drew the step-time model's error, and the intervals are prediction intervals
    from the replications' spread (:func:`des.study.intervals.model_interval`)."""
    checks = checks or []
    unstable = sum(judged_unstable(s) for s in summaries)  # a schedule's run (stable: None) has no such verdict
    transient = sum(c.explains(s) for c, s in zip(checks, summaries, strict=True)) if checks else 0
    metrics: dict[str, tuple[float, float, float]] = {}
    methods: dict[str, str] = {}
    verdicts, why = [], []
    if unstable:
        maybe = f", {transient} of them perhaps only filling up (runs too short to tell)" if transient else ""
        why.append(f"unstable in {unstable} of {len(summaries)} replications{maybe}")
    for slo in slos:
        vals = np.array([np.nan if s.get(slo.metric) is None else s[slo.metric] for s in summaries], float)
        if not np.isfinite(vals).all():  # the metric could not be measured (no completed request)
            metrics[slo.metric] = (math.nan, math.nan, math.nan)
            verdicts.append((False, False, True))
            why.append(f"{slo.metric} not measured")
            continue
        latency = latency_stat(slo.metric)
        series = [f[latency[0]].to_numpy(dtype=float) for f in requests] if latency and requests else None
        e = estimate(slo.metric, vals, series, replay, 1.0 if slo.metric in SHARES else None, model)
        mean, lo, hi = e.value, e.low, e.high
        if math.isnan(lo) and math.isnan(hi):  # no interval (one replication): judge by the value
            lo = hi = mean
        else:  # an end the data cannot bound is open
            lo, hi = (-math.inf if math.isnan(lo) else lo), (math.inf if math.isnan(hi) else hi)
        metrics[slo.metric] = (mean, lo, hi)
        methods[slo.metric] = e.method
        v = slo.verdicts(mean, lo, hi)
        verdicts.append(v)
        bound = f"limit {slo.limit:g}"
        if v[2]:
            why.append(f"{slo.metric} beyond its {bound} even at the interval's near end")
        elif not v[0]:
            why.append(f"{slo.metric} mean beyond its {bound}")
    stable = unstable == 0
    return Evaluation(
        value,
        metrics,
        unstable,
        stable and all(v[0] for v in verdicts),
        stable and all(v[1] for v in verdicts),
        unstable > transient or any(v[2] for v in verdicts),
        why,
        methods,
        short=sum(c.short for c in checks),
    )


@dataclass
class Search:
    """Memoised evaluations of one scenario along one parameter, run through a backend
    into ``root/<value>/r<k>/``."""

    base: dict[str, Any]
    param: str
    slos: Sequence[SLOTerm]
    replications: int
    runner: Backend
    root: Path
    integer: bool = False
    cache: dict[float, Evaluation] = field(default_factory=dict)
    on_eval: Callable[[Evaluation], None] | None = None

    def specs(self, value: float, scale: int = 1) -> list[RunSpec]:
        """The replications at ``value``, common random numbers across values; with
        ``scale`` > 1, their horizon and warm-up lengthened as many times, in ``<value>/x<scale>/``."""
        where = f"{self.param}={slug(value)}"
        longer = extended(self.base, scale)
        scenario = point_scenario(self.base, [(self.param, value), *longer], where)
        folder, named = (f"{slug(value)}/x{scale}", f"{where}/x{scale}") if longer else (slug(value), where)
        out = []
        for r in range(self.replications):
            s = dict(scenario)
            s["seed"] = replication_seed(self.base["seed"], r)
            s["name"] = f"{self.base['name']}/capacity/{named}/r{r}"
            point = ((self.param, value),)
            out.append(RunSpec(r, f"{folder}/r{r}", "capacity", point, r, s["seed"], s, resamples(s, r)))
        return out

    def _judge(self, value: float, scale: int) -> Evaluation:
        specs = self.specs(value, scale)
        rows = run_specs(self.runner, specs, self.root)
        requests = [measured_requests(self.root, s) for s in specs]
        closed = is_closed(self.base)
        checks = [check(row, req, closed) for row, req in zip(rows, requests, strict=True)]
        ev = judge(value, self.slos, rows, requests, is_replay(self.base), checks, uses_model_uncertainty(self.base))
        ev.scale = scale
        note = describe_short(checks, rows)
        if note:
            ev.notes.append(note)
        return ev

    def evaluate(self, value: float) -> Evaluation:
        """The verdicts at ``value``, its runs lengthened while they are too short to judge
        (and the SLOs do not surely fail anyway), at most :data:`MAX_EXTENSIONS` times."""
        value = int(round(value)) if self.integer else float(value)
        if value not in self.cache:
            ev = self._judge(value, 1)
            first, tried = list(ev.notes), []
            while ev.short and not ev.surely_fails and ev.scale < 2**MAX_EXTENSIONS and extended(self.base, 2):
                tried.append(self._length(ev.scale))
                ev = self._judge(value, ev.scale * 2)
            if tried:
                also = f", then at {', '.join(tried[1:])}" if len(tried) > 1 else ""
                ev.notes.insert(0, f"runs lengthened to {self._length(ev.scale)}; at {tried[0]}: {first[0]}{also}")
            if ev.short and not ev.surely_fails:
                ev.notes.append(
                    "a replay cannot be lengthened: an instability the start-up may explain is no sure failure"
                    if not extended(self.base, 2)
                    else "still short after lengthening: the verdict may reflect the start-up; "
                    "lengthen horizon.duration and warmup"
                )
            self.cache[value] = ev
            if self.on_eval:
                self.on_eval(self.cache[value])
        return self.cache[value]

    def _length(self, scale: int) -> str:
        """The horizon and warm-up of runs lengthened ``scale`` times, in words."""
        horizon, warmup = self.base["horizon"], float(self.base.get("warmup") or 0.0)
        if horizon.get("duration") is not None:
            size = f"{float(horizon['duration']) * scale:g} s"
        else:
            size = f"{int(horizon['num_requests']) * scale:,} requests"
        return f"{size} with {warmup * scale:g} s of warm-up"


@dataclass
class CapacityAnswer:
    """What a search found: ``value`` (the capacity, or the fewest replicas) and its interval."""

    param: str
    value: float | None
    ci_low: float | None
    ci_high: float | None
    bracket: tuple[float, float]
    slos: list[str]
    replications: int
    evaluations: list[Evaluation]
    note: str | None = None
    target_rate: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "param": self.param,
            "replicas" if self.target_rate is not None else "capacity": self.value,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "bracket": list(self.bracket),
            "slos": self.slos,
            "replications": self.replications,
            "target_rate": self.target_rate,
            "note": self.note,
            "evaluations": [e.as_dict() for e in self.evaluations],
        }


def _answer(search: Search, value, lo, hi, bracket, note=None, target_rate=None) -> CapacityAnswer:
    evals = sorted(search.cache.values(), key=lambda e: e.value)
    slos = [str(s) for s in search.slos]
    return CapacityAnswer(search.param, value, lo, hi, bracket, slos, search.replications, evals, note, target_rate)


def _bisect(
    search: Search, lo: float, hi: float, ok: Callable[[Evaluation], bool], rel_tol: float
) -> tuple[float, float]:
    """Narrow ``[lo, hi]`` (``ok`` at lo, not at hi) until it is ``rel_tol`` of ``hi`` wide."""
    while True:
        if search.integer:
            if hi - lo <= 1:
                return lo, hi
            mid: float = (lo + hi) // 2
        else:
            if hi - lo <= rel_tol * hi:
                return lo, hi
            mid = (lo + hi) / 2
        if ok(search.evaluate(mid)):
            lo = mid
        else:
            hi = mid


def _bracket(search: Search, lo: float, hi: float) -> tuple[float, float] | str:
    """``(lo, hi)`` with the SLOs holding at lo and failing at hi, doubling hi as needed;
    or why there is no such bracket."""
    if not search.evaluate(lo).holds:
        return _failing_low(search, lo)
    for _ in range(MAX_DOUBLINGS):
        if not search.evaluate(hi).holds:
            return lo, hi
        lo, hi = hi, hi * 2
    return "the SLOs still hold at the highest value tried"


def _failing_low(search: Search, lo: float) -> str:
    """Why a search has no answer when the SLOs fail at its lowest value ``lo``: the value,
    the failure, and for arrivals that follow a schedule, the peak rate there (a schedule's
    run is judged over its whole stretch: its SLOs can fail at any scale when its peak or
    its start-up does not meet them)."""
    ev = search.evaluate(lo)
    why = "; ".join(ev.why) or "an SLO's mean is beyond its limit"
    text = f"the SLOs fail at the lowest value tried, {search.param} = {lo:g} ({why})"
    from des.workload.arrivals import peak_rate

    try:
        peak = peak_rate(load_scenario(search.base, [(search.param, lo)]).workload.arrival)
    except ScenarioError:
        peak = None
    if peak is not None:
        text += (
            f"; there the schedule's rate peaks at {peak:.3g} req/s, and a scheduled run is judged over the whole "
            "schedule, its peak included"
        )
    return text + "; try a lower --low, or looser SLOs"


def _ci_edge(search: Search, start: float, sure: Callable[[Evaluation], bool], up: bool, rel_tol: float):
    """The value nearest ``start`` in direction ``up`` (or down) at which ``sure`` holds:
    ``start`` itself, or found by stepping away from it until ``sure`` (from the values
    already tried first) and bisecting back. None when it is not reached within
    ``EDGE_REACH`` times ``start``."""
    if sure(search.evaluate(start)):
        return start
    beyond = [v for v, e in search.cache.items() if sure(e) and (v > start if up else v < start)]
    far = (min(beyond) if up else max(beyond)) if beyond else None
    step = 2.0 if search.integer else EDGE_STEP
    probe = start
    while far is None:
        probe = probe * step if up else probe / step
        if probe > start * EDGE_REACH or probe < start / EDGE_REACH or (search.integer and probe < 1):
            return None
        if sure(search.evaluate(probe)):
            far = probe
    if up:
        return _bisect(search, start, far, lambda e: not sure(e), rel_tol)[1]
    return _bisect(search, far, start, sure, rel_tol)[0]


def find_capacity(search: Search, low: float | None, high: float | None, rel_tol: float = 0.02) -> CapacityAnswer:
    """The highest value at which the SLOs hold, with its confidence interval."""
    start = get_dotted(search.base, new_path(search.base, search.param))
    lo = low if low is not None else (1 if search.integer else start / 8)
    hi = high if high is not None else start
    bracket = _bracket(search, lo, hi)
    if isinstance(bracket, str):
        holding = [v for v, e in search.cache.items() if e.holds]
        return _answer(search, max(holding) if holding else None, None, None, (lo, hi), bracket)
    lo, hi = _bisect(search, *bracket, lambda e: e.holds, rel_tol)
    ci_low = _ci_edge(search, lo, lambda e: e.surely_holds, up=False, rel_tol=rel_tol)
    ci_high = _ci_edge(search, hi, lambda e: e.surely_fails, up=True, rel_tol=rel_tol)
    return _answer(search, lo, ci_low, ci_high, (lo, hi))


def find_min_replicas(search: Search, target_rate: float, start: int = 1, limit: int = 1024) -> CapacityAnswer:
    """The fewest replicas at which the SLOs hold (and at which they surely hold)."""
    n = max(start, 1)
    lo = 0
    while not search.evaluate(n).holds:
        lo, n = n, n * 2
        if n > limit:
            return _answer(search, None, None, None, (lo, n), f"the SLOs fail even with {limit} replicas", target_rate)
    need = n if lo == 0 else int(_bisect(search, lo, n, lambda e: not e.holds, 0)[1])
    sure = need
    while not search.evaluate(sure).surely_holds and sure < limit:
        sure += 1
    return _answer(search, need, need, sure, (need, need), None, target_rate)


def default_param(base: dict[str, Any]) -> str:
    """What "load" means for the scenario's arrivals: rate, a trace's rate_scale, or users."""
    arrival = base["workload"]["arrival"]
    for key in ("rate", "rate_scale", "concurrency"):
        if key in arrival:
            return f"workload.arrival.{key}"
    raise ScenarioError(("--param", f"{arrival['process']} arrivals have no single rate: name the parameter"))


@dataclass(frozen=True)
class CapacityQuestion:
    """A validated ``des capacity`` question: which parameter, under which SLOs, how sure;
    with ``notes``, the doubts about it that are no errors (warnings to show before the search)."""

    base: dict[str, Any]
    param: str
    slos: tuple[SLOTerm, ...]
    replications: int = 5
    target_rate: float | None = None
    low: float | None = None
    high: float | None = None
    tolerance: float = 0.02
    notes: tuple[str, ...] = ()

    @classmethod
    def ask(
        cls,
        scenario: Scenario,
        slos: Sequence[str],
        param: str | None = None,
        target_rate: float | None = None,
        replications: int | None = None,
        **options: Any,
    ) -> CapacityQuestion:
        """Check the question against the scenario; problems name the flag at fault.
        ``replications`` per value default to 5, or :data:`~des.study.spec.MODEL_REPLICATIONS`
        with model uncertainty (whose intervals rest on their spread). Its notes: the
        scenario's warnings about model uncertainty, an SLO's doubtful limit, a replay's or
        a model-uncertain search's replications too few for an interval."""
        from des.scenario import scenario_warnings

        notes = [note for note in scenario_warnings(scenario) if note.startswith("model_uncertainty:")]
        replications = replications or (MODEL_REPLICATIONS if scenario.model_uncertainty else 5)
        terms = tuple(parse_slo(s, metric_names()) for s in slos)
        check_measured(terms, scenario)
        base = scenario.resolved()
        if target_rate is not None:
            if not target_rate > 0:  # nan too
                raise ScenarioError(("--replicas-for", f"must be > 0 (got {target_rate})"))
            if "rate" not in base["workload"]["arrival"]:
                process = base["workload"]["arrival"]["process"]
                raise ScenarioError(("--replicas-for", f"needs arrivals with a rate; {process} arrivals have none"))
            try:
                base = load_scenario(base, [("workload.arrival.rate", target_rate)]).resolved()
            except ScenarioError as exc:
                raise exc.for_option("--replicas-for", "workload.arrival.rate") from None
            if len(base["cluster"]["pools"]) > 1:
                raise ScenarioError((
                    "--replicas-for",
                    "counts the replicas of one colocated pool, and this scenario splits prefill from decode "
                    "(search a pool's instances with --param cluster.pools.decode.instances instead)",
                ))  # fmt: skip
            param = "cluster.replicas"
        param = param or default_param(base)
        try:
            value = get_dotted(base, new_path(base, param))
        except KeyError:
            raise ScenarioError(("--param", f"{param!r} is not a field of the scenario")) from None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ScenarioError(("--param", f"{param!r} is {value!r}, not a number"))
        try:
            load_scenario(base, [(param, value)])
        except ScenarioError as exc:
            raise exc.prefixed("--param") from None
        for flag, key in (("--low", "low"), ("--high", "high")):
            bound = options.get(key)
            if bound is None:
                continue
            if not math.isfinite(bound):
                raise ScenarioError((flag, f"must be a finite number (got {bound})"))
            try:
                load_scenario(base, [(param, int(round(bound)) if isinstance(value, int) else bound)])
            except ScenarioError as exc:
                raise exc.for_option(flag, param, new_path(base, param)) from None
        if options.get("low") is not None and options.get("high") is not None and options["low"] >= options["high"]:
            raise ScenarioError(("--low", f"must be below --high (got {options['low']:g} and {options['high']:g})"))
        notes += [term.note for term in terms if term.note]
        if is_replay(base) and replications < 5:
            notes.append(
                f"a replay's interval comes from its {replications - 1} resampled trace(s) "
                "(des/study/resample.py): with fewer than 4 it is very wide or none; give --replications 5 or more"
            )
        if scenario.model_uncertainty and replications < MODEL_REPLICATIONS:
            notes.append(
                f"with model uncertainty the intervals rest on the spread of {replications} replication(s) per value: "
                f"give --replications {MODEL_REPLICATIONS} or more"
            )
        return cls(base, param, terms, replications, target_rate=target_rate, notes=tuple(notes), **options)

    @property
    def integer(self) -> bool:
        return isinstance(get_dotted(self.base, new_path(self.base, self.param)), int)

    def answer(
        self, runner: Backend, out_dir: Path, on_eval: Callable[[Evaluation], None] | None = None
    ) -> CapacityAnswer:
        """Search, with every run in ``out_dir/capacity/``; the answer is also written there.

        ``runner`` is a backend not yet entered (:func:`des.study.runner.open_backend`):
        it is opened inside the folder's lock and closed, its workers ended, before the
        lock is released."""
        root = Path(out_dir) / CAPACITY
        with sweep_lock(root, "capacity search"), runner:
            remove_stale_staging(root, ("answer.json",))
            search = Search(self.base, self.param, self.slos, self.replications, runner, root, self.integer)
            search.on_eval = on_eval
            if self.target_rate is not None:
                start = int(get_dotted(self.base, new_path(self.base, self.param)))
                answer = find_min_replicas(search, self.target_rate, start=start)
            else:
                answer = find_capacity(search, self.low, self.high, self.tolerance)
            text = json.dumps(answer.as_dict(), indent=2, default=float) + "\n"
            with Staged(root) as staged:
                staged.write("answer.json", lambda p: p.write_text(text))
                staged.commit()
        return answer
