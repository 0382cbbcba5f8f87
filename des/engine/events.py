"""The engine's own SimPy events, each already triggered and scheduled when made.

SimPy orders the events due at one instant by priority (``URGENT`` 0, then ``NORMAL``
1), then by the order they were scheduled. des adds:

- :class:`Barrier`: fires now, after every URGENT and NORMAL event already due now, so
  that the requests arriving at ``t`` join the batch formed at ``t``;
- :class:`LateAt`: a :class:`Barrier` at time ``at`` (now or later);
- :class:`ExactlyAt`: fires at exactly time ``at``, which ``env.timeout(at - now)``
  need not reach (``now + (at - now)`` may differ from ``at`` in floating point);
- :class:`StopAt`: fires at ``at`` before the regular events due then, as the stop
  event of ``Environment.run(until=at)`` does: a run stops on it.
"""

from __future__ import annotations

from heapq import heappush

import simpy
from simpy.events import NORMAL, URGENT, Event, EventPriority

#: Priority of the batch-formation barrier: after SimPy's URGENT (0) and NORMAL (1).
LATE = EventPriority(2)


def _triggered(event: Event) -> None:
    event._ok = True
    event._value = None


def _schedule_exactly(env: simpy.Environment, event: Event, at: float, priority: EventPriority) -> None:
    """Put ``event`` in ``env``'s queue at time ``at`` itself.

    ``Environment.schedule`` takes a delay and adds it to now; a queue entry is
    ``(time, priority, event id, event)``, as ``simpy.core.Environment.schedule`` pushes
    it in SimPy 4.1.2 (the version this was checked against): the one place des uses
    SimPy's private ``_queue`` and ``_eid``.
    """
    heappush(env._queue, (at, priority, next(env._eid), event))


class Barrier(Event):
    """Succeeds now, after every URGENT and NORMAL event already due now."""

    def __init__(self, env: simpy.Environment):
        super().__init__(env)
        _triggered(self)
        env.schedule(self, LATE)


class ExactlyAt(Event):
    """Succeeds at exactly time ``at`` (seconds), as a NORMAL event."""

    def __init__(self, env: simpy.Environment, at: float):
        super().__init__(env)
        _triggered(self)
        _schedule_exactly(env, self, at, NORMAL)


class LateAt(Event):
    """Succeeds at ``at`` (seconds, now or later), after every URGENT and NORMAL event due then."""

    def __init__(self, env: simpy.Environment, at: float):
        super().__init__(env)
        _triggered(self)
        _schedule_exactly(env, self, at, LATE)


class StopAt(Event):
    """Succeeds at ``at`` (seconds) before the regular events due then (URGENT)."""

    def __init__(self, env: simpy.Environment, at: float):
        super().__init__(env)
        _triggered(self)
        env.schedule(self, URGENT, at - env.now)
