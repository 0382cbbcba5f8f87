"""A GPU instance: one SimPy process per GPU (or tensor-parallel group).

It sleeps while it has no work; otherwise it loops: ask the scheduler for a batch,
cost it, hold the GPU for that long, apply the step, release finished requests.
Batches are formed after every other event at the same instant (a late-priority
barrier), so requests arriving at time ``t`` can join the batch formed at ``t``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import simpy
from simpy.events import Event, EventPriority

from des.cost.base import CostModel
from des.engine.request import Request
from des.engine.schedulers.base import Scheduler
from des.engine.steplog import StepLog

#: Priority of the batch-formation barrier: after SimPy's URGENT (0) and NORMAL (1).
LATE = EventPriority(2)


class _Barrier(Event):
    """Succeeds now, after every URGENT and NORMAL event already due now."""

    def __init__(self, env: simpy.Environment):
        super().__init__(env)
        self._ok = True
        self._value = None
        env.schedule(self, LATE)


class Instance:
    """Runs ``scheduler``'s batches with step times from ``cost``; logs every step."""

    def __init__(
        self,
        env: simpy.Environment,
        index: int,
        scheduler: Scheduler,
        cost: CostModel,
        log: StepLog,
        on_release: Callable[[Request], None],
    ):
        self.env = env
        self.index = index
        self.scheduler = scheduler
        self.cost = cost
        self.log = log
        self.on_release = on_release
        self.outstanding = 0  # requests routed here and not yet released
        self._wake: Event | None = None
        self.process = env.process(self._run())

    def submit(self, req: Request) -> None:
        """Hand a request to this instance's scheduler and wake the instance if idle."""
        req.instance = self.index
        self.outstanding += 1
        self.scheduler.add(req)
        wake = self._wake
        if wake is not None and not wake.triggered:
            wake.succeed()

    def _run(self) -> Generator:
        env, sched, cost, record = self.env, self.scheduler, self.cost, self.log.record
        index, release = self.index, self.on_release
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
            kv_used, waiting = sched.kv.used, sched.num_waiting()
            yield env.timeout(duration)
            released = sched.finish_step(step, env.now)
            shape = step.shape
            record(
                index, start, duration, step.batch_size, step.width, shape.prefill_tokens,
                shape.decode_tokens, step.emitted, kv_used, waiting, step.preempted,
            )
            for req in released:
                self.outstanding -= 1
                release(req)

