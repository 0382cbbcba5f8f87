"""Roofline step-time model: any GPU and model from their spec sheets and efficiency factors.

A step's GPU time is the sum of its groups of work, each derived from its FLOPs and bytes
and the fraction of the GPU's peaks the engine's kernels reach there
(:class:`~des.catalog.efficiency.Efficiency`, fitted to measured kernels by
``des calibrate``). For a step of ``T`` new tokens (``T'`` after CUDA-graph padding),
``n`` decoding sequences with ``D`` tokens of context in all, prefill chunks with ``P``
query-key pairs and ``X`` tokens of context, and ``E`` sequences that emit a token:

- **GEMMs** of all layers: weights streamed once, ``W = L · P_lin · b_w / (B · e_w)``;
  FLOPs ``C = 2 · L · P_lin · T' / (F · e_c)``; time ``max(W, C) + k · min(W, C)``: the
  shorter roof hides under the longer but for a share ``k = gemm_knee``, so the time
  rises with slope ``k`` below the ridge point instead of staying flat (``k = 0`` is the
  sharp roofline ``max(W, C)``); plus ``gemm_fixed`` seconds per GEMM kernel,
  :data:`GEMMS_PER_LAYER` per layer (``gemm_fixed_s``, 0 unless fitted);
  with a mixture of experts (:class:`~des.catalog.specs.ModelSpec`), ``C`` counts the
  active weights (``k`` routed experts per token) and ``W`` the weights every step reads
  (attention, dense layers' MLPs, routers, shared experts) plus the distinct experts the
  step's ``T'`` tokens touch, ``E · (1 − (1 − k/E)^T')`` per sparse layer under uniform
  routing (:func:`expected_experts`; one power per step). The expert GEMMs take the same
  GEMM factors unless the GPU's efficiency has MoE factors of its own (fitted to a profile
  of vLLM's fused-MoE block, :mod:`des.tools.moe_fit`): then the routed experts are a
  roofline of their own per step, ``L_moe · a_moe + max(W_e, C_e) + k_e · min(W_e, C_e)``
  with ``W_e`` the touched experts' weights at ``moe_bandwidth``, ``C_e`` the ``T' · k``
  routed rows' FLOPs at ``moe_compute`` and ``a_moe`` the block's fixed time per layer;
  a skewed ``model.routing`` (:mod:`des.catalog.routing`) reads the expected count from a
  table built once (``moe_distinct``);
- **LM head** for the ``E`` rows that emit, the same softened roofline on its weights
  plus one GEMM kernel's ``gemm_fixed`` (``head_fixed_s``);
- **attention**, per layer: in decode-only steps ``a_d + n · s_d + D · kv / (B · e_kv)``;
  in steps with prefill, ``a_p + max(4 · q_dim · (P + α · T_p) / (F · e_a),
  X / chunks · kv / (B · e_s), X · kv / (B · e_m))`` for the chunks plus, for the decodes
  the same kernel carries, ``max(n · s_m + D · kv / (B · e_m), D / n · kv / (B · e_s))``;
- **element-wise kernels** (RMSNorms, SiLU-and-mul, rotary, embedding): a fixed time
  per kernel plus their bytes per token, faster while a layer's activations fit in L2;
- **sampler** for the ``E`` emitting rows: a fixed time plus their fp32 logits;
- **all-reduces** with tensor parallelism: two of the ``T' × hidden`` bf16 activations
  (``S`` bytes) per layer and one per step (the vocabulary-parallel embedding's,
  ``VocabParallelEmbedding.forward``), each ``latency + 2 (tp - 1) / tp × S / bus_bandwidth``
  on the GPU's interconnect (:mod:`des.catalog.interconnect`): vLLM's own all-reduce with its
  shorter latency for messages below its size limit at this TP degree, NCCL's fitted
  latency above (both at NCCL's bus bandwidth), so the term is piecewise linear in ``T'``
  with one step at ``T' = limit / (2 · hidden)``;
- **the logits' all-gather** with tensor parallelism, per step with ``E`` emitting rows:
  each GPU's ``E × vocab / tp`` bf16 logits gathered by NCCL (``LogitsProcessor._gather_logits``,
  ``all_gather`` under vLLM V1), ``latency + (tp - 1) × bytes / bus_bandwidth``
  (:meth:`~des.catalog.interconnect.InterconnectSpec.gather_cost`).

Attention variants: under multi-head latent attention ``kv`` is the latent
(``kv_lora_rank + qk_rope_head_dim`` values), read whole by every tensor-parallel GPU, and
a pair's FLOPs are the absorbed decode's or the up-projected prefill's
(:attr:`~des.catalog.specs.ModelSpec.mla_pair_flops`); with windowed layers (a share
``window_share`` of them) ``D``, ``X`` and ``P`` are averaged over the layers from the shape's
full and windowed sums (:meth:`Roofline.contexts`), exactly the full sums while every
context fits the window.

``B`` is the memory bandwidth, ``F`` the dense tensor FLOP/s at the clock the GPU sustains
under load (:meth:`~des.catalog.specs.GPUSpec.sustained_flops`), ``kv`` the KV bytes per
token and layer. With tensor parallelism each GPU does ``1/tp`` of the GEMMs, attention
heads, KV, activation and LM head; norms, the sampler and fixed kernel times are not
split. The engine core's CPU time per step (``step_overhead + seq_overhead × sequences``,
plus the serving front-end's share of that thread: ``core_step_s + core_seq_s × emitting``,
:mod:`des.cost.frontend`) overlaps the GPU time under vLLM's async scheduling (the step
takes the longer of the two) or adds to it; the front-end's own process (the API
server's ``stage_step_s + stage_seq_s × emitting``) is a pipeline stage after the
engine, so a step is never shorter than it.

CUDA graphs (vLLM V1, ``vllm/config/vllm.py: _set_cudagraph_sizes``): steps of up to
``max_cudagraph_capture_size`` tokens run as graphs captured for 1, 2, 4, then multiples
of 8 below 256, then multiples of 16, and are padded to the next captured size; the GEMMs,
element-wise kernels and all-reduces compute the padded rows (the LM head and sampler run
outside the graph on the emitting rows only).

Everything per (GPU, model, precision, tp, engine) is precomputed by
:func:`build_roofline`; :meth:`Roofline.step_time` is a few dozen float operations.

Model uncertainty (:mod:`des.cost.uncertainty`): a run that draws its step-time factors
scales each group's precomputed seconds by one multiplier per group of
:data:`~des.catalog.efficiency.UNCERTAINTY_GROUPS` (:data:`GROUP_FIELDS` says which
coefficients belong to which group), once, at build time; the per-step path is the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from pydantic import Field

from des.catalog.efficiency import Efficiency, UncertaintyGroup
from des.catalog.interconnect import moe_exchange_bytes, ring_factor
from des.catalog.memory import GraphCapture
from des.catalog.precision import WEIGHT_BYTES, Precision
from des.catalog.quantization import WEIGHT_ONLY_COMPUTE, compute_dtype, weight_only
from des.catalog.routing import distinct_experts, distinct_table
from des.catalog.specs import GPUSpec, ModelSpec
from des.config import Strict
from des.cost.base import BatchShape, CostContext
from des.cost.frontend import FrontendSpec

#: vLLM's default ``max_cudagraph_capture_size``: min(2 × max_num_seqs, 512), and decode
#: batches never exceed max_num_seqs, so 512 pads exactly what vLLM pads.
DEFAULT_CAPTURE = 512
#: Bytes of one logit as the sampler reads it (fp32).
LOGIT_BYTES = 4
#: Activations stay in bf16 whatever the weights' format.
ACT_BYTES = 2
#: Bytes per data-parallel rank of the batch-size tensor the ranks all-reduce every step
#: (``vllm/v1/worker/dp_utils.py: _run_ar``: 4 int32 rows × ranks).
DP_SYNC_BYTES = 16
#: Element-wise kernels per layer (two RMSNorms, SiLU-and-mul, rotary) and per step
#: (embedding lookup, final RMSNorm).
KERNELS_PER_LAYER = 4
KERNELS_PER_STEP = 2
#: GEMM kernels per layer that ``gemm_fixed`` counts: the fused QKV, output, fused gate-up
#: and down projections of a dense layer as vLLM runs them (a mixture-of-experts or MLA
#: layer is counted alike).
GEMMS_PER_LAYER = 4


def activation_bytes(model: ModelSpec, tp: int = 1) -> tuple[float, float]:
    """Bytes the element-wise kernels move per token on one GPU: per layer and per step.

    Per layer: two fused add-RMSNorms (read x and the residual, write both: ``4 h``
    values each), SiLU-and-mul (read gate and up, write their product: ``3 I``; an ungated
    activation reads and writes ``I`` each: ``2 I``) and the rotary embedding (``q`` and
    ``k`` in place: ``2 (q_dim + kv_dim)``); per step the embedding lookup (``2 h``) and
    the final norm (``4 h``). bf16 values; the norms are replicated across tensor-parallel
    GPUs, the rest split.
    """
    h, q = model.hidden_size, model.q_dim
    act = model.mlp_matrices * model.mlp_width_per_token
    layer = ACT_BYTES * (2 * 4 * h + (act + 2 * (q + model.kv_dim)) / tp)
    return layer, ACT_BYTES * (2 * h + 4 * h)


@dataclass(frozen=True, slots=True)
class Engine:
    """Engine settings that shape step times: CUDA graphs and async scheduling (vLLM V1 defaults)."""

    enforce_eager: bool = False
    max_cudagraph_capture_size: int = DEFAULT_CAPTURE
    async_scheduling: bool = True

    @property
    def graph_max(self) -> int:
        """Largest captured size (0: no CUDA graphs): the capture ladder's last size ≤ the limit."""
        if self.enforce_eager:
            return 0
        m = self.max_cudagraph_capture_size
        if m >= 256:
            return 256 + (m - 256) // 16 * 16
        if m >= 8:
            return m // 8 * 8
        return 4 if m >= 4 else min(m, 2)


