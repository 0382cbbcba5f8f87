"""``des plan``: the cheapest configuration that meets the SLOs at a target load.

1. **Candidates** (:mod:`des.plan.space`): every GPU type asked for, tensor-parallel degree,
   colocated replica count and P:D split up to ``max_gpus`` GPUs.
2. **Prices** (:mod:`des.catalog.prices`): the catalog's list prices, overridden by
   ``--price``/``--price-file``; a candidate is priced at the sum of its GPUs' prices per
   hour. A GPU without a price cannot be ranked: its candidates are pruned, saying so.
3. **Bounds**: candidates that do not fit or cannot carry the rate at their GPUs' peaks are
   pruned without simulating (the bounds cannot be wrong).
4. **Simulation**, cheapest first: each survivor runs ``replications`` times at the target
   rate with common random numbers (the seeds of ``des capacity``), and its verdict comes
   from the study's intervals (:func:`des.study.capacity.judge`): ``pass`` when every SLO
   holds at its interval's far end and the runs are stable, ``fail`` when one fails even at
   its near end (or the runs are unstable), ``marginal`` in between: its mean holds but its
   interval crosses the limit (more replications decide it). Runs too short to judge are
   lengthened, as in a capacity search. The runs are kept under ``OUT/runs/``, so a plan
   started again reuses them. Once the cheapest passing configuration and ``runners_up``
   more are known, the costlier candidates are not simulated (pruned: "costlier than ...").
5. **Answer**: the winner (the cheapest ``pass``), the runners-up, and for every cheaper
   candidate why it failed: which SLO, at what value against its limit. Ties at equal
   price go to the simpler configuration (:func:`rank_key`): fewer GPUs, then colocated
   serving before a prefill/decode split (fewer pools: no KV transfer, no proxy), then
   fewer engines (fewer servers to run and balance), then the larger margin, then the name.
   Candidates are simulated in the same order, so that of equal-priced ones the simpler
   are simulated first.

Every candidate's row (its configuration, price, verdict, reason, and each SLO metric's
mean and interval) goes to ``candidates.parquet``; ``plan.json`` holds the winner with
its scenario and launch commands.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from des.catalog.prices import PriceBook
from des.plan.space import Candidate, candidates, prune
from des.scenario import Scenario, load_scenario
from des.study.capacity import Evaluation, Search, SLOTerm, find_capacity
from des.study.runner import Backend, run_specs
from des.study.spec import RATE
from des.workload.arrivals import Trace

#: How many passing configurations beyond the winner a plan simulates.
RUNNERS_UP = 3


@dataclass
class Outcome:
    """A candidate's fate: its scenario (None when refused), price per hour, verdict
    (``pass``, ``fail``, ``marginal``, ``pruned``), why, and its evaluation if simulated."""

    candidate: Candidate
    scenario: Scenario | None
    usd_per_hour: float | None
    verdict: str
    reason: str
    evaluation: Evaluation | None = None
    capacity: tuple[float | None, float | None, float | None] | None = None  # req/s, its 95 % interval

    def margin(self, slos: Sequence[SLOTerm]) -> float:
        """The smallest relative headroom of the SLO metrics' means against their limits (> 0: holds)."""
        ev = self.evaluation
        if ev is None:
            return -math.inf
        out = math.inf
        for term in slos:
            mean = ev.metrics.get(term.metric, (math.nan,))[0]
            if not math.isfinite(mean) or term.limit == 0:
                return -math.inf
            head = (term.limit - mean) / term.limit if term.op == "<=" else (mean - term.limit) / term.limit
            out = min(out, head)
        return out

    def watts(self) -> float:
        """Board power of the candidate's GPUs (W; :mod:`des.catalog.prices`: an upper bound on their draw)."""
        assert self.scenario is not None
        return sum((p.gpu.board_power_w or 0.0) * p.num_gpus for p in self.scenario.layout.pools)

    def row(self, slos: Sequence[SLOTerm], rate: float, mean_output: float | None) -> dict[str, Any]:
        c = self.candidate
        row: dict[str, Any] = c.row()
        row |= {
            "max_num_seqs": None,
            "max_num_batched_tokens": None,
            "usd_per_hour": self.usd_per_hour,
            "cost_per_hour": self.usd_per_hour,
            "cost_per_million_tokens": (
                self.usd_per_hour / (rate * mean_output * 3600) * 1e6
                if self.usd_per_hour is not None and mean_output
                else None
            ),
            "kwh_per_million_tokens": (
                self.watts() / 1000 / (rate * mean_output * 3600) * 1e6
                if self.scenario is not None and mean_output
                else None
            ),
            "verdict": self.verdict,
            "reason": self.reason,
        }
        if self.scenario is not None:
            policy = self.scenario.layout.pools[-1].policy
            row["max_num_seqs"] = getattr(policy, "max_num_seqs", None)
            row["max_num_batched_tokens"] = getattr(policy, "max_num_batched_tokens", None)
        ev = self.evaluation
        for term in slos:
            mean, lo, hi = ev.metrics.get(term.metric, (math.nan,) * 3) if ev is not None else (math.nan,) * 3
            row |= {term.metric: mean, f"{term.metric}_lo": lo, f"{term.metric}_hi": hi}
        row["replications_unstable"] = ev.unstable if ev is not None else None
        cap = self.capacity or (None, None, None)
        row |= {"capacity": cap[0], "capacity_lo": cap[1], "capacity_hi": cap[2]}
        return row


