"""SimPy processes that generate requests and hand them to a ``submit`` callback.

``submit(prompt_tokens, output_tokens, notify)`` is provided by the engine; with
``notify=True`` it returns an event that fires when the request leaves the system
(completed or rejected), which the closed-loop users wait on. Arrivals stop at the
horizon: the first of ``duration`` seconds and ``num_requests`` requests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from typing import Any, Protocol

import simpy

Submit = Callable[[int, int, bool], Any]  # returns a simpy.Event when notify is true


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
    prompt: Callable[[], int],
    output: Callable[[], int],
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
        submit(prompt(), output(), False)


def trace_replay(
    env: simpy.Environment,
    times: list[float],
    prompts: list[int],
    outputs: list[int],
    submit: Submit,
    duration: float,
    budget: Budget,
) -> Generator[simpy.Event, Any, None]:
    """Requests at the recorded times with the recorded lengths, until the horizon."""
    for t, p, o in zip(times, prompts, outputs, strict=True):
        if t >= duration or not budget.take():
            return
        if t > env.now:
            yield env.timeout(t - env.now)
        submit(p, o, False)


def closed_user(
    env: simpy.Environment,
    think: Callable[[], float],
    prompt: Callable[[], int],
    output: Callable[[], int],
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
        request: Outcome = yield submit(prompt(), output(), True)
        pause = think() + (retry_delay if request.status == "rejected" else 0.0)
        if pause > 0:
            yield env.timeout(pause)
