"""Build a scenario's SimPy model, run it, and hand the records to :mod:`des.metrics`.

Random streams: one ``numpy.random.SeedSequence(seed)`` spawns a child generator per
component — arrivals, prompt lengths, output lengths, router, think times, closed-loop
clients' turnaround, the draw of the step-time model's error (``model``, used only
with ``model_uncertainty``: :mod:`des.cost.uncertainty`) and speculative decoding's
accepted tokens (``speculative``, :mod:`des.engine.speculative`) — so changing one component's
draws never shifts another's, and the same scenario and seed give identical results.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import simpy
from simpy.core import EmptySchedule
from simpy.events import Event

from des.cost.uncertainty import draw
from des.engine.cluster import Cluster
from des.engine.events import StopAt
from des.scenario import Scenario
from des.workload.build import arrival_processes
from des.workload.client import CLIENTS

if TYPE_CHECKING:
    from des.metrics import Result

#: Named random streams, spawned in this order from the run's seed. New streams go at
#: the end, so the existing ones keep their draws.
STREAMS = (
    "arrivals",
    "prompt_tokens",
    "output_tokens",
    "router",
    "think",
    "router_decode",
    "prefix",
    "turns",
    "client",
    "model",
    "speculative",
)
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
    streams = _generators(scenario.seed)
    deployment = scenario.deployment
    routers = [streams[name] for name in ROUTER_STREAMS]
    frontend = scenario.frontend
    draws = draw(deployment.factors, streams["model"]) if scenario.model_uncertainty else None
    cluster = Cluster(
        env,
        deployment,
        scenario.model,
        scenario.precision,
        scenario.cost_model,
        routers,
        fast_forward,
        frontend,
        draws,
        streams["speculative"],
    )
    h = scenario.horizon
    duration = h.duration if h.duration is not None else math.inf
    limit = deployment.layout.context_limit(scenario.model)
    client = CLIENTS[scenario.serving.frontend] if scenario.serving is not None else None
    procs = arrival_processes(env, scenario.workload, streams, cluster.submit, duration, h.num_requests, limit, client)
    return env, cluster, procs


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
        return StopAt(env, float(h.duration))
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
    from des.metrics.result import build_result  # pandas, once the run is over: a run does not wait for it

    return build_result(scenario, cluster, end_time=env.now)
