"""Roofline step-time model: any GPU and model from their spec sheets.

For every group of work in a step the time is the larger of its compute time and its
memory time, ``max(FLOPs / (peak · mfu), bytes / (bandwidth · mbu))``; the groups'
times are summed and a per-step overhead (CPU scheduling and kernel launch) added:

- linear layers over all new tokens ``T``: ``2 · P_lin · T`` FLOPs, the layer weights
  read once per step (``P_lin`` = matrix parameters of all layers);
- attention of prefill chunks: ``4 · L · q_dim`` FLOPs per query-key pair, their KV
  read (``L · 2 · kv_dim`` elements per context token);
- attention of decodes: the same per token of context, which they read whole;
- the LM head for the sequences that emit a token: ``2 · hidden · vocab`` FLOPs each,
  its weights read once;
- KV writes of the ``T`` new tokens.

Matrix products of decode tokens run at ``mfu_decode``, of prefill tokens at
``mfu_prefill``. With tensor parallelism over ``tp`` GPUs each GPU does ``1/tp`` of
every group, and each layer adds two ring all-reduces of the ``T × hidden``
activations: ``2 (tp - 1) / tp × bytes / interconnect_bandwidth + latency`` each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from des.catalog.memory import Precision
from des.catalog.specs import Efficiency, GPUSpec, ModelSpec
from des.config import Strict
from des.cost.base import BatchShape, CostContext


@dataclass(frozen=True, slots=True)
class Roofline:
    """Precomputed per-unit costs of one (GPU, model, precision, tp) combination. Seconds."""

    # seconds per unit of work, already divided by tp
    lin_s_per_prefill_token: float
    lin_s_per_decode_token: float
    lin_weight_s: float
    attn_s_per_pair_prefill: float
    attn_s_per_pair_decode: float
    kv_read_s_per_token: float
    head_s_per_row: float
    head_weight_s: float
    kv_write_s_per_token: float
    allreduce_s_per_token: float
    allreduce_fixed_s: float
    overhead: float

    @property
    def ridge_tokens(self) -> float:
        """Tokens per step at which the linear layers' compute time overtakes their weight reads."""
        return self.lin_weight_s / self.lin_s_per_decode_token

    def breakdown(self, shape: BatchShape) -> dict[str, tuple[float, float]]:
        """Per group of work, its (compute seconds, memory seconds); the step takes the
        larger of each pair, summed, plus ``overhead`` and ``allreduce``."""
        t = shape.prefill_tokens + shape.decode_tokens
        comm = self.allreduce_fixed_s + self.allreduce_s_per_token * t if self.allreduce_fixed_s else 0.0
        return {
            "linear": (
                self.lin_s_per_prefill_token * shape.prefill_tokens + self.lin_s_per_decode_token * shape.decode_tokens,
                self.lin_weight_s,
            ),
            "attention_prefill": (
                self.attn_s_per_pair_prefill * shape.prefill_pairs,
                self.kv_read_s_per_token * shape.prefill_context,
            ),
            "attention_decode": (
                self.attn_s_per_pair_decode * shape.decode_context,
                self.kv_read_s_per_token * shape.decode_context,
            ),
            "lm_head": (self.head_s_per_row * shape.num_emitting, self.head_weight_s if shape.num_emitting else 0.0),
            "kv_write": (0.0, self.kv_write_s_per_token * t),
            "allreduce": (0.0, comm),
            "overhead": (0.0, self.overhead),
        }

    def step_time(self, shape: BatchShape) -> float:
        t = shape.prefill_tokens + shape.decode_tokens
        linear = max(
            self.lin_s_per_prefill_token * shape.prefill_tokens + self.lin_s_per_decode_token * shape.decode_tokens,
            self.lin_weight_s,
        )
        attn_prefill = max(
            self.attn_s_per_pair_prefill * shape.prefill_pairs,
            self.kv_read_s_per_token * shape.prefill_context,
        )
        attn_decode = max(
            self.attn_s_per_pair_decode * shape.decode_context,
            self.kv_read_s_per_token * shape.decode_context,
        )
        head = max(self.head_s_per_row * shape.num_emitting, self.head_weight_s) if shape.num_emitting else 0.0
        comm = self.allreduce_fixed_s + self.allreduce_s_per_token * t if self.allreduce_fixed_s else 0.0
        return linear + attn_prefill + attn_decode + head + self.kv_write_s_per_token * t + comm + self.overhead


def build_roofline(
    gpu: GPUSpec,
    model: ModelSpec,
    precision: Precision | None = None,
    tp: int = 1,
    efficiency: Efficiency | None = None,
) -> Roofline:
    """The roofline of ``model`` on ``tp`` × ``gpu`` with ``precision``."""
    precision = precision or Precision()
    eff = efficiency or gpu.efficiency
    peak = gpu.peak_flops(precision.compute_dtype)
    peak16 = gpu.peak_flops("bf16")
    bw = gpu.memory_bandwidth * eff.mbu
    L = model.num_layers
    p_lin = L * model.layer_linear_params
    kv_per_token = model.kv_bytes_per_token(precision.kv_bytes)
    attn_flops_per_pair = 4 * L * model.q_dim
    head_params = model.lm_head_params
    if tp > 1:
        ring = 2 * (tp - 1) / tp
        act_bytes = model.hidden_size * 2  # one token's activations, bf16
        ar_per_token = 2 * L * ring * act_bytes / gpu.interconnect_bandwidth
        ar_fixed = 2 * L * gpu.interconnect_latency
    else:
        ar_per_token = ar_fixed = 0.0
    return Roofline(
        lin_s_per_prefill_token=2 * p_lin / (peak * eff.mfu_prefill) / tp,
        lin_s_per_decode_token=2 * p_lin / (peak * eff.mfu_decode) / tp,
        lin_weight_s=p_lin * precision.weight_bytes_per_param / bw / tp,
        attn_s_per_pair_prefill=attn_flops_per_pair / (peak16 * eff.mfu_prefill) / tp,
        attn_s_per_pair_decode=attn_flops_per_pair / (peak16 * eff.mfu_decode) / tp,
        kv_read_s_per_token=kv_per_token / bw / tp,
        head_s_per_row=2 * head_params / (peak16 * eff.mfu_decode) / tp,
        head_weight_s=head_params * 2 / bw / tp,
        kv_write_s_per_token=kv_per_token / bw / tp,
        allreduce_s_per_token=ar_per_token,
        allreduce_fixed_s=ar_fixed,
        overhead=eff.step_overhead,
    )


class RooflineConfig(Strict):
    """Roofline step time from the catalog specs; ``efficiency`` overrides the GPU's factors."""

    kind: Literal["roofline"] = "roofline"
    efficiency: Efficiency | None = Field(None)

    def build(self, ctx: CostContext) -> Roofline:
        return build_roofline(ctx.gpu, ctx.model, ctx.precision, ctx.tp, self.efficiency)
