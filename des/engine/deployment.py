"""The deployment: one list of pools, apart from the batching policy (the scenario's ``cluster``).

As vLLM keeps ``parallel_config``, ``scheduler_config``, ``speculative_config`` and
``kv_transfer_config`` siblings, and Vidur keeps its replica configuration apart from its
replica scheduler's, a scenario writes *where* requests are served in ``cluster`` and
*how* each engine batches them in ``scheduler`` (with ``speculative`` beside it)::

    scheduler: {kind: continuous, max_num_seqs: 128}       # the pools' batching policy
    speculative: {method: ngram, ...}                     # optional
    cluster:
      pools:
        - {name: main, role: both, instances: 2, gpu: h100-80gb, tp: 2, pp: 1, dp: 1,
           expert_parallel: false, router: least_outstanding, autoscaler: {...},
           scheduler: {max_num_seqs: 64}}                 # this pool's settings over the policy's
      kv_transfer: {path: rdma, mode: push, first_token_from: prefill}   # between split pools

A pool plays ``role`` ``both`` (colocated: a request's whole life), ``prefill`` or
``decode``. The pools are one pool of role ``both``, or a ``prefill`` pool and a
``decode`` pool in that order with a KV link between them (disaggregated serving:
DistServe, Splitwise, vLLM's and Dynamo's P/D modes). A pool's ``gpu`` (default: the
scenario's) and ``tp``, ``pp``, ``dp`` (vLLM's tensor_parallel_size,
pipeline_parallel_size, data_parallel_size), ``expert_parallel`` and ``all2all_backend``
say what each of its engines is; ``router`` picks an instance (default by role:
``round_robin``, ``least_outstanding`` for prefill, ``least_kv`` for decode:
:mod:`des.engine.router`); ``scheduler`` holds the settings of this pool that differ
from the top-level policy's.

**Disaggregated serving.** Prompts run on the prefill pool, generation on the decode pool,
and each request's KV cache crosses a link between them:

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
instance emits every token. A request is rejected, with the reason, when some pool on its
path can never hold its KV (its prompt on a prefill instance, ``prompt + output - 1`` on a
decode instance). The link defaults to the catalog's ``kv_link`` of the two GPUs (the
slower end's bandwidth and latency).

**The old shapes** keep working: :func:`normalise` turns ``cluster: {replicas, router, tp,
dp, pp, expert_parallel, all2all_backend, autoscaler}`` and ``scheduler: {kind:
disaggregated, prefill, decode, router, kv_transfer, first_token_from}`` (and
``scheduler.speculative``) into pools, and says where each moved value was written, so
that an error names the key the user wrote.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal, cast

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
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
from des.catalog.memory import GraphCapture
from des.catalog.specs import GPUSpec, KVPath
from des.config import Strict
from des.cost.frontend import DEFAULT_FRONTEND
from des.engine.defaults import engine_defaults
from des.engine.layout import MAX_INSTANCES, All2AllBackend, Layout, LinkLayout, Parallelism, PoolLayout
from des.engine.policy import Role
from des.engine.router import RouterName
from des.engine.scaling import AutoscalerConfig
from des.engine.schedulers import SCHEDULERS, PolicyKind
from des.engine.speculative import SpeculativeConfig
from des.errors import ScenarioError

#: A pool's role as the scenario names it, and as the engine does (``both`` is colocated).
PoolRole = Literal["both", "prefill", "decode"]
ENGINE_ROLE: dict[str, Role] = {"both": "colocated", "prefill": "prefill", "decode": "decode"}
#: Each role's default router and pool name.
DEFAULT_ROUTER: dict[str, RouterName] = {"both": "round_robin", "prefill": "least_outstanding", "decode": "least_kv"}
DEFAULT_NAME = {"both": "main", "prefill": "prefill", "decode": "decode"}


def _policy_overrides() -> type[Strict]:
    """A pool's ``scheduler``: every setting of every batching policy kind made optional (None:
    not given, the top-level policy's applies), its checks kept: generated, so that it follows
    the policies' own fields."""
    fields: dict[str, Any] = {}
    for name in SCHEDULERS:
        kind: Any = SCHEDULERS.get(name)
        for key, f in kind.model_fields.items():
            if key != "kind" and key not in fields:
                fields[key] = (cast(Any, f.annotation) | None, FieldInfo.merge_field_infos(f, default=None))
    return create_model("PoolSettings", __base__=Strict, **fields)


