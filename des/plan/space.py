"""The configurations a plan considers, and the bounds that discard some before simulating.

A :class:`Candidate` is one way to serve the scenario's model: a GPU type, a tensor-parallel
degree, colocated replicas or a prefill/decode split of that many instances. The space
(:func:`candidates`) is every catalog GPU asked for, every tensor-parallel degree that
divides the model's attention heads (1, 2, 4, 8), and for up to ``max_gpus`` GPUs every
replica count and every P:D split; the engine settings (``max_num_seqs``,
``max_num_batched_tokens``, ...) are the scenario's.

Three checks discard a candidate without simulating it, and none can be wrong
(:func:`prune`):

- **a feature refuses it**: the candidate's pools are asked the same refusals as every
  scenario (:data:`des.engine.features.REFUSALS`: expert parallelism a model cannot split,
  pipeline stages des does not model with speculation, ...) before its scenario is built;
- **it does not fit**: vLLM's memory plan leaves no KV block (or the scenario is
  otherwise refused), exactly as ``des run`` would refuse it;
- **it cannot carry the rate**: the target rate exceeds the most requests per second its
  GPUs could complete at their spec-sheet peaks. Every token a request computes costs at
  least ``2 × active parameters`` FLOPs in the linear layers (a prompt's tokens only
  without prefix caching, whose hits compute nothing), so the GPUs complete at most
  ``Σ peak FLOP/s / (2 · N_active · tokens per request)`` requests a second; and an
  engine's decode step reads at least its weights (but an untied embedding table, only
  looked up) for at most ``max_num_seqs`` tokens, and each token's attention reads its
  sequence's KV so far, so its engines finish decoding at most ``1 / (E[output] · W /
  (max_num_seqs · bandwidth) + E[KV read] / bandwidth)`` requests a second per engine (not
  bounded for speculative decoding, which emits several tokens per sequence, nor for a
  mixture of experts, whose steps read only some experts). The roofline's step time is
  at least these terms (its efficiency factors are at most 1), so
  a simulation could never pass a candidate these bounds discard: a test runs them to check.
  (Only the roofline's: a constant or linear cost model's step times are not bounded by
  the GPU.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from des import catalog
from des.catalog.memory import weight_bytes
from des.catalog.quantization import compute_dtype
from des.engine.deployment import ClusterConfig
from des.engine.features import Deployed, problems
from des.errors import ScenarioError
from des.scenario import Scenario, load_scenario

#: The tensor-parallel degrees a plan tries.
TP_DEGREES = (1, 2, 4, 8)


@dataclass(frozen=True)
class Candidate:
    """One configuration: ``num_gpus`` GPUs of type ``gpu``, engines of ``tp`` GPUs, serving
    colocated (``scheduler`` continuous or static: ``replicas`` engines) or disaggregated
    (``prefill_instances`` + ``decode_instances`` engines)."""

    gpu: str
    tp: int
    scheduler: str  # the scenario's batching kind, or "disaggregated" for a split
    replicas: int = 0
    prefill_instances: int = 0
    decode_instances: int = 0
    decode_gpu: str | None = None  # a split's decode pool on another GPU type (None: ``gpu``)
    max_num_seqs: int | None = None  # engine settings searched (None: the scenario's)
    max_num_batched_tokens: int | None = None
    variant: str | None = None  # a quantised checkpoint of the model (its Hugging Face repo; None: the scenario's)
    pp: int = 1  # pipeline stages per engine (colocated)
    dp: int = 1  # data-parallel ranks per server (colocated; a mixture of experts' with expert parallelism)

    @property
    def engines(self) -> int:
        """Engines of ``tp × pp`` GPUs: servers × data-parallel ranks, or the pools' instances."""
        return self.replicas * self.dp + self.prefill_instances + self.decode_instances

    @property
    def num_gpus(self) -> int:
        return self.engines * self.tp * self.pp

    @property
    def name(self) -> str:
        """A short name, also its folder: ``h100-80gb/tp2/x3``, ``l40s/tp1/1P+2D``,
        ``h100-80gb/tp1/1P+2D-l40s`` (decode on L40S), ``…/x2/s256-b8192`` (engine settings)."""
        shape = f"x{self.replicas}" if self.replicas else f"{self.prefill_instances}P+{self.decode_instances}D"
        if self.pp > 1:
            shape += f"-pp{self.pp}"
        if self.dp > 1:
            shape += f"-dp{self.dp}ep"
        if self.decode_gpu is not None:
            shape += f"-{self.decode_gpu}"
        knobs = [f"s{self.max_num_seqs}"] if self.max_num_seqs else []
        knobs += [f"b{self.max_num_batched_tokens}"] if self.max_num_batched_tokens else []
        if self.variant is not None:
            knobs.append(self.variant.split("/")[-1])
        return f"{self.gpu}/tp{self.tp}/{shape}" + (f"/{'-'.join(knobs)}" if knobs else "")

    def gpu_counts(self) -> dict[str, int]:
        """GPUs of each type."""
        if self.decode_gpu is None:
            return {self.gpu: self.num_gpus}
        counts = {self.gpu: self.prefill_instances * self.tp}
        counts[self.decode_gpu] = counts.get(self.decode_gpu, 0) + self.decode_instances * self.tp
        return counts

    def overrides(self, base: dict[str, Any]) -> dict[str, Any]:
        """The base scenario (resolved, plain data) set to this configuration: its GPU, its
        engine settings, and its pools in place of the base's (a split keeps a split base's
        pool settings, routers and link; speculative decoding is the colocated pool's only)."""
        data = dict(base)
        data["gpu"] = self.gpu
        cluster = dict(base.get("cluster") or {})
        given = [dict(p) for p in cluster.get("pools") or [{"role": "both"}]]
        split_base = [p.get("role") for p in given] == ["prefill", "decode"]
        if self.replicas:
            own = {k: v for k, v in given[0].items() if k not in _PLACED} if not split_base else {}
            if self.dp > 1:
                own["expert_parallel"] = True
            pools = [{**own, "role": "both", "instances": self.replicas, "tp": self.tp, "pp": self.pp, "dp": self.dp}]
            cluster.pop("kv_transfer", None)
        else:
            sizes = ((self.prefill_instances, None), (self.decode_instances, self.decode_gpu))
            pools = []
            for i, (role, (n, gpu)) in enumerate(zip(("prefill", "decode"), sizes, strict=True)):
                own = {k: v for k, v in given[i].items() if k in ("router", "scheduler")} if split_base else {}
                pools.append({**own, "role": role, "instances": n, "gpu": gpu, "tp": self.tp})
            cluster["kv_transfer"] = cluster.get("kv_transfer") if split_base else None
            data["speculative"] = None
        cluster["pools"] = pools
        scheduler = dict(base["scheduler"])
        for key in ("max_num_seqs", "max_num_batched_tokens"):
            if getattr(self, key) is not None:
                scheduler[key] = getattr(self, key)
        data["cluster"] = cluster
        data["scheduler"] = scheduler
        if self.variant is not None:
            from des.catalog import find_variant

            _, variant = find_variant(self.variant)
            data["precision"] = {**dict(base.get("precision") or {}), **variant.precision}
        data.pop("serving", None) if data.get("cost_model", {}).get("kind") != "roofline" else None
        return data

    def row(self) -> dict[str, Any]:
        return asdict(self) | {"name": self.name, "num_gpus": self.num_gpus}


