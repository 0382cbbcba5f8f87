"""SimPy processes that generate requests and hand them to a ``submit`` callback.

``submit(spec, notify)`` is provided by the engine (a :class:`RequestSpec` says the
request's lengths and content); with ``notify=True`` it returns an event that fires
when the request leaves the system (completed or rejected), which closed-loop users
and conversations wait on. Arrivals stop at the horizon: the first of ``duration``
seconds and ``num_requests`` requests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterable
from typing import Any, Protocol

import simpy

from des.workload.spec import RequestSpec

Submit = Callable[[RequestSpec, bool], Any]  # returns a simpy.Event when notify is true
Make = Callable[[], RequestSpec]  # the next new request


class Outcome(Protocol):
    """What a closed-loop user learns of its request when it leaves the system."""

    status: str


class Budget:
    """Shared count of requests still allowed before the horizon (math.inf: unlimited)."""

    __slots__ = ("left",)

    def __init__(self, num_requests: int | None):
        self.left = math.inf if num_requests is None else num_requests

    def take(self) -> bool:
        if self.left <= 0:
            return False
        self.left -= 1
        return True


def open_loop(
    env: simpy.Environment,
    gaps: Callable[[], float],
    make: Make,
    submit: Submit,
    duration: float,
    budget: Budget,
) -> Generator[simpy.Event, Any, None]:
    """Requests at the epochs of a point process starting at t = 0, until the horizon."""
    t = 0.0
    while True:
        t += gaps()
        if t >= duration or not budget.take():
            return
        yield env.timeout(t - env.now)
        submit(make(), False)


def open_sessions(
    env: simpy.Environment,
    gaps: Callable[[], float],
    make: Make,
    start: Callable[[RequestSpec], Generator[simpy.Event, Any, None]],
    duration: float,
    budget: Budget,
) -> Generator[simpy.Event, Any, None]:
    """Sessions (``start(first request)``, a SimPy process each, e.g. a conversation)
    begun at the epochs of a point process until the horizon; ends when all have."""
    t = 0.0
    sessions = []
    while True:
        t += gaps()
        if t >= duration or not budget.take():
            break
        yield env.timeout(t - env.now)
        sessions.append(env.process(start(make())))
    yield env.all_of(sessions)


def trace_replay(
    env: simpy.Environment,
    times: list[float],
    specs: Iterable[RequestSpec],
    submit: Submit,
    duration: float,
    budget: Budget,
) -> Generator[simpy.Event, Any, None]:
    """Requests at the recorded times with the recorded lengths, until the horizon."""
    for t, spec in zip(times, specs, strict=True):
        if t >= duration or not budget.take():
            return
        if t > env.now:
            yield env.timeout(t - env.now)
        submit(spec, False)


def closed_user(
    env: simpy.Environment,
    think: Callable[[], float],
    make: Make,
    submit: Submit,
    duration: float,
    budget: Budget,
    retry_delay: float,
) -> Generator[simpy.Event, Any, None]:
    """One user: send, wait for the answer, think, repeat until the horizon.

    After a rejection the user waits ``retry_delay`` seconds more than its think time,
    as clients back off on errors (and so that time advances when every request of a
    zero-think workload is rejected).
    """
    while env.now < duration and budget.take():
        request: Outcome = yield submit(make(), True)
        pause = think() + (retry_delay if request.status == "rejected" else 0.0)
        if pause > 0:
            yield env.timeout(pause)
