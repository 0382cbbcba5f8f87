"""Routers: which instance of a pool receives each request.

- ``round_robin``: instances in turn.
- ``least_outstanding``: the instance with the fewest requests routed to it and not
  yet released (ties to the lowest index), as load balancers' least-connections.
- ``least_kv``: the instance with the most free KV blocks (ties to the lowest index),
  for decode pools whose instances fill with long generations.
- ``random``: uniformly at random, from the router's own generator.
- ``vllm_dp``: vLLM's data-parallel balancing (:class:`DataParallelBalance`): the engine
  with the lowest ``4 × waiting + running``.

``ROUTERS`` maps each name to a factory taking the run's router generator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Protocol, cast

import numpy as np
from pydantic import AfterValidator

from des.registry import Registry


class Routable(Protocol):
    """What a router may look at: requests routed to an instance and not yet released."""

    @property
    def outstanding(self) -> int: ...

    @property
    def free_blocks(self) -> int: ...


class Reporting(Routable, Protocol):
    """An engine that reports its counts as vLLM's do: ``running``, the requests routed to it
    that its scheduler holds and no longer queues."""

    @property
    def running(self) -> int: ...


class Router(Protocol):
    def pick(self, instances: Sequence[Routable]) -> int:
        """Index of the instance (in ``instances``) that receives the next request."""
        ...


class RoundRobin:
    def __init__(self) -> None:
        self._next = 0

    def pick(self, instances: Sequence[Routable]) -> int:
        i = self._next % len(instances)
        self._next = i + 1
        return i


class LeastOutstanding:
    def pick(self, instances: Sequence[Routable]) -> int:
        best, load = 0, instances[0].outstanding
        for i in range(1, len(instances)):
            if instances[i].outstanding < load:
                best, load = i, instances[i].outstanding
        return best


class LeastKV:
    def pick(self, instances: Sequence[Routable]) -> int:
        best, free = 0, instances[0].free_blocks
        for i in range(1, len(instances)):
            if instances[i].free_blocks > free:
                best, free = i, instances[i].free_blocks
        return best


class Random:
    def __init__(self, rng: np.random.Generator):
        self._rng = rng

    def pick(self, instances: Sequence[Routable]) -> int:
        return int(self._rng.integers(len(instances)))


class DataParallelBalance:
    """vLLM's balancing over the data-parallel engines of one server (vLLM 0.19,
    ``vllm/v1/engine/core_client.py``: ``DPLBAsyncMPClient.get_core_engine_for_request``).

    Each engine scores ``4 × waiting + running`` from the counts it reports; the lowest score
    wins, ties to the first engine scanned (from engine 0: one API server's
    ``eng_start_index``). ``waiting`` counts the requests routed to the engine and not yet
    started (vLLM adds each routed request to the engine's waiting count at once, so those
    still in the front-end count too), ``running`` those started and not yet left.

    vLLM's coordinator publishes the engines' counts at most every 100 ms
    (``vllm/v1/engine/coordinator.py``) and the client bridges the gap with its own
    increments; des reads the counts at each routing, as a snapshot with no delay.
    """

    def pick(self, instances: Sequence[Routable]) -> int:
        best, low = 0, -1
        for i, inst in enumerate(instances):
            running = cast(Reporting, inst).running
            score = 4 * (inst.outstanding - running) + running
            if low < 0 or score < low:
                best, low = i, score
        return best


RouterFactory = Callable[[np.random.Generator], Router]
ROUTERS: Registry[RouterFactory] = Registry("router")
ROUTERS.register("round_robin", lambda rng: RoundRobin())
ROUTERS.register("least_outstanding", lambda rng: LeastOutstanding())
ROUTERS.register("random", Random)
ROUTERS.register("least_kv", lambda rng: LeastKV())
ROUTERS.register("vllm_dp", lambda rng: DataParallelBalance())

#: A configuration field naming a router: validated against :data:`ROUTERS`.
RouterName = Annotated[str, AfterValidator(ROUTERS.known)]
