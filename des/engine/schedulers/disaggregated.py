"""Disaggregated prefill/decode serving (DistServe, Splitwise, vLLM's and Dynamo's P/D modes).

Prompts run on a pool of *prefill* instances, generation on a pool of *decode*
instances, and each request's KV cache crosses a link between them:

- A prefill instance runs continuous batching of prompts only (token budget, chunked
  prefill, FCFS). The step that completes a prompt emits the first token; the request
  then leaves the instance but keeps its KV blocks there until its transfer ends.
  (A request of one output token is done there.)
- Each prefill instance has one outbound link (:class:`~des.engine.link.KVLink`). When a
  prompt completes, the decode pool's router picks its decode instance at once, and that
  instance *reserves* the blocks of the prompt's KV, granting reservations at its step
  boundaries in the order they came (at once when idle). Reservations wait side by side;
  the wire moves one transfer at a time, in the order their blocks were granted, each
  lasting ``prompt_tokens × kv_bytes_per_token / bandwidth + latency`` seconds. A full
  decode cache therefore holds transfers back, which keeps prefill blocks held, which
  stalls prefill admission: back-pressure all the way, and nothing is ever dropped.
- A decode instance runs continuous batching too. It reserves blocks for the prompt's
  KV only, and grows them as the request decodes, one block per ``block_size``
  tokens, preempting its newest request when blocks run out (which then recomputes
  prompt and output on the decode instance, as vLLM does). A transferred request joins
  the batch at the next step boundary after its transfer ends (under async scheduling
  the one after, if a step was running as it ended: the next batch was formed as that
  step started); an idle decode instance starts at once.

``first_token_from: prefill`` (the default, as DistServe and Splitwise count it) dates
the first token at the end of the prefill step, and TPOT spans the transfer gap;
``decode`` (vLLM's P/D proxy, which drops the prefill instance's token) has the decode
instance recompute the prompt's last token in its first step, which emits the first
token: TTFT adds the transfer, the wait for a decode step and that step, and the decode
instance emits every token. A request is rejected, with the reason, when some pool on its path
can never hold its KV (its prompt on a prefill instance, ``prompt + output - 1`` on a
decode instance).

Each pool may name its own ``gpu`` and ``tp`` (Splitwise's H100-prefill / A100-decode),
with its own cost model and KV plan; by default both use the scenario's. The link
defaults to the catalog's ``kv_link`` of the two GPUs (the slower end's bandwidth and
latency).
"""

from __future__ import annotations

from typing import Any, Literal, cast

