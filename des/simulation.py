"""Build a scenario's SimPy model, run it, and hand the records to :mod:`des.metrics`.

Random streams: one ``numpy.random.SeedSequence(seed)`` spawns a child generator per
component — arrivals, prompt lengths, output lengths, router, think times — so
changing one component's draws never shifts another's, and the same scenario and
seed give identical results.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy
from simpy.core import EmptySchedule
from simpy.events import URGENT, Event

from des.engine.cluster import Cluster
from des.scenario import Scenario, Workload

if TYPE_CHECKING:
    from des.metrics import Result
from des.workload.arrivals import Closed, Trace
from des.workload.conversations import conversation
from des.workload.lengths import LengthStream
from des.workload.shared_prefix import SharedPrefix
from des.workload.source import Budget, Make, Submit, closed_user, open_loop, open_sessions, trace_replay
from des.workload.spec import ContentIds, RequestSpec, Segment

#: Named random streams, spawned in this order from the run's seed. New streams go at
#: the end, so the existing ones keep their draws.
STREAMS = ("arrivals", "prompt_tokens", "output_tokens", "router", "think", "router_decode", "prefix", "turns")
#: The router stream of each pool, in pool order.
ROUTER_STREAMS = ("router", "router_decode")


def _generators(seed: int) -> dict[str, np.random.Generator]:
    children = np.random.SeedSequence(seed).spawn(len(STREAMS))
    return {name: np.random.default_rng(s) for name, s in zip(STREAMS, children, strict=True)}


def build(scenario: Scenario, fast_forward: bool = True) -> tuple[simpy.Environment, Cluster, list[simpy.Process]]:
    """The environment, the cluster and the arrival processes of ``scenario``.

    ``fast_forward=False`` runs every GPU step through SimPy one by one: the reference
    the fast-forwarded engine must match exactly.
    """
    env = simpy.Environment()
    rng = _generators(scenario.seed)
    routers = [rng[name] for name in ROUTER_STREAMS]
    cluster = Cluster(
        env, scenario.plan(), scenario.model, scenario.precision, scenario.cost_model, routers, fast_forward
    )

    h, w = scenario.horizon, scenario.workload
    duration = h.duration if h.duration is not None else math.inf
    budget = Budget(h.num_requests)
    arrival = w.arrival
    ids = ContentIds()
    submit = cluster.submit
    if isinstance(arrival, Trace):
        t = arrival.table
        specs = trace_requests(t, ids, arrival.hash_block_tokens, w.shared_prefix)
        replay = trace_replay(env, t["arrival_time"].tolist(), specs, submit, duration, budget)
        return env, cluster, [env.process(replay)]
    assert w.prompt_tokens is not None and w.output_tokens is not None  # required unless replaying a trace
    prompt = LengthStream(w.prompt_tokens, rng["prompt_tokens"])
    output = LengthStream(w.output_tokens, rng["output_tokens"])
    make = new_requests(w, prompt, output, rng, ids)
    if isinstance(arrival, Closed):
        think = arrival.think(rng["think"])
        procs = [
            env.process(closed_user(env, think, make, submit, duration, budget, arrival.retry_delay))
            for _ in range(arrival.concurrency)
        ]
    elif w.conversations is not None:

        def still_open() -> bool:
            return env.now < duration and budget.take()

        start = conversations(env, w, prompt, output, rng, ids, scenario.context_limit, submit, still_open)
        procs = [env.process(open_sessions(env, arrival.gaps(rng["arrivals"]), make, start, duration, budget))]
    else:
        procs = [env.process(open_loop(env, arrival.gaps(rng["arrivals"]), make, submit, duration, budget))]
    return env, cluster, procs


def trace_requests(
    table: Any, ids: ContentIds, block_tokens: int, shared_prefix: SharedPrefix | None = None
) -> list[RequestSpec]:
    """The requests of a trace's rows: lengths as recorded, content as the trace states it.

    - ``hash_ids`` (Mooncake): each id names ``block_tokens`` tokens of the prompt (the
      last block may be partial); tokens beyond the ids are the request's own.
    - ``prefix_group``: the prompt opens with the group's prefix of ``prefix_tokens``
      tokens (the row's, else ``shared_prefix.tokens``; at most the prompt).
    - ``conversation_id``: a chat's rows are its turns in arrival order; a turn's prompt
      begins with the turn before's prompt and answer, then new tokens. A recorded
      prompt shorter than that history (a client that cut the context) shares the head
      of the history that fits.
    Rows stating nothing are content of their own.
    """
    n = len(table)
    prompts, outputs = table["prompt_tokens"].tolist(), table["output_tokens"].tolist()
    hashes = table["hash_ids"].tolist() if "hash_ids" in table else [()] * n
    groups = table["prefix_group"].tolist() if "prefix_group" in table else [-1] * n
    prefix = table["prefix_tokens"].tolist() if "prefix_tokens" in table else [0] * n
    chats = table["conversation_id"].tolist() if "conversation_id" in table else [-1] * n
    default_prefix = shared_prefix.tokens if shared_prefix is not None else 0
    last: dict[int, RequestSpec] = {}
    specs = []
    for p, o, h, g, pt, c in zip(prompts, outputs, hashes, groups, prefix, chats, strict=True):
        spec = RequestSpec(p, o)
        if h:
            segs = [(ids.named(("hash", b)), block_tokens) for b in h]
            covered = block_tokens * len(h)
            if covered > p:
                segs[-1] = (segs[-1][0], p - block_tokens * (len(h) - 1))
            elif covered < p:
                segs.append((ids.new(), p - covered))
            spec.segments = tuple(segs)
        elif g >= 0:
            t = min(pt or default_prefix, p)
            own = ((ids.new(), p - t),) if p > t else ()
            spec.segments, spec.prefix_group = ((ids.named(("prefix", g)), t), *own), g
        if c >= 0:
            before = last.get(c)
            if before is None:
                spec.segments = spec.segments or ((ids.new(), p),)
                spec.turn = 1
            else:
                assert before.segments is not None and before.answer_id is not None
                history = (*before.segments, (before.answer_id, before.output_tokens))
                spec.segments = _head(history, p) + (
                    ((ids.new(), p - _length(history)),) if p > _length(history) else ()
                )
                spec.turn, spec.prefix_group = before.turn + 1, before.prefix_group
            spec.conversation_id, spec.answer_id = c, ids.new()
            last[c] = spec
        specs.append(spec)
    return specs


def _length(segments: tuple[Segment, ...]) -> int:
    return sum(n for _, n in segments)


def _head(segments: tuple[Segment, ...], tokens: int) -> tuple[Segment, ...]:
    """The segments of the first ``tokens`` tokens (the last one cut short if need be)."""
    out: list[Segment] = []
    for cid, n in segments:
        if tokens <= 0:
            break
        out.append((cid, min(n, tokens)))
        tokens -= n
    return tuple(out)


def new_requests(
    w: Workload, prompt: LengthStream, output: LengthStream, rng: dict[str, np.random.Generator], ids: ContentIds
) -> Make:
    """The maker of ``w``'s new requests: lengths drawn from ``prompt`` and ``output``, a
    shared prefix group when ``w`` has one, explicit content when they start conversations."""
    prefix = w.shared_prefix
    chats = w.conversations is not None
    if prefix is not None:
        group = prefix.picker(rng["prefix"])

        def make() -> RequestSpec:
            spec = prefix.spec(group(), prompt(), output(), ids)
            if chats:
                spec.answer_id = ids.new()
            return spec

        return make
    if chats:
        return lambda: RequestSpec(p := prompt(), output(), ((ids.new(), p),), ids.new())
    return lambda: RequestSpec(prompt(), output())


def conversations(
    env: simpy.Environment,
    w: Workload,
    prompt: LengthStream,
    output: LengthStream,
    rng: dict[str, np.random.Generator],
    ids: ContentIds,
    limit: int,
    submit: Submit,
    still_open: Callable[[], bool],
) -> Callable[[RequestSpec], Generator[simpy.Event, Any, None]]:
    """What starts each conversation of ``w`` from its first request (numbered in order);
    its next turns draw their new tokens and outputs from ``prompt`` and ``output``."""
    chats = w.conversations
    assert chats is not None
    turns = LengthStream(chats.turns, rng["turns"])
    think = chats.think_time.sampler(rng["think"])
    count = iter(range(1 << 62))

    def start(first: RequestSpec) -> Generator[simpy.Event, Any, None]:
        first.conversation_id, first.turn = next(count), 1
        return conversation(env, first, turns(), think, prompt, output, submit, ids, limit, still_open)

    return start


@dataclass(frozen=True, slots=True)
class RunProgress:
    """Where a running simulation is: passed to the ``progress`` callback of :func:`simulate`.

    ``now`` and ``horizon`` (seconds of arrivals, None when arrivals stop by count or
    at the end of a trace) are simulated seconds; ``arrived`` counts requests so far
    (``target`` of them when ``horizon.num_requests`` is set); ``in_system`` the
    admitted ones not yet done; ``draining`` is true once arrivals have stopped.
    """

    now: float
    horizon: float | None
    arrived: int
    target: int | None
    in_system: int
    draining: bool

    @property
    def fraction(self) -> float | None:
        """Share of the arrival horizon simulated (by time, else by requests), in [0, 1]."""
        if self.horizon:
            return min(self.now / self.horizon, 1.0)
        if self.target:
            return min(self.arrived / self.target, 1.0)
        return None


#: Progress callback of :func:`simulate`.
Progress = Callable[[RunProgress], None]
#: Events processed between two progress reports.
REPORT_EVERY = 4096


class _At(Event):
    """Fires at time ``at`` before the regular events due then, as ``Environment.run(until=at)``'s stop does."""

    def __init__(self, env: simpy.Environment, at: float):
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, URGENT, at - env.now)


