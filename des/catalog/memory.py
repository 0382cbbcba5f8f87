"""Memory arithmetic: weight bytes, KV bytes per token, and KV-cache capacity in blocks.

The KV budget follows vLLM 0.19's ``Worker.determine_available_memory``
(``vllm/v1/worker/gpu_worker.py``, with ``memory_profiling`` in ``vllm/utils/mem_utils.py``):
the engine may use ``requested = ceil(gpu_memory_utilization × memory_bytes)``, measured
against a memory snapshot taken *after* the CUDA context (and NCCL) exist, so the
context itself lives in the ``1 − gpu_memory_utilization`` headroom. From the request it
subtracts

- the **weights** as loading them grew PyTorch's allocation: the parameters plus the
  rotary embedding's cos/sin cache (``max_position_embeddings × rotary_dim`` in bf16,
  ``rotary_embedding/base.py``);
- the **activation peak**: how far PyTorch's allocated-bytes peak rose during
  ``GPUModelRunner.profile_run`` (``gpu_model_runner.py``): a dummy forward over
  ``T = max_num_batched_tokens`` tokens split into ``R = min(T, max_num_seqs)``
  requests, then ``_dummy_sampler_run`` on the ``R`` last hidden states: the LM head's
  bf16 logits, their fp32 copy, the softmax probabilities and the exponential noise of
  ``random_sample`` (``R × vocab`` each), and the Triton top-k/top-p kernel's per-program
  buffer (``min(R, SMs) × vocab`` fp32, ``sample/ops/topk_topp_triton.py``), all held at
  once (``Sampler.forward``, ``TopKTopPSampler.forward_native``: the dummy run asks for
  top-k and top-p, so every row goes through them). Below 8 rows PyTorch sorts instead (fp32
  values and int64 indices); FlashInfer's sampler (opt-in, ``VLLM_USE_FLASHINFER_SAMPLER=1``)
  would skip the probabilities and the noise, and is not modelled. At ``max_num_seqs`` 1024
  (``vllm serve`` on a GPU of 70 GiB or more) this is vLLM's largest activation term. The
  forward's own peak is the gated MLP's: residual and normed input (``2 h``), the
  gate/up product (``2 I``) and its SiLU-and-mul (``I``) per token. The larger of the
  two is the peak;
- the **runtime reserve**: memory that grew outside PyTorch's allocator while the engine
  started (vLLM's "non-torch memory": kernel images loaded on first use, library handles).
  Its baseline snapshot is taken after the CUDA context exists and the NCCL communicators
  are built and warmed up (``Worker.init_device``), so neither is in it, and cuBLAS's
  workspaces come from PyTorch's allocator. What is left is the process's software, not a
  share of the GPU's memory nor a function of the model's shapes: a catalog constant
  (``runtime_reserve_bytes``, 1 GiB on every GPU, whose rtx4090 entry says where it comes from);
- the **CUDA graph pool**, only when vLLM is told to (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1``,
  off in 0.19, the default from 0.21): ``profile_cudagraph_memory`` captures the largest
  size first (its pool holds that step's activations) and charges every further graph at
  least 1 MiB. Otherwise the graphs are captured after the KV cache is allocated, in the
  headroom, and the plan shows the pool without charging it. ``enforce_eager``: no graphs.

What is left holds ``floor(left / (kv_bytes_per_token × block_size))`` blocks
(``kv_cache_utils.get_num_blocks``: available memory // page size // layers). Attention
variants (:class:`~des.catalog.specs.ModelSpec`): multi-head latent attention caches its
latent whole on every GPU (:func:`kv_layer_bytes`); windowed layers keep at most
``ceil(window / block_size) + 1`` blocks per sequence (:func:`window_reserve_tokens`), so the
plan sets that aside for ``max_num_seqs`` sequences and counts blocks over the
full-attention layers alone when that holds more tokens than counting every layer in full
(it never holds fewer: a sequence's windowed KV is never more than its full KV). Exact when
``max_num_seqs`` sequences each hold at least a window; conservative with fewer or shorter
ones, whose unused reserve vLLM's shared block pool would lend to the full layers. With tensor
parallelism every GPU holds ``1/tp`` of the weights, of each token's KV and of the
split activations (the residual stream and the all-gathered logits are whole on every
GPU), so budgets, activation peaks and reserves add over the ``tp`` GPUs and the blocks
are counted over them together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from des.catalog.precision import Precision
from des.catalog.specs import GPUSpec, ModelSpec
from des.errors import ScenarioError


def with_native(native: dict | None, given: dict | None) -> dict | None:
    """The precision a scenario runs a model at: the ``given`` keys laid over the model's
    ``native`` (its catalog ``default_precision``), unless ``given`` names other weights than
    the native ones, which then replace it whole (``bf16`` on gpt-oss: the dequantised
    checkpoint, every layer in bf16). None when neither says anything."""
    if not native:
        return given
    given = given or {}
    if "weights" in given and given["weights"] != native.get("weights"):
        return given
    return {**native, **given}


def quantized_params(model: ModelSpec, precision: Precision) -> int:
    """Weights stored in ``precision.weights``: every layer matrix, or with
    ``quantized_layers: experts`` the routed experts' alone (all of them resident)."""
    if precision.quantized_layers == "experts":
        return model.linear_params - model.always_linear_params
    return model.linear_params