PoolSettings = _policy_overrides()


class PoolSpec(Strict):
    """One pool of the cluster (see the module): ``instances`` servers of ``dp`` engines of
    ``tp`` x ``pp`` GPUs of type ``gpu`` (None: the scenario's) playing ``role``, behind
    ``router`` (None: the role's default); with an ``autoscaler``, ``instances`` serve at
    t = 0 and the autoscaler sets how many serve after (:mod:`des.engine.autoscaler`);
    ``scheduler``: this pool's batching settings over the top-level policy's."""

    name: str | None = None
    role: PoolRole = "both"
    instances: NonNegativeInt = Field(1, le=MAX_INSTANCES)
    gpu: GPUSpec | None = None
    tp: PositiveInt = 1
    pp: PositiveInt = Field(1, le=1024)
    dp: PositiveInt = Field(1, le=MAX_INSTANCES)
    expert_parallel: bool = False
    all2all_backend: All2AllBackend = "allgather_reducescatter"
    router: RouterName | None = None
    autoscaler: AutoscalerConfig | None = None
    scheduler: PoolSettings = PoolSettings()  # type: ignore[valid-type]

    @field_validator("gpu", mode="before")
    @classmethod
    def _gpu_by_name(cls, v: Any) -> Any:
        return None if v is None else catalog.resolve("gpus", v)

    @model_validator(mode="after")
    def _defaults_by_role(self) -> PoolSpec:
        """The name and router a pool of this role takes when it gives none."""
        if self.name is None:
            object.__setattr__(self, "name", DEFAULT_NAME[self.role])
        if self.router is None:
            object.__setattr__(self, "router", DEFAULT_ROUTER[self.role])
        return self

    @property
    def parallel(self) -> Parallelism:
        return Parallelism(self.dp, self.expert_parallel, self.all2all_backend, self.pp)

    @property
    def overrides(self) -> dict[str, Any]:
        """The batching settings this pool gives (its ``scheduler``, without the unset ones)."""
        return cast(Strict, self.scheduler).model_dump(exclude_none=True)


class KVTransferConfig(Strict):
    """The link between a split's pools (:mod:`des.catalog.kv_link`): ``path`` it takes (None:
    the GPUs' own link when the pools' GPUs are of one type, else RDMA), and ``bandwidth``
    (bytes/s, per pair of GPUs: each tensor-parallel rank sends its shard over its own)
    and ``latency`` (seconds per transfer) overriding the path's figures; with a
    ``bandwidth`` and no ``path``, a latency left out is 0. ``mode``: ``pull`` reserves the
    decode blocks when the prompt is done (vLLM's NIXL connector), ``push`` when its
    prefill starts (SGLang's and Dynamo's decode workers pre-allocate); ``overlap``:
    ``layerwise`` sends each layer's KV as the step that finishes the prompt computes it
    (Mooncake, DistServe), ``none`` after the step. ``first_token_from``: the pool whose
    step dates a request's first token (see the module)."""

    path: KVPath | None = None
    bandwidth: PositiveFloat | None = None
    latency: NonNegativeFloat | None = None
    mode: Literal["pull", "push"] = "pull"
    overlap: Literal["none", "layerwise"] = "none"
    first_token_from: Literal["prefill", "decode"] = "prefill"

    @field_validator("overlap")
    @classmethod
    def _layers_need_a_destination(cls, overlap: str, info: ValidationInfo) -> str:
        if overlap == "layerwise" and info.data.get("mode") != "push":
            raise ValueError(
                "layerwise needs mode: push (a layer's KV can leave during the prefill only to decode "
                "blocks already reserved; pulled, they are asked for when the prompt is done)"
            )
        return overlap

    def link(self, prefill: PoolLayout, decode: PoolLayout) -> LinkLayout:
        """The path's link (``path``, else the GPUs' own or RDMA), its figures overridden by
        ``bandwidth`` and ``latency``, every tensor-parallel rank sending its shard at once.
        Raises ValueError for a path the GPUs cannot have (:func:`link_problem` says so first)."""
        bandwidth, latency, path = self.bandwidth, self.latency, None
        if bandwidth is None or self.path is not None:
            link = default_link(prefill.gpu, decode.gpu, self.path)
            bandwidth = link.bandwidth if bandwidth is None else bandwidth
            latency = link.latency if latency is None else latency
            path = link.path
        return LinkLayout(transfer_bandwidth(bandwidth, prefill.tp, decode.tp), latency or 0.0, path, self.mode,
                          self.overlap)  # fmt: skip

    def link_problem(self, prefill: GPUSpec, decode: GPUSpec) -> str | None:
        """Why pools of ``prefill`` and ``decode`` GPUs cannot have the link asked for, or None."""
        if self.bandwidth is not None and self.path is None:
            return None
        try:
            default_link(prefill, decode, self.path)
        except ValueError as exc:
            return str(exc)
        return None


