"""What each feature of a deployment cannot run with: every refusal of a combination, in one place.

A feature (pipeline stages, expert parallelism, data parallelism, speculative decoding,
autoscaling, the KV link, static batching) states its refusals as a function of the
deployment the scenario asks for (:class:`Deployed`) returning ``(path, problem)``
pairs, each path naming the key in the scenario's one shape of pools
(:mod:`des.engine.deployment`). :data:`REFUSALS` lists them; the scenario asks them all
in one loop (:func:`problems`), and so can the planner and the page before they build a
configuration. A combination refused here is one des does not model, or one vLLM refuses
to start; the hardware's own limits (a model that does not fit, heads that a TP degree
cannot share) are the scenario's (:mod:`des.scenario`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from des.catalog.memory import weight_bytes
from des.catalog.precision import Precision
from des.catalog.specs import GPUSpec, ModelSpec
from des.engine.deployment import ClusterConfig
from des.engine.scaling import scaling_problem
from des.engine.schedulers import PolicyKind
from des.engine.speculative import SpeculativeConfig

Problems = list[tuple[str, str]]


@dataclass(frozen=True)
class Deployed:
    """What the refusals are asked about: the scenario's ``cluster`` with its batching
    ``policy`` and ``speculative`` config, the ``model``, the scenario's ``gpu`` (a pool's
    unless it names its own) and ``precision``, and whether the cost model is the ``roofline`` (which knows the
    model's layers; a constant or linear one states whole step times)."""

    cluster: ClusterConfig
    policy: PolicyKind
    speculative: SpeculativeConfig | None
    model: ModelSpec
    gpu: GPUSpec
    precision: Precision
    roofline: bool = True

    @property
    def speculating(self) -> bool:
        return self.speculative is not None and self.speculative.active


def pipeline_problems(d: Deployed) -> Problems:
    """Pipeline stages des cannot run: more stages than layers (vLLM would leave a stage
    without layers), or with a scheduler, cost model, pool role or data-parallel MoE group
    whose pipelined steps des does not model."""
    out: Problems = []
    model = d.model
    for i, pool in enumerate(d.cluster.pools):
        if pool.pp == 1:
            continue
        where = f"cluster.pools.{i}.pp"
        if pool.pp > model.num_layers:
            out.append((where, f"{pool.pp} stages are more than the {model.num_layers} layers of {model.name}"))
        elif pool.role != "both":
            out.append((where, f"pipeline parallelism is modelled for colocated pools only, not a {pool.role} pool"))
        elif d.policy.kind != "continuous":
            kind = d.policy.kind
            out.append((where, f"pipeline parallelism is modelled for the continuous scheduler only, not {kind}"))
        elif not d.roofline:
            out.append((where, "pipeline stages need the roofline cost model, which knows the layers"))
        elif pool.parallel.moe_group(model) > 1:
            out.append((where, "pipeline stages of data-parallel MoE ranks stepping together are not modelled "
                        "(set pp: 1)"))  # fmt: skip
        elif d.speculating:
            out.append((where, "pipeline stages with speculative decoding are not modelled (set pp: 1)"))
        elif model.window_layers:
            out.append((where, f"pipeline stages of {model.name}'s windowed attention layers are not modelled "
                        "(set pp: 1)"))  # fmt: skip
    return out


def expert_problems(d: Deployed) -> Problems:
    """What vLLM refuses in a data- and expert-parallel split (``vllm/config/model.py:
    _verify_with_expert_parallelism``), and what des asks besides: EP must divide the experts."""
    out: Problems = []
    model = d.model
    for i, pool in enumerate(d.cluster.pools):
        if not pool.expert_parallel:
            continue
        where = f"cluster.pools.{i}.expert_parallel"
        if not model.is_moe:
            out.append((where, f"{model.name} is a dense model, it has no experts to split (vLLM refuses to "
                        "start: 'Number of experts in the model must be greater than 0 when expert parallelism "
                        "is enabled')"))  # fmt: skip
            continue
        ep, experts = pool.dp * pool.tp, model.num_experts or 0
        if experts % ep:
            out.append((where, f"EP size {ep} (dp {pool.dp} x tp {pool.tp}) does not divide the {experts} experts of "
                        f"{model.name} evenly (each rank holds experts / EP of them)"))  # fmt: skip
    return out


def data_parallel_problems(d: Deployed) -> Problems:
    """Data-parallel ranks in a split's pools: its instances are already independent engines."""
    return [
        (
            f"cluster.pools.{i}.dp",
            f"{pool.dp} data-parallel ranks are not modelled in a {pool.role} pool: its "
            "instances are already independent engines (set its instances instead)",
        )  # fmt: skip
        for i, pool in enumerate(d.cluster.pools)
        if pool.dp > 1 and pool.role != "both"
    ]


def speculative_problems(d: Deployed) -> Problems:
    """Speculative decoding where des does not model it (static batches, split pools), and a
    proposer the model cannot have (``mtp`` needs the model's own multi-token-prediction layers)."""
    spec = d.speculative
    if spec is None:
        return []
    if d.policy.kind == "static":
        return [("speculative", "static batching does not speculate (a padded batch runs its rows in lockstep); "
                 "use kind: continuous")]  # fmt: skip
    if d.cluster.split:
        return [("speculative", "not modelled for disaggregated serving (the draft's KV would cross the link with "
                 "the target's); use one pool of role both")]  # fmt: skip
    if spec.active:
        for pool in d.cluster.pools:
            try:
                spec.proposer(d.model, d.precision, pool.tp)
            except ValueError as exc:
                return [("speculative.method", str(exc))]
    return []


def scaling_problems(d: Deployed) -> Problems:
    """An autoscaler's pool outside its bounds at the start, of engines it does not scale
    (data-parallel ranks, pipeline stages), or a decode pool scaling from zero; a pool of no
    instance without one."""
    out: Problems = []
    for i, pool in enumerate(d.cluster.pools):
        entry = pool.role != "decode"
        weights = weight_bytes(d.model, d.precision) if pool.autoscaler is not None else 0
        problem = scaling_problem(pool.autoscaler, pool.instances, pool.dp, pool.pp, "instances", entry, weights)
        if problem is not None:
            key, _, message = problem.partition(": ")
            out.append((f"cluster.pools.{i}.{key}", message))
    return out


def link_problems(d: Deployed) -> Problems:
    """A KV link the split's GPUs cannot have (:func:`~des.catalog.kv_link.default_link`)."""
    c = d.cluster
    if not c.split:
        return []
    t = c.transfer
    problem = t.link_problem(c.pools[0].gpu or d.gpu, c.pools[1].gpu or d.gpu)
    if problem is None:
        return []
    return [("cluster.kv_transfer.path" if t.path is not None else "cluster.kv_transfer", problem)]


def static_problems(d: Deployed) -> Problems:
    """Static batching serves whole requests: a split's pools batch continuously."""
    if d.policy.kind == "static" and d.cluster.split:
        return [("scheduler.kind", "static batching serves whole requests; a split's prefill and decode pools "
                 "batch continuously (kind: continuous)")]  # fmt: skip
    return []


#: Every feature's refusals, asked in this order.
REFUSALS: tuple[Callable[[Deployed], Problems], ...] = (
    static_problems,
    data_parallel_problems,
    scaling_problems,
    link_problems,
    speculative_problems,
    expert_problems,
    pipeline_problems,
)


def problems(d: Deployed) -> Problems:
    """Every refusal of the deployment ``d``, feature by feature (:data:`REFUSALS`)."""
    return [p for refusal in REFUSALS for p in refusal(d)]
