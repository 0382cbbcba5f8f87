"""A cluster: instances behind a router, and the ledger of every request that arrived.

``submit`` creates each request (ids from this cluster's own counter), rejects it
with a reason when it can never be served, and otherwise routes it. Released
requests are marked completed; whatever is neither completed nor rejected when the
simulation stops stays ``unfinished``.

The cluster also knows when it is *drained*: once :meth:`close` says no more
requests will arrive, the :attr:`drained` event fires as soon as no admitted request
is left in the system. A run that drains stops on that event, never on the emptiness
of SimPy's event queue (which holds unrelated events, e.g. the stop events that
``Environment.run(until=...)`` leaves behind).
"""

from __future__ import annotations

from collections.abc import Sequence

import simpy

from des.cost.base import CostModel
from des.engine.instance import Instance
from des.engine.request import COMPLETED, REJECTED, Request
from des.engine.router import Router
from des.engine.schedulers.base import Scheduler
from des.engine.steplog import StepLog


class Cluster:
    """Identical instances (one per scheduler given) behind ``router``."""

    def __init__(
        self,
        env: simpy.Environment,
        schedulers: Sequence[Scheduler],
        cost: CostModel,
        router: Router,
        fast_forward: bool = True,
    ):
        self.env = env
        self.requests: list[Request] = []
        self.log = StepLog()
        self.router = router
        self.instances = [
            Instance(env, i, s, cost, self.log, self._release, fast_forward) for i, s in enumerate(schedulers)
        ]
        self.in_system = 0  # admitted requests not yet completed
        self.closed = False  # no more arrivals
        self.drained = env.event()  # fires once closed and nothing is left in the system

    def submit(self, prompt_tokens: int, output_tokens: int, notify: bool = False):
        """A request arrives now; returns an event fired when it leaves if ``notify``."""
        env = self.env
        req = Request(len(self.requests), env.now, prompt_tokens, output_tokens)
        self.requests.append(req)
        reason = self.instances[0].scheduler.rejection(req)
        if reason is not None:
            req.status, req.reason = REJECTED, reason
            return env.event().succeed(req) if notify else None
        if notify:
            req.done = env.event()
        self.in_system += 1
        self.instances[self.router.pick(self.instances)].submit(req)
        return req.done

    def close(self) -> None:
        """No more requests will arrive: :attr:`drained` fires once the system is empty."""
        self.closed = True
        self._check_drained()

    def _check_drained(self) -> None:
        if self.closed and self.in_system == 0 and not self.drained.triggered:
            self.drained.succeed()

    @property
    def kv_capacity_tokens(self) -> int:
        """KV-cache capacity of one instance, tokens."""
        kv = self.instances[0].scheduler.kv
        return kv.num_blocks * kv.block_size

    def settle(self) -> None:
        """Bring every request still held by a scheduler up to date (the run has stopped)."""
        for inst in self.instances:
            inst.scheduler.sync()

    def _release(self, req: Request) -> None:
        req.status = COMPLETED
        self.in_system -= 1
        if req.done is not None:
            req.done.succeed(req)
        if self.in_system == 0:
            self._check_drained()