def stop_event(scenario: Scenario, env: simpy.Environment, cluster: Cluster, procs: list[simpy.Process]) -> Event:
    """The event a run of ``scenario`` ends on.

    With ``horizon.drain`` the run goes on until every admitted request is done
    (:attr:`Cluster.drained`, once the arrival processes have ended); otherwise it
    stops at ``horizon.duration``, or at the last arrival when only ``num_requests``
    (or a trace) bounds the arrivals.
    """
    arrivals_done = env.all_of(procs)
    arrivals_done.callbacks.append(lambda _: cluster.close())
    h = scenario.horizon
    if h.drain:
        return cluster.drained
    if h.duration is not None:
        return _At(env, float(h.duration))
    return arrivals_done


def run_until(env: simpy.Environment, stop: Event, observe: Callable[[], None] | None = None) -> None:
    """Process events until ``stop`` has been processed, or until nothing is left to happen.

    ``observe`` (if given) is called every :data:`REPORT_EVERY` events and at the end;
    it only watches, so a run gives the same results with or without it.
    """
    try:
        if observe is None:
            env.run(until=stop)
            return
        step = env.step
        while stop.callbacks is not None:
            for _ in range(REPORT_EVERY):
                step()
                if stop.callbacks is None:
                    break
            observe()
    except EmptySchedule:
        pass  # nothing left to happen: whatever is still in the system stays unfinished
    except RuntimeError as exc:  # Environment.run's form of the same, or a real error of the model
        if not isinstance(exc.__context__, EmptySchedule):
            raise
    if observe is not None:
        observe()


