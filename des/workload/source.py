"""SimPy processes that generate requests and hand them to a ``submit`` callback, and the
:class:`Sources` every arrival process builds them from.

``submit(spec, notify)`` is provided by the engine (a :class:`RequestSpec` says the
request's lengths and content); with ``notify=True`` it returns an event that fires
when the request leaves the system (completed or rejected), which closed-loop users
and conversations wait on. Arrivals stop at the horizon: the first of ``duration``
seconds and ``num_requests`` requests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import simpy

from des.workload.spec import ContentIds, RequestSpec

if TYPE_CHECKING:
    import numpy as np

    from des.workload.shared_prefix import SharedPrefix

Submit = Callable[[RequestSpec, bool], Any]  # returns a simpy.Event when notify is true
Make = Callable[[], RequestSpec]  # the next new request
Session = Generator[simpy.Event, Any, None]  # a SimPy process body
Start = Callable[[RequestSpec], Session]  # begins a session (a conversation) from its first request


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


@dataclass
class Sources:
    """What an arrival process builds its SimPy processes from.

    ``env`` is the clock and ``submit`` the engine's entrance; arrivals stop at
    ``duration`` seconds or when ``budget`` runs out. ``streams`` are the run's named
    random generators (an arrival process draws its gaps from ``"arrivals"``, closed
    users their think times from ``"think"``) and ``ids`` its content ids. ``make``
    makes each new request (None when the arrivals replay a trace, whose rows are the
    requests); ``start`` begins a conversation from its first request (None without
    conversations); ``shared_prefix`` gives the prefix length of a trace's prefix
    groups whose rows do not state it; ``turnaround`` draws a closed-loop client's gap
    between an answer and its next request (seconds; None: none).
    """

    env: simpy.Environment
    submit: Submit
    duration: float
    budget: Budget
    streams: Mapping[str, np.random.Generator]
    ids: ContentIds
    make: Make | None = None
    start: Start | None = None
    shared_prefix: SharedPrefix | None = None
    turnaround: Callable[[], float] | None = None

    def one_more(self) -> bool:
        """Whether the horizon allows one more request now (taking it from the budget)."""
        return self.env.now < self.duration and self.budget.take()

    def new(self) -> Make:
        """The maker of new requests (validation requires lengths of every workload but a replay)."""
        assert self.make is not None, "new requests need prompt_tokens and output_tokens"
        return self.make


def open_loop(
    env: simpy.Environment,
    gaps: Callable[[], float],
    make: Make,
    submit: Submit,
    duration: float,
    budget: Budget,
) -> Session:
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
    start: Start,
    duration: float,
    budget: Budget,
) -> Session:
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
    max_concurrency: int | None = None,
) -> Session:
    """Requests at the recorded times with the recorded lengths, until the horizon.

    With ``max_concurrency``, at most that many of them are in the system at once: one due
    while they are waits, in order, until one leaves (completed or rejected), and arrives
    when it is sent. This is the client's semaphore of ``vllm bench serve
    --max-concurrency`` (``limited_request_func`` in ``vllm/benchmarks/serve.py``); with all
    requests due at 0 it is a closed loop of ``max_concurrency`` users without think time.
    """
    in_flight: list[simpy.Event] = []
    for t, spec in zip(times, specs, strict=True):
        if t >= duration or not budget.take():
            return
        if t > env.now:
            yield env.timeout(t - env.now)
        if max_concurrency is None:
            submit(spec, False)
            continue
        while len(in_flight) >= max_concurrency:
            yield env.any_of(in_flight)
            in_flight = [e for e in in_flight if not e.triggered]
        in_flight.append(submit(spec, True))


def closed_user(
    env: simpy.Environment,
    think: Callable[[], float],
    make: Make,
    submit: Submit,
    duration: float,
    budget: Budget,
    retry_delay: float,
    turnaround: Callable[[], float] | None = None,
) -> Session:
    """One user: send, wait for the answer, think, repeat until the horizon.

    After a rejection the user waits ``retry_delay`` seconds more than its think time,
    as clients back off on errors (and so that time advances when every request of a
    zero-think workload is rejected). ``turnaround`` (if given) adds the client's own gap
    between receiving an answer and sending the next request: what keeps real users of
    a zero think time out of lock-step.
    """
    while env.now < duration and budget.take():
        request: Outcome = yield submit(make(), True)
        pause = think() + (retry_delay if request.status == "rejected" else 0.0)
        if turnaround is not None:
            pause += turnaround()
        if pause > 0:
            yield env.timeout(pause)
