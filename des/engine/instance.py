"""A GPU instance: one SimPy process per GPU (or tensor-parallel group).

It owns its KV cache (a :class:`~des.engine.kvcache.BlockManager`) and runs one
batching policy over it. It sleeps while it has no work; otherwise it loops: ask the
scheduler for a batch, cost it, hold the GPU for that long, apply the step, and hand
every request that leaves to its one exit, ``leave(request, instance)``, which asks
the cluster's route for the request's next stage. Batches are formed after every
other event at the same instant (a late-priority barrier), so requests arriving at
time ``t`` can join the batch formed at ``t``.

Fast-forward: when the scheduler (a :class:`SpanScheduler`) says the next ``j`` steps
are pure decodes of the same members that release nobody, the instance costs them
one by one (each step's decode context grows by its batch size), keeps those that
end strictly before the next event anywhere in the simulation, logs them and applies
them to the scheduler at once. It then lets the clock run through them step by step
(one bare timeout each, so the clock follows the very chain of sums the per-step path
computes; no single delay can land on the sum of many in floating point). Nothing
else can happen in between, so the result is the one the per-step path
(``fast_forward=False``, the reference) gives, to the bit, at a fraction of the
per-step cost.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import replace
from typing import Any

import simpy
from simpy.events import Event, EventPriority

from des.cost.base import CostModel
from des.cost.work import StepWork
from des.engine.kvcache import BlockManager
from des.engine.request import Request
from des.engine.schedulers.base import Role, Scheduler, SpanScheduler, Step
from des.engine.steplog import ROLE_CODE, StepLog

#: Priority of the batch-formation barrier: after SimPy's URGENT (0) and NORMAL (1).
LATE = EventPriority(2)
#: Longest run of steps applied at once (bounds the per-span arrays).
MAX_SPAN = 4096


class _Barrier(Event):
    """Succeeds now, after every URGENT and NORMAL event already due now."""

    def __init__(self, env: simpy.Environment):
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, LATE)


class Instance:
    """Runs ``scheduler``'s batches over ``kv`` with step times from ``cost``; logs every
    step with the work it did (``work``).

    ``index`` numbers the instance across the cluster; ``role`` is the part of a
    request's life it serves; ``leave(request, instance)`` is called for every
    request that leaves it.
    """

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        role: Role,
        scheduler: Scheduler,
        kv: BlockManager,
        cost: CostModel,
        work: StepWork,
        log: StepLog,
        leave: Callable[[Request, Instance], None],
        fast_forward: bool = True,
    ):
        self.env = env
        self.index = index
        self.role = role
        self.role_code = ROLE_CODE[role]
        self.scheduler = scheduler
        self.kv = kv
        self.cost = cost
        self.work = work
        self.log = log
        self.leave = leave
        self.spans: SpanScheduler | None = scheduler if fast_forward and isinstance(scheduler, SpanScheduler) else None
        self.outstanding = 0  # requests routed here and not yet left
        self._wake: Event | None = None
        self.process = env.process(self._run())

    @property
    def free_blocks(self) -> int:
        """KV blocks free (not held or reserved) on this instance."""
        return self.kv.free

    def reserve(self, req: Request, tokens: int) -> Event:
        """An event that fires once the KV blocks of ``req``'s first ``tokens`` tokens are
        set aside here for its arrival (see :meth:`BlockManager.reserve`; the scheduler
        serves reservations at step boundaries); wakes the instance if idle so that it can."""
        event = self.kv.reserve(req, tokens)
        self._wake_up()
        return event

    def free(self, req_id: int) -> None:
        """Give back the KV blocks a request that left still holds here; wake the instance
        if idle, since waiting requests may fit now."""
        self.scheduler.free(req_id)
        self._wake_up()

    def submit(self, req: Request, blocks: int = 0) -> None:
        """Hand a request (holding ``blocks`` KV blocks here) to the scheduler; wake the instance if idle."""
        req.instance = self.index
        if self.role == "prefill":
            req.prefill_instance = self.index
        elif self.role == "decode":
            req.decode_instance = self.index
        self.outstanding += 1
        self.scheduler.add(req, blocks)
        self._wake_up()

    def _wake_up(self) -> None:
        wake = self._wake
        if wake is not None and not wake.triggered:
            wake.succeed()

    def _run(self) -> Generator[Event, Any, None]:
        env, sched, cost, record, kv = self.env, self.scheduler, self.cost, self.log.record, self.kv
        leave = self.leave
        while True:
            if env.peek() == env.now:
                yield _Barrier(env)  # let every arrival due now join this batch
            step = sched.schedule(env.now)
            if step is None:
                self._wake = env.event()
                wake_at = sched.wakeup_time()
                if wake_at is None:
                    yield self._wake
                else:
                    yield self._wake | env.timeout(max(wake_at - env.now, 0.0))
                self._wake = None
                continue
            start = env.now
            duration = cost.step_time(step.shape)
            if self.spans is not None and start + duration < env.peek():
                j = self.spans.steady_steps(step, MAX_SPAN)
                if j > 1:
                    end = yield from self._span(self.spans, step, j, duration)
                    if end is not None:
                        continue
            kv_used, waiting = kv.used, sched.num_waiting()
            yield env.timeout(duration)
            released = sched.finish_step(step, env.now)
            record(self, start, duration, step, kv_used, waiting)
            for req in released:
                self.outstanding -= 1
                leave(req, self)

    def _span(self, sched: SpanScheduler, step: Step[Any], j: int, first: float) -> Generator[Event, Any, float | None]:
        """Apply up to ``j`` steady steps that end before the next event; None if < 2."""
        env = self.env
        limit = env.peek()
        shape = step.shape
        grow = shape.decode_tokens
        probe = replace(shape)  # a decode step's shape; only its context grows
        work = self.work
        starts, durations, flops, hbm_bytes = [], [], [], []
        t, d = env.now, first
        for _ in range(j):
            end = t + d
            if not end < limit:
                break
            starts.append(t)
            durations.append(d)
            flops.append(work.flops(probe))
            hbm_bytes.append(work.hbm_bytes(probe))
            t = end
            probe.decode_context += grow
            d = self.cost.step_time(probe)
        m = len(starts)
        if m < 2:
            return None
        waiting = sched.num_waiting()
        kv = sched.advance(step, m)
        self.log.record_span(self, starts, durations, step, kv.tolist(), waiting, flops, hbm_bytes)
        timeout = env.timeout
        for d in durations:
            yield timeout(d)
        return t