def weight_bytes(model: ModelSpec, precision: Precision | None = None) -> int:
    """Bytes of all weights: quantised layer matrices plus bf16 embeddings, head, norms, biases
    (and the layer matrices left in bf16 under ``quantized_layers: experts``)."""
    precision = precision or Precision()
    linear = quantized_params(model, precision)  # every expert of a mixture of experts is resident
    rest = model.num_params - linear
    return int(round(linear * precision.weight_bytes_per_param + rest * 2.0))


def expert_bytes(model: ModelSpec, precision: Precision | None = None) -> int:
    """Bytes of every routed expert of every sparse layer (0 for a dense model): the part of
    :func:`weight_bytes` that data and expert parallelism spread over the ranks."""
    precision = precision or Precision()
    params = model.num_moe_layers * (model.num_experts or 0) * model.expert_params
    return int(round(params * precision.weight_bytes_per_param))


def rank_weight_bytes(model: ModelSpec, precision: Precision | None = None, expert_shards: int = 1) -> int:
    """Bytes of weights one data-parallel rank (all its tensor-parallel GPUs together) holds
    when the routed experts are spread over ``expert_shards`` ranks.

    vLLM's MoE layers under data parallelism shard the experts over every GPU of the group
    (``FusedMoEParallelConfig.make`` in ``vllm/model_executor/layers/fused_moe/config.py``):
    with ``enable_expert_parallel`` each of the ``dp × tp`` GPUs holds ``E / (dp × tp)`` whole
    experts, without it every GPU holds a ``1 / (dp × tp)`` slice of every expert
    (``flatten_tp_across_dp``); the bytes per GPU are the same either way. Attention, dense
    MLPs, routers, shared experts, embeddings and the LM head stay whole on every rank.
    """
    whole = weight_bytes(model, precision)
    if expert_shards <= 1:
        return whole
    experts = expert_bytes(model, precision)
    return whole - experts + -(-experts // expert_shards)


#: Bytes of one activation value: vLLM runs bf16/fp16 activations whatever the weights' format.
ACT_BYTES = 2
#: Bytes of one logit once the sampler has cast it to fp32.
LOGIT_BYTES = 4
#: vLLM pads the LM head's vocabulary to a multiple of this (``DEFAULT_VOCAB_PADDING_SIZE``).
VOCAB_PADDING = 64
#: Below this many rows the sampler sorts the logits in PyTorch instead of the Triton kernel
#: (``apply_top_k_top_p``): fp32 sorted values and int64 indices.
TRITON_TOPK_MIN_ROWS = 8
#: What vLLM's CUDA-graph profiler charges each graph after the first, at least (1 MiB).
GRAPH_OVERHEAD_BYTES = 1 << 20
#: vLLM's default ``max_cudagraph_capture_size`` (min(2 × max_num_seqs, 512) with its default
#: 256 sequences).
DEFAULT_CAPTURE = 512


def pp_layers(num_layers: int, pp: int) -> list[int]:
    """Layers of each of ``pp`` pipeline stages, as vLLM splits them
    (``vllm/distributed/utils.py: get_pp_indices``, without ``VLLM_PP_LAYER_PARTITION``):
    ``num_layers // pp`` each, and the remainder one each to the stages before the last,
    from the second-to-last backwards (the last stage also runs the LM head)."""
    base, extra = divmod(num_layers, pp)
    parts = [base] * pp
    for i in range(2, extra + 2):
        parts[-i] += 1
    return parts


def kv_bytes_per_token(model: ModelSpec, precision: Precision, tp: int = 1) -> int:
    """Bytes one token's K and V take over the ``tp`` GPUs of an instance.

    Each GPU holds ``max(1, kv_heads // tp)`` KV heads (vLLM replicates a head on several
    GPUs when there are fewer heads than GPUs), so past ``tp = kv_heads`` the total grows
    with ``tp`` instead of staying the model's.
    """
    return (
        kv_layer_bytes(model, precision, tp) * model.num_layers
        if model.is_mla
        else (
            int(2 * model.num_layers * max(1, model.num_key_value_heads // tp) * model.d_head * precision.kv_bytes) * tp
        )
    )


def kv_layer_bytes(model: ModelSpec, precision: Precision, tp: int = 1) -> int:
    """Bytes one token's KV takes in one layer over the ``tp`` GPUs.

    Multi-head latent attention caches one latent of ``kv_lora_rank + qk_rope_head_dim``
    values per token and layer, which every tensor-parallel GPU holds whole: vLLM's
    ``ModelConfig.get_num_kv_heads`` returns 1 under MLA and ``get_head_size``
    ``kv_lora_rank + qk_rope_head_dim`` (``vllm/config/model.py``), and the MLA backends'
    cache (``vllm/v1/attention/backends/mla/common.py``) has that one head on every rank. So
    the total grows with ``tp``.
    """
    if model.is_mla:
        return int(model.kv_latent_dim * precision.kv_bytes) * tp
    return int(2 * max(1, model.num_key_value_heads // tp) * model.d_head * precision.kv_bytes) * tp


def window_reserve_tokens(model: ModelSpec, block_size: int, max_num_seqs: int) -> int:
    """Most tokens the windowed layers' KV holds at once, over ``max_num_seqs`` sequences.

    vLLM's hybrid KV cache manager gives sliding-window layers their own block table and
    frees blocks that fall out of the window (``SlidingWindowManager.remove_skipped_blocks``
    in ``vllm/v1/core/single_type_kv_cache_manager.py``: blocks before
    ``(computed − window + 1) // block_size`` go back to the pool); chunked local attention
    (``ChunkedLocalAttentionManager``) frees the chunks before the current one. A sequence
    thus holds at most ``ceil(window / block_size) + 1`` blocks on those layers (never more
    than its context needs: ``max_model_len``). vLLM releases that disable the hybrid
    manager for chunked local attention unless ``VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE``
    is set (``VllmConfig.__post_init__`` in ``vllm/config/vllm.py``) keep every layer's KV in
    full; des follows the hybrid manager, the default of releases where the variable defaults
    to on, so for Llama 4 under an older release its KV capacity is optimistic.
    """
    w = model.window
    if w is None:
        return 0
    per_seq = min(-(-w // block_size) + 1, -(-model.max_model_len // block_size)) * block_size
    return per_seq * max_num_seqs


def rope_cache_bytes(model: ModelSpec) -> int:
    """Bytes of the rotary embedding's cos/sin cache: ``max_position × rotary_dim`` bf16 values
    (``head_dim``; ``qk_rope_head_dim`` under MLA), built once per model when the weights
    load (``RotaryEmbedding.cos_sin_cache``)."""
    rotary = model.qk_rope_head_dim if model.is_mla and model.qk_rope_head_dim else model.d_head
    return model.max_model_len * rotary * ACT_BYTES


def forward_activation_bytes(model: ModelSpec, num_tokens: int, tp: int = 1) -> int:
    """Peak bytes PyTorch allocates on one GPU during a forward pass of ``num_tokens`` tokens.

    Layers run one after another and free their intermediates, so the peak is one
    layer's widest point: the gated MLP holds the residual and the normed input
    (``2 h``), the gate/up product (``2 I / tp``) and the SiLU-and-mul output (``I / tp``)
    per token; attention holds the residual and normed input, the fused q/k/v projection
    and the attention output. The profile run skips the attention kernel itself (no KV
    cache yet), so it adds no workspace. bf16 values. A mixture of experts' layer counts
    ``I`` as the width a token runs (``num_experts_per_tok × moe_intermediate_size`` plus
    the shared experts'): the same three products per routed token; vLLM's fused-MoE
    workspace caches (``fused_moe.py``) are not modelled separately.
    """
    h, i = model.hidden_size, model.widest_mlp_per_token
    mlp = 2 * h + 3 * i // tp
    attention = 2 * h + (2 * model.q_dim + 2 * model.kv_dim) // tp
    return num_tokens * ACT_BYTES * max(mlp, attention)


def sampler_bytes(model: ModelSpec, num_rows: int, sm_count: int | None = None) -> int:
    """Bytes ``_dummy_sampler_run`` allocates for ``num_rows`` sequences (one GPU; the
    logits are all-gathered, so every tensor-parallel GPU holds them whole).

    bf16 logits from the LM head (padded vocabulary), their fp32 copy, the softmax
    probabilities and the exponential noise ``q`` (``rows × vocab`` fp32 each), plus the
    top-k/top-p buffer: the Triton kernel's ``min(next_pow2(min(SMs, rows)), SMs) × vocab``
    fp32 scratch (``sm_count`` None: one row per sequence), or PyTorch's sort (fp32
    values and int64 indices) below 8 rows.
    """
    v = model.vocab_size
    padded = -(-v // VOCAB_PADDING) * VOCAB_PADDING
    logits = num_rows * padded * ACT_BYTES + 3 * num_rows * v * LOGIT_BYTES
    if num_rows < TRITON_TOPK_MIN_ROWS:
        topk = num_rows * v * (LOGIT_BYTES + 8)
    else:
        sms = sm_count or num_rows
        programs = min(sms, num_rows)
        topk = min(1 << (programs - 1).bit_length(), sms) * v * LOGIT_BYTES
    return logits + topk


def profile_peak_bytes(
    model: ModelSpec, num_tokens: int, num_seqs: int, tp: int = 1, sm_count: int | None = None
) -> tuple[int, int]:
    """The profile run's two peaks on one GPU, in bytes: ``(forward, sampler)``.

    The forward runs ``num_tokens`` tokens; the sampler then runs on ``R = min(num_tokens,
    num_seqs)`` rows while the forward's output (``num_tokens × h``), the gathered last
    hidden states and their random stand-in (``R × h`` each) are still held.
    """
    rows = min(num_tokens, num_seqs)
    held = (num_tokens + 2 * rows) * model.hidden_size * ACT_BYTES
    return forward_activation_bytes(model, num_tokens, tp), held + sampler_bytes(model, rows, sm_count)


def capture_sizes(max_size: int) -> list[int]:
    """vLLM's CUDA-graph capture sizes up to ``max_size``: 1, 2, 4, multiples of 8 below 256,
    then multiples of 16 (``vllm/config/vllm.py: _set_cudagraph_sizes``)."""
    ladder = [1, 2, 4, *range(8, 256, 8), *range(256, max_size + 1, 16)]
    return [s for s in ladder if s <= max_size]


@dataclass(frozen=True, slots=True)
class GraphCapture:
    """The CUDA graphs vLLM captures, for the memory plan.

    ``max_size``: the largest captured step in tokens (0: ``enforce_eager``, no graphs);
    ``charged``: whether the graph pool comes out of the KV budget
    (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``; off in vLLM 0.19, on from 0.21).
    """

    max_size: int = DEFAULT_CAPTURE
    charged: bool = False


def graph_pool_bytes(
    model: ModelSpec, graphs: GraphCapture, max_num_batched_tokens: int, max_num_seqs: int, tp: int = 1
) -> int:
    """vLLM's estimate of its CUDA-graph pool on one GPU, in bytes (0 without graphs).

    ``profile_cudagraph_memory`` (vLLM 0.19) captures the largest size of each mode first
    (the pool then holds that step's activations) and charges each further graph what the
    second capture added, at least 1 MiB. Under the default ``FULL_AND_PIECEWISE`` mode
    every size is captured piecewise, and the sizes up to ``max_num_seqs`` once more as
    full graphs of decode steps. No size exceeds ``max_num_batched_tokens``.
    """
    sizes = capture_sizes(min(graphs.max_size, max_num_batched_tokens))
    if not sizes:
        return 0
    full = [s for s in sizes if s <= max_num_seqs]
    first = forward_activation_bytes(model, sizes[-1], tp)
    further = (len(sizes) - 1) + max(len(full) - 1, 0)
    return first + further * GRAPH_OVERHEAD_BYTES


@dataclass(frozen=True, slots=True)
class MemoryPlan:
    """Where the memory of one instance (``tp`` GPUs) goes. All sizes in bytes, summed over the GPUs.

    ``kv_bytes_per_token`` counts a token's KV on every GPU (replicated heads included), in
    the layers the blocks are counted for: all of them, or with windowed layers held apart
    (``window_kv_bytes`` > 0) the full-attention layers only.
    ``budget`` = ``weights`` + ``rope_cache`` + ``activations`` + ``runtime_reserve``
    (+ ``graph_pool`` when ``graph_pool_charged``) + the KV blocks + what is too small for a block.
    """

    tp: int
    budget: int
    weights: int
    rope_cache: int
    forward_peak: int  # the profile run's forward pass
    sampler_peak: int  # the profile run's sampler, with the forward's outputs still held
    runtime_reserve: int
    graph_pool: int
    graph_pool_charged: bool
    kv_bytes_per_token: int
    block_size: int
    num_blocks: int
    fitting_blocks: int  # the blocks the memory left holds (num_blocks differs when overridden)
    window_kv_bytes: int = 0  # set aside for the windowed layers' KV (with kv_bytes_per_token the full layers')
    pp: int = 1  # pipeline stages: the sizes are summed over their tp × pp GPUs
    stage_weights: tuple[int, ...] = ()  # weights of each stage's tp GPUs (pipeline parallelism)

    @property
    def activations(self) -> int:
        """The activation peak vLLM subtracts: the larger of the forward and sampler peaks."""
        return max(self.forward_peak, self.sampler_peak)

    @property
    def non_kv(self) -> int:
        """Everything the budget gives before the KV cache."""
        charged = self.graph_pool if self.graph_pool_charged else 0
        return self.weights + self.rope_cache + self.activations + self.runtime_reserve + charged

    @property
    def kv_bytes(self) -> int:
        return self.num_blocks * self.block_size * self.kv_bytes_per_token + self.window_kv_bytes

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size


def plan_memory(
    gpu: GPUSpec,
    model: ModelSpec,
    *,
    precision: Precision | None = None,
    gpu_memory_utilization: float = 0.9,
    block_size: int = 16,
    max_num_batched_tokens: int = 2048,
    max_num_seqs: int = 128,
    tp: int = 1,
    num_blocks_override: int | None = None,
    graphs: GraphCapture | None = None,
    extra_weights: int = 0,
    extra_kv_per_token: int = 0,
    expert_shards: int = 1,
    pp: int = 1,
) -> MemoryPlan:
    """KV-cache capacity of one instance of ``tp`` GPUs; raises if nothing is left for KV.

    ``num_blocks_override`` fixes the number of blocks (vLLM's ``num_gpu_blocks_override``)
    once the model is known to fit; ``fitting_blocks`` says how many the memory holds.
    ``graphs``: the CUDA graphs captured (default: vLLM 0.19's, pool not charged).
    ``extra_weights`` and ``extra_kv_per_token`` (bytes over the ``tp`` GPUs): a speculative
    proposer's resident weights and the KV it adds to every token
    (:meth:`des.engine.speculative.SpeculativeConfig.proposer`); vLLM allocates a draft
    model's or EAGLE head's KV layers in the same blocks as the target's, so a block's page
    grows by them and fewer blocks fit.
    ``expert_shards``: the data-parallel ranks a mixture of experts' routed experts are
    spread over (:func:`rank_weight_bytes`; 1: every rank holds them all).
    ``pp``: pipeline stages (:func:`_plan_stages`).
    """
    if pp > 1:
        return _plan_stages(
            gpu, model, precision or Precision(), gpu_memory_utilization, block_size, max_num_batched_tokens,
            max_num_seqs, tp, num_blocks_override, graphs or GraphCapture(), expert_shards, pp,
        )  # fmt: skip
    precision = precision or Precision()
    graphs = graphs or GraphCapture()
    budget = math.ceil(gpu.memory_bytes * gpu_memory_utilization) * tp
    weights = rank_weight_bytes(model, precision, expert_shards) + extra_weights
    rope = rope_cache_bytes(model) * tp
    forward, sampler = profile_peak_bytes(model, max_num_batched_tokens, max_num_seqs, tp, gpu.sm_count)
    reserve = gpu.runtime_reserve_bytes * tp
    pool = graph_pool_bytes(model, graphs, max_num_batched_tokens, max_num_seqs, tp) * tp
    kv_per_token = kv_bytes_per_token(model, precision, tp) + extra_kv_per_token
    acts = max(forward, sampler) * tp
    left = budget - weights - rope - acts - reserve - (pool if graphs.charged else 0)
    blocks = left // (kv_per_token * block_size) if left > 0 else 0
    window_bytes = 0
    win_b = kv_layer_bytes(model, precision, tp) * model.window_layers
    if win_b and model.full_layers and blocks >= 1:
        # windowed layers hold at most `held` tokens over max_num_seqs sequences; the full
        # layers take the rest, never fewer blocks than counting every layer in full
        full_b = kv_per_token - win_b
        held = window_reserve_tokens(model, block_size, max_num_seqs)
        apart = (left - win_b * held) // (full_b * block_size)
        if apart > blocks:
            blocks, kv_per_token = apart, full_b
            window_bytes = min(int(apart) * block_size, held) * win_b
    if blocks < 1:
        gib = 1 << 30
        graph_part = f" + CUDA graphs {pool / gib:.2f} GiB" if graphs.charged else ""
        raise ScenarioError(
            (
                "model",
                f"{model.name} does not fit on {tp} x {gpu.name}: weights {(weights + rope) / gib:.2f} GiB "
                f"+ activations {acts / gib:.2f} GiB + reserve {reserve / gib:.2f} GiB{graph_part} leave no "
                f"room for a KV block in the {budget / gib:.2f} GiB budget "
                f"(gpu_memory_utilization {gpu_memory_utilization})",
            )
        )
    fitting = int(blocks)
    if num_blocks_override is not None:
        blocks = num_blocks_override
    return MemoryPlan(
        tp, budget, weights, rope, forward * tp, sampler * tp, reserve, pool, graphs.charged,
        kv_per_token, block_size, int(blocks), fitting, window_bytes,
    )  # fmt: skip


def one_sequence_bytes(
    length: int, block_size: int, full_bytes: int, window_bytes: int, window: int | None, chunked: bool, step: int
) -> int:
    """Bytes of KV one sequence of ``length`` tokens may hold at once, as vLLM counts them
    when it checks that one sequence of ``max_model_len`` fits (``max_memory_usage_bytes`` of
    each layer's spec, ``vllm/v1/kv_cache_interface.py``): full-attention layers
    (``full_bytes`` a token) ``ceil(length / block_size)`` blocks; sliding-window layers
    (``window_bytes`` a token) ``ceil(min(window - 1 + step, length) / block_size) + 1`` blocks
    (the window plus a step of ``step`` tokens, ``max_num_batched_tokens``, not aligned to a
    block); chunked local attention ``ceil(min(window + step, length) / block_size)``."""
    blocks = -(-length // block_size)
    total = blocks * block_size * full_bytes
    if window_bytes and window is not None:
        held = min(window + step if chunked else window - 1 + step, length)
        total += (-(-held // block_size) + (0 if chunked else 1)) * block_size * window_bytes
    return total


def longest_sequence(plan: MemoryPlan, model: ModelSpec, precision: Precision, step: int, limit: int) -> int:
    """The longest ``max_model_len`` (tokens, at most ``limit``) one sequence of which the
    memory ``plan`` leaves for KV holds: vLLM's ``estimate_max_model_len`` (a binary search
    over :func:`one_sequence_bytes`, ``vllm/v1/core/kv_cache_utils.py``), which it names when
    it refuses to start because one ``max_model_len`` sequence does not fit (``step``: the
    engine's ``max_num_batched_tokens``). Over pipeline stages, the tightest stage's blocks."""
    bs = plan.block_size
    if plan.pp > 1 or model.window is None:
        return min(limit, plan.fitting_blocks * bs)  # every layer full: blocks of the tightest worker
    available = plan.budget - plan.non_kv
    window_bytes = kv_layer_bytes(model, precision, plan.tp) * model.window_layers
    full_bytes = plan.kv_bytes_per_token if plan.window_kv_bytes else plan.kv_bytes_per_token - window_bytes
    chunked = model.attention_chunk_size is not None

    def fits(length: int) -> bool:
        return one_sequence_bytes(length, bs, full_bytes, window_bytes, model.window, chunked, step) <= available

    if not fits(1):
        return 0
    lo, hi = 1, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def _plan_stages(
    gpu: GPUSpec,
    model: ModelSpec,
    precision: Precision,
    utilization: float,
    block_size: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    tp: int,
    num_blocks_override: int | None,
    graphs: GraphCapture,
    expert_shards: int,
    pp: int,
) -> MemoryPlan:
    """The KV cache of an engine split in ``pp`` pipeline stages of ``tp`` GPUs each.

    Stage ``s`` holds its layers' share (:func:`pp_layers`) of the layers' weights and KV;
    the first also the embedding, the last the final norm and the LM head (a tied LM head is
    loaded there as a copy of the embedding). Every stage runs the forward over the profile's
    tokens; only the last samples. vLLM sizes one KV cache for every worker from the smallest
    memory any reports (``vllm/v1/engine/core.py: _initialize_kv_caches`` takes the minimum
    of the workers' available memory), so the engine holds as many blocks as its tightest
    stage. Sizes in the plan are summed over all ``tp × pp`` GPUs.
    """
    layers = pp_layers(model.num_layers, pp)
    whole = rank_weight_bytes(model, precision, expert_shards)
    embed = model.embedding_params * ACT_BYTES
    head = model.lm_head_params * ACT_BYTES
    head_in_whole = 0 if model.tie_word_embeddings else head
    body = whole - embed - head_in_whole - model.hidden_size * ACT_BYTES
    per_gpu_budget = math.ceil(gpu.memory_bytes * utilization)
    budget = per_gpu_budget * tp
    rope = rope_cache_bytes(model) * tp
    forward, sampler = profile_peak_bytes(model, max_num_batched_tokens, max_num_seqs, tp, gpu.sm_count)
    reserve = gpu.runtime_reserve_bytes * tp
    pool = graph_pool_bytes(model, graphs, max_num_batched_tokens, max_num_seqs, tp) * tp
    kv_layer = kv_bytes_per_token(model, precision, tp) // model.num_layers  # one layer, the stage's GPUs
    stage_weights, fitting = [], []
    for s, n in enumerate(layers):
        weights = body * n // model.num_layers + (embed if s == 0 else 0)
        if s == pp - 1:
            weights += head + model.hidden_size * ACT_BYTES
        acts = (max(forward, sampler) if s == pp - 1 else forward) * tp
        left = budget - weights - rope - acts - reserve - (pool if graphs.charged else 0)
        stage_weights.append(weights)
        fitting.append(left // (kv_layer * n * block_size) if left > 0 else 0)
    blocks = min(fitting)
    if blocks < 1:
        gib = 1 << 30
        worst = fitting.index(blocks)
        raise ScenarioError(
            (
                "model",
                f"{model.name} does not fit on {pp} stages of {tp} x {gpu.name}: stage {worst} holds weights "
                f"{stage_weights[worst] / gib:.2f} GiB and leaves no room for a KV block in its "
                f"{budget / gib:.2f} GiB budget (gpu_memory_utilization {utilization})",
            )
        )
    return MemoryPlan(
        tp, budget * pp, sum(stage_weights), rope * pp, forward * tp * pp, sampler * tp, reserve * pp, pool * pp,
        graphs.charged, kv_layer * model.num_layers, block_size,
        int(num_blocks_override if num_blocks_override is not None else blocks), int(blocks),
        pp=pp, stage_weights=tuple(stage_weights),
    )  # fmt: skip


__all__ = [
    "pp_layers",
    "GraphCapture",
    "MemoryPlan",
    "plan_memory",
    "weight_bytes",
    "expert_bytes",
    "rank_weight_bytes",
    "rope_cache_bytes",
    "kv_bytes_per_token",
    "kv_layer_bytes",
    "window_reserve_tokens",
    "quantized_params",
    "with_native",
    "forward_activation_bytes",
    "sampler_bytes",
    "profile_peak_bytes",
    "graph_pool_bytes",
    "capture_sizes",
    "one_sequence_bytes",
    "longest_sequence",
]
