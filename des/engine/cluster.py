"""A cluster: pools of instances, the route between them, and the ledger of every request.

``submit`` creates each request (ids from this cluster's own counter, rows of its
:class:`~des.engine.ledger.RequestLog`), rejects it
with a reason when some pool on its path can never serve it, and otherwise admits it
to the first pool. Every instance hands each request that leaves it to
:meth:`Cluster.leave`, its only exit: the topology's route names the request's next
stage (a KV link to the decode pool), or none, and then the request is completed and
its KV blocks freed on the instance it left. Whatever is neither completed nor
rejected when the simulation stops stays ``unfinished``. Behind a serving front-end a
request is routed to an instance of the first pool when it arrives (a load balancer in
front of the servers) and reaches that instance's scheduler once through its API server
process (first come, first served: :class:`~des.engine.instance.Lanes`; HTTP, tokenizing:
:meth:`~des.cost.frontend.FrontendSpec.ingress_busy` and
:meth:`~des.cost.frontend.FrontendSpec.ingress_after`), which its TTFT includes; each of
its tokens reaches the client the front-end's
:attr:`~des.cost.frontend.FrontendSpec.egress` after the step that emits it: the ledger
dates its tokens so, and a closed-loop user's next request waits for the last.

The cluster also knows when it is *drained*: once :meth:`close` says no more
requests will arrive, the :attr:`drained` event fires as soon as no admitted request
is left in the system. A run that drains stops on that event, never on the emptiness
of SimPy's event queue (which holds unrelated events, e.g. the stop events that
``Environment.run(until=...)`` leaves behind).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import simpy

from des.catalog.precision import Precision
from des.catalog.specs import ModelSpec
from des.cost.base import CostKind
from des.cost.frontend import FrontendSpec
from des.cost.uncertainty import ModelDraws
from des.engine.events import ExactlyAt
from des.engine.instance import BuildContext, Instance
from des.engine.layout import Deployment
from des.engine.ledger import RequestLog
from des.engine.request import COMPLETED, REJECTED, Request
from des.engine.steplog import StepLog
from des.engine.topology import build_topology
from des.engine.transferlog import TransferLog
from des.workload.spec import RequestSpec


class Cluster:
    """The pools of ``deployment`` (of ``model`` at ``precision``, step times from
    ``cost``, behind ``frontend``, scaled by ``draws`` when the run draws the model's
    error), router ``i`` drawing from ``routers[i]``, speculative decoding's accepted tokens
    from ``speculative``; every step logged."""

    def __init__(
        self,
        env: simpy.Environment,
        deployment: Deployment,
        model: ModelSpec,
        precision: Precision,
        cost: CostKind,
        routers: Sequence[np.random.Generator],
        fast_forward: bool = True,
        frontend: FrontendSpec | None = None,
        draws: ModelDraws | None = None,
        speculative: np.random.Generator | None = None,
    ):
        self.env = env
        self.deployment = deployment
        self.frontend = frontend
        self.draws = draws
        self.log = StepLog()
        self.transfers = TransferLog()
        ctx = BuildContext(
            env,
            model,
            precision,
            cost,
            self.log,
            self.transfers,
            self.leave,
            fast_forward,
            frontend,
            draws,
            speculative,
        )
        self.topology = build_topology(ctx, deployment, routers)
        self.egress = frontend.egress if frontend is not None else 0.0  # seconds from a token's step to its client
        self.ledger = RequestLog(self.egress)
        self.in_system = 0  # admitted requests not yet completed
        self.closed = False  # no more arrivals
        self.drained = env.event()  # fires once closed and nothing is left in the system

    @property
    def instances(self) -> list[Instance]:
        return self.topology.instances

    def submit(self, spec: RequestSpec, notify: bool = False) -> Any:
        """A request arrives now; returns an event fired when it leaves if ``notify``."""
        env = self.env
        req = Request(
            len(self.ledger),
            env.now,
            spec.prompt_tokens,
            spec.output_tokens,
            segments=spec.segments,
            answer_id=spec.answer_id,
            conversation_id=spec.conversation_id,
            turn=spec.turn,
            prefix_group=spec.prefix_group,
            previous=spec.previous,
        )
        self.ledger.add(req)
        reason = self.topology.rejection(req)
        if reason is not None:
            req.status, req.reason = REJECTED, reason
            self.ledger.write(req)
            return env.event().succeed(req) if notify else None
        if notify:
            req.done = env.event()
        self.in_system += 1
        self.topology.entry.admit(req, ingress=self.frontend is not None)
        return req.done

    def leave(self, req: Request, inst: Instance) -> None:
        """``req`` leaves ``inst``: on to its next stage, or out of the system."""
        nxt = self.topology.route(req, inst)
        if nxt is not None:
            nxt.admit(req)
            return
        inst.free(req.id)
        req.status = COMPLETED
        self.ledger.write(req)
        self.in_system -= 1
        done = req.done
        if done is not None:
            if self.egress:  # the client has its last token once it is through the front-end
                ExactlyAt(self.env, self.env.now + self.egress).callbacks.append(lambda _: done.succeed(req))
            else:
                done.succeed(req)
        if self.in_system == 0:
            self._check_drained()

    def close(self) -> None:
        """No more requests will arrive: :attr:`drained` fires once the system is empty."""
        self.closed = True
        self._check_drained()

    def _check_drained(self) -> None:
        if self.closed and self.in_system == 0 and not self.drained.triggered:
            self.drained.succeed()

    def settle(self) -> None:
        """Write every request still in flight into the ledger, its progress up to date (the
        run has stopped)."""
        for inst in self.instances:
            inst.scheduler.sync()
        self.ledger.settle()