#: A colocated pool's keys a candidate sets (the rest, its router and settings, stay the base's).
_PLACED = ("name", "role", "instances", "gpu", "tp", "pp", "dp", "autoscaler")


def candidates(
    base: Scenario,
    gpus: list[str],
    max_gpus: int,
    splits: bool = True,
    mixed: bool = False,
    max_num_seqs: list[int] | None = None,
    max_num_batched_tokens: list[int] | None = None,
    variants: bool = False,
    pipeline: Sequence[int] = (1,),
) -> list[Candidate]:
    """Every configuration of up to ``max_gpus`` GPUs of each type in ``gpus``: colocated
    replicas of each tensor-parallel degree, (``splits``) every P:D split, (``mixed``) every
    split with its decode pool on another of the types, each at every combination of the
    engine settings given (None: the scenario's) and (``variants``) in the scenario's weights
    and in each quantised checkpoint the catalog lists for the model. Colocated engines also
    take each pipeline depth of ``pipeline`` and, for a mixture of experts, servers of 2, 4
    or 8 data-parallel ranks with expert parallelism (a dense model's ranks would be replicas)."""
    colocated = base.scheduler.kind
    dps = [d for d in TP_DEGREES if d == 1 or base.model.is_moe]  # a dense model's ranks are replicas
    shapes: list[Candidate] = []
    for gpu in gpus:
        for tp in TP_DEGREES:
            if tp > max_gpus:
                break
            engines = max_gpus // tp
            for pp in pipeline:
                for dp in dps:
                    per_server = tp * pp * dp
                    shapes += [
                        Candidate(gpu, tp, colocated, replicas=n, pp=pp, dp=dp)
                        for n in range(1, max_gpus // per_server + 1)
                    ]
            if not splits:
                continue
            for other in [None, *(g for g in gpus if g != gpu)] if mixed else [None]:
                shapes += [
                    Candidate(gpu, tp, "disaggregated", prefill_instances=p, decode_instances=n - p, decode_gpu=other)
                    for n in range(2, engines + 1)
                    for p in range(1, n)
                ]
    unset: list[int | None] = [None]
    seqs: list[int | None] = [*max_num_seqs] if max_num_seqs else unset
    budgets: list[int | None] = [*max_num_batched_tokens] if max_num_batched_tokens else unset
    if colocated == "static":  # static batches have no such settings
        seqs, budgets = unset, unset
    checkpoints: list[str | None] = [None]
    if variants:
        checkpoints += [v.repo for v in base.model.variants]
    return [
        replace(c, max_num_seqs=s, max_num_batched_tokens=b, variant=v)
        for c in shapes
        for s in seqs
        for b in budgets
        for v in checkpoints
    ]


def build(candidate: Candidate, base: dict[str, Any]) -> Scenario:
    """The candidate's scenario; ScenarioError when des (as vLLM) refuses it."""
    return load_scenario(candidate.overrides(base))


def throughput_bound(sc: Scenario) -> float:
    """The most requests per second the scenario's GPUs could complete (see the module's
    docstring): the tighter of the compute and the decode-memory bounds."""
    model, precision, workload = sc.model, sc.precision, sc.workload
    if workload.prompt_tokens is None or workload.output_tokens is None:
        return math.inf  # a replay's lengths: no bound from a law
    if sc.cost_model.kind != "roofline":
        return math.inf  # a constant or linear step time owes nothing to the GPU's peaks
    prompt, output = workload.prompt_tokens.moments()[0], workload.output_tokens.moments()
    out_mean, out_var = output
    pools = sc.layout.pools
    # a prompt computes nothing only where the prefix cache can hit: a shared prefix, a chat
    # history, a replay's hashed blocks (des's other prompts hold content of their own)
    caching = any(p.policy.prefix_caching for p in pools)
    shared = workload.shared_prefix is not None or workload.conversations is not None or workload.prompt_tokens is None
    tokens = out_mean + (0.0 if caching and shared else prompt)
    active = model.active_params if model.is_moe else model.num_params
    flops = 0.0
    for p in pools:
        dtype: Any = compute_dtype(p.gpu, precision)
        flops += p.num_gpus * p.gpu.flops[dtype]
    bound = flops / (2.0 * active * tokens)
    decoding = [p for p in pools if p.role in ("colocated", "decode")]
    speculating = any(p.policy.speculative is not None and p.policy.speculative.active for p in decoding)
    if model.is_moe or speculating:
        return bound
    # every decode step reads the weights (but an untied embedding table, only looked up) for
    # at most max_num_seqs tokens, and each token's attention reads its sequence's KV so far
    embedding = 0 if model.tie_word_embeddings else model.vocab_size * model.hidden_size * 2
    weights = weight_bytes(model, precision) - embedding
    kv = 0.0
    if model.window is None and model.kv_lora_rank is None:  # full attention: every past token read
        per_token = model.kv_bytes_per_token(precision.kv_bytes)
        kv = per_token * (out_mean * prompt + (out_var + out_mean**2 + out_mean) / 2)  # Σ_j (prompt + j)
    for p in decoding:
        per_engine = p.gpu.memory_bandwidth * p.tp * p.parallel.pp
        seconds = out_mean * weights / (p.policy.max_batch * per_engine) + kv / per_engine
        bound = min(bound, p.engines / seconds)  # requests per second its engines could finish decoding
    return bound


def refusals(candidate: Candidate, base: Scenario, cluster: dict[str, Any]) -> list[tuple[str, str]]:
    """What the features refuse in ``candidate``'s deployment of ``base``'s model
    (:func:`des.engine.features.problems`, the loop every scenario's validation runs), asked
    of its pools and speculation alone, before the candidate's scenario and memory plan are
    built; ``cluster`` is the base's, resolved (plain data)."""
    pools = ClusterConfig.model_validate(candidate.overrides({"scheduler": {}, "cluster": cluster})["cluster"])
    speculative = base.speculative if candidate.replicas else None  # a split does not speculate
    gpu = catalog.gpu(candidate.gpu)
    roofline = base.cost_model.kind == "roofline"
    return problems(Deployed(pools, base.scheduler, speculative, base.model, gpu, base.precision, roofline))


def prune(
    candidate: Candidate, base: dict[str, Any], rate: float, scenario: Scenario | None = None
) -> tuple[Scenario | None, str | None]:
    """The candidate's scenario, or None and why it cannot serve ``rate`` req/s; ``scenario``
    (the base as a Scenario) lets a feature's refusal be found before the candidate is built."""
    found = refusals(candidate, scenario, base["cluster"]) if scenario is not None and candidate.variant is None else []
    if found:
        return None, f"refused: {found[0][0]}: {found[0][1]}"
    try:
        sc = build(candidate, base)
    except ScenarioError as exc:
        return None, f"refused: {exc.problems[0][0]}: {exc.problems[0][1]}"
    bound = throughput_bound(sc)
    if bound < rate:
        return sc, f"cannot carry {rate:g} req/s: its GPUs complete at most {bound:.3g} req/s at their peaks"
    return sc, None