class ClusterConfig(Strict):
    """Where requests are served: ``pools`` (one of role ``both``, or a ``prefill`` and a
    ``decode`` pool, in that order) and, between split pools, ``kv_transfer`` (None: the
    GPUs' default link)."""

    pools: list[PoolSpec] = Field(default_factory=lambda: [PoolSpec()], min_length=1)
    kv_transfer: KVTransferConfig | None = None

    @model_validator(mode="after")
    def _one_shape(self) -> ClusterConfig:
        """One pool serving whole requests, or a prefill pool then a decode pool (the engine
        routes a request through the pools in order); names unique."""
        roles = [p.role for p in self.pools]
        if roles not in (["both"], ["prefill", "decode"]):
            raise ValueError(
                f"pools: roles {roles} are not a deployment des models: one pool of role both (colocated), "
                "or a prefill pool then a decode pool (disaggregated)"
            )
        names = [p.name for p in self.pools]
        if len(set(names)) < len(names):
            raise ValueError(f"pools: names {names} repeat (each pool needs its own)")
        if self.kv_transfer is not None and not self.split:
            raise ScenarioError(
                ("kv_transfer", "a KV link joins a prefill pool to a decode pool; one pool of role both has none")
            )
        return self

    @property
    def split(self) -> bool:
        """Whether prefill and decode run on pools of their own."""
        return self.pools[0].role == "prefill"

    @property
    def transfer(self) -> KVTransferConfig:
        """The link's settings (the defaults where none are given)."""
        return self.kv_transfer if self.kv_transfer is not None else KVTransferConfig()

    def layout(
        self,
        policy: PolicyKind,
        speculative: SpeculativeConfig | None,
        gpu: GPUSpec,
        graphs: GraphCapture,
        frontend: str = DEFAULT_FRONTEND,
        max_model_len: int | None = None,
    ) -> Layout:
        """The engine's layout: each pool with its policy (``policy`` with the pool's settings
        over it, and ``speculative``), on its GPUs (``gpu`` where it names none). Continuous
        batching's settings that neither gives take the defaults of the vLLM entry point
        ``frontend`` stands for on the pool's GPU (:mod:`des.engine.defaults`; contexts of
        the pool's ``max_model_len``, else of ``max_model_len``, the model's), resolved here
        once and recorded on the pool (:attr:`PoolLayout.defaults`)."""
        pools = []
        for p in self.pools:
            on = p.gpu or gpu
            applied = None
            if policy.kind == "continuous" and max_model_len is not None:
                given = policy.given(p.overrides)
                applied = engine_defaults(given, on, frontend, given.get("max_model_len") or max_model_len)
            pools.append(
                PoolLayout(
                    ENGINE_ROLE[p.role],
                    p.instances,
                    policy.policy(p.overrides, speculative, applied.values if applied else None),
                    on,
                    p.tp,
                    cast(str, p.router),
                    graphs,
                    p.parallel,
                    p.autoscaler,
                    cast(str, p.name),
                    applied,
                )  # fmt: skip
            )
        if not self.split:
            return Layout(tuple(pools))
        t = self.transfer
        return Layout(tuple(pools), t.link(pools[0], pools[1]), t.first_token_from)


# -- the old shapes --------------------------------------------------------------------

#: The old colocated shape's keys at ``cluster``'s top level, and the pool field each is.
LEGACY_CLUSTER = {
    "replicas": "instances",
    "router": "router",
    "tp": "tp",
    "dp": "dp",
    "pp": "pp",
    "expert_parallel": "expert_parallel",
    "all2all_backend": "all2all_backend",
    "autoscaler": "autoscaler",
}
#: Keys of every pool, given once at ``cluster``'s top level in the old shape.
_EVERY_POOL = ("tp", "pp", "expert_parallel", "all2all_backend")
#: The old split's keys under ``scheduler``.
LEGACY_SPLIT = ("prefill", "decode", "router", "kv_transfer", "first_token_from")
#: The keys of an old split's pool that are the pool's (the rest are batching settings).
_POOL_KEYS = ("instances", "gpu", "tp", "autoscaler")
_ROLES = ("prefill", "decode")


