"""Routers: which instance of a pool receives each request.

- ``round_robin``: instances in turn.
- ``least_outstanding``: the instance with the fewest requests routed to it and not
  yet released (ties to the lowest index), as load balancers' least-connections.
- ``least_kv``: the instance with the most free KV blocks (ties to the lowest index),
  for decode pools whose instances fill with long generations.
- ``random``: uniformly at random, from the router's own generator.

``ROUTERS`` maps each name to a factory taking the run's router generator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated, Protocol

import numpy as np
from pydantic import AfterValidator

from des.registry import Registry


class Routable(Protocol):
    """What a router may look at: requests routed to an instance and not yet released."""

    @property
    def outstanding(self) -> int: ...

    @property
    def free_blocks(self) -> int: ...


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


RouterFactory = Callable[[np.random.Generator], Router]
ROUTERS: Registry[RouterFactory] = Registry("router")
ROUTERS.register("round_robin", lambda rng: RoundRobin())
ROUTERS.register("least_outstanding", lambda rng: LeastOutstanding())
ROUTERS.register("random", Random)
ROUTERS.register("least_kv", lambda rng: LeastKV())

#: A configuration field naming a router: validated against :data:`ROUTERS`.
RouterName = Annotated[str, AfterValidator(ROUTERS.known)]