def simulate(scenario: Scenario, progress: Progress | None = None, fast_forward: bool = True) -> Result:
    """Run ``scenario`` to its end and return its request and step tables and summary.

    Arrivals stop at the horizon; with ``horizon.drain`` the run goes on until every
    admitted request is done, otherwise it stops at the horizon (``duration``, or the
    last arrival when only ``num_requests`` is set). ``progress`` is called with a
    :class:`RunProgress` every few thousand events and once at the end.
    """
    env, cluster, procs = build(scenario, fast_forward)
    stop = stop_event(scenario, env, cluster, procs)
    observe = None
    if progress is not None:
        h = scenario.horizon

        def observe() -> None:
            progress(
                RunProgress(env.now, h.duration, len(cluster.ledger), h.num_requests, cluster.in_system, cluster.closed)
            )

    run_until(env, stop, observe)
    return build_result(scenario, cluster, end_time=env.now)


def build_result(scenario: Scenario, cluster: Cluster, end_time: float) -> Result:
    """The tables and summary of a run of ``scenario`` on ``cluster`` that stopped at ``end_time``.

    The metrics (pandas) are imported here, once the simulation has run: a run does not
    wait for them to start.
    """
    from des.metrics import (
        Result,
        pool_metrics,
        requests_table,
        steps_table,
        summarize,
        transfer_metrics,
        transfers_table,
    )
    from des.metrics.cache import cache_metrics
    from des.metrics.summary import arrival_window_end
    from des.metrics.utilisation import InstanceLimits, utilisation

    cluster.settle()
    requests = requests_table(cluster.ledger)
    steps = steps_table(cluster.log)
    transfers = transfers_table(cluster.transfers)
    h = scenario.horizon
    end = h.duration if h.duration is not None else end_time
    pools = cluster.topology.pools
    last = pools[-1]
    summary = summarize(
        requests,
        steps,
        warmup=scenario.warmup,
        end=end,
        arrivals_end=arrival_window_end(requests, h.duration),
        replicas=len(cluster.instances),
        kv_capacity_tokens=last.memory.kv_capacity_tokens,
        max_batch=last.plan.policy.max_batch,
        slo=scenario.slo.limits() if scenario.slo is not None else None,
    )
    instances: dict[str, int] = {p.role: len(p.instances) for p in pools}
    blocks: dict[str, int] = {p.role: p.memory.num_blocks for p in pools}
    summary.update(pool_metrics(steps, instances, blocks, scenario.warmup, end))
    summary.update(transfer_metrics(transfers, requests, scenario.warmup, end))
    limits = [
        InstanceLimits(
            p.work.peak_flops, p.work.peak_bandwidth, p.plan.policy.max_batch, p.plan.policy.token_budget,
            p.memory.num_blocks,
        )
        for p in pools
        for _ in p.instances
    ]  # fmt: skip
    summary.update(utilisation(steps, limits, scenario.warmup, end))
    summary.update(cache_metrics(steps, scenario.warmup, end))
    return Result(scenario, requests, steps, summary, transfers if cluster.plan.link is not None else None)
