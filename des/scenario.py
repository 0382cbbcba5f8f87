"""The scenario file: validated, frozen, with every error naming its dotted field path.

``load_scenario(path_or_dict, overrides)`` reads YAML (or takes a mapping), applies
``dotted.key=value`` overrides, validates everything — catalog names, distributions,
trace files, whether the model fits the GPU — and returns a :class:`Scenario`. Any
problem raises :class:`~des.errors.ScenarioError` with one ``(path, message)`` per
problem. See DESIGN.md for the contract; unknown keys are errors.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from des import catalog
from des.catalog.memory import GraphCapture, MemoryPlan, longest_sequence, with_native
from des.catalog.precision import Precision
from des.catalog.prices import PriceBook
from des.catalog.quantization import unsupported
from des.catalog.specs import GPUSpec, ModelSpec
from des.config import MAX_TIME, DuplicateKey, Flag, Seconds, Strict, load_yaml, plausible_latency
from des.cost import COST_MODELS, CostConfig, RooflineConfig
from des.cost.frontend import DEFAULT_FRONTEND, FrontendSpec, Serving
from des.cost.uncertainty import RunHardware, factor_sources, no_uncertainty_note
from des.dotted import deep_copy, set_dotted
from des.engine.deployment import ClusterConfig, PoolSpec, in_words_written, normalise, written_as
from des.engine.features import Deployed, problems
from des.engine.layout import Deployment, Layout, PoolLayout, ResolvedPool
from des.engine.schedulers import SCHEDULERS, ContinuousConfig, SchedulerConfig
from des.engine.schedulers.settings import ContinuousSettings
from des.engine.speculative import Proposer, SpeculativeConfig
from des.errors import ScenarioError, did_you_mean, reword, validation_errors
from des.registry import kind_of
from des.workload.arrivals import ARRIVALS, Trace, expected_count, expected_time, scheduled
from des.workload.build import Workload
from des.workload.lengths import LENGTHS
from des.workload.schedule import SCHEDULES
from des.workload.times import TIMES

#: The most requests a run may be asked to take: a million take about 45 s and 700 MB, so
#: 1e8 already needs hours and tens of GB.
MAX_REQUESTS = 100_000_000


class Horizon(Strict):
    """When arrivals stop: after ``duration`` seconds and/or ``num_requests`` requests.

    ``drain``: run on after the horizon until every admitted request is done (true),
    or stop at the horizon and count what is left as ``unfinished`` (false).
    """

    duration: PositiveFloat | None = None
    num_requests: PositiveInt | None = Field(None, le=MAX_REQUESTS)
    drain: bool = True

    @field_validator("duration")
    @classmethod
    def _timeable(cls, v: float | None) -> float | None:
        if v is not None and v > MAX_TIME:
            raise ValueError(f"{v:g} s is beyond {MAX_TIME:g} s (317 years), where a double no longer times a step")
        return v


class SLO(Strict):
    """Per-request latency objectives in seconds (a number, or a string with a unit: ``2s``,
    ``2000ms``); a request meets them all or not."""

    ttft: Annotated[Seconds, Field(gt=0)] | None = None
    tpot: Annotated[Seconds, Field(gt=0)] | None = None
    e2e: Annotated[Seconds, Field(gt=0)] | None = None
    #: The share of requests that must meet them for a window of the run to meet the SLO (``slo_met``).
    attainment: float = Field(0.99, gt=0, le=1)

    def limits(self) -> dict[str, float]:
        return {k: v for k, v in self.model_dump(exclude={"attainment"}).items() if v is not None}


#: The shortest window (seconds): a millisecond, below the shortest step a GPU takes, so
#: a window shorter would not hold a step to say how the run went.
MIN_WINDOW = 1e-3


class MetricsConfig(Strict):
    """How a run is reported over time: ``window`` seconds per row of windows.parquet
    (:mod:`des.metrics.windows`), at least :data:`MIN_WINDOW`."""

    window: Annotated[Seconds, Field(gt=0)] = 300.0

    @field_validator("window")
    @classmethod
    def _window(cls, v: float) -> float:
        if v < MIN_WINDOW:
            raise ValueError(
                f"{v:g} s is shorter than {MIN_WINDOW:g} s (a millisecond, below any step's time): "
                "such a window holds no step to say how the run went"
            )
        return v


class Scenario(Strict):
    """One simulation: hardware, model, workload, engine and horizon. Times in seconds.

    ``model_uncertainty``: draw the step-time model's error for this run, one multiplier
    per GPU type and group of work from the factors' stated uncertainty
    (:mod:`des.cost.uncertainty`), from the seed's own ``model`` stream.
    ``prices``: USD per GPU-hour by GPU name, over the catalog's (the cost of the run).
    ``metrics``: how the run is reported over time (windows.parquet).

    ``scheduler`` is the batching policy of every pool, ``speculative`` how its decodes
    speculate (vLLM's ``speculative_config``), and ``cluster`` where requests are served: a
    list of pools (:mod:`des.engine.deployment`; the old shapes are normalised into it).
    Validation resolves the deployment once (:attr:`deployment`: every pool's layout, memory
    plan and proposer), which everything after it reads."""

    name: str = "scenario"
    seed: int = Field(0, ge=0)
    gpu: GPUSpec = Field(default_factory=lambda: catalog.gpu("rtx4090"))
    model: ModelSpec = Field(default_factory=lambda: catalog.model("qwen2.5-7b"))
    precision: Precision = Precision()
    horizon: Horizon = Horizon()
    warmup: NonNegativeFloat = 0.0
    workload: Workload
    cost_model: CostConfig = RooflineConfig()
    serving: Serving | None = None
    scheduler: SchedulerConfig = ContinuousConfig()
    speculative: SpeculativeConfig | None = None
    cluster: ClusterConfig = ClusterConfig()
    slo: SLO | None = None
    metrics: MetricsConfig = MetricsConfig()
    prices: dict[str, PositiveFloat] = Field(default_factory=dict)
    model_uncertainty: Flag = False
    _deployment: Deployment | None = PrivateAttr(None)
    _aliases: dict[str, str] = PrivateAttr(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _one_deployment_shape(cls, data: Any) -> Any:
        """The old shapes of the deployment (``cluster.replicas``..., ``scheduler.kind:
        disaggregated``, ``scheduler.speculative``) as pools (:func:`des.engine.deployment.normalise`)."""
        return normalise(data)[0]

    @model_validator(mode="before")
    @classmethod
    def _native_precision(cls, data: Any) -> Any:
        """A model whose checkpoint has its own weight format (``default_precision`` in the
        catalog: gpt-oss's MXFP4 experts, DeepSeek-V3's fp8) runs in it unless the scenario
        names other weights (:func:`des.catalog.memory.with_native`)."""
        if not isinstance(data, dict) or "model" not in data:
            return data
        try:
            entry = catalog.resolve("models", data["model"])
        except ValueError:
            return data  # reported by the model field's own validation
        native = entry.get("default_precision") if isinstance(entry, dict) else None
        given = data.get("precision")
        if not isinstance(native, dict) or not (given is None or isinstance(given, dict)):
            return data
        return {**data, "precision": with_native(native, given)}

    @field_validator("scheduler", "cost_model", mode="before")
    @classmethod
    def _default_kind(cls, v: Any, info: ValidationInfo) -> Any:
        """A section that names no kind but only keys of the default kind is of that kind
        (so ``--set scheduler.max_num_seqs=64`` works on a scenario that leaves the
        scheduler out), and so is one whose other keys no kind has (they are then
        reported as unknown keys); with keys of another kind, its kind stays required."""
        if isinstance(v, dict) and "kind" not in v:
            default: Any = ContinuousConfig if info.field_name == "scheduler" else RooflineConfig
            kinds: Any = SCHEDULERS if info.field_name == "scheduler" else COST_MODELS
            known = {k for name in kinds for k in kinds.get(name).model_fields} & set(v)
            if known <= set(default.model_fields):
                return {"kind": default.model_fields["kind"].default, **v}
        return v

    @field_validator("serving")
    @classmethod
    def _serving_needs_roofline(cls, v: Serving | None, info: ValidationInfo) -> Serving | None:
        """The serving front-end's CPU time is the roofline's (``api_server`` unless given);
        a constant or linear cost model states whole step times and has no serving stack, so
        it drops the default section (a resolved roofline scenario carries one) and refuses
        any other."""
        cost = info.data.get("cost_model")
        if cost is None:
            return v
        if not isinstance(cost, RooflineConfig):
            if v is not None and v != Serving():
                raise ValueError(
                    f"frontend: a {cost.kind} cost model states whole step times, with no serving stack around "
                    "them (the front-end's CPU time is the roofline's: cost_model.kind: roofline)"
                )
            return None
        return v if v is not None else Serving()

    @property
    def frontend(self) -> FrontendSpec | None:
        """The serving front-end around the engine (None: the cost model has no serving stack)."""
        return self.serving.spec if self.serving is not None else None

    @field_validator("gpu", mode="before")
    @classmethod
    def _gpu_by_name(cls, v: Any) -> Any:
        return catalog.resolve("gpus", v)

    @field_validator("model", mode="before")
    @classmethod
    def _model_by_name(cls, v: Any) -> Any:
        return catalog.resolve("models", v)

    @model_validator(mode="after")
    def _experts_to_quantize(self) -> Scenario:
        if self.precision.quantized_layers == "experts" and not self.model.is_moe:
            raise ScenarioError(
                (
                    "precision.quantized_layers",
                    f"'experts' quantises a mixture of experts' routed experts, and {self.model.name} has none "
                    "(use 'all')",
                )
            )
        return self

    @model_validator(mode="after")
    def _horizon_needed(self) -> Scenario:
        h = self.horizon
        if h.duration is None and h.num_requests is None and not isinstance(self.workload.arrival, Trace):
            raise ValueError("horizon: needs duration (seconds) and/or num_requests")
        if h.duration is not None and self.warmup >= h.duration:
            raise ValueError(f"warmup: {self.warmup} s is not shorter than horizon.duration {h.duration} s")
        arrival = self.workload.arrival
        count = expected_count(arrival, h.duration) if h.duration is not None else None
        if h.num_requests is None and count is not None and count > MAX_REQUESTS:
            pace = "the schedule" if scheduled(arrival) else f"{getattr(arrival, 'rate', 0):g} req/s"
            raise ValueError(
                f"horizon: {pace} for {h.duration:g} s is {count:.3g} requests, beyond the "
                f"{MAX_REQUESTS:.0e} a run can hold (a million take about 45 s and 700 MB): shorten duration or "
                "set num_requests"
            )
        return self

    @model_validator(mode="after")
    def _features_combine(self) -> Scenario:
        """Every pool's batching settings are its policy's, and no feature refuses what it is
        asked to run with (:mod:`des.engine.features`)."""
        kind = type(self.scheduler)
        found = [
            (f"cluster.pools.{i}.scheduler.{key}", f"unknown key for {self.scheduler.kind} batching"
             + did_you_mean(key, [k for k in kind.model_fields if k != "kind"]))
            for i, pool in enumerate(self.cluster.pools)
            for key in pool.overrides
            if key not in kind.model_fields
        ]  # fmt: skip
        if found:
            raise ScenarioError(found)
        found = problems(self._deployed())
        if found:
            raise ScenarioError(found)
        return self

    def _deployed(self) -> Deployed:
        roofline = isinstance(self.cost_model, RooflineConfig)
        return Deployed(self.cluster, self.scheduler, self.speculative, self.model, self.gpu, self.precision, roofline)

    @model_validator(mode="after")
    def _hardware_can_serve(self, info: ValidationInfo) -> Scenario:
        """What vLLM refuses to start, des refuses to simulate: a weight format it has no kernel
        for on the GPU (:mod:`des.catalog.quantization`), a tensor-parallel degree that
        does not divide the attention heads, a context beyond the model's, a model that does
        not fit, and more KV blocks than the memory left holds. Then the deployment is
        resolved, once: every pool's proposer and memory plan (:attr:`deployment`).

        Skipped for a scenario loaded with ``hardware=False`` (:func:`load_scenario`: the
        base of ``des plan``, whose model and workload are planned on other GPUs): it has no
        deployment and cannot be simulated."""
        if info.context is not None and info.context.get("hardware") is False:
            return self
        found: list[tuple[str, str]] = []
        layout = self._layout()
        resolved: list[ResolvedPool] = []
        for i, pool in enumerate(layout.pools):
            pool_problems = self._pool_problems(i, pool)
            if pool_problems:
                found += pool_problems
                continue
            proposer = pool.proposer(self.model, self.precision)  # refused by speculative_problems if none
            try:
                memory = pool.memory(self.model, self.precision, proposer)
            except ScenarioError as exc:  # at `model`, or the draft's: say what would fit
                (where, message), *_ = exc.problems
                if proposer is not None and _fits(pool, self.model, self.precision, None):
                    where, message = self._draft_too_big(pool, proposer, message)
                hint = _what_fits(i, pool, self.model, self.precision, self._allows(i))
                raise ScenarioError((where, message + hint)) from None
            if memory.num_blocks > memory.fitting_blocks:
                gib = 1 << 30
                need = memory.num_blocks * memory.block_size * memory.kv_bytes_per_token / gib
                room = memory.fitting_blocks * memory.block_size * memory.kv_bytes_per_token / gib
                found.append((self._setting(i, "num_gpu_blocks_override"), (
                    f"{memory.num_blocks} blocks hold {need:.4g} GiB of KV, more than the {room:.4g} GiB "
                    f"({memory.fitting_blocks} blocks) left on {pool.tp} x {pool.gpu.name} "
                    "(vLLM would run out of memory allocating them)"
                )))  # fmt: skip
            short = self._context_problem(i, pool, memory)
            if short is not None:
                found.append(short)
            resolved.append(ResolvedPool(pool, memory, proposer))
        if found:
            raise ScenarioError(list(dict.fromkeys(found)))
        run = RunHardware(tuple((pool.gpu, pool.tp) for pool in layout.pools), self.frontend)
        self._deployment = Deployment(layout, tuple(resolved), factor_sources(self.cost_model, run))
        return self

    def _pool_problems(self, i: int, pool: PoolLayout) -> list[tuple[str, str]]:
        """What vLLM refuses of pool ``i`` before it plans memory: its weights' format on its
        GPU, a TP degree its heads cannot share, a context or a step too long, a step's token
        budget below its sequences (``vllm/config/scheduler.py``)."""
        model, found = self.model, []
        refused = unsupported(pool.gpu, self.precision)
        if refused is not None:
            native = (model.default_precision or {}).get("weights")
            if native == self.precision.weights:
                refused += f" (it is {model.name}'s own format: name other weights, e.g. bf16)"
            return [("precision.weights", refused)]
        heads = model.num_attention_heads
        if heads % pool.tp:
            return [(f"cluster.pools.{i}.tp", (
                f"{pool.tp} GPUs cannot share the {heads} attention heads of {model.name} evenly (vLLM: "
                f"'Total number of attention heads ({heads}) must be divisible by tensor parallel size "
                f"({pool.tp})')"
            ))]  # fmt: skip
        kv = model.num_key_value_heads
        if (pool.tp % kv if pool.tp >= kv else kv % pool.tp) != 0:
            return [(f"cluster.pools.{i}.tp", (
                f"{pool.tp} GPUs cannot share the {kv} KV heads of {model.name}: each GPU holds a share of "
                f"them, or copies of one when there are fewer heads than GPUs (vLLM asserts that {pool.tp} "
                f"and {kv} divide)"
            ))]  # fmt: skip
        policy = pool.policy
        limit = policy.max_model_len
        if limit is not None and limit > model.max_model_len:
            found.append((self._setting(i, "max_model_len"), (
                f"{limit} tokens is longer than the {model.max_model_len}-token context of {model.name} "
                "(vLLM refuses a max_model_len above the model's; its outputs beyond are not to be trusted)"
            )))  # fmt: skip
        context = min(limit or model.max_model_len, model.max_model_len)
        if isinstance(policy, ContinuousSettings) and policy.max_num_batched_tokens < policy.max_num_seqs:
            budget, seqs = policy.max_num_batched_tokens, policy.max_num_seqs
            found.append((self._setting(i, "max_num_batched_tokens"), (
                f"{budget} is fewer than max_num_seqs ({seqs}), which vLLM refuses at start-up, chunked prefill "
                f"or not (SchedulerConfig: 'max_num_batched_tokens ({budget}) must be greater than or equal to "
                f"max_num_seqs ({seqs}).')"
            )))  # fmt: skip
        elif isinstance(policy, ContinuousSettings) and not policy.enable_chunked_prefill:
            budget = policy.max_num_batched_tokens
            if budget < context:
                found.append((self._setting(i, "max_num_batched_tokens"), (
                    f"{budget} tokens is smaller than max_model_len ({context}) with chunked prefill off"
                    f"{'' if pool.role == 'colocated' else f' on the {pool.role} pool'}: "
                    "a prompt longer than one step could never run (vLLM refuses this at start-up: raise "
                    f"max_num_batched_tokens to {context}, set max_model_len to {budget} or less, or "
                    "enable chunked prefill)"
                )))  # fmt: skip
        return found

    def _context_problem(self, i: int, pool: PoolLayout, memory: MemoryPlan) -> tuple[str, str] | None:
        """vLLM's refusal to start when the KV cache cannot hold one sequence of
        ``max_model_len`` tokens (``_check_enough_kv_cache_memory`` in
        ``vllm/v1/core/kv_cache_utils.py``), in its words and with its estimate of the
        longest length that fits (:func:`des.catalog.memory.longest_sequence`), or None.
        (Continuous batching only: a static batch is no vLLM engine.)"""
        model, policy = self.model, pool.policy
        if not isinstance(policy, ContinuousSettings):
            return None
        context = min(policy.max_model_len or model.max_model_len, model.max_model_len)
        step = policy.token_budget or policy.profile_tokens
        fits = longest_sequence(memory, model, self.precision, step, context)
        if fits >= context:
            return None
        where = "" if len(self.cluster.pools) == 1 else f" of the {pool.role} pool"
        gib, per = 1 << 30, memory.tp
        if memory.pp == 1:
            need = memory.block_size * memory.kv_bytes_per_token * -(-context // memory.block_size)
            quoted = (
                f"'To serve at least one request with the models's max seq len ({context}), ({need / per / gib:.2f} "
                f"GiB KV cache is needed, which is larger than the available KV cache memory "
                f"({(memory.budget - memory.non_kv) / per / gib:.2f} GiB).'"
            )
        else:
            quoted = f"'To serve at least one request with the models's max seq len ({context}), ...'"
        estimate = (
            f"the estimated maximum model length is {fits}: set max_model_len to {fits} or less"
            if fits > 0
            else "no length fits"
        )
        return self._setting(i, "max_model_len"), (
            f"{context} tokens (the context{where}) do not fit the KV cache left on {pool.tp} x {pool.gpu.name} "
            f"({memory.fitting_blocks * memory.block_size:,} tokens in all): vLLM refuses to start ({quoted} Based "
            f"on the available memory, {estimate}, or raise gpu_memory_utilization)"
        )

    def _draft_too_big(self, pool: PoolLayout, proposer: Proposer, message: str) -> tuple[str, str]:
        """The problem of a model that fits alone but not with its speculative ``proposer``
        (the memory plan's ``message`` about both): at the proposer's key, as the draft's."""
        spec = self.speculative
        assert spec is not None
        what = f"{spec.model} (the {spec.method} model)" if spec.model else f"{self.model.name}'s {spec.method} layers"
        _, _, budget = message.partition(": ")
        return ("speculative.model" if spec.model else "speculative.method"), (
            f"{what} does not fit beside {self.model.name} on {pool.tp} x {pool.gpu.name}, its "
            f"{proposer.weight_bytes / (1 << 30):.2f} GiB resident with the target's: {budget}"
        )

    def _allows(self, i: int) -> Callable[[dict[str, Any]], bool]:
        """Whether pool ``i`` with the fields of an update (``tp``, ``pp``, ``dp`` ...) is a
        deployment no feature refuses (:mod:`des.engine.features`): a hint must be possible."""
        deployed = self._deployed()

        def allows(update: dict[str, Any]) -> bool:
            pools = list(self.cluster.pools)
            pools[i] = pools[i].model_copy(update=update)
            return not problems(replace(deployed, cluster=self.cluster.model_copy(update={"pools": pools})))

        return allows

    def _setting(self, i: int, name: str) -> str:
        """Where the batching setting ``name`` of pool ``i`` is written: the pool's own
        ``scheduler``, else the top-level policy."""
        own = self.cluster.pools[i].overrides
        return f"cluster.pools.{i}.scheduler.{name}" if name in own else f"scheduler.{name}"

    def _layout(self) -> Layout:
        cost = self.cost_model
        graphs = cost.graphs if isinstance(cost, RooflineConfig) else GraphCapture()
        frontend = self.serving.frontend if self.serving is not None else DEFAULT_FRONTEND
        return self.cluster.layout(
            self.scheduler, self.speculative, self.gpu, graphs, frontend, self.model.max_model_len
        )

    @property
    def deployment(self) -> Deployment:
        """The deployment resolved once, at validation: the engine's layout and every pool's
        memory plan and proposer (:mod:`des.engine.layout`)."""
        if self._deployment is None:
            raise ValueError(
                "this scenario was loaded without its hardware (load_scenario(hardware=False)): no deployment"
            )
        return self._deployment

    def named(self, path: str) -> str:
        """``path`` (a key in the one shape of pools) as the scenario's file wrote it (an
        old shape's key, where :func:`load_scenario` read one), for a problem found later."""
        return written_as(path, self._aliases)

    @property
    def layout(self) -> Layout:
        """The pools of instances requests pass through, and the link between them."""
        return self.deployment.layout

    def price_book(self) -> dict[str, float | None]:
        """USD per GPU-hour of each GPU the run's pools use: ``prices``, else the catalog's
        list price (:mod:`des.catalog.prices`; None: none known)."""
        book = PriceBook.from_catalog().overridden(self.prices, "the scenario's prices")
        return {pool.gpu.name: book.per_gpu_hour(pool.gpu) for pool in self.layout.pools}

    @model_validator(mode="after")
    def _prices_name_gpus(self) -> Scenario:
        """Every GPU ``prices`` names is the catalog's or one of the run's."""
        known = {*catalog.gpu_names(), *(pool.gpu.name for pool in self._layout().pools)}
        for name in self.prices:
            if name not in known:
                raise ScenarioError(
                    (f"prices.{name}", f"unknown GPU{did_you_mean(name, known)}; known: {', '.join(sorted(known))}")
                )
        return self

    def memory_plan(self) -> MemoryPlan:
        """The KV cache of one instance of the pool requests finish in (the only pool of
        colocated serving, the decode pool of disaggregated serving)."""
        return self.deployment.finishing.memory

    def memory_plans(self) -> list[MemoryPlan]:
        """The KV cache of one instance of each pool."""
        return self.deployment.memory_plans

    def resolved(self) -> dict[str, Any]:
        """The scenario with every default filled in, as plain data (for provenance), its
        deployment in the one shape of pools (a pool's ``scheduler`` holds only what it sets)."""
        data = self.model_dump(mode="json")
        for pool, spec in zip(data["cluster"]["pools"], self.cluster.pools, strict=True):
            pool["scheduler"] = spec.overrides
        return data


# -- loading ------------------------------------------------------------------------


#: The kind names of every tagged union (pydantic puts them in error paths; users never wrote them).
_TAGS = {*SCHEDULERS, *COST_MODELS, *ARRIVALS, *LENGTHS, *TIMES, *SCHEDULES}
_FIELD_PREFIX = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*): (.*)$", re.S)


def _fields_at(loc: tuple[Any, ...]) -> list[str]:
    """The keys the configuration at ``loc`` (a pydantic error's location in a Scenario)
    takes, for a "did you mean"; none where the walk cannot tell."""
    ann: Any = Scenario
    parts = list(loc)
    while True:
        origin, args = get_origin(ann), get_args(ann)
        if origin is Annotated:
            ann = args[0]
        elif origin in (Union, types.UnionType):
            members = [a for a in args if a is not type(None)]
            if len(members) == 1:
                ann = members[0]
            elif parts and isinstance(parts[0], str):  # a tagged union: the location names the member
                tag = parts.pop(0)
                found = [m for m in members if isinstance(m, type) and _kind_or_none(m) == tag]
                if not found:
                    return []
                ann = found[0]
            else:
                return []
        elif origin in (list, tuple) and parts and isinstance(parts[0], int):
            parts.pop(0)
            ann = args[0]
        elif isinstance(ann, type) and issubclass(ann, BaseModel):
            if not parts:
                return list(ann.model_fields)
            field = ann.model_fields.get(str(parts.pop(0)))
            if field is None:
                return []
            ann = field.annotation
        else:
            return []


def _kind_or_none(cls: type) -> str | None:
    try:
        return kind_of(cls)
    except TypeError:
        return None


def problems_of(exc: ValidationError) -> list[tuple[str, str]]:
    """pydantic errors as (dotted path, message) pairs, worded for a user."""
    out: list[tuple[str, str]] = []
    errors = validation_errors(exc)
    # a mapping with a key it does not know: that is the mistake, not the keys it then lacks
    unknown_in = {tuple(e["loc"][:-1]) for e in errors if e["type"] == "extra_forbidden"}
    for err in errors:
        if err["type"] == "missing" and tuple(err["loc"][:-1]) in unknown_in:
            continue
        loc = [str(x) for x in err["loc"] if not (isinstance(x, str) and (x in _TAGS or "[" in x))]
        typ, msg, ctx = err["type"], err["msg"], err.get("ctx") or {}
        value = err.get("input")
        if typ == "extra_forbidden":
            names = _fields_at(err["loc"][:-1])
            if err["loc"][:2] == ("cluster", "pools") and err["loc"][-2:-1] == ("scheduler",):
                names += list(PoolSpec.model_fields)  # an old split's pool wrote both in one mapping
            msg = "unknown key" + did_you_mean(str(err["loc"][-1]), names)
            value = None
        elif typ == "missing":
            msg = "required"
            value = None
        elif typ == "union_tag_invalid":
            loc.append(ctx.get("discriminator", "kind").strip("'"))
            msg = f"unknown value {ctx.get('tag')!r}; valid: {ctx.get('expected_tags', '').replace(chr(39), '')}"
            value = None
        elif typ == "union_tag_not_found":
            loc.append(ctx.get("discriminator", "kind").strip("'"))
            msg = "required"
            value = None
        elif typ == "scenario_error":  # a validator naming the field itself
            value = None
        elif typ in ("value_error", "assertion_error"):
            msg = msg.removeprefix("Value error, ").removeprefix("Assertion failed, ")
            m = _FIELD_PREFIX.match(msg)
            if m:
                loc.append(m.group(1))
                msg = m.group(2)
            value = None
        else:
            msg = reword(msg)
        if value is not None and not isinstance(value, dict | list):
            msg = f"{msg} (got {value!r})"
        out.append((".".join(loc) or "scenario", msg))
    return out


def parse_override(text: str) -> tuple[str, Any]:
    """``"a.b=value"`` as ``("a.b", value)``, the value parsed as a YAML scalar or list.

    A relative file path in an override (a ``path`` key, or a ``path`` inside a mapping
    value) is made absolute against the current directory, as a shell user expects;
    paths written in a scenario file stay relative to the file.
    """
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*", key):
        raise ScenarioError(("--set", f"expected dotted.key=value, got {text!r}"))
    try:
        value = load_yaml(raw) if raw.strip() else ""
    except DuplicateKey as exc:
        raise ScenarioError(("--set", f"{text!r}: {exc.problem}")) from None
    except yaml.YAMLError:
        value = raw
    parent, _, name = key.rpartition(".")
    return key, _from_cwd(name, value, parent.rpartition(".")[2])


#: Keys named ``path`` that name no file: ``scheduler.kv_transfer.path`` is where KV crosses.
NOT_FILES = frozenset({"kv_transfer"})


def _from_cwd(name: str, value: Any, parent: str = "") -> Any:
    """``value`` with the relative paths of its ``path`` keys (but those under
    :data:`NOT_FILES`) made absolute against the CWD; ``parent``: the key above ``name``."""
    if name == "path" and parent not in NOT_FILES and isinstance(value, str) and value:
        return value if Path(value).is_absolute() else str(Path.cwd() / value)
    if isinstance(value, dict):
        return {k: _from_cwd(str(k), v, name) for k, v in value.items()}
    return value


def yaml_problem(exc: yaml.YAMLError) -> str:
    """Where and why a YAML document could not be read, on one line: `` line N: not valid YAML (...)``."""
    mark = getattr(exc, "problem_mark", None)
    where = f" line {mark.line + 1}" if mark is not None else ""
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow (a NUL byte, ...)
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        return f" character {exc.position + 1}: not valid YAML (character U+{char:04X} is not allowed)"
    problem = getattr(exc, "problem", None) or str(exc).strip().splitlines()[0]
    return f"{where}: not valid YAML ({problem})"


def read_yaml(path: Path) -> dict[str, Any]:
    """A YAML mapping from ``path``; problems as ScenarioError naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(("scenario", f"cannot read {str(path)!r}: {exc.strerror or exc}")) from None
    except UnicodeDecodeError:
        raise ScenarioError(("scenario", f"{str(path)!r} is not UTF-8 text")) from None
    return parse_yaml(text, str(path))


def parse_yaml(text: str, name: str) -> dict[str, Any]:
    """A YAML mapping from the ``text`` of the file ``name``; problems as ScenarioError naming it."""
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        raise ScenarioError(("scenario", f"{name!r}{yaml_problem(exc)}")) from None
    if not isinstance(data, dict):
        raise ScenarioError(("scenario", f"{name!r} does not hold a mapping of keys"))
    return data


def default_scenario_path() -> Path:
    """The embedded default scenario: RTX 4090 + Qwen2.5-7B under Poisson traffic."""
    return Path(str(resources.files("des.scenarios").joinpath("default.yaml")))


def load_scenario(
    source: str | Path | Mapping[str, Any] | Scenario | None = None,
    overrides: Iterable[str | tuple[str, Any]] = (),
    file_roots: Iterable[Path] | None = None,
    hardware: bool = True,
) -> Scenario:
    """Validate a scenario file (or mapping) with ``dotted.key=value`` overrides.

    ``None`` loads the embedded default. Relative paths inside the file (traces,
    empirical lengths) are resolved against the file's directory. With ``file_roots``,
    a path outside those folders is refused before it is read (the what-if page's
    scenarios: :func:`des.config.resolve_path`). ``hardware=False``
    skips what only its GPUs decide (the model fits, its heads divide the TP degree:
    ``Scenario._hardware_can_serve``), for a scenario whose model and workload are
    deployed elsewhere (``des plan``'s base); such a scenario has no :attr:`~Scenario.deployment`.
    """
    if isinstance(source, Scenario):
        source = source.resolved()
    if source is None:
        source = default_scenario_path()
    if isinstance(source, Mapping):
        data, base_dir = deep_copy(source), Path.cwd()
    else:
        path = Path(source)
        data, base_dir = read_yaml(path), path.resolve().parent
    aliases: dict[str, str] = {}
    for item in overrides:
        key, value = parse_override(item) if isinstance(item, str) else item
        if key.startswith("cluster.pools.") and not _has_pools(data):
            data, aliases = normalise(data)  # an old shape's pools, addressed in the new one
        set_dotted(data, key, value)
    try:
        data, moved = normalise(data)
        aliases.update(moved)
        roots = None if file_roots is None else tuple(file_roots)
        context = {"base_dir": base_dir, "file_roots": roots, "hardware": hardware}
        scenario = Scenario.model_validate(data, context=context)
        scenario._aliases = aliases
        return scenario
    except ValidationError as exc:
        raise ScenarioError(in_words_written(problems_of(exc), aliases)) from None
    except ScenarioError as exc:
        raise ScenarioError(in_words_written(exc.problems, aliases)) from None


def _has_pools(data: Mapping[str, Any]) -> bool:
    cluster = data.get("cluster")
    return isinstance(cluster, Mapping) and isinstance(cluster.get("pools"), list)


def scenario_warnings(scenario: Scenario) -> list[str]:
    """Things worth a user's attention that are not errors (e.g. truncation moving a mean)."""
    notes = []
    w = scenario.workload
    for key in ("prompt_tokens", "output_tokens"):
        dist = getattr(w, key)
        stated = getattr(dist, "mean", None)
        if dist is None or stated is None:
            continue
        low, high = dist.mean_bounds()
        if abs(low - stated) <= 0.01 * stated and abs(high - stated) <= 0.01 * stated:
            continue  # within 1 % for sure, without the pmf sum of exact moments
        mean, _ = dist.moments()
        if abs(mean - stated) > 0.01 * stated:
            notes.append(
                f"workload.{key}: the lengths sampled have mean {mean:.2f}, not {stated:g}, "
                f"because they are truncated to [{dist.min or 1}, {dist.max or 'inf'}]"
            )
    if isinstance(w.arrival, Trace):
        notes += [f"workload.arrival: {note}" for note in w.arrival.notes]
    notes += _warmup_past_arrivals(scenario)
    if scenario.model_uncertainty:
        none = no_uncertainty_note(scenario.deployment.factors)
        if none:
            notes.append(f"model_uncertainty: {none}")
    if scenario.slo is not None:
        for name, limit in scenario.slo.limits().items():
            doubt = plausible_latency(name, limit)
            if doubt:
                notes.append(f"slo.{name}: {doubt}")
    return notes


def _fits(pool: PoolLayout, model: ModelSpec, precision: Precision, proposer: Proposer | None) -> bool:
    """Whether ``model`` at ``precision`` (and ``proposer``'s weights and KV beside it) leaves
    room for a KV block on ``pool``'s GPUs."""
    try:
        pool.memory(model, precision, proposer)
    except ScenarioError:
        return False
    return True


def _what_fits(
    i: int, pool: PoolLayout, model: ModelSpec, precision: Precision, allows: Callable[[dict[str, Any]], bool]
) -> str:
    """``; it fits with ...``: the smallest tensor-parallel degree vLLM accepts that makes
    ``model`` (with the pool's speculative proposer) fit pool ``i``'s GPUs, the fewest
    pipeline stages or expert-parallel ranks, and the lightest weight format that does on as
    many; only those ``allows`` (no feature refuses them, :mod:`des.engine.features`) and
    the GPU runs (its kernels for the format)."""
    hints = []
    heads, kv = model.num_attention_heads, model.num_key_value_heads
    proposer = pool.proposer(model, precision)
    at = f"cluster.pools.{i}"
    for tp in (2, 4, 8, 16, 32):
        if tp <= pool.tp or heads % tp or (tp % kv if tp >= kv else kv % tp) or not allows({"tp": tp}):
            continue
        if _fits(replace(pool, tp=tp), model, precision, replace(pool, tp=tp).proposer(model, precision)):
            hints.append(f"{at}.tp: {tp} ({tp} x {pool.gpu.name})")
            break
    par = pool.parallel
    for pp in (2, 4, 8):  # stages split the weights on GPUs that need not share heads
        if pool.role != "colocated" or pp <= par.pp or pp > model.num_layers or not allows({"pp": pp}):
            continue
        if _fits(replace(pool, parallel=replace(par, pp=pp)), model, precision, proposer):
            hints.append(f"{at}.pp: {pp} ({pp * pool.tp} x {pool.gpu.name})")
            break
    if model.is_moe and pool.role == "colocated":  # data parallelism spreads the experts
        for dp in (2, 4, 8):
            if dp <= par.dp or (model.num_experts or 0) % (dp * pool.tp):
                continue
            if not allows({"dp": dp, "expert_parallel": True}):
                continue
            if _fits(replace(pool, parallel=replace(par, dp=dp, expert_parallel=True)), model, precision, proposer):
                hints.append(f"{at}.dp: {dp} and {at}.expert_parallel: true ({dp * pool.tp} x {pool.gpu.name})")
                break
    for weights in ("fp8", "int4-awq"):
        lighter = precision.model_copy(update={"weights": weights})
        if lighter.weight_bytes_per_param >= precision.weight_bytes_per_param or unsupported(pool.gpu, lighter):
            continue
        if _fits(pool, model, lighter, pool.proposer(model, lighter)):
            hints.append(f"precision.weights: {weights}")
            break
    return f"; it fits with {' or with '.join(hints)}" if hints else ""


def _warmup_past_arrivals(scenario: Scenario) -> list[str]:
    """A warning when the warm-up outlasts the arrivals (a replay's, or ``num_requests`` at
    the arrival rate): the arrival window is then empty, and nothing is measured."""
    warmup, h, arrival = scenario.warmup, scenario.horizon, scenario.workload.arrival
    if warmup == 0 or h.duration is not None:
        return []  # a duration longer than the warm-up bounds the window (validated)
    if isinstance(arrival, Trace):
        last = float(arrival.table["arrival_time"].max())
        if warmup >= last:
            return [
                f"warmup: {warmup:g} s is not shorter than the replay, whose last request arrives at {last:.4g} s: "
                "no request is measured (set warmup below it, e.g. 0)"
            ]
    elif h.num_requests is not None:
        expected = expected_time(arrival, h.num_requests)
        if expected is not None and warmup >= expected:
            pace = "on the schedule" if scheduled(arrival) else f"at {getattr(arrival, 'rate', 0):g} req/s"
            return [
                f"warmup: {warmup:g} s is not shorter than the {expected:.4g} s its {h.num_requests:,} requests take "
                f"to arrive {pace}: few or none are measured (set warmup below it)"
            ]
    return []


__all__ = [
    "Scenario",
    "Horizon",
    "Workload",
    "ClusterConfig",
    "load_scenario",
    "parse_override",
    "scenario_warnings",
    "default_scenario_path",
]
