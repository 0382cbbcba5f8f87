"""The pools of a cluster and the route between them, built from the resolved deployment.

:func:`build_pools` turns a :class:`~des.engine.layout.Deployment` into SimPy objects: for
each pool its instances (numbered across the cluster in pool order), each with its
own KV cache sized by the pool's memory plan, its own scheduler and the pool's cost
model, and a router; then the :class:`Topology` that routes a request leaving an
instance to its next stage, like Ciw's node → routing → exit node: another pool
through a link, or ``None`` for leaving the system.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from des.catalog.memory import MemoryPlan, weight_bytes
from des.cost.base import CostContext, CostModel
from des.cost.roofline import RooflineConfig
from des.cost.speculative import build_verification
from des.cost.work import StepWork, step_work
from des.engine.autoscaler import Autoscaler, Fleet, Timeline, cold_start_seconds
from des.engine.instance import BuildContext, Instance
from des.engine.kvcache import BlockManager
from des.engine.layout import Deployment, PoolLayout, ResolvedPool
from des.engine.link import KVLink
from des.engine.lockstep import LockstepGroup
from des.engine.pipeline import Pipelined, PipelineInstance, send_cost, stage_costs
from des.engine.policy import Role
from des.engine.prefix_cache import PrefixCache
from des.engine.request import Request
from des.engine.router import ROUTERS, DataParallelBalance, Router


class Stage(Protocol):
    """Somewhere a request can be sent next: a pool, or a link to one."""

    def admit(self, req: Request) -> None: ...


@dataclass(frozen=True)
class PoolFacts:
    """What a pool reports of itself for a run's metrics (desmod's result hook): its
    ``role`` and number of ``instances`` (an autoscaled pool's most), the peaks and caps of
    each instance, its GPUs, and an autoscaled pool's timeline of instances serving and paid for."""

    role: Role
    instances: int
    peak_flops: float  # FLOP/s
    peak_bandwidth: float  # bytes/s
    max_batch: int  # sequences per step
    token_budget: int | None  # tokens per step (None: no budget)
    kv_blocks: int
    kv_capacity_tokens: int
    gpu: str = ""  # the catalog name of its GPUs
    gpus_per_instance: int = 1  # GPUs of each of its engines (tp x pp)
    timeline: Timeline | None = None  # an autoscaled pool's serving and paying counts over time (None: fixed)
    scalings: tuple[int, int] = (0, 0)  # scale-ups (started, or back from draining), scale-downs (drained, cancelled)


class Server:
    """The data-parallel ranks of one server, seen from the pool's router as one: its load is
    the sum of its ranks'."""

    def __init__(self, ranks: list[Instance]):
        self.ranks = ranks

    @property
    def outstanding(self) -> int:
        return sum(r.outstanding for r in self.ranks)

    @property
    def free_blocks(self) -> int:
        return sum(r.free_blocks for r in self.ranks)

    @property
    def running(self) -> int:
        return sum(r.running for r in self.ranks)


class Pool:
    """Instances of one role behind a router; with data parallelism, servers of ``dp`` ranks
    each behind the router, and vLLM's balancing over the ranks of a server
    (:class:`~des.engine.router.DataParallelBalance`)."""

    def __init__(
        self,
        role: Role,
        instances: list[Instance],
        router: Router,
        layout: PoolLayout,
        memory: MemoryPlan,
        work: StepWork,
        fleet: Fleet | None = None,
    ):
        self.role = role
        self.work = work
        self.instances = instances
        self.router = router
        self.layout = layout
        self.memory = memory
        self.fleet = fleet
        #: The instances the router picks from: every one, or an autoscaled pool's serving ones.
        self.active = fleet.active if fleet is not None else instances
        dp = layout.parallel.dp
        self.servers = [Server(instances[i : i + dp]) for i in range(0, len(instances), dp)] if dp > 1 else []
        self.balance = DataParallelBalance()

    def pick(self) -> Instance:
        """The instance the router sends the next request to (through vLLM's balancing over
        the ranks of the server it picks, with data parallelism)."""
        if self.fleet is not None:
            self.fleet.routed += 1
        if not self.servers:
            return self.active[self.router.pick(self.active)]
        servers = self.servers
        server = servers[self.router.pick(servers)] if len(servers) > 1 else servers[0]
        return server.ranks[self.balance.pick(server.ranks)]

    def admit(self, req: Request, ingress: bool = False) -> None:
        """Route ``req`` to an instance now; its scheduler sees it then, or with ``ingress``
        once through the serving front-end (:meth:`Instance.submit`), which it enters now
        (with no instance serving, once the first starting one serves)."""
        if not self.active and self.fleet is not None:
            entrance = self.fleet.entrance()
            if entrance is not None:
                self.fleet.routed += 1
                inst, wait = entrance
                inst.submit(req, delay=wait, ingress=ingress)
                return
        self.pick().submit(req, ingress=ingress)

    def rejection(self, req: Request) -> str | None:
        """Why ``req`` can never be served by this pool (its instances are identical)."""
        return self.instances[0].scheduler.rejection(req)

    def facts(self) -> PoolFacts:
        policy, memory, layout = self.layout.policy, self.memory, self.layout
        return PoolFacts(
            self.role, len(self.instances), self.work.peak_flops, self.work.peak_bandwidth, policy.max_batch,
            policy.token_budget, memory.num_blocks, memory.kv_capacity_tokens, layout.gpu.name,
            layout.tp * layout.parallel.pp,
            self.fleet.timeline if self.fleet is not None else None,
            (self.fleet.scale_ups, self.fleet.scale_downs) if self.fleet is not None else (0, 0),
        )  # fmt: skip


@dataclass
class Topology:
    """The pools of a cluster and the route between them.

    A request enters the first pool. When it leaves an instance it goes on to the next
    pool through that instance's link, unless it is done (all its tokens emitted) or
    the instance is in the last pool: then it leaves the system.
    """

    pools: list[Pool]
    links: dict[int, Stage] = field(default_factory=dict)  # instance index -> its outbound link

    @property
    def entry(self) -> Pool:
        return self.pools[0]

    @property
    def instances(self) -> list[Instance]:
        return [inst for pool in self.pools for inst in pool.instances]

    def route(self, req: Request, inst: Instance) -> Stage | None:
        """The next stage of ``req`` leaving ``inst``, or None when it leaves the system."""
        if req.generated >= req.output_tokens:
            return None
        return self.links.get(inst.index)

    def facts(self) -> list[PoolFacts]:
        """Every pool's facts, in the order requests pass through them."""
        return [pool.facts() for pool in self.pools]

    def rejection(self, req: Request) -> str | None:
        """Why ``req`` can never be served on its path (every pool is asked)."""
        for pool in self.pools:
            reason = pool.rejection(req)
            if reason is not None:
                return reason
        return None


def build_topology(ctx: BuildContext, deployment: Deployment, routers: Sequence[np.random.Generator]) -> Topology:
    """The pools of ``deployment``, every instance leaving through ``ctx.leave``, and a link out
    of every instance of the first pool into the second when its layout has one."""
    pools = build_pools(ctx, deployment, routers)
    links: dict[int, Stage] = {}
    layout = deployment.layout
    if layout.link is not None:
        kv_bytes = ctx.model.kv_bytes_per_token(ctx.precision.kv_bytes)
        source, dest = pools[0], pools[1]
        for inst in source.instances:
            link = layout.link
            reserve_at: Literal["start", "end"] = "start" if link.mode == "push" else "end"
            links[inst.index] = KVLink(
                ctx.env, inst, dest.pick, link.bandwidth, link.latency, kv_bytes, ctx.transfers,
                layout.first_token_from, reserve_at, link.overlap, ctx.model.num_layers,
            )  # fmt: skip
    return Topology(pools, links)


def _pipelined(
    ctx: BuildContext, index: int, plan: PoolLayout, kv: BlockManager, cost: CostModel, work: StepWork
) -> Instance:
    """An engine of ``plan.parallel.pp`` pipeline stages (:mod:`des.engine.pipeline`): one
    scheduler per batch in flight, each with ``max_num_seqs / pp`` sequences."""
    pp, model = plan.parallel.pp, ctx.model
    policy: Any = plan.policy
    part = policy.model_copy(update={"max_num_seqs": max(1, policy.max_num_seqs // pp)})
    subs = [part.build(kv, model.max_model_len, plan.role) for _ in range(pp)]
    cctx = CostContext(plan.gpu, model, ctx.precision, plan.tp, ctx.frontend,
                       ctx.draws.for_gpu(plan.gpu) if ctx.draws is not None else None)  # fmt: skip
    return PipelineInstance(
        ctx, index, plan.role, Pipelined(subs), kv, cost, work,
        stages=stage_costs(ctx.cost, cctx, pp), send=send_cost(cctx),
    )  # fmt: skip


def _pool_cost(ctx: BuildContext, pool: ResolvedPool) -> CostModel:
    """The step-time model of the pool's engines: the cost model on its GPUs (with the run's
    draw of the model's error), verifying speculative decoding's drafts where it speculates."""
    plan, model, precision = pool.layout, ctx.model, ctx.precision
    multipliers = ctx.draws.for_gpu(plan.gpu) if ctx.draws is not None else None
    par = plan.parallel
    cost_ctx = CostContext(
        plan.gpu, model, precision, plan.tp, ctx.frontend, multipliers,
        moe_group=par.moe_group(model), all2all=par.all2all,
    )  # fmt: skip
    spec = plan.policy.speculative
    if spec is not None and spec.active and isinstance(ctx.cost, RooflineConfig):
        proposer = pool.proposer
        draft = None
        if proposer is not None:
            draft = CostContext(plan.gpu, proposer.spec, proposer.precision, plan.tp, None, multipliers)
        return build_verification(ctx.cost, cost_ctx, spec.num_speculative_tokens, draft)
    return ctx.cost.build(cost_ctx)  # a constant or linear step time takes the verification step's rows as any tokens


def _engines(ctx: BuildContext, pool: ResolvedPool, first: int, cost: CostModel, work: StepWork) -> list[Instance]:
    """The pool's engines (an autoscaled pool's most), numbered from ``first``, each with its own
    KV cache and scheduler; the ranks of a data-parallel MoE group stepping together."""
    plan, memory, model = pool.layout, pool.memory, ctx.model
    group = plan.parallel.moe_group(model)  # ranks stepping together (1: each on its own)
    scaling = plan.autoscaler
    count = scaling.max_instances if scaling is not None else plan.engines
    instances = []
    for index in range(first, first + count):
        manager = PrefixCache if plan.policy.prefix_caching else BlockManager
        kv = manager(memory.num_blocks, memory.block_size, ctx.env, model.window or 0)
        if plan.parallel.pp > 1:
            instances.append(_pipelined(ctx, index, plan, kv, cost, work))
        else:
            sched = plan.policy.build(kv, model.max_model_len, plan.role, ctx.speculative)
            instances.append(Instance(ctx, index, plan.role, sched, kv, cost, work, group == 1))
    if group > 1:
        for i in range(0, len(instances), group):
            LockstepGroup(ctx.env, instances[i : i + group], cost, ctx.cost.async_scheduling)
    return instances


def _fleet(ctx: BuildContext, plan: PoolLayout, instances: list[Instance]) -> Fleet | None:
    """An autoscaled pool's fleet and its autoscaler (None: a fixed pool)."""
    scaling = plan.autoscaler
    if scaling is None:
        return None
    graphs = not (isinstance(ctx.cost, RooflineConfig) and ctx.cost.enforce_eager)  # constant, linear: no engine
    cold = cold_start_seconds(scaling, weight_bytes(ctx.model, ctx.precision), graphs)
    fleet = Fleet(ctx.env, instances, plan.instances, cold)
    fleet.autoscaler = Autoscaler(ctx.env, fleet, scaling)
    return fleet


def build_pools(ctx: BuildContext, deployment: Deployment, routers: Sequence[np.random.Generator]) -> list[Pool]:
    """The pools of ``deployment``: instances numbered in pool order, router ``i`` drawing from ``routers[i]``."""
    model, precision = ctx.model, ctx.precision
    pools = []
    index = 0
    for pool, rng in zip(deployment.pools, routers[: len(deployment.pools)], strict=True):
        plan = pool.layout
        cost = _pool_cost(ctx, pool)
        work = step_work(plan.gpu, model, precision, plan.tp, plan.parallel.moe_group(model))
        instances = _engines(ctx, pool, index, cost, work)
        index += len(instances)
        router = ROUTERS.get(plan.router)(rng)
        pools.append(Pool(plan.role, instances, router, plan, pool.memory, work, _fleet(ctx, plan, instances)))
    return pools