def normalise(data: Any) -> tuple[Any, dict[str, str]]:
    """``data`` (a scenario mapping) with the deployment in the one shape of pools, and the
    paths the old shapes' values moved from (``{new path: path as written}``).

    Idempotent; a mapping already in the new shape comes back equal. Old keys written
    beside new ones (an override of ``cluster.tp`` or ``scheduler.decode.instances`` on a
    scenario in the new shape) are applied to the pools, as they were to the old shape."""
    if not isinstance(data, Mapping):
        return data, {}
    out = dict(data)
    aliases: dict[str, str] = {}
    scheduler = dict(out["scheduler"]) if isinstance(out.get("scheduler"), Mapping) else None
    cluster = dict(out["cluster"]) if isinstance(out.get("cluster"), Mapping) else None
    pools = _pools(cluster)
    own: set[tuple[int, str]] = set()  # (pool, key) set by an old split's own pool
    if scheduler is not None and (
        scheduler.get("kind") == "disaggregated" or (_is_split(pools) and any(k in scheduler for k in LEGACY_SPLIT))
    ):
        cluster = dict(cluster or {})
        if pools is not None and not _is_split(pools) and any(k in cluster for k in LEGACY_CLUSTER):
            pools = _fold_cluster(cluster, pools, aliases, own)  # the colocated pool as the old keys leave it
        pools = _split(scheduler, cluster, pools, aliases, own)
    if scheduler is not None and "speculative" in scheduler:
        out["speculative"] = scheduler.pop("speculative")
        aliases.setdefault("speculative", "scheduler.speculative")
    if cluster is not None and any(k in cluster for k in LEGACY_CLUSTER):
        pools = _fold_cluster(cluster, pools, aliases, own)
    if pools is not None:
        assert cluster is not None
        cluster["pools"] = pools
    if scheduler is not None:
        out["scheduler"] = scheduler
    if cluster is not None:
        out["cluster"] = cluster
    given = data.get("cluster")
    if not (isinstance(given, Mapping) and "pools" in given):  # written in an old shape, or not at all
        _old_names(pools, aliases)
    return out, aliases


def _old_names(pools: list[Any] | None, aliases: dict[str, str]) -> None:
    """Where an old shape writes what the user did not: a colocated pool's keys at
    ``cluster``'s top level, a split pool's under ``scheduler.<role>`` (its ``tp`` and the
    other keys of every pool at ``cluster``'s top level)."""
    if _is_split(pools):
        for i, role in enumerate(_ROLES):
            aliases.setdefault(f"cluster.pools.{i}", f"scheduler.{role}")
            aliases.setdefault(f"cluster.pools.{i}.scheduler", f"scheduler.{role}")
            aliases.setdefault(f"cluster.pools.{i}.router", f"scheduler.router.{role}")
            for key in _EVERY_POOL:
                aliases.setdefault(f"cluster.pools.{i}.{key}", f"cluster.{key}")
        aliases.setdefault("cluster.kv_transfer", "scheduler.kv_transfer")
        aliases.setdefault("cluster.kv_transfer.first_token_from", "scheduler.first_token_from")
        return
    for key, field in LEGACY_CLUSTER.items():
        aliases.setdefault(f"cluster.pools.0.{field}", f"cluster.{key}")


def _pools(cluster: dict[str, Any] | None) -> list[Any] | None:
    """A copy of ``cluster``'s pools, each a mapping copied (None: not given as a list)."""
    given = cluster.get("pools") if cluster is not None else None
    if not isinstance(given, list):
        return None
    return [dict(p) if isinstance(p, Mapping) else p for p in given]


def _is_split(pools: list[Any] | None) -> bool:
    return pools is not None and [p.get("role") if isinstance(p, dict) else None for p in pools] == list(_ROLES)


def _colocated_default(pool: Any) -> bool:
    """Whether ``pool`` is one colocated instance on the scenario's GPU with nothing set but
    its tensor parallelism: what an old split may replace (its cluster's defaults)."""
    if not isinstance(pool, dict):
        return False
    unset = {
        "name": (None, "main"), "role": (None, "both"), "instances": (None, 1), "gpu": (None,),
        "router": (None, "round_robin"), "dp": (None, 1), "autoscaler": (None,), "scheduler": (None, {}),
    }  # fmt: skip
    rest = {"tp", "pp", "expert_parallel", "all2all_backend"}
    return all(k in rest or pool[k] in unset.get(k, ()) for k in pool)


