"""The pools of a cluster and the route between them, built from a scheduler kind's plan.

:func:`build_pools` turns a :class:`~des.engine.plan.Plan` into SimPy objects: for
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
from des.engine.link import KVLink
from des.engine.lockstep import LockstepGroup
from des.engine.pipeline import Pipelined, PipelineInstance, send_cost, stage_costs
from des.engine.plan import Plan, PoolPlan
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
    scalings: tuple[int, int] = (0, 0)  # instances started, and stopped or cancelled, by its autoscaler


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
        plan: PoolPlan,
        memory: MemoryPlan,
        work: StepWork,
        fleet: Fleet | None = None,
    ):
        self.role = role
        self.work = work
        self.instances = instances
        self.router = router
        self.plan = plan
        self.memory = memory
        self.fleet = fleet
        #: The instances the router picks from: every one, or an autoscaled pool's serving ones.
        self.active = fleet.active if fleet is not None else instances
        dp = plan.parallel.dp
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

    def admit(self, req: Request, delay: float = 0.0) -> None:
        """Route ``req`` to an instance now; its scheduler sees it ``delay`` seconds later
        (and, with no instance serving, once the first starting one serves)."""
        if not self.active and self.fleet is not None:
            entrance = self.fleet.entrance()
            if entrance is not None:
                self.fleet.routed += 1
                inst, wait = entrance
                inst.submit(req, delay=wait + delay)
                return
        self.pick().submit(req, delay=delay)

    def rejection(self, req: Request) -> str | None:
        """Why ``req`` can never be served by this pool (its instances are identical)."""
        return self.instances[0].scheduler.rejection(req)

    def facts(self) -> PoolFacts:
        policy, memory = self.plan.policy, self.memory
        return PoolFacts(
            self.role, len(self.instances), self.work.peak_flops, self.work.peak_bandwidth, policy.max_batch,
            policy.token_budget, memory.num_blocks, memory.kv_capacity_tokens, self.plan.gpu.name,
            self.plan.tp * self.plan.parallel.pp,
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


def build_topology(ctx: BuildContext, plan: Plan, routers: Sequence[np.random.Generator]) -> Topology:
    """The pools of ``plan``, every instance leaving through ``ctx.leave``, and a link out of
    every instance of the first pool into the second when the plan has one."""
    pools = build_pools(ctx, plan, routers)
    links: dict[int, Stage] = {}
    if plan.link is not None:
        kv_bytes = ctx.model.kv_bytes_per_token(ctx.precision.kv_bytes)
        source, dest = pools[0], pools[1]
        for inst in source.instances:
            link = plan.link
            reserve_at: Literal["start", "end"] = "start" if link.mode == "push" else "end"
            links[inst.index] = KVLink(
                ctx.env, inst, dest.pick, link.bandwidth, link.latency, kv_bytes, ctx.transfers,
                plan.first_token_from, reserve_at, link.overlap, ctx.model.num_layers,
            )  # fmt: skip
    return Topology(pools, links)


def _pipelined(
    ctx: BuildContext, index: int, plan: PoolPlan, kv: BlockManager, cost: CostModel, work: StepWork
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


def build_pools(ctx: BuildContext, plan: Plan, routers: Sequence[np.random.Generator]) -> list[Pool]:
    """The pools of ``plan``: instances numbered in pool order, router ``i`` drawing from ``routers[i]``."""
    model, precision = ctx.model, ctx.precision
    pools = []
    index = 0
    for pool_plan, rng in zip(plan.pools, routers[: len(plan.pools)], strict=True):
        memory = pool_plan.memory(model, precision)
        multipliers = ctx.draws.for_gpu(pool_plan.gpu) if ctx.draws is not None else None
        par = pool_plan.parallel
        group = par.moe_group(model)  # ranks stepping together (1: each on its own)
        cost_ctx = CostContext(
            pool_plan.gpu,
            model,
            precision,
            pool_plan.tp,
            ctx.frontend,
            multipliers,
            moe_group=group,
            all2all=par.all2all,
        )
        spec = getattr(pool_plan.policy, "speculative", None)
        if spec is not None and spec.active and isinstance(ctx.cost, RooflineConfig):
            proposer = spec.proposer(model, precision, pool_plan.tp)
            draft = None
            if proposer is not None:
                draft = CostContext(pool_plan.gpu, proposer.spec, proposer.precision, pool_plan.tp, None, multipliers)
            cost_model: CostModel = build_verification(ctx.cost, cost_ctx, spec.num_speculative_tokens, draft)
        else:  # a constant or linear step time takes the verification step's rows as any tokens
            cost_model = ctx.cost.build(cost_ctx)
        work = step_work(pool_plan.gpu, model, precision, pool_plan.tp, group)
        instances = []
        scaling = pool_plan.autoscaler
        engines = scaling.max_instances if scaling is not None else pool_plan.engines
        for _ in range(engines):
            manager = PrefixCache if pool_plan.policy.prefix_caching else BlockManager
            kv = manager(memory.num_blocks, memory.block_size, ctx.env, model.window or 0)
            if par.pp > 1:
                instances.append(_pipelined(ctx, index, pool_plan, kv, cost_model, work))
            else:
                sched = pool_plan.policy.build(kv, model.max_model_len, pool_plan.role, ctx.speculative)
                instances.append(Instance(ctx, index, pool_plan.role, sched, kv, cost_model, work, group == 1))
            index += 1
        if group > 1:
            for i in range(0, len(instances), group):
                LockstepGroup(ctx.env, instances[i : i + group], cost_model, ctx.cost.async_scheduling)
        fleet = None
        if scaling is not None:
            eager = getattr(ctx.cost, "enforce_eager", False)
            cold = cold_start_seconds(scaling, weight_bytes(model, precision), not eager)
            fleet = Fleet(ctx.env, instances, pool_plan.instances, cold)
            fleet.autoscaler = Autoscaler(ctx.env, fleet, scaling)
        router = ROUTERS.get(pool_plan.router)(rng)
        pools.append(Pool(pool_plan.role, instances, router, pool_plan, memory, work, fleet))
    return pools
