"""The work a GPU step does: floating-point operations and bytes moved to and from memory.

Counted from the model's architecture alone (whatever cost model sets the step's
duration), per instance of ``tp`` GPUs, for a step of shape ``s`` with ``T`` new tokens:

- FLOPs: ``2 · P_lin · T`` in the layers' matrix products, ``4 · L · q_dim`` per
  query-key pair of attention (``s.prefill_pairs + s.decode_context`` pairs: a decode
  attends to its whole context), and ``2 · hidden · vocab`` per sequence through the
  LM head (``s.num_emitting``);
- with a mixture of experts ``P_lin`` counts the weights a token runs (``k`` routed
  experts per sparse layer) in the FLOPs, and every expert in the bytes (an upper bound:
  a small step touches fewer; :mod:`des.cost.roofline` takes the expected number);
- bytes: the layers' weights once per step, the LM head's weights when some sequence
  emits, the KV cache read by attention (``s.prefill_context + s.decode_context``
  tokens) and written for the new tokens (``T``), at ``kv_bytes_per_token`` each.

Divided by a step's duration and by the instance's peaks, these give the share of the
roofline a step used (:mod:`des.metrics.utilisation`).
"""

from __future__ import annotations

from dataclasses import dataclass

from des.catalog.memory import Precision
from des.catalog.quantization import compute_dtype
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

    def flops(self, s: BatchShape) -> float:
        return (
            self.flops_per_token * (s.prefill_tokens + s.decode_tokens)
            + self.flops_per_pair * (s.prefill_pairs + s.decode_context)
            + self.flops_per_row * s.num_emitting
        )

    def hbm_bytes(self, s: BatchShape) -> float:
        t = s.prefill_tokens + s.decode_tokens
        head = self.head_bytes if s.num_emitting else 0.0
        return self.weight_bytes + head + self.kv_bytes_per_token * (s.prefill_context + s.decode_context + t)


def step_work(gpu: GPUSpec, model: ModelSpec, precision: Precision, tp: int = 1, expert_shards: int = 1) -> StepWork:
    """The work coefficients of ``model`` at ``precision`` on ``tp`` x ``gpu``, its routed
    experts spread over ``expert_shards`` data-parallel ranks (1: all on this one)."""
    L = model.num_layers
    p_lin: float = model.linear_params  # every expert of a mixture of experts: weight bytes at most
    if expert_shards > 1:  # this rank's share of the experts
        experts = model.num_moe_layers * (model.num_experts or 0) * model.expert_params
        p_lin -= experts - experts / expert_shards
    return StepWork(
        flops_per_token=2.0 * model.active_linear_params,
        flops_per_pair=4.0 * L * model.q_dim,
        flops_per_row=2.0 * model.lm_head_params,
        weight_bytes=p_lin * precision.weight_bytes_per_param,
        head_bytes=2.0 * model.lm_head_params,
        kv_bytes_per_token=float(model.kv_bytes_per_token(precision.kv_bytes)),
        peak_flops=gpu.peak_flops(compute_dtype(gpu, precision)) * tp,
        peak_bandwidth=gpu.memory_bandwidth * tp,
    )