def _split(
    scheduler: dict[str, Any],
    cluster: dict[str, Any],
    pools: list[Any] | None,
    aliases: dict[str, str],
    own: set[tuple[int, str]],
) -> list[Any]:
    """The old split's keys under ``scheduler`` moved onto a prefill and a decode pool."""
    if scheduler.get("kind") == "disaggregated":
        scheduler["kind"] = "continuous"
    if not _is_split(pools):
        if pools is not None and len(pools) == 1 and isinstance(pools[0], dict):
            old = {"replicas": "instances", "router": "router", "dp": "dp", "autoscaler": "autoscaler"}
            _refuse_on_split({key: pools[0].get(field) for key, field in old.items()})
        if pools is not None and not (len(pools) == 1 and _colocated_default(pools[0])):
            raise ScenarioError(
                (
                    "scheduler.kind",
                    "disaggregated is the old shape of a split: with cluster.pools given, give them "
                    "the roles prefill and decode instead",
                )  # fmt: skip
            )
        base = {k: v for k, v in (pools[0] if pools else {}).items() if k in _EVERY_POOL and v is not None}
        pools = [{"role": role, **base} for role in _ROLES]
    assert pools is not None
    for i, role in enumerate(_ROLES):
        given = scheduler.pop(role, None)
        if given is None:
            continue
        if not isinstance(given, Mapping):
            raise ScenarioError((f"scheduler.{role}", f"must be a mapping of the {role} pool's settings"))
        aliases[f"cluster.pools.{i}"] = f"scheduler.{role}"
        settings = dict(pools[i].get("scheduler") or {})
        for key, value in given.items():
            if value is None:
                continue  # not given: the pool's default (or the top level's) applies
            if key == "speculative":  # the old shape let a pool speculate: the split refuses it there
                scheduler["speculative"] = value
                aliases["speculative"] = f"scheduler.{role}.speculative"
            elif key in _POOL_KEYS:
                pools[i][key] = value
                own.add((i, key))
                aliases[f"cluster.pools.{i}.{key}"] = f"scheduler.{role}.{key}"
            else:
                settings[key] = value
                aliases[f"cluster.pools.{i}.scheduler.{key}"] = f"scheduler.{role}.{key}"
        if settings:
            pools[i]["scheduler"] = settings
    routers = scheduler.pop("router", None)
    if isinstance(routers, Mapping):
        for i, role in enumerate(_ROLES):
            if routers.get(role) is not None:
                pools[i]["router"] = routers[role]
                aliases[f"cluster.pools.{i}.router"] = f"scheduler.router.{role}"
    elif routers is not None:
        raise ScenarioError(("scheduler.router", "must be a mapping of the pools' routers (prefill, decode)"))
    if "kv_transfer" in scheduler:
        kv = scheduler.pop("kv_transfer")
        if isinstance(kv, Mapping):
            cluster["kv_transfer"] = {**dict(cluster.get("kv_transfer") or {}), **kv}
        elif kv is not None:
            cluster["kv_transfer"] = kv  # not a mapping: its validation says so
        aliases["cluster.kv_transfer"] = "scheduler.kv_transfer"
    if "first_token_from" in scheduler:
        first = scheduler.pop("first_token_from")
        if first is not None:
            cluster["kv_transfer"] = {**dict(cluster.get("kv_transfer") or {}), "first_token_from": first}
        aliases["cluster.kv_transfer.first_token_from"] = "scheduler.first_token_from"
    _old_names(pools, aliases)  # written in the old shape of a split: its keys named in it
    return pools


