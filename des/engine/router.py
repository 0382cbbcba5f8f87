"""Routers: which instance of a cluster receives each arriving request.

- ``round_robin``: instances in turn.
- ``least_outstanding``: the instance with the fewest requests routed to it and not
  yet released (ties to the lowest index), as load balancers' least-connections.
- ``random``: uniformly at random, from the router's own generator.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np


class Router(Protocol):
    def pick(self, instances: Sequence) -> int: ...


class RoundRobin:
    def __init__(self, rng: np.random.Generator):
        self._next = 0

    def pick(self, instances: Sequence) -> int:
        i = self._next % len(instances)
        self._next = i + 1
        return i


class LeastOutstanding:
    def __init__(self, rng: np.random.Generator):
        pass

    def pick(self, instances: Sequence) -> int:
        best, load = 0, instances[0].outstanding
        for i in range(1, len(instances)):
            if instances[i].outstanding < load:
                best, load = i, instances[i].outstanding
        return best


class Random:
    def __init__(self, rng: np.random.Generator):
        self._rng = rng

    def pick(self, instances: Sequence) -> int:
        return int(self._rng.integers(len(instances)))


ROUTERS = {"round_robin": RoundRobin, "least_outstanding": LeastOutstanding, "random": Random}