@dataclass
class Plan:
    """A plan's question and its answer: every outcome, cheapest first."""

    rate: float  # requests per second offered
    slos: list[SLOTerm]
    replications: int
    param: str = "workload.arrival.rate"  # what the load sets
    load: float = math.nan  # its value
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def passing(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.verdict == "pass"]

    @property
    def winner(self) -> Outcome | None:
        return self.passing[0] if self.passing else None

    def closest(self) -> Outcome | None:
        """The simulated candidate nearest to meeting the SLOs (largest margin), when none passes."""
        tried = [o for o in self.outcomes if o.evaluation is not None]
        return max(tried, key=lambda o: o.margin(self.slos)) if tried else None


def _verdict(ev: Evaluation, slos: Sequence[SLOTerm]) -> tuple[str, str]:
    """pass / fail / marginal from an evaluation, and the reason in words (which SLO, at what value)."""
    parts = []
    for term in slos:
        mean, lo, hi = ev.metrics.get(term.metric, (math.nan,) * 3)
        parts.append(f"{term.metric} {mean:.4g} [{lo:.4g}, {hi:.4g}] against {term.op}{term.limit:g}")
    detail = "; ".join(parts)
    if ev.surely_holds:
        return "pass", detail
    if ev.holds:
        return "marginal", f"{detail}: the mean holds, its interval crosses the limit (more replications decide)"
    why = "; ".join(ev.why) if ev.why else "an SLO fails"
    return "fail", f"{why} ({detail})"


def rank_key(o: Outcome) -> tuple[float, int, int, int, str]:
    """Cheapest first; at equal price the simpler (the module's docstring): fewest GPUs,
    then fewest pools (colocated before a split), then fewest engines; then by name
    (deterministic)."""
    price = o.usd_per_hour if o.usd_per_hour is not None else math.inf
    c = o.candidate
    pools = 1 if c.replicas else 2
    return (price, c.num_gpus, pools, c.engines, c.name)


#: The verdicts in the answer's order.
VERDICT_ORDER = {"pass": 0, "marginal": 1, "fail": 2, "pruned": 3}


def answer_key(o: Outcome, slos: Sequence[SLOTerm]) -> tuple[Any, ...]:
    """The answer's order: by verdict, then :func:`rank_key`'s (cheapest, then the simpler),
    then as simple at that price the larger margin, then the name: the first ``pass`` wins."""
    *simpler, name = rank_key(o)
    return (VERDICT_ORDER[o.verdict], *simpler, -o.margin(slos), name)


def plan(
    base: Scenario,
    load: float,
    slos: Sequence[SLOTerm],
    gpus: Sequence[str],
    max_gpus: int,
    book: PriceBook,
    replications: int,
    runner: Backend,
    root: Path,
    splits: bool = True,
    runners_up: int = RUNNERS_UP,
    progress: Callable[[Outcome], None] | None = None,
    mixed: bool = False,
    max_num_seqs: list[int] | None = None,
    max_num_batched_tokens: list[int] | None = None,
    variants: bool = False,
    pipeline: Sequence[int] = (1,),
    capacities: bool = False,
) -> Plan:
    """Plan ``base``'s model and workload at ``load`` under ``slos`` (see the module's docstring):
    ``load`` req/s for an open process, or a trace's ``rate_scale`` (its recorded rate scaled).

    ``runner`` must be entered (a backend's ``with`` block); runs go under ``root``."""
    data, param = at_load(base, load)
    rate = offered_rate(load_scenario(data, hardware=False))
    result = Plan(rate, list(slos), replications, param, load)
    pending: list[Outcome] = []
    space = candidates(
        base, list(gpus), max_gpus, splits, mixed, max_num_seqs, max_num_batched_tokens, variants, pipeline
    )
    for cand in space:
        counts = cand.gpu_counts()
        unpriced = [g for g in counts if book.per_gpu_hour(g) is None]
        if unpriced:
            g = unpriced[0]
            result.outcomes.append(
                Outcome(cand, None, None, "pruned", f"no price for {g} (give --price {g}=USD_PER_HOUR)")
            )
            continue
        price = sum(n * (book.per_gpu_hour(g) or 0.0) for g, n in counts.items())
        sc, why = prune(cand, data, rate, base)
        outcome = Outcome(cand, sc, price, "pruned" if why else "", why or "")
        (result.outcomes if why else pending).append(outcome)
    pending.sort(key=rank_key)
    passed = 0
    i = 0
    while i < len(pending):
        if passed > runners_up:
            for o in pending[i:]:
                o.verdict, o.reason = "pruned", f"costlier than {passed} passing configurations"
            break
        # the next cheapest candidates, as many as the backend has workers, run at once
        batch = [o for o in pending[i : i + max(1, runner_width(runner))]]
        _simulate(batch, data, slos, replications, runner, root)
        for o in batch:
            assert o.evaluation is not None
            o.verdict, o.reason = _verdict(o.evaluation, slos)
            passed += o.verdict == "pass"
            if progress is not None:
                progress(o)
        i += len(batch)
    result.outcomes += pending
    result.outcomes.sort(key=lambda o: answer_key(o, slos))
    if capacities:  # how much more the winner and the runners-up carry: a capacity search each
        for o in result.passing[: 1 + runners_up]:
            o.capacity = _capacity(o, data, slos, replications, runner, root, rate / load)
            if progress is not None:
                progress(o)
    return result


