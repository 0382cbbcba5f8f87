"""Efficiency factors of the roofline step-time model: what a serving engine's kernels
reach of a GPU's spec-sheet peaks, group by group, and its CPU time per step.

Every factor is a dimensionless fraction of a peak (the spec sheet's memory bandwidth, or
its dense tensor FLOP/s at the clock the GPU sustains under load:
:meth:`~des.catalog.specs.GPUSpec.sustained_flops`) or a time in seconds;
:mod:`des.cost.roofline` turns them into seconds per byte, per FLOP and per token for one
(GPU, model, precision, tp). ``des calibrate`` fits them to a kernel profile (see
``reports/calibration.md``); a catalog GPU carries its architecture's fitted factors, or
factors transferred from the fitted architectures by the rule of
:mod:`des.tools.architectures`, which ``provenance`` and ``basis`` say.

The single-factor roofline of earlier versions (``mfu_prefill``, ``mfu_decode``, ``mbu``,
``step_overhead``) is still accepted as shorthand: ``mbu`` sets every memory-bandwidth
factor, ``mfu_prefill`` the compute factors of prefill work and ``mfu_decode`` those of
decode work. With those four alone (every refinement left at its default: sharp knee,
no fixed or per-sequence kernel times, no element-wise or sampler term, KV writes at
``mbu``) the model is the single-factor one exactly; given over a catalog entry
(``gpu: {base: rtx4090, efficiency: {mbu: 0.8}}``) they override the fitted factors they
name and leave the others.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from des.config import Strict

#: Which factors each single-factor key sets.
LEGACY: dict[str, tuple[str, ...]] = {
    "mbu": (
        "weight_bandwidth",
        "lm_head_bandwidth",
        "kv_bandwidth",
        "kv_stream",
        "mixed_kv_bandwidth",
        "kv_write_bandwidth",
    ),
    "mfu_prefill": ("gemm_compute", "attention_compute"),
    "mfu_decode": ("decode_compute",),
}

#: Where a GPU's factors come from: ``fitted`` to a kernel profile of that GPU's
#: architecture, ``transferred`` from fitted architectures by a rule, or ``spec`` (set by
#: hand or left at a default: nothing measured behind them). A run is as fitted as its
#: least-fitted GPU (:data:`PROVENANCE_ORDER`).
Provenance = Literal["fitted", "transferred", "spec"]
PROVENANCE_ORDER: tuple[Provenance, ...] = ("fitted", "transferred", "spec")

#: Groups of work whose step-time factors carry one uncertainty each (``uncertainty``):
#: ``gemm`` (GEMMs and LM head: weight_bandwidth, gemm_compute, decode_compute,
#: lm_head_bandwidth, gemm_knee, gemm_fixed), ``attention`` (attention_* and kv_* factors),
#: ``elementwise`` (element-wise kernels and sampler), ``communication`` (tensor-parallel
#: all-reduces) and ``cpu`` (the serving stack's CPU time per step and per sequence).
UncertaintyGroup = Literal["gemm", "attention", "elementwise", "communication", "cpu"]
UNCERTAINTY_GROUPS: tuple[UncertaintyGroup, ...] = ("gemm", "attention", "elementwise", "communication", "cpu")

#: Factors above 1 are allowed (data small enough to stay in L2 streams faster than DRAM;
#: a compute factor of a GPU whose sustained clock is not in its spec), up to these bounds.
DRAM = 1.5
CACHED = 10.0


class Efficiency(Strict):
    """Fractions of a GPU's peaks that serving kernels reach, and the engine's CPU time.

    Matrix products (the layers' GEMMs and the LM head), per step of ``T`` tokens:
    ``time = max(W, C) + gemm_knee × min(W, C)`` with ``W`` the weights streamed at
    ``weight_bandwidth`` × bandwidth and ``C`` their FLOPs at ``gemm_compute`` × peak:
    the shorter roof hides under the longer but for a share ``gemm_knee`` (0: the sharp
    roofline ``max(W, C)``), so the share of the compute roof reached rises continuously
    with the tokens per step, ``C / time = T / (T* + k T)`` below the ridge ``T* = W / c``
    and ``T / (T + k T*)`` above it, where the sharp roofline stays flat up to the ridge.
    ``gemm_fixed``: seconds per GEMM kernel on top of that (its launch and tail inside a
    CUDA graph: a tiny GEMM takes longer than its bytes over the bandwidth), for
    :data:`~des.cost.roofline.GEMMS_PER_LAYER` kernels per layer and one for the LM head
    (default 0: the roofline alone).
    ``decode_compute`` is the compute factor of decode rows, decode attention and the LM
    head when it differs (default: ``gemm_compute`` for the GEMM rows and the LM head,
    ``attention_compute`` for attention); ``lm_head_bandwidth`` (default
    ``weight_bandwidth``) the streaming factor of the LM head's weights.

    Attention, per layer and step: prefill chunks run ``4 · q_dim`` FLOPs per query-key
    pair plus ``attention_tile`` pairs per prefill token (tiles along the causal
    diagonal) at ``attention_compute`` × peak, but no faster than one chunk streams its KV
    (``kv_stream`` × bandwidth per sequence) or all of it (``mixed_kv_bandwidth``).
    Decode-only steps read the decodes' KV at ``kv_bandwidth`` × bandwidth; in steps
    with prefill work the same KV is read by the prefill kernel at ``mixed_kv_bandwidth``
    and no faster than one sequence streams its mean context (``kv_stream``).
    ``attention_fixed`` / ``prefill_attention_fixed``: seconds per layer of the kernel in
    decode-only steps / steps with prefill; ``attention_per_seq`` / ``mixed_per_seq``:
    seconds per layer per decoding sequence in each. ``kv_write_bandwidth``: KV writes of
    the new tokens as a separate term (None: counted in the attention kernel's time, as a
    kernel profile measures it).

    Element-wise kernels (RMSNorms, activation, rotary embedding, embedding lookup):
    ``elementwise_kernel`` seconds per kernel plus their bytes at
    ``elementwise_bandwidth`` × bandwidth while a layer's activations fit in
    ``elementwise_l2`` × the L2 cache, the bytes beyond at ``elementwise_spill`` ×
    bandwidth more (None: no element-wise term). Sampler, per step with emitting
    sequences: ``sampler_fixed`` seconds plus the fp32 logits (4 bytes × vocabulary per
    sequence) at ``sampler_bandwidth`` × bandwidth, beyond ``sampler_l2`` × L2 at
    ``sampler_spill`` × bandwidth more (None: no sampler term).

    Routed experts of a mixture of experts (vLLM's fused-MoE kernel: router top-k, token
    alignment per expert, the two grouped GEMMs and the activation, the weighted sum), per
    sparse layer: ``moe_fixed`` seconds plus ``max(W, C) + moe_knee × min(W, C)`` with ``W``
    the weights of the distinct experts the step's tokens touch at ``moe_bandwidth`` ×
    bandwidth and ``C`` the routed rows' FLOPs (``tokens × top_k`` rows) at ``moe_compute`` ×
    peak. With ``moe_bandwidth`` and ``moe_compute`` both unset the experts are costed as
    before, inside the GEMMs' own roofline at the GEMM factors; with either set, unset ones
    fall back to ``weight_bandwidth``, ``gemm_compute`` and ``gemm_knee``. They apply to
    16-bit experts only (the kernel they are fitted to): quantised experts run other kernels
    (Marlin, w8a8 Triton, MXFP4) and stay in the GEMMs' roofline.

    Unset factors fall back: ``attention_compute`` to ``gemm_compute``; ``kv_bandwidth``
    to ``weight_bandwidth``; ``kv_stream`` and ``mixed_kv_bandwidth`` to ``kv_bandwidth``;
    fixed and per-sequence times to 0.

    Provenance: ``provenance`` says whether the factors are ``fitted`` (to ``basis``, a
    kernel profile), ``transferred`` (``basis`` names the architectures and the rule) or
    ``spec`` only; ``uncertainty`` maps a group of :data:`UNCERTAINTY_GROUPS` to the
    standard deviation of the natural log of (true time / predicted time) of that group's
    work that the factors' error implies (0.1: about ±10 %); groups left out carry none.

    CPU: ``step_overhead`` seconds per step plus ``seq_overhead`` per scheduled
    sequence (scheduling, input preparation, output processing); whether it adds to the
    GPU time or overlaps it is the engine's setting (``cost_model.async_scheduling``).
    """

    weight_bandwidth: float = Field(gt=0, le=DRAM)
    gemm_compute: float = Field(gt=0, le=DRAM)
    gemm_knee: float = Field(0.0, ge=0, le=1)
    gemm_fixed: float = Field(0.0, ge=0, le=1)
    decode_compute: float | None = Field(None, gt=0, le=DRAM)
    lm_head_bandwidth: float | None = Field(None, gt=0, le=DRAM)

    attention_compute: float | None = Field(None, gt=0, le=DRAM)
    attention_tile: float = Field(0.0, ge=0, le=1e5)
    kv_bandwidth: float | None = Field(None, gt=0, le=CACHED)
    kv_stream: float | None = Field(None, gt=0, le=CACHED)
    mixed_kv_bandwidth: float | None = Field(None, gt=0, le=CACHED)
    kv_write_bandwidth: float | None = Field(None, gt=0, le=CACHED)
    attention_fixed: float = Field(0.0, ge=0, le=1)
    prefill_attention_fixed: float = Field(0.0, ge=0, le=1)
    attention_per_seq: float = Field(0.0, ge=0, le=1)
    mixed_per_seq: float = Field(0.0, ge=0, le=1)

    moe_bandwidth: float | None = Field(None, gt=0, le=DRAM)
    moe_compute: float | None = Field(None, gt=0, le=DRAM)
    moe_knee: float | None = Field(None, ge=0, le=1)
    moe_fixed: float = Field(0.0, ge=0, le=1)

    elementwise_kernel: float = Field(0.0, ge=0, le=1)
    elementwise_bandwidth: float | None = Field(None, gt=0, le=CACHED)
    elementwise_spill: float | None = Field(None, gt=0, le=CACHED)
    elementwise_l2: float = Field(1.0, ge=0, le=CACHED)
    sampler_fixed: float = Field(0.0, ge=0, le=1)
    sampler_bandwidth: float | None = Field(None, gt=0, le=CACHED)
    sampler_spill: float | None = Field(None, gt=0, le=CACHED)
    sampler_l2: float = Field(1.0, ge=0, le=CACHED)

    step_overhead: float = Field(ge=0, le=10)
    seq_overhead: float = Field(0.0, ge=0, le=1)
    source: str = ""
    provenance: Provenance = "spec"
    basis: str = ""
    uncertainty: dict[UncertaintyGroup, Annotated[float, Field(ge=0, le=2)]] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _single_factor_keys(cls, data: Any) -> Any:
        """Replace ``mbu`` / ``mfu_prefill`` / ``mfu_decode`` by the factors they set."""
        if not isinstance(data, dict) or not LEGACY.keys() & data.keys():
            return data
        out = dict(data)
        for key, targets in LEGACY.items():
            if key not in out:
                continue
            value = out.pop(key)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"{key}: must be a number in (0, 1] (got {value!r})")
            if not (math.isfinite(value) and 0 < value <= 1):
                raise ValueError(f"{key}: must be > 0 and <= 1 (got {value!r})")
            for target in targets:
                out[target] = float(value)
        return out

    @property
    def moe_own(self) -> bool:
        """Whether the routed experts run at factors of their own (``moe_bandwidth`` or
        ``moe_compute`` set) rather than inside the GEMMs' roofline."""
        return self.moe_bandwidth is not None or self.moe_compute is not None

    @property
    def compute_decode(self) -> float:
        """The compute factor of decode GEMM rows and the LM head."""
        return self.decode_compute or self.gemm_compute
