"""Memory arithmetic: weight bytes, KV bytes per token, and KV-cache capacity in blocks.

The KV budget follows vLLM's accounting: the engine may use
``gpu_memory_utilization × memory_bytes``; from that it subtracts the weights, the
activation peak of a profiling step of ``max_num_batched_tokens`` tokens, and a
runtime reserve (CUDA context, cuBLAS workspace, CUDA graphs). What is left holds
``floor(left / (kv_bytes_per_token × block_size))`` blocks of ``block_size`` tokens.
With tensor parallelism every GPU holds ``1/tp`` of the weights and of each token's
KV, so the blocks are counted over the ``tp`` GPUs together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from des.catalog.specs import GPUSpec, ModelSpec
from des.config import Strict
from des.errors import ScenarioError

WeightDtype = Literal["bf16", "fp16", "fp8", "int8", "int4-awq", "int4-gptq"]
KVDtype = Literal["bf16", "fp16", "fp8"]

#: Quantisation group size of AWQ / GPTQ checkpoints (weights per scale).
INT4_GROUP_SIZE = 128
#: Bytes of metadata per int4 group: an fp16 scale and a packed 4-bit zero point.
INT4_GROUP_BYTES = 2.5

WEIGHT_BYTES: dict[str, float] = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4-awq": 0.5 + INT4_GROUP_BYTES / INT4_GROUP_SIZE,
    "int4-gptq": 0.5 + INT4_GROUP_BYTES / INT4_GROUP_SIZE,
}
KV_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
#: Tensor-core dtype the matrix products of each weight format run in.
COMPUTE_DTYPE: dict[str, str] = {
    "bf16": "bf16",
    "fp16": "fp16",
    "fp8": "fp8",
    "int8": "int8",
    "int4-awq": "fp16",
    "int4-gptq": "fp16",
}


class Precision(Strict):
    """Number formats: ``weights`` (quantisation of the linear layers) and ``kv_cache_dtype``.

    Quantised formats apply to the layers' matrices; embeddings, LM head, norms and
    biases stay in bf16, as in AWQ/GPTQ/FP8 checkpoints.
    """

    weights: WeightDtype = "bf16"
    kv_cache_dtype: KVDtype = "bf16"

    @property
    def weight_bytes_per_param(self) -> float:
        return WEIGHT_BYTES[self.weights]

    @property
    def kv_bytes(self) -> float:
        return KV_BYTES[self.kv_cache_dtype]

    @property
    def compute_dtype(self) -> str:
        return COMPUTE_DTYPE[self.weights]


def weight_bytes(model: ModelSpec, precision: Precision | None = None) -> int:
    """Bytes of all weights: quantised layer matrices plus bf16 embeddings, head, norms, biases."""
    precision = precision or Precision()
    linear = model.num_layers * model.layer_linear_params
    rest = model.num_params - linear
    return int(round(linear * precision.weight_bytes_per_param + rest * 2.0))


def activation_bytes(model: ModelSpec, num_tokens: int, num_seqs: int) -> int:
    """Peak activation memory of one profiling step, in bytes.

    ``num_tokens`` tokens flow through a layer in bf16: the residual stream and the
    attention projections (4 × hidden) and the gated MLP's gate, up and product
    (3 × intermediate); the sampler holds fp32 logits for ``num_seqs`` sequences.
    """
    per_token = 2 * (4 * model.hidden_size + 3 * model.intermediate_size)
    return num_tokens * per_token + num_seqs * model.vocab_size * 4


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Where the memory of one instance (``tp`` GPUs) goes. All sizes in bytes."""

    tp: int
    budget: int
    weights: int
    activations: int
    runtime_reserve: int
    kv_bytes_per_token: int
    block_size: int
    num_blocks: int
    fitting_blocks: int  # the blocks the memory left holds (num_blocks differs when overridden)

    @property
    def kv_bytes(self) -> int:
        return self.num_blocks * self.block_size * self.kv_bytes_per_token

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size


def plan_memory(
    gpu: GPUSpec,
    model: ModelSpec,
    *,
    precision: Precision | None = None,
    gpu_memory_utilization: float = 0.92,
    block_size: int = 16,
    max_num_batched_tokens: int = 2048,
    max_num_seqs: int = 128,
    tp: int = 1,
    num_blocks_override: int | None = None,
) -> MemoryPlan:
    """KV-cache capacity of one instance of ``tp`` GPUs; raises if nothing is left for KV.

    ``num_blocks_override`` fixes the number of blocks (vLLM's ``num_gpu_blocks_override``)
    once the model is known to fit; ``fitting_blocks`` says how many the memory holds.
    """
    precision = precision or Precision()
    budget = int(gpu.memory_bytes * gpu_memory_utilization) * tp
    weights = weight_bytes(model, precision)
    acts = activation_bytes(model, max_num_batched_tokens, max_num_seqs)
    reserve = gpu.runtime_reserve_bytes * tp
    kv_per_token = model.kv_bytes_per_token(precision.kv_bytes)
    left = budget - weights - acts - reserve
    blocks = left // (kv_per_token * block_size) if left > 0 else 0
    if blocks < 1:
        gib = 1 << 30
        raise ScenarioError(
            (
                "model",
                f"{model.name} does not fit on {tp} x {gpu.name}: weights {weights / gib:.2f} GiB "
                f"+ activations {acts / gib:.2f} GiB + reserve {reserve / gib:.2f} GiB leave no room "
                f"for a KV block in the {budget / gib:.2f} GiB budget "
                f"(gpu_memory_utilization {gpu_memory_utilization})",
            )
        )
    fitting = int(blocks)
    if num_blocks_override is not None:
        blocks = num_blocks_override
    return MemoryPlan(tp, budget, weights, acts, reserve, kv_per_token, block_size, int(blocks), fitting)


__all__ = [
    "Precision",
    "MemoryPlan",
    "plan_memory",
    "weight_bytes",
    "activation_bytes",
]