def expected_experts(experts: int, miss: float, tokens: int) -> float:
    """Expected distinct experts ``tokens`` tokens touch in one sparse layer when each
    token picks ``k`` of ``experts`` uniformly (``miss = 1 - k / experts``):
    ``E · (1 − (1 − k/E)^T)``; every token independently leaves a given expert out with
    probability ``1 − k/E``. 0 for a dense model (``experts = 0``)."""
    return experts * (1.0 - miss**tokens) if experts else 0.0


def graph_size(tokens: int) -> int:
    """The captured size a step of ``tokens`` tokens is padded to (1, 2, 4, 8, 16, ... 248, 256, 272, ...)."""
    if tokens <= 2:
        return tokens
    if tokens <= 4:
        return 4
    if tokens <= 256:
        return -(-tokens // 8) * 8
    return 256 + -(-(tokens - 256) // 16) * 16


@dataclass(frozen=True, slots=True)
class Roofline:
    """Precomputed per-unit costs of one (GPU, model, precision, tp, engine). Seconds, tokens, bytes."""

    layers: int
    # GEMMs and LM head (already divided by tp)
    gemm_weight_s: float  # weights every step reads (with MoE: attention, dense MLPs, routers, shared experts)
    moe_expert_weight_s: float  # one routed expert's weights in every sparse layer (0 for a dense model)
    moe_experts: int  # routed experts per sparse layer (0 for a dense model)
    moe_miss: float  # 1 - k / E: the chance a token's routing skips a given expert
    gemm_s_per_prefill_token: float
    gemm_s_per_decode_token: float
    knee: float  # share of the shorter roof that shows: max(W, C) + knee · min(W, C)
    head_weight_s: float
    head_s_per_row: float
    # attention, decode-only steps
    dec_fixed_s: float
    dec_s_per_seq: float
    dec_s_per_context: float
    # attention, steps with prefill
    pre_fixed_s: float
    pre_s_per_pair: float
    pre_tile_pairs: float
    stream_s_per_context: float
    mixed_s_per_context: float
    mixed_s_per_seq: float
    mixed_compute_s_per_context: float
    kv_write_s_per_token: float
    # element-wise kernels
    el_fixed_s: float
    el_s_per_token: float
    el_layer_bytes: float
    el_step_bytes: float
    el_threshold: float
    el_spill_s_per_byte: float
    # sampler
    samp_fixed_s: float
    samp_s_per_row: float
    samp_row_bytes: float
    samp_threshold: float
    samp_spill_s_per_byte: float
    # communication and CPU
    allreduce_s_per_token: float
    allreduce_fixed_s: float  # NCCL's latencies, per step
    allreduce_small_fixed_s: float  # vLLM's own all-reduce's latencies, per step
    allreduce_split_tokens: float  # steps of fewer (padded) tokens run vLLM's own all-reduce
    cpu_step_s: float
    cpu_seq_s: float
    cpu_emit_s: float
    stage_step_s: float
    stage_seq_s: float
    overlap_cpu: bool
    graph_max: int
    # skewed routing: expected distinct experts per sparse layer by (padded) step tokens
    moe_distinct: tuple[float, ...] | None = None
    # share of the attention layers that are windowed (their contexts cut to the window)
    window_share: float = 0.0
    # data-parallel ranks of a mixture of experts stepping together (:mod:`des.engine.lockstep`)
    moe_group: int = 1  # ranks whose tokens meet in every MoE layer (1: the engine steps alone)
    moe_exchange_s_per_token: float = 0.0  # dispatch + combine, all sparse layers, per padded rank token
    moe_exchange_fixed_s: float = 0.0  # their latencies, per step
    # tensor parallelism: the logits' all-gather per step with emitting rows
    gather_fixed_s: float = 0.0  # its latency
    gather_s_per_row: float = 0.0  # per emitting row (vocab / tp bf16 logits from each other GPU)
    dp_sync_s: float = 0.0  # the group's per-step all-reduce of its batch sizes on the GPUs (sync scheduling)
    # routed experts at factors of their own (Efficiency.moe_own); else inside the GEMMs' roofline
    moe_split: bool = False
    moe_s_per_token: float = 0.0  # the routed experts' FLOPs of one (padded) token, all sparse layers
    moe_fixed_s: float = 0.0  # the fused-MoE block's fixed time, all sparse layers, per step
    moe_knee: float = 0.0  # share of the shorter roof that shows in the experts' roofline
    moe_inline_s_per_token: float = 0.0  # without moe_split: the routed FLOPs inside gemm_s_per_prefill_token
    # fixed time of the GEMM kernels (Efficiency.gemm_fixed): all layers', and the LM head's
    gemm_fixed_s: float = 0.0
    head_fixed_s: float = 0.0

    def distinct_experts(self, tokens: int) -> float:
        """Expected distinct experts ``tokens`` tokens touch in one sparse layer (0 for a dense model)."""
        return distinct_experts(self.moe_experts, self.moe_miss, self.moe_distinct, tokens)

    @property
    def ridge_tokens(self) -> float:
        """Tokens per step at which the GEMMs' compute time equals their weight-streaming time
        (with a mixture of experts, the time to stream every expert: a step that large
        touches nearly all of them)."""
        w = self.gemm_weight_s + self.moe_expert_weight_s * self.moe_experts
        return w / (self.gemm_s_per_decode_token + self.moe_s_per_token)

    def _roof(self, memory: float, compute: float) -> float:
        if memory > compute:
            return memory + self.knee * compute
        return compute + self.knee * memory

    def allreduce(self, tokens: int) -> float:
        """Seconds of a step's all-reduces over ``tokens`` (padded) tokens: 0 without tensor parallelism."""
        if not self.allreduce_s_per_token:
            return 0.0
        fixed = self.allreduce_small_fixed_s if tokens < self.allreduce_split_tokens else self.allreduce_fixed_s
        return fixed + self.allreduce_s_per_token * tokens

    def breakdown(
        self, shape: BatchShape, group_tokens: int | None = None, group_total: int | None = None
    ) -> dict[str, float]:
        """Seconds of each group of work in a step of ``shape``; ``gpu`` is their sum,
        ``cpu`` the engine's CPU time, and :meth:`step_time` combines the two.

        ``group_tokens``: the step is one rank's of a data-parallel group of
        :attr:`moe_group` ranks stepping together, the largest of whose batches has that
        many new tokens, ``group_total`` the sum of their batches' (:meth:`group_step_time`)."""
        s = shape
        pt = s.prefill_tokens
        t = pt + s.decode_tokens
        n = s.decode_tokens - s.spec_tokens  # sequences decoding
        padded = t if group_tokens is None else group_tokens
        tg = graph_size(padded) if 0 < padded <= self.graph_max else padded
        gathered = tg * self.moe_group  # tokens in each MoE layer, the group's
        if group_tokens is not None and not 0 < group_tokens <= self.graph_max:
            # a rank's step too large for a CUDA graph runs eager everywhere, unpadded:
            # each rank its own tokens, the MoE layers the group's sum (all_gatherv)
            tg = t
            gathered = group_total if group_total is not None else group_tokens * self.moe_group
        share = gathered / self.moe_group  # a rank's share of the gathered rows (= tg when padded)
        emitting = s.num_emitting
        rows = emitting + s.spec_tokens  # through the LM head and sampler
        out: dict[str, float] = {}
        experts = self.moe_expert_weight_s * self.distinct_experts(gathered)
        dense = self.gemm_s_per_prefill_token * pt + self.gemm_s_per_decode_token * (tg - pt)
        if self.moe_split:
            out["gemm"] = self.gemm_fixed_s + self._roof(self.gemm_weight_s, dense)
            w, c = experts, self.moe_s_per_token * share
            roof = w + self.moe_knee * c if w > c else c + self.moe_knee * w
            out["moe"] = self.moe_fixed_s + roof if gathered else 0.0
        else:  # the routed rows' FLOPs are in the GEMM coefficients, for the rank's own tokens
            dense += self.moe_inline_s_per_token * (share - tg)  # 0 unless an unpadded group step
            out["gemm"] = self.gemm_fixed_s + self._roof(self.gemm_weight_s + experts, dense)
        out["lm_head"] = self.head_fixed_s + self._roof(self.head_weight_s, self.head_s_per_row * rows) if rows else 0.0
        attn_pre = attn_dec = 0.0
        d, x, pairs = self.contexts(s)
        if pt:
            chunks = max(s.num_seqs - n, 1)
            attn_pre = self.pre_fixed_s + max(
                self.pre_s_per_pair * (pairs + self.pre_tile_pairs * pt),
                self.stream_s_per_context * x / chunks,
                self.mixed_s_per_context * x,
            )
            if n:
                attn_dec = max(
                    self.mixed_compute_s_per_context * d,
                    self.mixed_s_per_seq * n + self.mixed_s_per_context * d,
                    self.stream_s_per_context * d / n,
                )
        elif n:
            attn_dec = self.dec_fixed_s + self.dec_s_per_seq * n + self.dec_s_per_context * d
        out["attention_prefill"] = attn_pre
        out["attention_decode"] = attn_dec
        out["kv_write"] = self.kv_write_s_per_token * t
        spill = max(tg * self.el_layer_bytes - self.el_threshold, 0.0) * self.layers + max(
            tg * self.el_step_bytes - self.el_threshold, 0.0
        )
        out["elementwise"] = self.el_fixed_s + self.el_s_per_token * tg + self.el_spill_s_per_byte * spill
        if rows:
            logits = rows * self.samp_row_bytes
            out["sampler"] = (
                self.samp_fixed_s
                + self.samp_s_per_row * rows
                + self.samp_spill_s_per_byte * max(logits - self.samp_threshold, 0.0)
            )
        else:
            out["sampler"] = 0.0
        out["allreduce"] = self.allreduce(tg)
        out["logits_gather"] = self.gather_fixed_s + self.gather_s_per_row * rows if rows else 0.0
        if self.moe_group > 1:
            out["dp_sync"] = self.dp_sync_s
            out["moe_exchange"] = self.moe_exchange_fixed_s + self.moe_exchange_s_per_token * share if gathered else 0.0
        out["gpu"] = sum(out.values())
        out["cpu"] = self.cpu_step_s + self.cpu_seq_s * s.num_seqs + self.cpu_emit_s * emitting
        out["frontend"] = self.stage_step_s + self.stage_seq_s * emitting
        return out

    def contexts(self, s: BatchShape) -> tuple[float, float, float]:
        """The step's decode context, prefill context and prefill pairs averaged over the
        layers: the windowed layers' share (``window_share``) reads the shape's windowed
        sums. A shape that carries no window (``window`` 0) is costed as full attention."""
        return s.layer_average(self.window_share)

    def scaled(self, multipliers: Mapping[UncertaintyGroup, float]) -> Roofline:
        """This roofline with each group's seconds (:data:`GROUP_FIELDS`) times its
        multiplier: every term of a group, and so the group's time in any step, scales by
        it (the softened roofline ``max(W, C) + k · min(W, C)`` too, since ``W`` and ``C``
        both do). Groups left out keep a multiplier of 1."""
        changes = {name: getattr(self, name) * m for group, m in multipliers.items() for name in GROUP_FIELDS[group]}
        return replace(self, **changes) if changes else self

    def serial(self) -> Roofline:
        """This roofline as a step formed on an idle engine runs it: under async scheduling
        the engine core's CPU time (scheduling, input preparation) hides under the GPU's
        previous step, and an idle engine has none, so the two add up as without it
        (the first-token path, :mod:`des.cost.frontend`)."""
        return replace(self, overlap_cpu=False) if self.overlap_cpu else self

    def stage(self, first: bool, last: bool) -> Roofline:
        """This roofline (built for one pipeline stage's layers) as that stage runs it: the
        LM head, sampler, logits' all-gather and front-end stage on the last stage only, the
        engine core's CPU time (scheduling the batch) and the embedding's all-reduce before and
        on the first only (:mod:`des.engine.pipeline`)."""
        changes: dict[str, Any] = {}
        if not last:
            changes |= dict.fromkeys(
                ("head_weight_s", "head_s_per_row", "head_fixed_s", "samp_fixed_s", "samp_s_per_row",
                 "samp_spill_s_per_byte", "stage_step_s", "stage_seq_s", "gather_fixed_s", "gather_s_per_row"), 0.0,
            )  # fmt: skip
        if not first:
            changes |= dict.fromkeys(("cpu_step_s", "cpu_seq_s", "cpu_emit_s"), 0.0)
            if self.allreduce_s_per_token:  # 2 all-reduces per layer, without the embedding's
                share = 2 * self.layers / (2 * self.layers + 1)
                for name in ("allreduce_s_per_token", "allreduce_fixed_s", "allreduce_small_fixed_s"):
                    changes[name] = getattr(self, name) * share
        return replace(self, **changes) if changes else self

    def group_step_time(self, shape: BatchShape, group_tokens: int, group_total: int | None = None) -> float:
        """Seconds one rank of a data-parallel group of a mixture of experts takes for its
        batch ``shape`` (empty: a dummy step) when the largest batch of the group has
        ``group_tokens`` new tokens and all of them ``group_total`` (None: every rank
        ``group_tokens``).

        vLLM pads every rank's batch to the group's largest (``coordinate_batch_across_dp``,
        ``vllm/v1/worker/dp_utils.py``) when every rank's step runs as a CUDA graph (the
        ranks' graph modes are all-reduced and their minimum taken: ``should_dp_pad =
        synced_cudagraph_mode != NONE``), so each rank's GEMMs, element-wise kernels and
        collectives run on that many (graph-padded) rows; the rank's own sequences set its
        attention, LM head and sampler. A group whose largest step exceeds the captured
        sizes (or runs eager) is not padded: each rank runs its own tokens and each MoE
        layer the group's ``group_total`` (``all_gatherv`` of unequal sizes), each rank
        its share ``group_total / ranks`` of the routed rows and of the exchange. Each MoE
        layer gathers the group's tokens (:attr:`moe_group` × the padded rows), and the
        rank reads those of its share of the experts that they touch (:func:`expected_experts`
        over the group's tokens, at the shard's bytes: :attr:`moe_expert_weight_s` is
        already divided over the ranks), and exchanges tokens with the other ranks
        (:func:`des.catalog.interconnect.moe_exchange_bytes`). Under synchronous scheduling
        each step begins with the ranks' all-reduce of their batch sizes on the GPUs
        (:attr:`dp_sync_s`, NCCL's small-message time on the link); under async scheduling
        vLLM runs it over Gloo on the CPUs, behind the GPUs' work, and des counts nothing.
        The group's step lasts as long as its slowest rank's (:mod:`des.engine.lockstep`).
        """
        b = self.breakdown(shape, group_tokens, group_total)
        return self._combine(b["gpu"], b["cpu"], b["frontend"])

    def _combine(self, gpu: float, cpu: float, stage: float) -> float:
        """A step's seconds from its GPU time, the engine core's CPU time (overlapped under
        async scheduling, added otherwise) and the front-end stage it may not be shorter than."""
        step = (gpu if gpu > cpu else cpu) if self.overlap_cpu else gpu + cpu
        return step if step > stage else stage

    def step_time(self, shape: BatchShape, extra_gpu: float = 0.0) -> float:
        """Seconds of a step of ``shape``, ``extra_gpu`` seconds of other GPU work (a
        speculative proposer's passes) added before the CPU time is set against it. A
        verification step's ``spec_tokens`` proposed rows run through the GEMMs, LM head
        and sampler like any row; its attention's per-sequence terms count the sequences."""
        s = shape
        pt, v = s.prefill_tokens, s.spec_tokens
        t = pt + s.decode_tokens
        n = s.decode_tokens - v  # sequences decoding
        tg = t
        if 0 < t <= self.graph_max:  # graph_size, inlined
            if t > 4:
                tg = -(-t // 8) * 8 if t <= 256 else 256 + -(-(t - 256) // 16) * 16
            elif t == 3:
                tg = 4
        # GEMMs (softened roofline)
        k = self.knee
        w = self.gemm_weight_s
        moe = 0.0
        if self.moe_experts:  # distinct experts the step's tokens touch
            table = self.moe_distinct
            if table is None:  # uniform routing
                we = self.moe_expert_weight_s * self.moe_experts * (1.0 - self.moe_miss**tg)
            else:
                we = self.moe_expert_weight_s * table[tg if tg < len(table) else -1]
            if self.moe_split:  # the fused-MoE block's own roofline
                ce = self.moe_s_per_token * tg
                moe = self.moe_fixed_s + (we + self.moe_knee * ce if we > ce else ce + self.moe_knee * we)
            else:
                w += we
        c = self.gemm_s_per_prefill_token * pt + self.gemm_s_per_decode_token * (tg - pt)
        gpu = (w + k * c if w > c else c + k * w) + moe
        gpu += self.gemm_fixed_s  # the GEMM kernels' fixed time
        # LM head and sampler, for the emitting rows (and every proposed row a step verifies)
        emitting = s.num_emitting
        rows = emitting + v
        if rows:
            w = self.head_weight_s
            c = self.head_s_per_row * rows
            gpu += w + k * c if w > c else c + k * w
            gpu += self.head_fixed_s
            over = rows * self.samp_row_bytes - self.samp_threshold
            gpu += self.samp_fixed_s + self.samp_s_per_row * rows
            if over > 0.0:
                gpu += self.samp_spill_s_per_byte * over
        # attention
        d: float = s.decode_context
        x: float = s.prefill_context
        pairs = s.prefill_pairs
        ws = self.window_share
        if ws and s.window:  # windowed layers read the windowed sums (Roofline.contexts)
            d -= ws * (d - s.decode_window_context)
            x -= ws * (x - s.prefill_window_context)
            pairs -= ws * (pairs - s.prefill_window_pairs)
        if pt:
            chunks = s.num_seqs - n
            a = self.pre_s_per_pair * (pairs + self.pre_tile_pairs * pt)
            b = self.stream_s_per_context * x / (chunks if chunks > 1 else 1)
            if b > a:
                a = b
            b = self.mixed_s_per_context * x
            gpu += self.pre_fixed_s + (a if a > b else b)
            if n:
                a = self.mixed_compute_s_per_context * d
                b = self.mixed_s_per_seq * n + self.mixed_s_per_context * d
                if b > a:
                    a = b
                b = self.stream_s_per_context * d / n
                gpu += a if a > b else b
        elif n:
            gpu += self.dec_fixed_s + self.dec_s_per_seq * n + self.dec_s_per_context * d
        # KV writes, element-wise kernels, all-reduces
        gpu += self.kv_write_s_per_token * t + self.el_fixed_s + self.el_s_per_token * tg
        over = tg * self.el_layer_bytes - self.el_threshold
        if over > 0.0:
            gpu += self.el_spill_s_per_byte * over * self.layers
            over = tg * self.el_step_bytes - self.el_threshold
            if over > 0.0:
                gpu += self.el_spill_s_per_byte * over
        if self.allreduce_s_per_token:
            if tg < self.allreduce_split_tokens:
                gpu += self.allreduce_small_fixed_s + self.allreduce_s_per_token * tg
            else:
                gpu += self.allreduce_fixed_s + self.allreduce_s_per_token * tg
        if rows and self.gather_s_per_row:
            gpu += self.gather_fixed_s + self.gather_s_per_row * rows
        gpu += extra_gpu
        cpu = self.cpu_step_s + self.cpu_seq_s * s.num_seqs + self.cpu_emit_s * emitting
        if self.overlap_cpu:
            step = gpu if gpu > cpu else cpu
        else:
            step = gpu + cpu
        stage = self.stage_step_s + self.stage_seq_s * emitting
        return step if step > stage else stage


#: The coefficients (seconds per unit of work) of each group of
#: :data:`~des.catalog.efficiency.UNCERTAINTY_GROUPS`, which a drawn multiplier scales
#: (:meth:`Roofline.scaled`). Every field of :class:`Roofline` that holds seconds belongs
#: to exactly one group (a test checks it): a new time coefficient must be added here.
GROUP_FIELDS: dict[UncertaintyGroup, tuple[str, ...]] = {
    "gemm": (
        "gemm_weight_s", "moe_expert_weight_s", "gemm_s_per_prefill_token", "gemm_s_per_decode_token",
        "head_weight_s", "head_s_per_row", "gemm_fixed_s", "head_fixed_s", "moe_s_per_token", "moe_fixed_s",
        "moe_inline_s_per_token",
    ),
    "attention": (
        "dec_fixed_s", "dec_s_per_seq", "dec_s_per_context", "pre_fixed_s", "pre_s_per_pair",
        "stream_s_per_context", "mixed_s_per_context", "mixed_s_per_seq", "mixed_compute_s_per_context",
        "kv_write_s_per_token",
    ),
    "elementwise": (
        "el_fixed_s", "el_s_per_token", "el_spill_s_per_byte", "samp_fixed_s", "samp_s_per_row",
        "samp_spill_s_per_byte",
    ),
    "communication": (
        "allreduce_s_per_token", "allreduce_fixed_s", "allreduce_small_fixed_s", "moe_exchange_s_per_token",
        "moe_exchange_fixed_s", "gather_fixed_s", "gather_s_per_row", "dp_sync_s",
    ),
    "cpu": ("cpu_step_s", "cpu_seq_s", "cpu_emit_s", "stage_step_s", "stage_seq_s"),
}  # fmt: skip


def time_fields() -> list[str]:
    """The fields of :class:`Roofline` that hold seconds (``_s`` or ``_s_per_...``)."""
    return [f.name for f in fields(Roofline) if f.name.endswith("_s") or "_s_per_" in f.name]


def build_roofline(
    gpu: GPUSpec,
    model: ModelSpec,
    precision: Precision | None = None,
    tp: int = 1,
    efficiency: Efficiency | None = None,
    engine: Engine | None = None,
    frontend: FrontendSpec | None = None,
    multipliers: Mapping[UncertaintyGroup, float] | None = None,
    query_len: int = 1,
    moe_group: int = 1,
    all2all: str = "allgather_reducescatter",
) -> Roofline:
    """The roofline of ``model`` on ``tp`` × ``gpu`` with ``precision`` under ``engine``'s
    settings, behind ``frontend`` (None: the engine core's CPU time alone); ``multipliers``
    scale each group's times (a draw of the model's error, :mod:`des.cost.uncertainty`);
    ``query_len`` query tokens per decoding sequence (speculative verification: ``k + 1``)
    multiply a decode's attention FLOPs per context token (its KV is still read once).

    ``moe_group``: the data-parallel ranks a mixture of experts' routed experts are spread
    over and whose tokens meet in every MoE layer (1: none), exchanged by the ``all2all``
    backend (:func:`des.catalog.interconnect.moe_exchange_bytes`)."""
    precision = precision or Precision()
    engine = engine or Engine()
    e = efficiency or gpu.efficiency
    fe = frontend
    bw = gpu.memory_bandwidth
    peak = gpu.sustained_flops(compute_dtype(gpu, precision))  # des/catalog/quantization.py
    peak16 = gpu.sustained_flops("bf16")
    L, h, q = model.num_layers, model.hidden_size, model.q_dim
    p_lin = model.active_linear_params  # FLOPs: the weights a token runs
    p_read = model.always_linear_params  # read every step; the routed experts on top
    vocab = model.vocab_size
    if model.is_mla:
        # the latent is one "KV head" every GPU holds whole (vLLM ModelConfig.get_num_kv_heads
        # returns 1 under MLA, get_head_size kv_lora_rank + qk_rope_head_dim): not split by tp
        kv_all = L * model.kv_latent_dim * precision.kv_bytes  # per token, all layers, one GPU
    else:
        kv_layer = 2 * model.kv_dim * precision.kv_bytes  # KV bytes per token and layer
        kv_all = L * kv_layer / tp  # per token, all layers, one GPU

    def seconds_per_byte(factor: float | None) -> float:
        return 1.0 / (bw * factor) if factor else 0.0

    e_dec = e.compute_decode
    w_byte = precision.weight_bytes_per_param * seconds_per_byte(e.weight_bandwidth) / tp
    e_att = e.attention_compute or e.gemm_compute
    e_att_dec = e.decode_compute or e_att
    kv_read = seconds_per_byte(e.kv_bandwidth or e.weight_bandwidth) * kv_all
    stream = seconds_per_byte(e.kv_stream or e.kv_bandwidth or e.weight_bandwidth) * kv_all
    mixed = seconds_per_byte(e.mixed_kv_bandwidth or e.kv_bandwidth or e.weight_bandwidth) * kv_all
    att_flops = att_flops_dec = 4 * L * q / tp  # per query-key pair
    if model.is_mla:
        att_flops, att_flops_dec = model.mla_pair_flops
        att_flops, att_flops_dec = L * att_flops / tp, L * att_flops_dec / tp

    act_layer, act_step = activation_bytes(model, tp)
    el_on = e.elementwise_bandwidth is not None

    ar_per_token = ar_fixed = ar_small = ar_split = gather_fixed = gather_per_row = 0.0
    if tp > 1:  # two all-reduces per layer and the embedding's, of h bf16 values per token
        link = gpu.link
        cost = link.nccl_cost(tp)
        calls = 2 * L + 1
        ar_per_token = calls * ring_factor(tp) * h * ACT_BYTES / cost.bus_bandwidth
        ar_fixed = calls * cost.latency
        limit = link.custom_limit(tp)
        if limit and link.custom_latency is not None:
            ar_small = calls * link.custom_latency
            ar_split = limit / (h * ACT_BYTES)
        gather = link.gather_cost(tp)  # the logits: vocab / tp bf16 values per emitting row from each GPU
        gather_fixed = gather.latency
        gather_per_row = (tp - 1) * vocab / tp * ACT_BYTES / gather.bus_bandwidth
    group = moe_group if model.is_moe and moe_group > 1 else 1
    ex_per_token = ex_fixed = dp_sync = 0.0
    if group > 1 and not engine.async_scheduling:
        # vLLM's coordinate_batch_across_dp all-reduces a 4 × ranks int32 tensor every step: on
        # the GPUs over NCCL, then read back, when scheduling is synchronous; over Gloo on the
        # CPUs, overlapping the GPUs' work, under async scheduling (disable_nccl_for_dp_synchronization)
        sync = gpu.link.nccl_cost(group)
        dp_sync = sync.latency + ring_factor(group) * DP_SYNC_BYTES * group / sync.bus_bandwidth
    if group > 1:  # dispatch and combine in every sparse layer, each at NCCL's all-gather cost among the ranks
        cost = gpu.link.gather_cost(group)
        per_token = moe_exchange_bytes(all2all, 1, group, h, model.num_experts_per_tok or 0, ACT_BYTES)
        ex_per_token = 2 * model.num_moe_layers * per_token / cost.bus_bandwidth
        ex_fixed = 2 * model.num_moe_layers * cost.latency
    read_byte = w_byte  # weights read every step
    expert_byte = w_byte  # one routed expert's
    # the routed experts at factors of their own: fitted to vLLM's 16-bit fused-MoE kernel, so
    # for 16-bit experts only (quantised experts run other kernels: Marlin, w8a8 Triton, MXFP4)
    split = model.is_moe and e.moe_own and precision.weight_bytes_per_param == ACT_BYTES
    if split:
        expert_byte = precision.weight_bytes_per_param * seconds_per_byte(e.moe_bandwidth or e.weight_bandwidth) / tp
    if weight_only(gpu, precision):  # Marlin dequantises the weights per 64-row slab: part of the rate
        peak = peak * WEIGHT_ONLY_COMPUTE
    gemm_pre = 2 * p_lin / (peak * e.gemm_compute) / tp
    gemm_dec = 2 * p_lin / (peak * e_dec) / tp
    if precision.quantized_layers == "experts" and model.is_moe:
        # only the routed experts are quantised (gpt-oss's MXFP4): the rest reads and runs bf16
        read_byte = WEIGHT_BYTES["bf16"] * seconds_per_byte(e.weight_bandwidth) / tp
        p_exp = p_lin - p_read  # routed experts' weights a token runs
        gemm_pre = 2 * (p_read / peak16 + p_exp / peak) / e.gemm_compute / tp
        gemm_dec = 2 * (p_read / peak16 + p_exp / peak) / e_dec / tp
        if split:
            gemm_pre = 2 * p_read / peak16 / e.gemm_compute / tp
            gemm_dec = 2 * p_read / peak16 / e_dec / tp
    elif split:
        gemm_pre = 2 * p_read / (peak * e.gemm_compute) / tp
        gemm_dec = 2 * p_read / (peak * e_dec) / tp
    moe_per_token = 2 * (p_lin - p_read) / (peak * (e.moe_compute or e.gemm_compute)) / tp if split else 0.0
    moe_inline = 2 * (p_lin - p_read) / (peak * e.gemm_compute) / tp if model.is_moe and not split else 0.0
    routing_table = None
    if model.is_moe:
        routing_table = distinct_table(model.num_experts or 0, model.num_experts_per_tok or 0, model.routing)
    roofline = Roofline(
        layers=L,
        gemm_weight_s=(p_read if model.is_moe else p_lin) * read_byte,
        moe_expert_weight_s=model.num_moe_layers * model.expert_params * expert_byte / group,
        moe_experts=model.num_experts or 0,
        moe_miss=1.0 - (model.num_experts_per_tok or 0) / (model.num_experts or 1),
        gemm_s_per_prefill_token=gemm_pre,
        gemm_s_per_decode_token=gemm_dec,
        knee=e.gemm_knee,
        head_weight_s=vocab * h * ACT_BYTES * seconds_per_byte(e.lm_head_bandwidth or e.weight_bandwidth) / tp,
        head_s_per_row=2 * vocab * h / (peak16 * e_dec) / tp,
        dec_fixed_s=L * e.attention_fixed,
        dec_s_per_seq=L * e.attention_per_seq,
        dec_s_per_context=max(query_len * att_flops_dec / (peak16 * e_att_dec), kv_read),
        pre_fixed_s=L * e.prefill_attention_fixed,
        pre_s_per_pair=att_flops / (peak16 * e_att),
        pre_tile_pairs=e.attention_tile,
        stream_s_per_context=stream,
        mixed_s_per_context=mixed,
        mixed_s_per_seq=L * e.mixed_per_seq,
        mixed_compute_s_per_context=query_len * att_flops_dec / (peak16 * e_att_dec),
        kv_write_s_per_token=seconds_per_byte(e.kv_write_bandwidth) * kv_all,
        el_fixed_s=(KERNELS_PER_LAYER * L + KERNELS_PER_STEP) * e.elementwise_kernel if el_on else 0.0,
        el_s_per_token=(L * act_layer + act_step) * seconds_per_byte(e.elementwise_bandwidth),
        el_layer_bytes=act_layer if e.elementwise_spill else 0.0,
        el_step_bytes=act_step if e.elementwise_spill else 0.0,
        el_threshold=e.elementwise_l2 * gpu.l2_bytes,
        el_spill_s_per_byte=seconds_per_byte(e.elementwise_spill),
        samp_fixed_s=e.sampler_fixed if e.sampler_bandwidth is not None else 0.0,
        samp_s_per_row=vocab * LOGIT_BYTES * seconds_per_byte(e.sampler_bandwidth),
        samp_row_bytes=vocab * LOGIT_BYTES if e.sampler_spill else 0.0,
        samp_threshold=e.sampler_l2 * gpu.l2_bytes,
        samp_spill_s_per_byte=seconds_per_byte(e.sampler_spill),
        allreduce_s_per_token=ar_per_token,
        allreduce_fixed_s=ar_fixed,
        allreduce_small_fixed_s=ar_small,
        allreduce_split_tokens=ar_split,
        cpu_step_s=e.step_overhead + (fe.core_step_s if fe else 0.0),
        cpu_seq_s=e.seq_overhead,
        cpu_emit_s=fe.core_seq_s if fe else 0.0,
        stage_step_s=fe.stage_step_s if fe else 0.0,
        stage_seq_s=fe.stage_seq_s if fe else 0.0,
        overlap_cpu=engine.async_scheduling,
        graph_max=engine.graph_max,
        moe_distinct=routing_table,
        window_share=model.window_layers / L,
        moe_group=group,
        moe_exchange_s_per_token=ex_per_token,
        moe_exchange_fixed_s=ex_fixed,
        gather_fixed_s=gather_fixed,
        gather_s_per_row=gather_per_row,
        dp_sync_s=dp_sync,
        moe_inline_s_per_token=moe_inline,
        moe_split=split,
        moe_s_per_token=moe_per_token,
        moe_fixed_s=model.num_moe_layers * e.moe_fixed if split else 0.0,
        moe_knee=(e.gemm_knee if e.moe_knee is None else e.moe_knee) if split else 0.0,
        gemm_fixed_s=GEMMS_PER_LAYER * L * e.gemm_fixed,
        head_fixed_s=e.gemm_fixed,
    )
    return roofline.scaled(multipliers) if multipliers else roofline


class RooflineConfig(Strict):
    """Roofline step time from the catalog specs; ``efficiency`` overrides the GPU's factors.

    Engine settings (vLLM V1's defaults): ``enforce_eager`` turns CUDA graphs off;
    steps of up to ``max_cudagraph_capture_size`` tokens are padded to the captured
    sizes; ``async_scheduling`` overlaps the CPU's work on the next step with the GPU's
    on this one (otherwise the two add up). ``estimate_cudagraph_memory`` takes the CUDA
    graphs' pool out of the KV budget, as vLLM does with
    ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1`` (off in vLLM 0.19, on from 0.21).
    """

    kind: Literal["roofline"] = "roofline"
    efficiency: Efficiency | None = Field(None)
    enforce_eager: bool = False
    max_cudagraph_capture_size: int = Field(DEFAULT_CAPTURE, ge=1, le=1 << 20)
    async_scheduling: bool = True
    estimate_cudagraph_memory: bool = False

    @property
    def engine(self) -> Engine:
        return Engine(self.enforce_eager, self.max_cudagraph_capture_size, self.async_scheduling)

    @property
    def graphs(self) -> GraphCapture:
        """The CUDA graphs the memory plan accounts for (none under ``enforce_eager``)."""
        return GraphCapture(self.engine.graph_max, self.estimate_cudagraph_memory)

    def build(self, ctx: CostContext) -> Roofline:
        return build_roofline(
            ctx.gpu, ctx.model, ctx.precision, ctx.tp, self.efficiency, self.engine, ctx.frontend, ctx.multipliers,
            ctx.query_len, ctx.moe_group, ctx.all2all,
        )  # fmt: skip