from pydantic import (
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from des import catalog
from des.catalog.kv_link import default_link, transfer_bandwidth
from des.catalog.specs import GPUSpec, KVPath
from des.config import Strict
from des.engine.kvcache import CacheConfig
from des.engine.plan import MAX_INSTANCES, LinkPlan, Plan, PlanContext, PoolPlan
from des.engine.policy import Role
from des.engine.router import RouterName
from des.engine.scaling import AutoscalerConfig, scaling_problem
from des.engine.schedulers.continuous import ContinuousSettings
from des.errors import ScenarioError


class _Pool(Strict):
    """Where a pool runs: ``instances`` instances of ``tp`` x ``gpu`` (with an ``autoscaler``,
    those serving at t = 0: :mod:`des.engine.autoscaler`)."""

    instances: PositiveInt = Field(1, le=MAX_INSTANCES)
    gpu: GPUSpec | None = None
    tp: PositiveInt | None = None
    autoscaler: AutoscalerConfig | None = None

    @field_validator("gpu", mode="before")
    @classmethod
    def _gpu_by_name(cls, v: Any) -> Any:
        return None if v is None else catalog.resolve("gpus", v)


def _with_overrides(base: type[Strict]) -> type[Strict]:
    """``base`` plus every continuous-batching setting made optional (None: not given), its
    checks kept: generated, so that a pool's overrides follow :class:`ContinuousSettings`.
    The policy's own settings come before the cache's, as a user reads them."""
    own = [name for name in ContinuousSettings.model_fields if name not in CacheConfig.model_fields]
    fields: dict[str, Any] = {
        name: (cast(Any, f.annotation) | None, FieldInfo.merge_field_infos(f, default=None))
        for name in (*own, *CacheConfig.model_fields)
        for f in (ContinuousSettings.model_fields[name],)
    }
    return create_model(f"{base.__name__}Overrides", __base__=base, **fields)


class PoolConfig(_with_overrides(_Pool)):  # type: ignore[misc]
    """One pool of a disaggregated cluster: ``instances`` continuous-batching instances of
    ``tp`` x ``gpu`` (default: the scenario's GPU and ``cluster.tp``). Every
    continuous-batching setting left out takes the value given at the scheduler's top
    level (itself defaulting as for ``kind: continuous``)."""

    def settings(self, defaults: ContinuousSettings) -> ContinuousSettings:
        """This pool's continuous-batching settings: its own where given, else ``defaults``
        (validated as one)."""
        own = self.model_dump(include=set(ContinuousSettings.model_fields), exclude_none=True)
        return ContinuousSettings.model_validate({**defaults.model_dump(), **own})


class KVTransferConfig(Strict):
    """The link between pools (:mod:`des.catalog.kv_link`): ``path`` it takes (None: the
    GPUs' own link when the pools' GPUs are of one type, else RDMA), and ``bandwidth``
    (bytes/s, per pair of GPUs: each tensor-parallel rank sends its shard over its own)
    and ``latency`` (seconds per transfer) overriding the path's figures; with a
    ``bandwidth`` and no ``path``, a latency left out is 0. ``mode``: ``pull`` reserves the
    decode blocks when the prompt is done (vLLM's NIXL connector), ``push`` when its
    prefill starts (SGLang's and Dynamo's decode workers pre-allocate); ``overlap``:
    ``layerwise`` sends each layer's KV as the step that finishes the prompt computes it
    (Mooncake, DistServe), ``none`` after the step."""

    path: KVPath | None = None
    bandwidth: PositiveFloat | None = None
    latency: NonNegativeFloat | None = None
    mode: Literal["pull", "push"] = "pull"
    overlap: Literal["none", "layerwise"] = "none"

    @field_validator("overlap")
    @classmethod
    def _layers_need_a_destination(cls, overlap: str, info: ValidationInfo) -> str:
        if overlap == "layerwise" and info.data.get("mode") != "push":
            raise ValueError(
                "layerwise needs mode: push (a layer's KV can leave during the prefill only to decode "
                "blocks already reserved; pulled, they are asked for when the prompt is done)"
            )
        return overlap


class RouterConfig(Strict):
    """The router of each pool (see :mod:`des.engine.router`)."""

    prefill: RouterName = "least_outstanding"
    decode: RouterName = "least_kv"


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
    def _no_speculation(self) -> DisaggregatedConfig:
        """Speculative decoding is refused here, at whichever level it is set."""
        for where, cfg in (("", self), ("prefill.", self.prefill), ("decode.", self.decode)):
            if cfg.speculative is not None:
                raise ScenarioError((
                    f"{where}speculative",
                    "not modelled for disaggregated serving (the draft's KV would cross the link with the "
                    "target's); use kind: continuous",
                ))  # fmt: skip
        return self

    @model_validator(mode="after")
    def _pools_can_scale(self) -> DisaggregatedConfig:
        for role, cfg in (("prefill", self.prefill), ("decode", self.decode)):
            problem = scaling_problem(cfg.autoscaler, cfg.instances, 1, 1, "instances", entry=role == "prefill")
            if problem is not None:
                raise ScenarioError((role, problem))
        return self

    def setting_path(self, role: str, name: str) -> str | None:
        """``role.name`` where that pool sets it, else as at the top level."""
        pool = getattr(self, role, None)
        if isinstance(pool, PoolConfig) and getattr(pool, name, None) is not None:
            return f"{role}.{name}"
        return super().setting_path(role, name)

    def link_problem(self, default: GPUSpec) -> str | None:
        """Why the pools' GPUs (a pool's, else ``default``) cannot have the link asked for
        (:func:`~des.catalog.kv_link.default_link`); None when they can."""
        t = self.kv_transfer
        if t is not None and t.bandwidth is not None and t.path is None:
            return None
        try:
            default_link(self.prefill.gpu or default, self.decode.gpu or default, t.path if t is not None else None)
        except ValueError as exc:
            return str(exc)
        return None

    def plan(self, ctx: PlanContext) -> Plan:
        """A prefill pool, a decode pool, and a link from every prefill instance. The
        cluster's replicas and router are not used: the pools have their own."""
        prefill = self._pool("prefill", self.prefill, self.router.prefill, ctx)
        decode = self._pool("decode", self.decode, self.router.decode, ctx)
        return Plan((prefill, decode), self._link(prefill, decode), self.first_token_from)

    def _pool(self, role: Role, cfg: PoolConfig, router: str, ctx: PlanContext) -> PoolPlan:
        policy = cfg.settings(
            ContinuousSettings.model_validate(self.model_dump(include=set(ContinuousSettings.model_fields)))
        )
        return PoolPlan(
            role, cfg.instances, policy, cfg.gpu or ctx.gpu, cfg.tp or ctx.tp, router, ctx.graphs,
            autoscaler=cfg.autoscaler,
        )  # fmt: skip

    def _link(self, prefill: PoolPlan, decode: PoolPlan) -> LinkPlan:
        """The path's link (``kv_transfer.path``, else the GPUs' own or RDMA), its figures
        overridden by ``kv_transfer``'s, every tensor-parallel rank sending its shard at once.
        Raises ValueError for a path the GPUs cannot have (the scenario's validation names
        the field first: :meth:`link_problem`)."""
        t = self.kv_transfer
        given_path, bandwidth, latency = (t.path, t.bandwidth, t.latency) if t is not None else (None, None, None)
        path: str | None = None
        if bandwidth is None or given_path is not None:
            link = default_link(prefill.gpu, decode.gpu, given_path)
            bandwidth = link.bandwidth if bandwidth is None else bandwidth
            latency = link.latency if latency is None else latency
            path = link.path
        mode, overlap = (t.mode, t.overlap) if t is not None else ("pull", "none")
        return LinkPlan(transfer_bandwidth(bandwidth, prefill.tp, decode.tp), latency or 0.0, path, mode, overlap)
