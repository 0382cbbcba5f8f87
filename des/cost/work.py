"""The work a GPU step does: floating-point operations and bytes moved to and from memory.

Counted from the model's architecture alone (whatever cost model sets the step's
duration), per instance of ``tp`` GPUs, for a step of shape ``s`` with ``T`` new tokens:

- FLOPs: ``2 · P_lin · T`` in the layers' matrix products, ``4 · L · q_dim`` per
  query-key pair of attention (``s.prefill_pairs + s.decode_context`` pairs: a decode
  attends to its whole context), and ``2 · hidden · vocab`` per sequence through the
  LM head (``s.num_emitting``);
- with a mixture of experts ``P_lin`` counts the weights a token runs (``k`` routed
  experts per sparse layer) in the FLOPs, and the bytes count the weights every step
  reads plus the distinct experts the step's ``T`` tokens touch, as the roofline takes
  them (:meth:`StepWork.experts`: ``E · (1 − (1 − k/E)^T)`` per sparse layer under uniform
  routing, the table of :mod:`des.catalog.routing` under skewed routing);
- bytes: the layers' weights once per step, the LM head's weights when some sequence
  emits, the KV cache read by attention (``s.prefill_context + s.decode_context``
  tokens) and written for the new tokens (``T``), at ``kv_bytes_per_token`` each.

Divided by a step's duration and by the instance's peaks, these give the share of the
roofline a step used (:mod:`des.metrics.utilisation`).

Attention variants: under multi-head latent attention a pair costs what vLLM's absorbed
decode runs (:attr:`~des.catalog.specs.ModelSpec.mla_pair_flops`) and a token's KV is the
latent, held whole on every GPU; a model with windowed layers counts their share of the
layers at the shape's windowed sums (:class:`~des.cost.base.BatchShape`).
"""

from __future__ import annotations

from dataclasses import dataclass

from des.catalog.memory import kv_bytes_per_token, quantized_params
from des.catalog.precision import Precision
from des.catalog.quantization import compute_dtype
from des.catalog.routing import distinct_experts, distinct_table
from des.catalog.specs import GPUSpec, ModelSpec
from des.cost.base import BatchShape


@dataclass(frozen=True, slots=True)
class StepWork:
    """Coefficients of a step's FLOPs and bytes, and the peaks of the instance running it."""

    flops_per_token: float  # linear layers, per new token
    flops_per_pair: float  # attention, per query-key pair
    flops_per_row: float  # LM head, per emitting sequence
    weight_bytes: float  # layers' weights, read once per step
    head_bytes: float  # LM-head weights, read once per step that emits
    kv_bytes_per_token: float  # KV read or written, per token
    peak_flops: float  # FLOP/s of the instance (all its GPUs)
    peak_bandwidth: float  # bytes/s of the instance (all its GPUs)
    window_share: float = 0.0  # share of the layers whose attention is windowed
    expert_bytes: float = 0.0  # one routed expert's weights in every sparse layer (0: dense)
    num_experts: int = 0  # routed experts per sparse layer
    miss: float = 1.0  # 1 - k / E
    distinct: tuple[float, ...] | None = None  # skewed routing: expected distinct experts by tokens
    token_group: int = 1  # data-parallel ranks whose tokens (each padded to this step's) meet in the MoE layers

    def experts(self, tokens: int) -> float:
        """Expected distinct experts ``tokens`` tokens touch in one sparse layer (0: dense)."""
        return distinct_experts(self.num_experts, self.miss, self.distinct, tokens)

    def flops(self, s: BatchShape) -> float:
        d, _, pairs = s.layer_average(self.window_share)
        return (
            self.flops_per_token * (s.prefill_tokens + s.decode_tokens)
            + self.flops_per_pair * (pairs + d)
            + self.flops_per_row * s.num_emitting
        )

    def hbm_bytes(self, s: BatchShape) -> float:
        t = s.prefill_tokens + s.decode_tokens
        head = self.head_bytes if s.num_emitting else 0.0
        d, x, _ = s.layer_average(self.window_share)
        if self.num_experts:
            weights = self.weight_bytes + self.expert_bytes * self.experts(t * self.token_group)
        else:
            weights = self.weight_bytes
        return weights + head + self.kv_bytes_per_token * (x + d + t)


def step_work(gpu: GPUSpec, model: ModelSpec, precision: Precision, tp: int = 1, expert_shards: int = 1) -> StepWork:
    """The work coefficients of ``model`` at ``precision`` on ``tp`` x ``gpu``, its routed
    experts spread over ``expert_shards`` data-parallel ranks (1: all on this one)."""
    L = model.num_layers
    p_lin = model.linear_params  # every expert of a mixture of experts: weight bytes at most
    quantized = quantized_params(model, precision)
    per_pair = 4.0 * L * model.q_dim
    kv = float(model.kv_bytes_per_token(precision.kv_bytes))
    if model.is_mla:
        per_pair = L * model.mla_pair_flops[1]
        kv = float(kv_bytes_per_token(model, precision, tp))  # the latent on every GPU
    all_weights = quantized * precision.weight_bytes_per_param + (p_lin - quantized) * 2.0
    experts = model.num_experts or 0
    expert_bytes = 0.0
    full = 0.0
    if experts:  # routed experts are quantised whenever anything is
        full = model.num_moe_layers * model.expert_params * precision.weight_bytes_per_param
        expert_bytes = full / expert_shards  # this rank's share of each expert
    return StepWork(
        flops_per_token=2.0 * model.active_linear_params,
        flops_per_pair=per_pair,
        flops_per_row=2.0 * model.lm_head_params,
        weight_bytes=all_weights - full * experts,
        head_bytes=2.0 * model.lm_head_params,
        kv_bytes_per_token=kv,
        peak_flops=gpu.peak_flops(compute_dtype(gpu, precision)) * tp,
        peak_bandwidth=gpu.memory_bandwidth * tp,
        window_share=model.window_layers / L,
        expert_bytes=expert_bytes,
        num_experts=experts,
        miss=1.0 - (model.num_experts_per_tok or 0) / (experts or 1),
        distinct=distinct_table(experts, model.num_experts_per_tok or 0, model.routing) if experts else None,
        token_group=expert_shards,
    )