def at_load(base: Scenario, load: float) -> tuple[dict[str, Any], str]:
    """The base scenario as plain data with its arrivals at ``load``, and the parameter the
    load sets (an open process's ``rate``, or the ``rate_scale`` of a replay or a schedule)."""
    data = base.resolved()
    param = _param(data)
    data["workload"]["arrival"] = _at_load(data["workload"]["arrival"], param, load)
    return data, param


def _param(data: dict[str, Any]) -> str:
    """What the load sets: an open process's ``rate``, or the ``rate_scale`` of a replay or of a
    rate schedule (``nhpp``)."""
    return RATE if "rate" in data["workload"]["arrival"] else RATE_SCALE


def _load(data: dict[str, Any]) -> float:
    """The target load set in the (plain data) scenario."""
    return float(data["workload"]["arrival"][_param(data).rsplit(".", 1)[-1]])


def _search(
    o: Outcome, data: dict[str, Any], slos: Sequence[SLOTerm], replications: int, runner: Backend, root: Path
) -> Search:
    """The capacity search's evaluator of candidate ``o`` (its runs in ``root/<name>/``), common
    random numbers from the base scenario's seed."""
    assert o.scenario is not None
    scenario = o.scenario.resolved() | {"name": f"plan/{o.candidate.name}", "seed": data.get("seed", 0)}
    return Search(scenario, _param(data), list(slos), replications, runner, root / o.candidate.name)


def _capacity(
    o: Outcome, data: dict[str, Any], slos: Sequence[SLOTerm], replications: int, runner: Backend, root: Path,
    per_unit: float,
) -> tuple[float | None, float | None, float | None]:  # fmt: skip
    """A passing candidate's capacity under the SLOs (req/s) and its 95 % interval, by the
    capacity search of ``des capacity`` from the target load up (its runs reused)."""
    load = _load(data)
    answer = find_capacity(_search(o, data, slos, replications, runner, root), load, 2 * load)

    def rate(x: float | None) -> float | None:
        return None if x is None else x * per_unit

    return rate(answer.value), rate(answer.ci_low), rate(answer.ci_high)


def runner_width(runner: Backend) -> int:
    """How many candidates to run at once: enough to keep the backend's workers busy."""
    workers = getattr(runner, "workers", 1) or 1
    return max(1, int(workers))


#: The parameter a replay's or a rate schedule's load is: its rates scaled.
RATE_SCALE = "workload.arrival.rate_scale"


def _at_load(arrival: dict[str, Any], param: str, load: float) -> dict[str, Any]:
    """The arrival process at ``load``: an open process's ``rate``, or a replay's ``rate_scale``."""
    key = param.rsplit(".", 1)[-1]
    if key not in arrival:
        from des.errors import ScenarioError

        raise ScenarioError(
            ("--rate", f"the scenario's {arrival.get('process')} arrivals have no rate to set (plan poisson, gamma, "
             "mmpp or a trace)")
        )  # fmt: skip
    return {**arrival, key: load}


def offered_rate(sc: Scenario) -> float:
    """Requests per second the scenario's arrivals offer (a replay's: its mean rate as scaled)."""
    arrival = sc.workload.arrival
    if isinstance(arrival, Trace):
        return float(arrival.stats().rate or math.nan)
    return float(getattr(arrival, "rate", math.nan))


def mean_output(sc: Scenario) -> float | None:
    """Mean output tokens per request: the law's, or a replay's recorded mean."""
    law = sc.workload.output_tokens
    if law is not None:
        return law.moments()[0]
    arrival = sc.workload.arrival
    return float(arrival.table["output_tokens"].mean()) if isinstance(arrival, Trace) else None


def _simulate(
    batch: Sequence[Outcome], data: dict[str, Any], slos: Sequence[SLOTerm], replications: int, runner: Backend,
    root: Path,
) -> None:  # fmt: skip
    """Each outcome's evaluation at the target rate: the batch's runs submitted at once (each
    in its candidate's folder under ``root``), then judged, lengthened where too short."""
    from dataclasses import replace

    load = _load(data)
    searches, specs = [], []
    for o in batch:
        search = _search(o, data, slos, replications, runner, root)
        searches.append(search)
        specs += [replace(spec, run_id=f"{o.candidate.name}/{spec.run_id}") for spec in search.specs(load)]
    run_specs(runner, specs, root)
    for o, search in zip(batch, searches, strict=True):
        o.evaluation = search.evaluate(load)  # reuses the runs just made
