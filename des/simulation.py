"""Build a scenario's SimPy model, run it, and hand the records to :mod:`des.metrics`.

Random streams: one ``numpy.random.SeedSequence(seed)`` spawns a child generator per
component — arrivals, prompt lengths, output lengths, router, think times — so
changing one component's draws never shifts another's, and the same scenario and
seed give identical results.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import simpy

from des.engine.cluster import Cluster
from des.engine.kvcache import BlockManager
from des.engine.router import ROUTERS
from des.metrics import Result, build_result
from des.scenario import Scenario
from des.workload.arrivals import Closed, Trace
from des.workload.lengths import LengthStream
from des.workload.source import Budget, closed_user, open_loop, trace_replay

#: Progress callback: (simulated seconds so far, seconds of arrivals, requests arrived).
Progress = Callable[[float, float, int], None]

STREAMS = ("arrivals", "prompt_tokens", "output_tokens", "router", "think")


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
    plan = scenario.memory_plan()
    cost = scenario.cost_model.build(
        gpu=scenario.gpu, model=scenario.model, precision=scenario.precision, tp=scenario.cluster.tp
    )
    schedulers = [
        scenario.scheduler.build(BlockManager(plan.num_blocks, plan.block_size), scenario.model.max_model_len)
        for _ in range(scenario.cluster.replicas)
    ]
    cluster = Cluster(env, schedulers, cost, ROUTERS[scenario.cluster.router](rng["router"]), fast_forward)

    h, w = scenario.horizon, scenario.workload
    duration = h.duration if h.duration is not None else math.inf
    budget = Budget(h.num_requests)
    arrival = w.arrival
    if isinstance(arrival, Trace):
        t = arrival.table
        procs = [env.process(trace_replay(
            env, t["arrival_time"].tolist(), t["prompt_tokens"].tolist(), t["output_tokens"].tolist(),
            cluster.submit, duration, budget,
        ))]
    else:
        prompt = LengthStream(w.prompt_tokens, rng["prompt_tokens"])
        output = LengthStream(w.output_tokens, rng["output_tokens"])
        if isinstance(arrival, Closed):
            think = arrival.think(rng["think"])
            procs = [
                env.process(closed_user(env, think, prompt, output, cluster.submit, duration, budget, arrival.retry_delay))
                for _ in range(arrival.concurrency)
            ]
        else:
            gaps = arrival.gaps(rng["arrivals"])
            procs = [env.process(open_loop(env, gaps, prompt, output, cluster.submit, duration, budget))]
    return env, cluster, procs


def simulate(
    scenario: Scenario, progress: Progress | None = None, ticks: int = 100, fast_forward: bool = True
) -> Result:
    """Run ``scenario`` to its end and return its request and step tables and summary.

    Arrivals stop at the horizon; with ``horizon.drain`` the run goes on until every
    admitted request is done, otherwise it stops at the horizon (``duration``, or the
    last arrival when only ``num_requests`` is set). ``progress`` is called about
    ``ticks`` times along the way.
    """
    env, cluster, procs = build(scenario, fast_forward)
    h = scenario.horizon
    arrivals_done = env.all_of(procs)
    horizon = h.duration

    def run_until(target) -> None:
        if progress is None or horizon is None:
            env.run(until=target)
            return
        step = horizon / ticks
        while not _reached(env, target):
            nxt = env.now + step
            if isinstance(target, float | int):
                nxt = min(nxt, target)
            if env.peek() == math.inf:
                break
            env.run(until=nxt)
            progress(env.now, horizon, len(cluster.requests))

    if h.drain:
        run_until(arrivals_done)
        run_until(None)
    elif horizon is not None:
        run_until(float(horizon))
    else:
        run_until(arrivals_done)
    if progress is not None:
        progress(env.now, horizon or env.now, len(cluster.requests))
    return build_result(scenario, cluster, end_time=env.now)


def _reached(env: simpy.Environment, target) -> bool:
    if target is None:
        return env.peek() == math.inf
    if isinstance(target, simpy.Event):
        return target.processed
    return env.now >= target
