"""Autoscaling a pool: instances that start (after a cold start), serve, drain and stop.

A pool with an autoscaler owns up to ``max_instances`` instances, built up front (an
instance that is off is an idle SimPy process with an empty KV cache: it costs nothing).
Each is in one of four states, kept by the pool's :class:`Fleet`:

- ``off``: not paid for, receives nothing;
- ``starting``: paid for from the moment it is asked for; serves after its cold start
  (weights read, engine start, compile and CUDA-graph capture: :func:`cold_start_seconds`);
- ``serving``: behind the pool's router;
- ``draining``: takes no new requests, finishes those it holds, and stops (``off``) once
  it holds none, its KV blocks all given back (a prefill instance's transfers sent).

The :class:`Autoscaler` is a SimPy process that every ``interval`` seconds reads one
metric off the serving instances and sets the number of instances as Kubernetes'
Horizontal Pod Autoscaler does (``pkg/controller/podautoscaler/horizontal.go``):

- ``desired = ceil(usage / target)``, where ``usage`` is the sum over serving instances
  of the per-instance metric (requests waiting, requests running, share of KV blocks in
  use, share of the last interval spent stepping; or the pool's requests per second),
  left as it is while the mean per
  instance stays within ``[scale_down_threshold, scale_up_threshold]`` (by default
  ``target`` ± HPA's 10 % tolerance);
- stabilisation: it scales up to the *lowest* recommendation of the last
  ``cooldown_up`` seconds (0 by default, HPA's default: at once) and down to the *highest*
  of the last ``cooldown`` seconds (300 s by default, HPA's scale-down stabilisation
  window), so one quiet sample does not shed instances a burst needs back;
- within ``[min_instances, max_instances]``.

Scaling up revives draining instances first (they are warm: no cold start), then starts
instances that are off. Scaling down cancels starting instances first (the newest
first: they never served), then drains the serving instances holding the fewest
requests (ties: the newest). With ``min_instances: 0`` on the pool requests enter, a
request that finds no instance serving waits for the first one starting (and starts one
if none is): scale from zero, its cold start in the request's TTFT.

Gauges are read at the evaluation instant (a scrape of vLLM's ``num_requests_waiting``,
``num_requests_running``, ``kv_cache_usage_perc``); ``utilization`` is the exact share of
the last interval each serving instance spent in steps (:attr:`Instance.busy`);
``arrival_rate`` the requests per second routed to the pool over the last interval (a
load balancer's request rate, as Knative's ``rps`` target). With ``target`` set to what one
instance carries within the SLO (``des capacity``'s answer, with a margin), it scales on
the SLO breach the load predicts, before a queue builds.
The fleet's :class:`Timeline` records every change of the serving and paying counts;
GPU-hours are its integral (:mod:`des.metrics.windows`). The configuration
(:class:`~des.engine.scaling.AutoscalerConfig`) and its checks against a pool are in
:mod:`des.engine.scaling`, which the scenario reads without this runtime.
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from des.catalog.coldstart import default_cold_start
from des.engine.scaling import AutoscalerConfig

if TYPE_CHECKING:
    import simpy

    from des.engine.instance import Instance

OFF, STARTING, SERVING, DRAINING = "off", "starting", "serving", "draining"


def cold_start_seconds(config: AutoscalerConfig, weight_bytes: int, cuda_graphs: bool) -> float:
    """Seconds from the decision to start an instance to its serving: ``config.cold_start``
    when given in seconds, else its ``weight_bytes`` of weights read and its engine started
    (:mod:`des.catalog.coldstart`: the catalog's figures, or the scenario's over them);
    ``cuda_graphs``: the engine compiles and captures graphs (not ``enforce_eager``)."""
    cold = config.cold_start
    if isinstance(cold, float | int):
        return float(cold)
    spec = default_cold_start() if cold == "auto" else cold
    return spec.seconds(weight_bytes, cuda_graphs)


class Timeline:
    """Every change of a fleet's counts: at ``times[i]`` (seconds), ``serving[i]`` instances
    serve and ``paying[i]`` are paid for (starting, serving or draining), until the next."""

    def __init__(self, serving: int, paying: int):
        self.times = array("d", [0.0])
        self.serving = array("q", [serving])
        self.paying = array("q", [paying])

    def record(self, now: float, serving: int, paying: int) -> None:
        if self.times[-1] == now:  # several changes at one instant: the last counts
            self.serving[-1], self.paying[-1] = serving, paying
            return
        self.times.append(now)
        self.serving.append(serving)
        self.paying.append(paying)


class Fleet:
    """The states of a pool's ``instances``: the first ``initial`` serve from t = 0, the
    others are off. :attr:`active` (the serving ones, in index order) is the list the
    pool's router picks from."""

    def __init__(self, env: simpy.Environment, instances: list[Instance], initial: int, cold_start: float):
        self.env = env
        self.instances = instances
        self.position = {inst.index: k for k, inst in enumerate(instances)}
        self.cold_start = cold_start
        self.state = [SERVING if i < initial else OFF for i in range(len(instances))]
        self.active: list[Instance] = instances[:initial]
        self.ready_at = [0.0] * len(instances)  # when a starting instance serves
        self.generation = [0] * len(instances)  # bumped when a start is cancelled
        self.timeline = Timeline(initial, initial)
        # instances asked for (started, or brought back from draining) and let go (a start
        # cancelled, or a drain begun): like events, so scale_ups - scale_downs is the change
        # in instances serving or starting
        self.scale_ups = self.scale_downs = 0
        self.routed = 0  # requests routed to the pool so far
        self.autoscaler: Autoscaler | None = None  # the process that scales it
        for inst in instances:
            inst.on_empty = self._emptied

    def count(self, state: str) -> int:
        return self.state.count(state)

    @property
    def paying(self) -> int:
        return len(self.state) - self.count(OFF)

    def _record(self) -> None:
        self.timeline.record(self.env.now, len(self.active), self.paying)

    def _activate(self, i: int) -> None:
        self.state[i] = SERVING
        self.active.append(self.instances[i])
        self.active.sort(key=lambda inst: inst.index)

    def start(self, n: int) -> None:
        """Bring ``n`` more instances up: draining ones back at once, then off ones after a cold start."""
        for i, s in enumerate(self.state):
            if n == 0:
                break
            if s == DRAINING:
                self._activate(i)
                self.scale_ups += 1  # a scale-up, as the drain it undoes was a scale-down
                n -= 1
        for i, s in enumerate(self.state):
            if n == 0:
                break
            if s == OFF:
                self.state[i] = STARTING
                self.ready_at[i] = self.env.now + self.cold_start
                self.env.timeout(self.cold_start).callbacks.append(self._when_ready(i))
                self.scale_ups += 1
                n -= 1
        self._record()

    def _when_ready(self, i: int) -> Callable[[Any], None]:
        """The callback of instance ``i``'s cold start (ignored if the start is cancelled meanwhile)."""
        gen = self.generation[i]
        return lambda _: self._ready(i, gen)

    def _ready(self, i: int, gen: int) -> None:
        if self.generation[i] != gen or self.state[i] != STARTING:
            return  # cancelled meanwhile
        self._activate(i)
        self._record()
        inst = self.instances[i]
        if inst.outstanding:  # requests that waited for it (scale from zero): they may run now
            inst.wake()

    def stop(self, n: int) -> None:
        """Take ``n`` instances down: starting ones first (newest first), then drain the
        serving ones holding the fewest requests (ties: the newest)."""
        for i in reversed(range(len(self.state))):
            if n == 0:
                break
            if self.state[i] == STARTING and not self.instances[i].outstanding:
                self.state[i] = OFF
                self.generation[i] += 1
                self.scale_downs += 1
                n -= 1
        while n > 0 and len(self.active) > 0:
            inst = min(reversed(self.active), key=lambda x: x.outstanding)
            self.active.remove(inst)
            self.state[self.position[inst.index]] = DRAINING
            self.scale_downs += 1
            n -= 1
            self._emptied(inst)
        self._record()

    def _emptied(self, inst: Instance) -> None:
        """``inst`` may hold nothing any more: a draining instance that holds nothing stops."""
        i = self.position[inst.index]
        if self.state[i] == DRAINING and inst.outstanding == 0 and inst.kv.used == 0:
            self.state[i] = OFF
            inst.kv.restart()
            self._record()

    def entrance(self) -> tuple[Instance, float] | None:
        """Scale from zero, a request finding no instance serving: the starting instance due
        first and how long until it serves (seconds); if none is starting, a draining one
        brought back (at once) or one started now. None only for a pool of no instance."""
        starting = [i for i, s in enumerate(self.state) if s == STARTING]
        if not starting:
            if not self.instances:
                return None
            self.start(1)  # a draining instance first: it serves at once
            if self.active:
                return self.active[0], 0.0
            starting = [i for i, s in enumerate(self.state) if s == STARTING]
        i = min(starting, key=lambda j: (self.ready_at[j], j))
        return self.instances[i], self.ready_at[i] - self.env.now


