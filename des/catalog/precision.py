"""Number formats: the weight and KV-cache dtypes a model runs at, their bytes, and the dtype
their matrix products run in.

:class:`Precision` is a scenario's ``precision`` block and a catalog model's
``default_precision``. Bytes are per parameter (``WEIGHT_BYTES``: int4 and fp4 formats
include their per-group scales) and per KV element (``KV_BYTES``); the memory arithmetic
that uses them is in :mod:`des.catalog.memory`, the tensor-core path in
:mod:`des.catalog.quantization`.
"""

from __future__ import annotations

from typing import Literal

from des.config import Strict

WeightDtype = Literal["bf16", "fp16", "fp8", "int8", "int4-awq", "int4-gptq", "mxfp4", "nvfp4"]
KVDtype = Literal["bf16", "fp16", "fp8"]

#: Quantisation group size of AWQ / GPTQ checkpoints (weights per scale).
INT4_GROUP_SIZE = 128
#: Bytes of metadata per int4 group: an fp16 scale and a packed 4-bit zero point.
INT4_GROUP_BYTES = 2.5
#: MXFP4 (OCP Microscaling Formats spec v1.0): 4-bit E2M1 values, one 8-bit E8M0 scale per 32.
MXFP4_BLOCK = 32
#: NVFP4 (vLLM ``ModelOptNvFp4LinearMethod``: ``weight`` uint8 holding two values, ``weight_scale``
#: FP8-E4M3 of shape [out, in / group_size], group_size 16, plus one fp32 scale per tensor).
NVFP4_BLOCK = 16

WEIGHT_BYTES: dict[str, float] = {
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4-awq": 0.5 + INT4_GROUP_BYTES / INT4_GROUP_SIZE,
    "int4-gptq": 0.5 + INT4_GROUP_BYTES / INT4_GROUP_SIZE,
    "mxfp4": 0.5 + 1.0 / MXFP4_BLOCK,  # 4.25 bits
    "nvfp4": 0.5 + 1.0 / NVFP4_BLOCK,  # 4.5 bits
}
KV_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0}
#: Tensor-core dtype the matrix products of each weight format run in where the GPU has that
#: path; :func:`des.catalog.quantization.compute_dtype` falls back to bf16 (weight-only) where not.
COMPUTE_DTYPE: dict[str, str] = {
    "bf16": "bf16",
    "fp16": "fp16",
    "fp8": "fp8",
    "int8": "int8",
    "int4-awq": "fp16",
    "int4-gptq": "fp16",
    "mxfp4": "fp4",
    "nvfp4": "fp4",
}


class Precision(Strict):
    """Number formats: ``weights`` (quantisation of the linear layers) and ``kv_cache_dtype``.

    Quantised formats apply to the layers' matrices; embeddings, LM head, norms and
    biases stay in bf16, as in AWQ/GPTQ/FP8 checkpoints. ``quantized_layers: experts``
    quantises only a mixture of experts' routed experts and keeps attention, routers and
    shared experts in bf16, as gpt-oss's MXFP4 checkpoints do (``quantization_config``
    ``modules_to_not_convert``: ``self_attn``, ``router``, ``embed_tokens``, ``lm_head``).
    """

    weights: WeightDtype = "bf16"
    kv_cache_dtype: KVDtype = "bf16"
    quantized_layers: Literal["all", "experts"] = "all"

    @property
    def weight_bytes_per_param(self) -> float:
        return WEIGHT_BYTES[self.weights]

    @property
    def kv_bytes(self) -> float:
        return KV_BYTES[self.kv_cache_dtype]

    @property
    def compute_dtype(self) -> str:
        return COMPUTE_DTYPE[self.weights]


__all__ = [
    "WeightDtype",
    "KVDtype",
    "WEIGHT_BYTES",
    "KV_BYTES",
    "COMPUTE_DTYPE",
    "Precision",
]