def _fold_cluster(
    cluster: dict[str, Any], pools: list[Any] | None, aliases: dict[str, str], own: set[tuple[int, str]]
) -> list[Any]:
    """The old colocated shape's keys at ``cluster``'s top level moved onto the pools: all of
    them onto one pool of role both; onto a split's, those of every pool (``tp``, ``pp``,
    ``expert_parallel``, ``all2all_backend``) where the pool sets none of its own, and the
    rest refused as the old shape refused them."""
    legacy = {key: cluster.pop(key) for key in list(cluster) if key in LEGACY_CLUSTER}
    if pools is None:
        pools = [{"role": "both"}]
    if _is_split(pools):
        _refuse_on_split(legacy)
        for i in range(len(pools)):
            for key in _EVERY_POOL:
                if key in legacy and legacy[key] is not None and (i, key) not in own:
                    pools[i][key] = legacy[key]
                    aliases[f"cluster.pools.{i}.{key}"] = f"cluster.{key}"
        return pools
    if len(pools) != 1 or not isinstance(pools[0], dict):
        raise ScenarioError(
            (
                f"cluster.{next(iter(legacy))}",
                "is the old shape's key for one pool: with several cluster.pools, set it on each pool",
            )  # fmt: skip
        )
    pool = pools[0]
    for key, value in legacy.items():
        field = LEGACY_CLUSTER[key]
        if value is None:
            pool.pop(field, None)  # null unsets it: the default applies
        else:
            pool[field] = value
        aliases[f"cluster.pools.0.{field}"] = f"cluster.{key}"
    _old_names(pools, aliases)  # written in the old shape: the pool's keys named in it
    return pools


def _refuse_on_split(legacy: dict[str, Any]) -> None:
    """The old shape's refusals of cluster-wide keys under a split, in its words."""
    dp, replicas, router = legacy.get("dp"), legacy.get("replicas"), legacy.get("router")
    if dp is not None and dp != 1:
        raise ScenarioError((
            "cluster.dp",
            f"{dp} data-parallel ranks are not supported with a disaggregated scheduler: its pools' "
            "instances are already independent engines (set scheduler.prefill.instances and "
            "scheduler.decode.instances instead)",
        ))  # fmt: skip
    if replicas is not None and replicas != 1:
        raise ScenarioError((
            "cluster.replicas",
            f"{replicas} is not used by a disaggregated scheduler, whose instances are its pools' "
            "(set scheduler.prefill.instances and scheduler.decode.instances; null unsets it)",
        ))  # fmt: skip
    if router is not None and router != DEFAULT_ROUTER["both"]:
        raise ScenarioError((
            "cluster.router",
            f"{router!r} is not used by a disaggregated scheduler, whose pools have their own "
            "(set scheduler.router.prefill and scheduler.router.decode; null unsets it)",
        ))  # fmt: skip
    if legacy.get("autoscaler") is not None:
        raise ScenarioError((
            "cluster.autoscaler",
            "a split's pools scale on their own (set scheduler.prefill.autoscaler or scheduler.decode.autoscaler)",
        ))  # fmt: skip


def new_path(scenario: Mapping[str, Any], dotted: str) -> str:
    """Where a key of the old colocated shape (``cluster.replicas``, ``cluster.tp``, ...)
    lives in ``scenario`` (a resolved mapping of one pool): ``cluster.pools.0.<field>``;
    any other key as it is. (An override may still be written in the old shape; reading its
    value needs the new path.)"""
    head, _, key = dotted.partition(".")
    pools = (scenario.get("cluster") or {}).get("pools")
    if head == "cluster" and key in LEGACY_CLUSTER and isinstance(pools, list) and len(pools) == 1:
        return f"cluster.pools.0.{LEGACY_CLUSTER[key]}"
    return dotted


def serving_kind(scenario: Mapping[str, Any]) -> str:
    """How a scenario (a mapping in either shape: a results folder's ``scenario.yaml``)
    serves: ``disaggregated`` when its pools split prefill from decode, else its batching
    kind (``continuous``, ``static``)."""
    data, _ = normalise(scenario)
    pools = (data.get("cluster") or {}).get("pools") or []
    if _is_split(pools):
        return "disaggregated"
    return str((data.get("scheduler") or {}).get("kind", "continuous"))


def written_as(path: str, aliases: Mapping[str, str]) -> str:
    """``path`` (in the new shape) as the user wrote it: its longest prefix that an old
    shape's key moved to, replaced by that key."""
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        head = ".".join(parts[:n])
        if head in aliases:
            return ".".join([aliases[head], *parts[n:]])
    return path


_POOL_PATH = re.compile(r"(?<![\w.])cluster\.pools\.\d+(?:\.[A-Za-z_]\w*)*")


def in_words_written(problems: list[tuple[str, str]], aliases: Mapping[str, str]) -> list[tuple[str, str]]:
    """``problems`` with every path, and every key of the pools named in a message (a hint
    such as ``cluster.pools.0.tp: 2``), as the user wrote them (:func:`written_as`)."""
    if not aliases:
        return problems
    return [
        (written_as(path, aliases), _POOL_PATH.sub(lambda m: written_as(m.group(0), aliases), message))
        for path, message in problems
    ]