class Autoscaler:
    """Every ``config.interval`` seconds, reads ``config.metric`` off ``fleet``'s serving
    instances and starts or stops instances (see the module's docstring)."""

    def __init__(self, env: simpy.Environment, fleet: Fleet, config: AutoscalerConfig):
        self.env = env
        self.fleet = fleet
        self.config = config
        # (time, recommendation) of the last cooldown_up seconds, recommendations rising from
        # the front (its lowest), and of the last cooldown seconds, falling (its highest): a
        # recommendation that a later one as low (high) outlives can never be the lowest
        # (highest) again, so each evaluation is O(1) amortised, whatever cooldown / interval
        self.lows: deque[tuple[float, int]] = deque()
        self.highs: deque[tuple[float, int]] = deque()
        self.busy_seen = [inst.busy_at(0.0) for inst in fleet.instances]
        self.routed_seen = 0
        self.process = env.process(self._run())

    def usage(self) -> tuple[float, int]:
        """The metric summed over the serving instances, and how many serve."""
        cfg, fleet, now = self.config, self.fleet, self.env.now
        serving = fleet.active
        metric = cfg.metric
        if metric == "utilization":
            total = 0.0
            for k, (inst, s) in enumerate(zip(fleet.instances, fleet.state, strict=True)):
                busy = inst.busy_at(now)
                if s == SERVING:
                    total += (busy - self.busy_seen[k]) / cfg.interval
                self.busy_seen[k] = busy
            return total, len(serving)
        if metric == "arrival_rate":  # requests per second routed to the pool over the last interval
            routed, self.routed_seen = fleet.routed - self.routed_seen, fleet.routed
            return routed / cfg.interval, len(serving)
        if metric == "queue_length":  # waiting, including those held for a starting instance
            waiting = sum(
                inst.waiting for inst, s in zip(fleet.instances, fleet.state, strict=True) if s in (SERVING, STARTING)
            )
            return float(waiting), len(serving)
        if metric == "running":
            return float(sum(i.running for i in serving)), len(serving)
        return float(sum(i.kv.used / i.kv.num_blocks for i in serving)), len(serving)

    def recommend(self) -> int:
        """HPA's desired count from the current usage, before stabilisation."""
        usage, n = self.usage()
        cfg = self.config
        mean = usage / n if n else (math.inf if usage > 0 else 0.0)
        if cfg.down <= mean <= cfg.up:
            return n
        return math.ceil(usage / cfg.target)

    def evaluate(self) -> None:
        now, cfg, fleet = self.env.now, self.config, self.fleet
        desired = self.recommend()
        lows, highs = self.lows, self.highs
        while lows and lows[-1][1] >= desired:
            lows.pop()
        lows.append((now, desired))
        while lows[0][0] < now - cfg.cooldown_up:
            lows.popleft()
        while highs and highs[-1][1] <= desired:
            highs.pop()
        highs.append((now, desired))
        while highs[0][0] < now - cfg.cooldown:
            highs.popleft()
        up = lows[0][1]  # the lowest recommendation of the last cooldown_up seconds
        down = highs[0][1]  # the highest of the last cooldown seconds
        current = len(fleet.active) + fleet.count(STARTING)
        new = up if up > current else down if down < current else current
        new = min(max(new, cfg.min_instances), cfg.max_instances)
        if new > current:
            fleet.start(new - current)
        elif new < current:
            fleet.stop(current - new)

    def _run(self) -> Generator[Any, Any, None]:
        env = self.env
        while True:
            yield env.timeout(self.config.interval)
            self.evaluate()
            if env.peek() == math.inf:  # nothing else can happen: let the run end
                return
