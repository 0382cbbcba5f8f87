"""Disaggregated prefill/decode serving (DistServe, Splitwise, vLLM's and Dynamo's P/D modes).

Prompts run on a pool of *prefill* instances, generation on a pool of *decode*
instances, and each request's KV cache crosses a link between them:

- A prefill instance runs continuous batching of prompts only (token budget, chunked
  prefill, FCFS). The step that completes a prompt emits the first token; the request
  then leaves the instance but keeps its KV blocks there until its transfer ends.
  (A request of one output token is done there.)
- Each prefill instance has one outbound link. Transfers on it run one at a time, in
  the order prompts completed (ties by arrival). The transfer at the head of the line
  asks the decode pool's router for an instance and waits until that instance has
  *reserved* the blocks of the prompt's KV; only then does it start, lasting
  ``prompt_tokens × kv_bytes_per_token / bandwidth + latency`` seconds. A full decode
  cache therefore stalls the link, which keeps prefill blocks held, which stalls
  prefill admission: back-pressure all the way, and nothing is ever dropped.
- A decode instance runs continuous batching too. It reserves blocks for the prompt's
  KV only, and grows them as the request decodes, one block per ``block_size``
  tokens, preempting its newest request when blocks run out (which then recomputes
  prompt and output on the decode instance, as vLLM does). A transferred request joins
  the batch at the next step boundary after its transfer ends; an idle decode
  instance starts at once.

``first_token_from: prefill`` (the default, as DistServe and Splitwise count it) dates
the first token at the end of the prefill step; ``decode`` dates it when the KV has
arrived at the decode instance, so the transfer adds to TTFT. Either way TPOT spans
the transfer gap. A request is rejected, with the reason, when some pool on its path
can never hold its KV (its prompt on a prefill instance, ``prompt + output - 1`` on a
decode instance).

Each pool may name its own ``gpu`` and ``tp`` (Splitwise's H100-prefill / A100-decode),
with its own cost model and KV plan; by default both use the scenario's. The link
defaults to the catalog's ``kv_link`` of the two GPUs (the slower end's bandwidth and
latency).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, field_validator, model_validator

from des import catalog
from des.catalog.specs import GPUSpec
from des.config import Strict
from des.engine.plan import LinkPlan, Plan, PlanContext, PoolPlan
from des.engine.router import ROUTERS
from des.engine.schedulers.base import Role
from des.engine.schedulers.continuous import ContinuousSettings
from des.errors import ScenarioError
from des.registry import UnknownKind


class PoolConfig(Strict):
    """One pool of a disaggregated cluster: ``instances`` continuous-batching instances of
    ``tp`` x ``gpu`` (default: the scenario's GPU and ``cluster.tp``). Every
    continuous-batching setting left out takes the value given at the scheduler's top
    level (itself defaulting as for ``kind: continuous``)."""

    instances: PositiveInt = 1
    gpu: GPUSpec | None = None
    tp: PositiveInt | None = None
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    block_size: int | None = Field(None, ge=1)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    max_model_len: int | None = Field(None, ge=1)
    num_gpu_blocks_override: int | None = Field(None, ge=1)

    @field_validator("gpu", mode="before")
    @classmethod
    def _gpu_by_name(cls, v: Any) -> Any:
        return None if v is None else catalog.resolve("gpus", v)

    def settings(self, defaults: ContinuousSettings) -> ContinuousSettings:
        """This pool's continuous-batching settings: its own where given, else ``defaults``."""
        own = {k: getattr(self, k) for k in ContinuousSettings.model_fields if getattr(self, k) is not None}
        return defaults.model_copy(update=own)


class KVTransferConfig(Strict):
    """The link between pools: ``bandwidth`` bytes/s, ``latency`` seconds per transfer."""

    bandwidth: PositiveFloat
    latency: NonNegativeFloat = 0.0


class RouterConfig(Strict):
    """The router of each pool (see :mod:`des.engine.router`)."""

    prefill: str = "least_outstanding"
    decode: str = "least_kv"

    @field_validator("prefill", "decode")
    @classmethod
    def _known(cls, v: str) -> str:
        try:
            ROUTERS.get(v)
        except UnknownKind as exc:
            raise ValueError(str(exc)) from None
        return v


class DisaggregatedConfig(ContinuousSettings):
    """Prefill on one pool, decode on another, KV over a link between them. The
    continuous-batching settings at this level are the defaults of both pools."""

    kind: Literal["disaggregated"] = "disaggregated"
    prefill: PoolConfig = PoolConfig()
    decode: PoolConfig = PoolConfig()
    kv_transfer: KVTransferConfig | None = None
    first_token_from: Literal["prefill", "decode"] = "prefill"
    router: RouterConfig = RouterConfig()

    @model_validator(mode="after")
    def _link_known(self) -> DisaggregatedConfig:
        if self.kv_transfer is None:
            for role in ("prefill", "decode"):
                gpu = getattr(self, role).gpu
                if gpu is not None and gpu.kv_link is None:
                    raise ValueError(
                        f"kv_transfer: required, {role}.gpu {gpu.name!r} has no kv_link in the catalog "
                        "(give {bandwidth: bytes/s, latency: s})"
                    )
        return self

    def plan(self, ctx: PlanContext) -> Plan:
        """A prefill pool, a decode pool, and a link from every prefill instance."""
        if ctx.replicas != 1:
            raise ScenarioError(
                (
                    "cluster.replicas",
                    f"{ctx.replicas} is not used by a disaggregated scheduler, whose instances are its pools' "
                    "(set scheduler.prefill.instances and scheduler.decode.instances)",
                )
            )
        if ctx.router != PlanContext.router:  # the cluster router left at its default
            raise ScenarioError(
                (
                    "cluster.router",
                    f"{ctx.router!r} is not used by a disaggregated scheduler, whose pools have their own "
                    "(set scheduler.router.prefill and scheduler.router.decode)",
                )
            )
        prefill = self._pool("prefill", self.prefill, self.router.prefill, ctx)
        decode = self._pool("decode", self.decode, self.router.decode, ctx)
        return Plan((prefill, decode), self._link(prefill.gpu, decode.gpu), self.first_token_from)

    def _pool(self, role: Role, cfg: PoolConfig, router: str, ctx: PlanContext) -> PoolPlan:
        policy = cfg.settings(
            ContinuousSettings.model_validate(self.model_dump(include=set(ContinuousSettings.model_fields)))
        )
        return PoolPlan(role, cfg.instances, policy, cfg.gpu or ctx.gpu, cfg.tp or ctx.tp, router)

    def _link(self, a: GPUSpec, b: GPUSpec) -> LinkPlan:
        if self.kv_transfer is not None:
            return LinkPlan(self.kv_transfer.bandwidth, self.kv_transfer.latency)
        ends = [g.kv_link for g in (a, b) if g.kv_link is not None]
        if len(ends) < 2:
            missing = a.name if a.kv_link is None else b.name
            raise ScenarioError(
                (
                    "scheduler.kv_transfer",
                    f"required: GPU {missing!r} has no kv_link in the catalog "
                    "(give {bandwidth: bytes/s, latency: s})",
                )
            )
        return LinkPlan(min(e.bandwidth for e in ends), max(e.latency for e in ends))
