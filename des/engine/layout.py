"""The engine's layout: the pools a request passes through, and the link between them,
resolved once with what each pool needs to be built.

A :class:`Layout` is plain data, made from the scenario's ``cluster.pools``
(:mod:`des.engine.deployment`): one pool of colocated instances, or a prefill pool, a
decode pool and a KV link between them. Resolved, it becomes a
:class:`Deployment`, where every pool carries its KV memory plan and its speculative
proposer, computed once (desmod's ``elaborate()``, done by the scenario's validation:
:attr:`des.scenario.Scenario.deployment`): validation, the engine
(:mod:`des.engine.topology`), the planner, the launcher and the result read those
records, and nothing recomputes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from des.catalog.memory import GraphCapture, MemoryPlan, plan_memory
from des.catalog.precision import Precision
from des.catalog.specs import GPUSpec, ModelSpec
from des.cost.uncertainty import FactorSource
from des.engine.defaults import AppliedDefaults
from des.engine.policy import PolicyConfig, Role
from des.engine.scaling import MAX_INSTANCES as AUTOSCALED_MAX
from des.engine.scaling import AutoscalerConfig
from des.engine.speculative import Proposer

#: The most instances a pool may have: each is a SimPy process with its own KV cache and
#: scheduler (10,000 build in about 2 s and 100 MB; 1e29 would never be built).
MAX_INSTANCES = AUTOSCALED_MAX

#: How a mixture of experts' MoE layers exchange tokens between data-parallel ranks
#: (vLLM's ``all2all_backend``, ``vllm/config/parallel.py``): ``allgather_reducescatter``
#: (vLLM's default: every rank gathers the group's tokens, computes its experts' share, and
#: reduce-scatters the outputs back) or ``all_to_all`` (DeepEP / pplx-style dispatch and
#: combine: each token goes to the ranks of its ``top-k`` experts only).
All2AllBackend = Literal["allgather_reducescatter", "all_to_all"]
ALL2ALL_BACKENDS: tuple[str, ...] = get_args(All2AllBackend)


@dataclass(frozen=True)
class Parallelism:
    """How each engine of a pool is split, as vLLM names it: ``dp`` data-parallel ranks
    (``data_parallel_size``) of ``tp`` GPUs each, ``expert_parallel``
    (``enable_expert_parallel``), the MoE layers' token exchange ``all2all``, and ``pp``
    pipeline stages (``pipeline_parallel_size``) per rank."""

    dp: int = 1
    expert_parallel: bool = False
    all2all: All2AllBackend = "allgather_reducescatter"
    pp: int = 1

    def moe_group(self, model: ModelSpec) -> int:
        """Data-parallel ranks that step together through MoE layers and share the experts:
        ``dp`` for a mixture of experts, 1 for a dense model (whose ranks step on their own)."""
        return self.dp if model.is_moe and self.dp > 1 else 1


@dataclass(frozen=True)
class PoolLayout:
    """``instances`` servers of ``parallel.dp`` data-parallel engines (ranks) of ``tp`` x
    ``gpu`` each, playing ``role`` with batching ``policy``, capturing the CUDA graphs
    ``graphs``; ``router`` picks a server, vLLM's data-parallel balancing a rank within it.
    With an ``autoscaler``, ``instances`` serve at t = 0 and the autoscaler sets how many
    serve after (:mod:`des.engine.autoscaler`). ``name``: the scenario's name of the pool;
    ``defaults``: which of ``policy``'s settings the scenario left out and vLLM's defaults
    filled (:mod:`des.engine.defaults`)."""

    role: Role
    instances: int
    policy: PolicyConfig
    gpu: GPUSpec
    tp: int
    router: str
    graphs: GraphCapture = GraphCapture()
    parallel: Parallelism = Parallelism()
    autoscaler: AutoscalerConfig | None = None
    name: str = ""
    defaults: AppliedDefaults | None = None  # the engine settings vLLM's defaults filled (None: none looked up)

    @property
    def dp(self) -> int:
        return self.parallel.dp

    @property
    def engines(self) -> int:
        """Engines (each with its own scheduler and KV cache) the pool runs: servers × ranks."""
        return self.instances * self.parallel.dp

    @property
    def num_gpus(self) -> int:
        return self.engines * self.tp * self.parallel.pp

    def proposer(self, model: ModelSpec, precision: Precision) -> Proposer | None:
        """The speculative proposer of the pool's policy (None: no speculation, or n-gram
        lookup, which has no model); raises ValueError when the method has none for ``model``."""
        spec = self.policy.speculative
        if spec is None or not spec.active:
            return None
        return spec.proposer(model, precision, self.tp)

    def memory(self, model: ModelSpec, precision: Precision, proposer: Proposer | None = None) -> MemoryPlan:
        """The KV cache of one instance (``proposer``'s weights and KV, if any, beside the
        model's); raises ScenarioError if the model does not fit."""
        p = self.policy
        extra_weights, extra_kv = (proposer.weight_bytes, proposer.kv_bytes_per_token) if proposer else (0, 0)
        return plan_memory(
            self.gpu,
            model,
            precision=precision,
            gpu_memory_utilization=p.gpu_memory_utilization,
            block_size=p.block_size,
            max_num_batched_tokens=p.profile_tokens,
            max_num_seqs=p.max_batch,
            tp=self.tp,
            num_blocks_override=p.num_gpu_blocks_override,
            graphs=self.graphs,
            extra_weights=extra_weights,
            extra_kv_per_token=extra_kv,
            expert_shards=self.parallel.moe_group(model),
            pp=self.parallel.pp,
        )


@dataclass(frozen=True)
class LinkLayout:
    """A KV link per prefill instance: ``bandwidth`` bytes/s of one transfer (every
    tensor-parallel rank's share at once), ``latency`` seconds per transfer, over ``path``
    (:mod:`des.catalog.kv_link`; None: a bandwidth given without one), reserving decode
    blocks in ``mode`` and overlapping the prefill as ``overlap`` says (:class:`~des.engine.link.KVLink`)."""

    bandwidth: float
    latency: float
    path: str | None = None
    mode: Literal["pull", "push"] = "pull"  # decode blocks reserved when the prompt ends, or as it starts
    overlap: Literal["none", "layerwise"] = "none"  # KV sent after the finishing step, or during it


@dataclass(frozen=True)
class Layout:
    """The pools a request passes through, in order, and the link between consecutive ones."""

    pools: tuple[PoolLayout, ...]
    link: LinkLayout | None = None
    first_token_from: Literal["prefill", "decode"] = "prefill"

    @property
    def num_gpus(self) -> int:
        return sum(p.num_gpus for p in self.pools)

    def context_limit(self, model: ModelSpec) -> int:
        """The longest sequence (prompt + output, tokens) every pool on a request's path accepts."""
        return min(pool.policy.max_model_len or model.max_model_len for pool in self.pools)


@dataclass(frozen=True)
class ResolvedPool:
    """One pool of the layout with what building it needs, computed once: one instance's KV
    ``memory`` plan and the speculative ``proposer`` (None: none, or n-gram lookup)."""

    layout: PoolLayout
    memory: MemoryPlan
    proposer: Proposer | None = None


@dataclass(frozen=True)
class Deployment:
    """A layout resolved: every pool's record (:class:`ResolvedPool`), in pool order, and
    where the step-time factors of each of its GPU types come from (``factors``:
    :mod:`des.cost.uncertainty`)."""

    layout: Layout
    pools: tuple[ResolvedPool, ...]
    factors: tuple[FactorSource, ...] = ()

    @property
    def memory_plans(self) -> list[MemoryPlan]:
        """One instance's KV cache of each pool, in pool order."""
        return [p.memory for p in self.pools]

    @property
    def engine_defaults(self) -> str:
        """Which engine settings vLLM's defaults filled, and why, pool by pool (one line;
        "none" when every setting was given or the policy is not vLLM's)."""
        lines = [
            (f"{p.layout.name}: " if len(self.pools) > 1 else "") + p.layout.defaults.describe()
            for p in self.pools
            if p.layout.defaults is not None and p.layout.defaults.values
        ]
        return "; ".join(lines) or "none"

    @property
    def finishing(self) -> ResolvedPool:
        """The pool requests finish in (the only pool of colocated serving, the decode pool of a split)."""
        return self.pools[-1]
