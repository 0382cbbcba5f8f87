"""A GPU instance: one SimPy process per GPU (or tensor-parallel group).

It owns its KV cache (a :class:`~des.engine.kvcache.BlockManager`) and runs one
batching policy over it. It sleeps while it has no work; otherwise it loops: ask the
scheduler for a batch, cost it, hold the GPU for that long, apply the step, and hand
every request that leaves to its one exit, ``leave(request, instance)``, which asks
the cluster's route for the request's next stage. Batches are formed after every
other event at the same instant (a late-priority barrier), so requests arriving at
time ``t`` can join the batch formed at ``t``. Under async scheduling (the cost kind's
``async_scheduling``: vLLM V1's engine forms the next batch while a step runs) the
batch of a step that follows another back to back was formed when that one started,
and the scheduler is told so (``schedule(now, seen)``): a request that reached it
during the step waits a step more; after idling, the batch is formed at once, and with
no step to hide under, its CPU time (scheduling, input preparation) adds to its GPU time
(the cost model's ``serial()`` step times, as without async scheduling).

Fast-forward: a step that ends strictly before the next event anywhere in the
simulation cannot be touched by anything else, nor can the steps after it that also
end before that event. The instance runs such steps back to back, without SimPy
events, as long as none of them hands a request to the exit (whoever receives it
must see the clock at the step's end) and no KV reservation waits (serving one fires
an event); then one event brings the clock to the end of the last, exactly the sum
the per-step path (``fast_forward=False``, the reference) reaches, since both add the
same durations in the same order. The results are the reference's, to the bit.

Whatever loop steps an instance (its own, a pipeline's in
:mod:`des.engine.pipeline`, a data-parallel group's in :mod:`des.engine.lockstep`)
keeps its bookkeeping through the same three calls: :meth:`Instance.account` for each
step it commits to (the busy time the autoscaler reads), :meth:`Instance.release` for
the requests a step releases (the step's span the KV link reads, the outstanding count,
the exit), and :func:`idle` / :func:`sleep` to wait for work on the instance's one wake
event.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy
from simpy.events import Event

from des.catalog.precision import Precision
from des.catalog.specs import ModelSpec
from des.cost.base import CostKind, CostModel
from des.cost.frontend import FrontendSpec
from des.cost.uncertainty import ModelDraws
from des.cost.work import StepWork
from des.engine.events import Barrier, ExactlyAt, LateAt
from des.engine.kvcache import BlockManager
from des.engine.policy import Role, Scheduler
from des.engine.request import Request
from des.engine.steplog import StepLog
from des.engine.transferlog import TransferLog

#: The exit of every instance: ``leave(request, instance)`` for each request leaving it.
Leave = Callable[[Request, "Instance"], None]


class Lanes:
    """The API server processes in front of one engine (``serving.api_server_count``; each
    data-parallel rank has its own, as des gives every engine its own front-end: vLLM's
    ``api_server_count × dp`` processes, :mod:`des.plan.launch`), each one asyncio event
    loop that takes the requests sent to it first come, first served.

    vLLM's processes share one listening port (``SO_REUSEPORT``): the kernel hands each new
    connection to one of them by a hash of its addresses and ports, which spreads
    connections evenly but not in turn. des hands the requests to the processes in turn
    (round robin), a deterministic stand-in with the kernel's equal shares. Each process is
    a "free at" time (seconds): a request's way through it starts when it arrives or when
    the request before it there is through, whichever is later. O(1) per request."""

    __slots__ = ("free_at", "turn")

    def __init__(self, count: int = 1):
        self.free_at = [0.0] * count
        self.turn = 0

    def enter(self, ready: float, busy: float) -> float:
        """When a request ready at ``ready`` (seconds) that keeps its process ``busy``
        seconds starts at the next process in turn (which is then busy until that plus ``busy``)."""
        i = self.turn
        free = self.free_at
        self.turn = i + 1 if i + 1 < len(free) else 0
        start = ready if ready > free[i] else free[i]
        free[i] = start + busy
        return start


@dataclass(frozen=True)
class BuildContext:
    """What every part of a cluster is built with: the clock ``env``; the ``model`` served
    at ``precision``, with step times from the ``cost`` kind; the run's records (``log``
    of steps, ``transfers`` of KV); the exit ``leave``; whether steps run
    back to back when nothing else can happen (``fast_forward``); the serving front-end
    around every engine (``frontend``, None: none); and the run's draw of the step-time
    model's error (``draws``; None: the model as fitted); the stream speculative decoding's
    accepted tokens are drawn from (``speculative``)."""

    env: simpy.Environment
    model: ModelSpec
    precision: Precision
    cost: CostKind
    log: StepLog
    transfers: TransferLog
    leave: Leave
    fast_forward: bool = True
    frontend: FrontendSpec | None = None
    draws: ModelDraws | None = None
    speculative: np.random.Generator | None = None


@dataclass(slots=True)
class _Call:
    """One ``generate()`` call of the ``LLM`` class: its requests (and KV blocks held), ready
    at ``ready``, all added by ``end`` (seconds)."""

    ready: float
    end: float = 0.0
    members: list[tuple[Request, int]] = field(default_factory=list)


class Instance:
    """Runs ``scheduler``'s batches over ``kv`` with step times from ``cost``; records every
    step with the work it did (``work``) in ``ctx.log``.

    ``index`` numbers the instance across the cluster; ``role`` is the part of a
    request's life it serves; ``ctx.leave(request, instance)`` is called for every
    request that leaves it. ``standalone``: it runs its own steps; otherwise it is a rank
    of a data-parallel group that steps it (:mod:`des.engine.lockstep`) and only holds
    its scheduler, KV cache and records.
    """

    def __init__(
        self,
        ctx: BuildContext,
        index: int,
        role: Role,
        scheduler: Scheduler,
        kv: BlockManager,
        cost: CostModel,
        work: StepWork,
        standalone: bool = True,
    ):
        env = self.env = ctx.env
        self.index = index
        self.role = role
        self.scheduler = scheduler
        self.kv = kv
        self.cost = cost
        self.work = work
        self.record = ctx.log.recorder(index, role, work)
        self.leave = ctx.leave
        self.frontend = ctx.frontend
        #: The API server processes requests reach it through.
        self.lanes = Lanes(ctx.frontend.api_servers if ctx.frontend is not None else 1)
        self.intake_free = 0.0  # when the engine core's input thread is through the requests sent to it
        self._call: _Call | None = None  # the LLM class's generate() call still being added
        self.fast_forward = ctx.fast_forward
        self.forms_ahead = ctx.cost.async_scheduling  # the next batch is formed while a step runs
        serial = getattr(cost, "serial", None) if self.forms_ahead else None
        #: Step times of a batch formed on an idle engine: no GPU step to hide its CPU time under.
        self.cold: CostModel = serial() if serial is not None else cost
        self.outstanding = 0  # requests routed here and not yet left
        self.step_span = (0.0, 0.0)  # start and duration (seconds) of the step that released the last requests
        self.arriving = 0  # requests routed here and still in the front-end (not yet queued)
        self.busy = 0.0  # seconds of the steps committed to so far (each counted by ``account`` as it is)
        self.busy_until = 0.0  # when the last step committed to ends
        #: Told when the instance may hold nothing any more (an autoscaled pool's fleet, to stop a draining instance).
        self.on_empty: Callable[[Instance], None] | None = None
        self._wake: Event | None = None
        self.process = env.process(self._run()) if standalone else None

    @property
    def running(self) -> int:
        """Requests routed here that the scheduler holds and no longer queues (vLLM's running
        count): neither in the front-end nor waiting."""
        return self.outstanding - self.arriving - self.scheduler.num_waiting()

    @property
    def waiting(self) -> int:
        """Requests routed here and not yet running: in the front-end or queued (vLLM's
        ``num_requests_waiting``, counting those still being tokenized)."""
        return self.arriving + self.scheduler.num_waiting()

    def busy_at(self, now: float) -> float:
        """Seconds spent in steps up to ``now`` (the part of a running step before ``now``): exact
        while the steps committed to run back to back, as a lone instance's and a group's do
        (a pipeline's batches may overlap when a later stage is the slowest: then an estimate,
        never decreasing)."""
        return self.busy - max(self.busy_until - now, 0.0)

    @property
    def free_blocks(self) -> int:
        """KV blocks free on this instance and not asked for by a reservation still waiting."""
        return self.kv.free - self.kv.pending

    def reserve(self, req: Request, tokens: int) -> Event:
        """An event that fires once the KV blocks of ``req``'s first ``tokens`` tokens are
        set aside here for its arrival (see :meth:`BlockManager.reserve`; the scheduler
        serves reservations at step boundaries); wakes the instance if idle so that it can.
        The request counts as routed here (:attr:`outstanding`) from now on."""
        event = self.kv.reserve(req, tokens)
        self.outstanding += 1
        self._wake_up()
        return event

    def free(self, req_id: int) -> None:
        """Give back the KV blocks a request that left still holds here; wake the instance
        if idle, since waiting requests may fit now."""
        self.scheduler.free(req_id)
        self._wake_up()
        if self.on_empty is not None:
            self.on_empty(self)

    def submit(
        self, req: Request, blocks: int = 0, delay: float = 0.0, routed: bool = False, ingress: bool = False
    ) -> None:
        """Route a request (holding ``blocks`` KV blocks here) to this instance now and hand it
        to the scheduler ``delay`` seconds later, waking the instance if idle. ``ingress``: the
        request comes from a client through the serving front-end, which it enters ``delay``
        seconds from now (once the instance serves): it waits its turn at its API server
        process (:class:`Lanes`), keeps it busy for its
        :meth:`~des.cost.frontend.FrontendSpec.ingress_busy`, waits out the tokenizer's window
        and then takes the engine core's input thread (one per engine, first come, first
        served) for its intake: alone, it reaches the scheduler its
        :meth:`~des.cost.frontend.FrontendSpec.ingress` after it enters. ``routed``: it was
        already counted here when its blocks were reserved."""
        req.instance = self.index
        if self.role == "prefill":
            req.prefill_instance = self.index
        elif self.role == "decode":
            req.decode_instance = self.index
        if not routed:
            self.outstanding += 1
        fe = self.frontend
        if ingress and fe is not None:
            p = req.prompt_tokens
            ready = self.env.now + delay
            start = self.lanes.enter(ready, fe.ingress_busy(p))
            # then the engine core's input thread, first come, first served too
            if self.intake_free <= start + fe.ingress_busy(p) + fe.tokenize_wait_s:
                at = start + fe.ingress(p)
            else:
                at = self.intake_free + fe.intake_s + fe.hash_s_per_token * p
            self.intake_free = at
            self.arriving += 1
            if fe.caller_steps:
                self._join_call(req, blocks, ready, at)
            else:
                ExactlyAt(self.env, at).callbacks.append(lambda _: self._arrive(req, blocks))
        elif delay > 0:
            self.arriving += 1
            self.env.timeout(delay).callbacks.append(lambda _: self._arrive(req, blocks))
        else:
            self._enqueue(req, blocks)

    def _join_call(self, req: Request, blocks: int, ready: float, at: float) -> None:
        """``req`` (ready at ``ready``, added by ``at``) joins the ``generate()`` call of the
        requests ready at that instant: the call's requests reach the scheduler together, in
        order, once its last is added (the ``LLM`` class adds them all before it steps)."""
        call = self._call
        if call is None or call.ready != ready:
            call = self._call = _Call(ready)
            LateAt(self.env, ready).callbacks.append(lambda _: self._close_call(call))
        call.members.append((req, blocks))
        call.end = at

    def _close_call(self, call: _Call) -> None:
        if self._call is call:
            self._call = None
        ExactlyAt(self.env, call.end).callbacks.append(lambda _: self._arrive_all(call.members))

    def _arrive_all(self, members: list[tuple[Request, int]]) -> None:
        for req, blocks in members:
            self._arrive(req, blocks)

    def _arrive(self, req: Request, blocks: int) -> None:
        self.arriving -= 1
        self._enqueue(req, blocks)

    def _enqueue(self, req: Request, blocks: int) -> None:
        req.queued_time = self.env.now
        self.scheduler.add(req, blocks)
        self._wake_up()

    def wake(self) -> None:
        """Wake the instance if idle: it may have work now."""
        self._wake_up()

    def _wake_up(self) -> None:
        wake = self._wake
        if wake is not None and not wake.triggered:
            wake.succeed()

    def account(self, start: float, duration: float) -> None:
        """Count a step of ``duration`` seconds beginning at ``start`` (now or later) into
        :attr:`busy` and :attr:`busy_until`: every loop that steps the instance calls this
        once for each step it will record, as it commits to it, with the start and duration
        it will record (:meth:`_run`, the per-step path, has it inlined)."""
        self.busy += duration
        self.busy_until = start + duration

    def release(self, start: float, duration: float, released: list[Request]) -> None:
        """Hand the requests ``released`` by the step recorded as ``(start, duration)``
        (seconds) to the exit, in order; that step becomes :attr:`step_span`."""
        if released:
            self.step_span = (start, duration)
            leave = self.leave
            for req in released:
                self.outstanding -= 1
                leave(req, self)

    def _run(self) -> Generator[Event, Any, None]:
        env, sched, cost, cold, record, kv = self.env, self.scheduler, self.cost, self.cold, self.record, self.kv
        fast, ahead = self.fast_forward, self.forms_ahead
        seen: float | None = None  # when the next batch was formed (None: when it starts)
        while True:
            if env.peek() == env.now:
                yield Barrier(env)  # let every arrival due now join this batch
            step = sched.schedule(env.now, seen)
            if step is None:
                yield from idle((self,))
                seen = None  # idle: the next batch is formed when work comes
                continue
            t = env.now
            limit = env.peek() if fast else t  # steps ending before it run back to back
            costed = cold if seen is None else cost  # formed on an idle engine: its CPU time shows
            while True:
                duration = costed.step_time(step.shape)
                costed = cost
                kv_used, waiting = kv.used, sched.num_waiting()
                end = t + duration
                self.busy += duration  # account(t, duration), inlined: a call per step costs
                self.busy_until = end  # about 130 ns of the ~23 us a step takes (0.5%)
                if ahead:
                    seen = t  # the batch after this step is formed as it starts
                if end < limit and not kv.waiters:
                    released = sched.finish_step(step, end)
                    record(t, duration, step, kv_used, waiting)
                    if not released:
                        nxt = sched.schedule(end, seen)
                        if nxt is not None:
                            t, step = end, nxt
                            continue
                    yield ExactlyAt(env, end)  # the clock catches up with the steps run
                    break
                if t != env.now:
                    yield ExactlyAt(env, t)
                yield env.timeout(duration)
                released = sched.finish_step(step, env.now)
                record(t, duration, step, kv_used, waiting)
                break
            self.release(t, duration, released)


def sleep(instances: Sequence[Instance], until: Event | None = None) -> Generator[Event, Any, None]:
    """Wait until one of ``instances`` is woken (work reaches it, or KV blocks are freed on
    it: :meth:`Instance.wake`) or ``until`` fires (None: only the former). The one place an
    instance's wake event is set: whatever loop steps instances sleeps through it."""
    wake = instances[0].env.event()
    for inst in instances:
        inst._wake = wake
    yield wake if until is None else wake | until
    for inst in instances:
        inst._wake = None


def idle(instances: Sequence[Instance]) -> Generator[Event, Any, None]:
    """Sleep while ``instances`` have nothing to run: until one is woken or the earliest of
    their schedulers' own wake-up times (the idle wait of an instance, or of a
    data-parallel group's ranks together)."""
    env = instances[0].env
    times = [t for inst in instances if (t := inst.scheduler.wakeup_time()) is not None]
    return sleep(instances, env.timeout(max(min(times) - env.now, 0.0)) if times else None)
