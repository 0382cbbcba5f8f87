"""GPU and model specifications as validated data.

A :class:`GPUSpec` holds spec-sheet numbers (bytes, bytes/s, FLOP/s, clocks), its
interconnect (:mod:`des.catalog.interconnect`) and the efficiency factors of the roofline
cost model (:mod:`des.catalog.efficiency`), given inline or read from a ``des calibrate``
file; a :class:`ModelSpec` holds a
decoder-only transformer's architecture, from which the parameter count and the
per-token sizes are derived.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PositiveFloat, PositiveInt, ValidationInfo, field_validator, model_validator

from des.catalog.efficiency import Efficiency
from des.catalog.interconnect import InterconnectSpec
from des.catalog.precision import Precision
from des.catalog.routing import Routing, Zipf, routing
from des.config import Strict, resolve_path

Dtype = Literal["bf16", "fp16", "fp8", "int8", "fp4"]
#: Low-precision tensor-core paths a GPU may have (:mod:`des.catalog.quantization`).
TensorCorePath = Literal["fp8", "fp4"]


#: Where a prompt's KV crosses between a prefill and a decode GPU: a scale-up fabric within
#: a node (NVLink, AMD's Infinity Fabric ``xgmi``), PCIe peer-to-peer, PCIe staged through
#: host memory (GeForce: no peer-to-peer), or RDMA between nodes (:mod:`des.catalog.kv_link`).
KVPath = Literal["nvlink", "xgmi", "pcie", "host", "rdma"]


class KVLinkSpec(Strict):
    """How fast a prompt's KV cache moves from one GPU to another (disaggregated serving),
    per pair of GPUs (a tensor-parallel rank sends its shard over its own): ``bandwidth``
    in bytes/s as a KV connector moves paged blocks, ``latency`` in seconds per transfer,
    over ``path``; ``ceiling``: the raw copy rate of the path (bytes/s), which block-wise
    transfers do not reach, for sensitivity (None: not stated)."""

    path: KVPath
    bandwidth: PositiveFloat
    latency: float = Field(ge=0)
    ceiling: PositiveFloat | None = None
    source: str = ""


#: GPU architectures the catalog knows; each fitted one has a kernel profile behind its factors
#: (``des/catalog/data/gpus.yaml``), the others take factors transferred from those.
Architecture = Literal["ada", "ampere", "hopper", "blackwell", "cdna3", "other"]


#: A price's month: ``YYYY-MM``.
PRICE_DATE = r"^(19|20)[0-9]{2}-(0[1-9]|1[0-2])$"


class PriceSpec(Strict):
    """What renting one GPU costs: ``usd_per_gpu_hour`` (US dollars per GPU-hour, on-demand
    list price), ``source`` (provider and instance, and how the per-GPU figure was derived,
    e.g. an 8-GPU instance's price ÷ 8) and ``date`` (``YYYY-MM``: list prices move)."""

    usd_per_gpu_hour: float = Field(ge=0)
    source: str = Field(min_length=1)
    date: str = Field(pattern=PRICE_DATE)


class ClockSpec(Strict):
    """Clocks of the tensor cores' domain, MHz.

    ``boost_mhz`` is the spec sheet's boost clock: the clock its ``flops`` are stated at
    (SMs × FLOP per clock × boost). ``sustained_mhz`` is the clock the card holds under a
    sustained tensor load, where measured (``source`` says where); the roofline's compute
    peak is ``flops × sustained_mhz / boost_mhz``, so a card that boosts past its spec
    sheet (GPU Boost under a light power load) or throttles under a power cap does so in
    its spec, and its efficiency factors stay the kernels' share of that peak (≤ 1).
    Without a measurement the sustained clock is the boost clock. ``base_mhz``: the
    guaranteed base clock (None where not published).
    """

    base_mhz: PositiveFloat | None = None
    boost_mhz: PositiveFloat
    sustained_mhz: PositiveFloat | None = None
    source: str = ""

    @model_validator(mode="after")
    def _ordered(self) -> ClockSpec:
        if self.base_mhz is not None and self.base_mhz > self.boost_mhz:
            raise ValueError(f"base_mhz: {self.base_mhz:g} is above boost_mhz {self.boost_mhz:g}")
        return self

    @property
    def sustained_ratio(self) -> float:
        """Sustained clock over boost clock: what the spec sheet's FLOP/s are scaled by."""
        return (self.sustained_mhz or self.boost_mhz) / self.boost_mhz


class GPUSpec(Strict):
    """One accelerator. Units: bytes, bytes/s, FLOP/s; clocks in MHz.

    ``architecture`` and ``memory_type`` (``hbm`` or ``gddr``) say which fitted efficiency
    factors the GPU carries, or from which profiled GPUs its factors are transferred
    (:mod:`des.tools.architectures`); ``clocks`` scale the spec sheet's FLOP/s to the
    clock held under load (:meth:`sustained_flops`). ``interconnect``: how a
    tensor-parallel group of it all-reduces (:mod:`des.catalog.interconnect`; read it
    through :attr:`link`, which applies the older two-number shorthand).
    ``runtime_reserve_bytes``: memory the serving engine's runtime takes outside
    PyTorch's allocator while it starts (vLLM's "non-torch memory";
    :mod:`des.catalog.memory`). ``sm_count``: streaming multiprocessors (compute units on
    AMD), which size vLLM's sampler scratch buffer. ``tensor_cores``: the low-precision
    tensor-core paths it has (``fp8``, ``fp4``), each with its ``flops``; None: those ``flops``
    lists (:attr:`tensor_core_paths`, :mod:`des.catalog.quantization`).
    ``board_power_w``: the spec sheet's board power (TDP / TBP, watts; ``power_source`` says
    where it is stated), for energy (:mod:`des.catalog.prices`). ``price``: a cloud on-demand
    list price per GPU-hour with its source and date (:class:`PriceSpec`; None: no price,
    e.g. an inline custom GPU, or a part no cloud rents by the hour).
    """

    name: str = "custom"
    description: str = ""
    architecture: Architecture = "other"
    memory_type: Literal["hbm", "gddr"] | None = None
    clocks: ClockSpec | None = None
    memory_bytes: PositiveInt
    memory_bandwidth: PositiveFloat
    flops: dict[Dtype, PositiveFloat]
    tensor_cores: list[TensorCorePath] | None = None
    interconnect: InterconnectSpec | None = None
    interconnect_bandwidth: PositiveFloat | None = None
    interconnect_latency: float | None = Field(None, ge=0, le=1.0)
    l2_bytes: int = Field(0, ge=0)
    runtime_reserve_bytes: int = Field(1 << 30, ge=0)
    sm_count: PositiveInt | None = None
    kv_link: KVLinkSpec | None = None
    board_power_w: PositiveFloat | None = None
    power_source: str = ""
    price: PriceSpec | None = None
    source: str = ""
    efficiency: Efficiency
    calibration: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _calibration_file(cls, data: Any, info: ValidationInfo) -> Any:
        """``calibration: path`` takes the efficiency factors from a ``des calibrate`` file
        (relative paths against the scenario's folder); ``efficiency`` keys given
        alongside override the file's."""
        if not isinstance(data, dict) or data.get("calibration") is None:
            return data
        from des.catalog.calibration import read_calibration

        raw = data["calibration"]
        if not isinstance(raw, str | Path):
            raise ValueError(f"calibration: must be the path of a calibration file (got {raw!r})")
        try:
            path = resolve_path(Path(raw), info)
        except ValueError as exc:
            raise ValueError(f"calibration: {exc}") from None
        fitted = read_calibration(path).efficiency.model_dump()
        inline = data.get("efficiency") or {}
        if not isinstance(inline, dict):
            return data
        return {**data, "calibration": str(path), "efficiency": {**fitted, **inline}}

    @model_validator(mode="after")
    def _needs_bf16(self) -> GPUSpec:
        if "bf16" not in self.flops:
            raise ValueError("flops: needs a 'bf16' entry (FLOP/s)")
        return self

    @model_validator(mode="after")
    def _paths_have_flops(self) -> GPUSpec:
        for path in self.tensor_cores or []:
            if path not in self.flops:
                raise ValueError(f"tensor_cores: {path!r} needs a flops.{path} entry (FLOP/s)")
        return self

    @property
    def tensor_core_paths(self) -> frozenset[str]:
        """Low-precision tensor-core paths (``fp8``, ``fp4``) the matrix products can take."""
        if self.tensor_cores is not None:
            return frozenset(self.tensor_cores)
        return frozenset(p for p in ("fp8", "fp4") if p in self.flops)

    @property
    def link(self) -> InterconnectSpec:
        """The interconnect in effect for tensor parallelism (:mod:`des.catalog.interconnect`).

        ``interconnect_bandwidth`` (bus bytes/s) and ``interconnect_latency`` (seconds per
        call), the older two-number shorthand, replace ``interconnect`` when given: NCCL at
        that cost for every TP degree (a missing one of the two is taken from
        ``interconnect``'s NCCL cost at its smallest TP degree, else the default). Without
        either, a GPU given with no ``interconnect`` gets the shorthand's defaults (25 GB/s,
        20 us: PCIe through host memory).
        """
        bw, lat = self.interconnect_bandwidth, self.interconnect_latency
        if bw is None and lat is None:
            return self.interconnect or InterconnectSpec.legacy()
        base = InterconnectSpec.legacy() if self.interconnect is None else self.interconnect
        first = base.nccl_cost(min(base.nccl))
        return InterconnectSpec.legacy(first.bus_bandwidth if bw is None else bw, first.latency if lat is None else lat)

    def peak_flops(self, dtype: str) -> float:
        """Dense tensor FLOP/s for ``dtype`` from the spec sheet (at its boost clock),
        falling back to bf16 when not listed."""
        return self.flops.get(dtype, self.flops["bf16"])  # type: ignore[call-overload]

    def sustained_flops(self, dtype: str) -> float:
        """Dense tensor FLOP/s for ``dtype`` at the clock held under load:
        :meth:`peak_flops` × sustained / boost clock (:class:`ClockSpec`); the roofline's peak."""
        ratio = self.clocks.sustained_ratio if self.clocks is not None else 1.0
        return self.peak_flops(dtype) * ratio


class Variant(Strict):
    """A checkpoint people download for a catalog model: its Hugging Face ``repo`` and the
    ``precision`` it runs at (``weights``, optionally ``kv_cache_dtype``); ``source``: where
    it is published. A scenario runs it as the catalog name with that ``precision``."""

    repo: str
    precision: dict[str, str]
    source: str = ""


class ModelSpec(Strict):
    """A decoder-only transformer with grouped-query attention and a gated MLP (or, with
    ``gated_mlp: false``, an ungated one: up, activation, down).

    Mixture of experts (``num_experts`` set): the MLP of each sparse layer is a router
    (``hidden × num_experts`` weights) and ``num_experts`` expert MLPs of width
    ``moe_intermediate_size``, of which each token runs ``num_experts_per_tok``, plus
    ``num_shared_experts`` experts every token runs (width ``shared_expert_intermediate_size``
    each, default the experts' width). Layer ``i`` (from 0) is sparse when
    ``i >= first_k_dense`` and ``(i + 1) % decoder_sparse_step == 0`` (Qwen-MoE's
    ``decoder_sparse_step``, DeepSeek's ``first_k_dense_replace``); the other layers keep
    a dense MLP of width ``intermediate_size``. Parameter counts: :attr:`num_params` holds
    every expert, :attr:`active_params` those one token runs. ``expert_bias``: the experts'
    and router's projections carry biases (gpt-oss). ``routing``: how tokens spread over the
    experts, for the distinct experts a step reads (:mod:`des.catalog.routing`).

    Attention variants (:attr:`attention_kind`):

    - **MLA** (``kv_lora_rank`` set; DeepSeek-V2/V3): queries through a ``q_lora_rank``
      low-rank pair (or one ``hidden × heads·(nope + rope)`` matrix without it), keys and values
      from a ``kv_lora_rank`` latent plus a ``qk_rope_head_dim`` rotary key shared by the heads;
      the cache holds that latent, ``kv_lora_rank + qk_rope_head_dim`` values per token and
      layer, whatever the heads (``num_key_value_heads`` is then the config's, unused).
    - **Windowed layers**: ``sliding_window`` (gpt-oss, Mistral, Gemma) or
      ``attention_chunk_size`` (Llama 4's chunked local attention) on ``num_window_layers`` of
      the layers (default all); the others attend over the whole context.
    - **GQA / MQA**: ``num_key_value_heads`` below the query heads (1: multi-query).

    ``attention_sinks``: one learned logit per head and layer (gpt-oss); ``o_proj_bias``: the
    output projection has a bias too (gpt-oss; Qwen2's ``attention_bias`` covers q, k, v only).
    ``vision_params``: a vision encoder and projector vLLM loads with the model (resident in
    bf16, never run for text): the published total counts them. ``num_nextn_predict_layers``:
    multi-token-prediction layers the checkpoint ships (DeepSeek-V3), loaded only for MTP
    speculative decoding (its ``mtp`` proposer) and not counted in :attr:`num_params`
    (:attr:`mtp_params`).
    ``default_precision``: the checkpoint's own weight format, which a scenario naming the
    model without ``precision.weights`` runs (a :class:`~des.catalog.precision.Precision`); ``variants``: the
    quantised repositories people download, each with its precision.
    ``published_active_counts_embedding``: whether the card's active count includes the
    embedding lookup (DeepSeek's and OpenAI's count the LM head only).
    """

    name: str = "custom"
    description: str = ""
    num_layers: PositiveInt
    hidden_size: PositiveInt
    intermediate_size: PositiveInt
    num_attention_heads: PositiveInt
    num_key_value_heads: PositiveInt
    head_dim: PositiveInt | None = None
    vocab_size: PositiveInt
    gated_mlp: bool = True
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    max_model_len: PositiveInt = 4096
    num_experts: PositiveInt | None = None
    num_experts_per_tok: PositiveInt | None = None
    moe_intermediate_size: PositiveInt | None = None
    num_shared_experts: int = Field(0, ge=0)
    shared_expert_intermediate_size: PositiveInt | None = None
    first_k_dense: int = Field(0, ge=0)
    decoder_sparse_step: PositiveInt = 1
    expert_bias: bool = False
    routing: Routing = "uniform"
    # attention variants
    kv_lora_rank: PositiveInt | None = None
    q_lora_rank: PositiveInt | None = None
    qk_rope_head_dim: PositiveInt | None = None
    qk_nope_head_dim: PositiveInt | None = None
    v_head_dim: PositiveInt | None = None
    sliding_window: PositiveInt | None = None
    attention_chunk_size: PositiveInt | None = None
    num_window_layers: PositiveInt | None = None
    attention_sinks: bool = False
    o_proj_bias: bool = False
    vision_params: int = Field(0, ge=0)
    num_nextn_predict_layers: int = Field(0, ge=0)
    default_precision: dict[str, str] | None = None
    variants: list[Variant] = []
    published_params: PositiveFloat | None = None
    published_active_params: PositiveFloat | None = None
    published_active_counts_embedding: bool = True
    source: str = ""

    model_config = Strict.model_config | {"ignored_types": (cached_property,)}

    @model_validator(mode="after")
    def _check_attention(self) -> ModelSpec:
        mla = (self.kv_lora_rank, self.qk_rope_head_dim, self.qk_nope_head_dim, self.v_head_dim)
        if any(v is not None for v in mla) and any(v is None for v in mla):
            raise ValueError(
                "kv_lora_rank: multi-head latent attention needs kv_lora_rank, qk_rope_head_dim, "
                "qk_nope_head_dim and v_head_dim"
            )
        if self.q_lora_rank is not None and self.kv_lora_rank is None:
            raise ValueError("q_lora_rank: needs kv_lora_rank (multi-head latent attention)")
        if self.sliding_window is not None and self.attention_chunk_size is not None:
            raise ValueError("attention_chunk_size: give either sliding_window or attention_chunk_size, not both")
        if self.num_window_layers is not None:
            if self.window is None:
                raise ValueError("num_window_layers: needs sliding_window or attention_chunk_size")
            if self.num_window_layers > self.num_layers:
                raise ValueError(
                    f"num_window_layers: {self.num_window_layers} is more than num_layers {self.num_layers}"
                )
        if self.default_precision is not None:
            Precision.model_validate(self.default_precision)
        return self

    @model_validator(mode="after")
    def _check_heads(self) -> ModelSpec:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_key_value_heads: {self.num_key_value_heads} does not divide "
                f"num_attention_heads {self.num_attention_heads}"
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise ValueError("head_dim: required when hidden_size is not a multiple of num_attention_heads")
        moe = (self.num_experts, self.num_experts_per_tok, self.moe_intermediate_size)
        if any(v is not None for v in moe) and any(v is None for v in moe):
            raise ValueError(
                "num_experts: a mixture of experts needs num_experts, num_experts_per_tok and moe_intermediate_size"
            )
        if self.num_experts is not None and self.num_experts_per_tok is not None:
            if self.num_experts_per_tok > self.num_experts:
                raise ValueError(
                    f"num_experts_per_tok: {self.num_experts_per_tok} is more than num_experts {self.num_experts}"
                )
            if self.num_moe_layers == 0:
                raise ValueError("first_k_dense: leaves no sparse layer (use a dense model)")
        elif self.num_shared_experts:
            raise ValueError("num_shared_experts: needs num_experts (a mixture of experts)")
        elif isinstance(self.routing, Zipf):
            raise ValueError(
                f"routing: {self.name} is dense (no num_experts): it has no experts to route tokens to; remove routing"
            )
        return self

    @field_validator("routing", mode="before")
    @classmethod
    def _one_routing(cls, v: Any) -> Any:
        return routing(v)

    @property
    def is_moe(self) -> bool:
        """Whether the model is a mixture of experts."""
        return self.num_experts is not None

    @property
    def num_moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (0 for a dense model)."""
        if self.num_experts is None:
            return 0
        step = self.decoder_sparse_step
        return sum(1 for i in range(self.first_k_dense, self.num_layers) if (i + 1) % step == 0)

    @property
    def num_dense_layers(self) -> int:
        """Layers with a dense MLP of width ``intermediate_size``."""
        return self.num_layers - self.num_moe_layers

    @property
    def attention_kind(self) -> Literal["mla", "mha"]:
        """``mla`` (a compressed latent KV) or ``mha`` (per-head keys and values: MHA, GQA, MQA)."""
        return "mla" if self.kv_lora_rank is not None else "mha"

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def window(self) -> int | None:
        """Tokens a windowed layer attends over (``sliding_window`` or ``attention_chunk_size``), or None."""
        return self.sliding_window if self.sliding_window is not None else self.attention_chunk_size

    @property
    def window_layers(self) -> int:
        """Layers whose attention is windowed (0 without a window)."""
        if self.window is None:
            return 0
        return self.num_window_layers if self.num_window_layers is not None else self.num_layers

    @property
    def full_layers(self) -> int:
        """Layers that attend over the whole context."""
        return self.num_layers - self.window_layers

    @property
    def qk_head_dim(self) -> int:
        """Dimension of a query (and key) head: ``nope + rope`` under MLA, else :attr:`d_head`."""
        if self.is_mla:
            return (self.qk_nope_head_dim or 0) + (self.qk_rope_head_dim or 0)
        return self.d_head

    @property
    def kv_latent_dim(self) -> int:
        """Values one token's KV holds per layer under MLA: ``kv_lora_rank + qk_rope_head_dim``."""
        return (self.kv_lora_rank or 0) + (self.qk_rope_head_dim or 0)

    @property
    def mla_pair_flops(self) -> tuple[float, float]:
        """FLOPs per query-key pair of one MLA layer, all heads: ``(prefill, decode)``.

        vLLM's MLA (``vllm/v1/attention/backends/mla/common.py``) runs prefill as ordinary
        attention over keys and values up-projected from the latent (``kv_b_proj``): scores
        over ``qk_nope + qk_rope`` dimensions and the weighted sum over ``v_head_dim``,
        ``2 · heads · (nope + rope + v_head)``. Decode absorbs ``W_UK`` into the query and
        ``W_UV`` into the output, so each head scores the latent (``kv_lora_rank + rope``
        dimensions) and sums the latent (``kv_lora_rank``): ``2 · heads · (2 · kv_lora_rank +
        rope)``. The up-projection of a prefill's cached context (a chunk after the first) is
        not counted.
        """
        heads = self.num_attention_heads
        nope, rope, v = self.qk_nope_head_dim or 0, self.qk_rope_head_dim or 0, self.v_head_dim or 0
        lora = self.kv_lora_rank or 0
        return 2.0 * heads * (nope + rope + v), 2.0 * heads * (2 * lora + rope)

    @property
    def attention_linear_params(self) -> int:
        """Weights of one layer's attention projections (q, k, v, o).

        MLA (DeepSeek-V3's ``DeepseekV3Attention``): ``q_a_proj`` (``h × q_lora``) and
        ``q_b_proj`` (``q_lora × heads·(nope + rope)``), or ``q_proj`` without a ``q_lora_rank``;
        ``kv_a_proj_with_mqa`` (``h × (kv_lora + rope)``), ``kv_b_proj``
        (``kv_lora × heads·(nope + v_head)``) and ``o_proj`` (``heads·v_head × h``).
        """
        h = self.hidden_size
        if self.is_mla:
            heads = self.num_attention_heads
            q_out = heads * self.qk_head_dim
            q = h * self.q_lora_rank + self.q_lora_rank * q_out if self.q_lora_rank else h * q_out
            kv_lora = self.kv_lora_rank or 0
            kv = h * self.kv_latent_dim + kv_lora * heads * ((self.qk_nope_head_dim or 0) + (self.v_head_dim or 0))
            return q + kv + heads * (self.v_head_dim or 0) * h
        return h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h

    @property
    def expert_params(self) -> int:
        """Weights of one routed expert's MLP (0 for a dense model)."""
        return self.mlp_matrices * self.hidden_size * (self.moe_intermediate_size or 0)

    @property
    def shared_expert_width(self) -> int:
        """MLP width of the shared experts of one sparse layer, all together."""
        return self.num_shared_experts * (self.shared_expert_intermediate_size or self.moe_intermediate_size or 0)

    @property
    def moe_layer_fixed_params(self) -> int:
        """Weights every token of a sparse layer reads besides its routed experts: the
        router (``hidden × num_experts``) and the shared experts."""
        h = self.hidden_size
        return h * (self.num_experts or 0) + self.mlp_matrices * h * self.shared_expert_width

    @property
    def always_linear_params(self) -> int:
        """Matrix weights every step reads whatever the routing: attention of every layer,
        the dense layers' MLPs, and the sparse layers' routers and shared experts."""
        dense_mlp = self.mlp_matrices * self.hidden_size * self.intermediate_size
        return (
            self.num_layers * self.attention_linear_params
            + self.num_dense_layers * dense_mlp
            + self.num_moe_layers * self.moe_layer_fixed_params
        )

    @property
    def linear_params(self) -> int:
        """Weights of all layers' matrix products, every expert included, biases excluded."""
        return self.always_linear_params + self.num_moe_layers * (self.num_experts or 0) * self.expert_params

    @property
    def active_linear_params(self) -> int:
        """Matrix weights one token runs: :attr:`linear_params` with ``num_experts_per_tok``
        routed experts per sparse layer (all of them for a dense model)."""
        return self.always_linear_params + self.num_moe_layers * (self.num_experts_per_tok or 0) * self.expert_params

    @property
    def mlp_width_per_token(self) -> float:
        """MLP width one token runs, averaged over the layers (``intermediate_size`` for a
        dense model; ``k × moe_intermediate_size`` plus the shared experts' in a sparse layer)."""
        if not self.is_moe:
            return self.intermediate_size
        sparse = (self.num_experts_per_tok or 0) * (self.moe_intermediate_size or 0) + self.shared_expert_width
        return (self.num_dense_layers * self.intermediate_size + self.num_moe_layers * sparse) / self.num_layers

    @property
    def widest_mlp_per_token(self) -> int:
        """The widest MLP a token runs in any one layer (the activation peak's width)."""
        sparse = (self.num_experts_per_tok or 0) * (self.moe_intermediate_size or 0) + self.shared_expert_width
        return max(self.intermediate_size if self.num_dense_layers else 0, sparse)

    @property
    def d_head(self) -> int:
        """Dimension of one attention head."""
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def q_dim(self) -> int:
        """Width of the queries (all heads): ``heads × (nope + rope)`` under MLA."""
        return self.num_attention_heads * self.qk_head_dim

    @property
    def kv_dim(self) -> int:
        """Width of one token's keys (or values) per layer: the KV heads' (the latent under MLA)."""
        if self.is_mla:
            return self.kv_latent_dim
        return self.num_key_value_heads * self.d_head

    @property
    def layer_linear_params(self) -> int:
        """Weights of one dense layer's matrix products (q, k, v, o, gate, up, down), biases
        excluded; an ungated MLP (``gated_mlp: false``, GELU as in phi-2) has no gate."""
        return self.attention_linear_params + self.mlp_matrices * self.hidden_size * self.intermediate_size

    @property
    def mlp_matrices(self) -> int:
        """Matrices of the MLP: gate, up and down (3), or up and down (2) when ungated."""
        return 3 if self.gated_mlp else 2

    @property
    def layer_params(self) -> int:
        """All parameters of one dense layer: matrices, attention biases and the two RMSNorms."""
        return self.layer_linear_params + self.layer_small_params

    @property
    def layer_small_params(self) -> int:
        """Parameters of one layer outside its matrices: attention biases, sinks, the two
        RMSNorms and MLA's latent RMSNorms (``q_a_layernorm``, ``kv_a_layernorm``); a sparse
        layer's router and expert biases are :attr:`expert_bias_params`."""
        bias = (self.q_dim + 2 * self.kv_dim) if self.attention_bias else 0
        if self.o_proj_bias:
            bias += self.hidden_size
        if self.attention_sinks:
            bias += self.num_attention_heads
        if self.is_mla:
            bias += (self.q_lora_rank or 0) + (self.kv_lora_rank or 0)
        return bias + 2 * self.hidden_size

    @property
    def expert_bias_params(self) -> int:
        """Biases of one sparse layer's router and experts (``expert_bias``, gpt-oss): the
        router's (``E``) and each expert's gate/up (``2 I``, ``I`` ungated) and down (``h``)."""
        if not self.expert_bias or not self.num_moe_layers:
            return 0
        e, i = self.num_experts or 0, self.moe_intermediate_size or 0
        return e + e * ((self.mlp_matrices - 1) * i + self.hidden_size)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        """LM-head weights; shared with the embedding when tied (counted once in ``num_params``)."""
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        """Total parameter count: embedding, layers, final norm and an untied LM head."""
        head = 0 if self.tie_word_embeddings else self.lm_head_params
        layers = self.linear_params + self.num_layers * self.layer_small_params
        layers += self.num_moe_layers * self.expert_bias_params
        return self.embedding_params + layers + self.hidden_size + head + self.vision_params

    @property
    def mtp_params(self) -> int:
        """Parameters of the multi-token-prediction layers (DeepSeek-V3's MTP module): each a
        decoder layer like the last one plus ``eh_proj`` (``2h × h``) and three RMSNorms
        (``enorm``, ``hnorm``, its head's norm); embedding and head are shared. Not in :attr:`num_params`."""
        if not self.num_nextn_predict_layers:
            return 0
        h = self.hidden_size
        # the MTP layer is layer number num_layers (from 0): sparse by the same rule
        sparse = self.is_moe and (self.num_layers + 1) % self.decoder_sparse_step == 0
        if sparse:
            mlp = self.moe_layer_fixed_params + (self.num_experts or 0) * self.expert_params + self.expert_bias_params
        else:
            mlp = self.mlp_matrices * h * self.intermediate_size
        layer = self.attention_linear_params + mlp + self.layer_small_params
        return self.num_nextn_predict_layers * (layer + 2 * h * h + 3 * h)

    @property
    def published_active_counted(self) -> int:
        """:attr:`active_params` as the model card counts them (without the embedding lookup
        where ``published_active_counts_embedding`` is false)."""
        return self.active_params - (0 if self.published_active_counts_embedding else self.embedding_params)

    @property
    def active_params(self) -> int:
        """Parameters one token runs through: :attr:`num_params` less the routed experts it
        skips and a vision encoder (equal to :attr:`num_params` for a dense text model)."""
        return self.num_params - self.vision_params - (self.linear_params - self.active_linear_params)

    @property
    def kv_values_per_layer(self) -> int:
        """Values one token's cache holds in one layer: K and V of the KV heads, or the MLA
        latent (``kv_lora_rank + qk_rope_head_dim``, keys and values together)."""
        return self.kv_latent_dim if self.is_mla else 2 * self.kv_dim

    def kv_bytes_per_token(self, kv_dtype_bytes: float = 2) -> int:
        """Bytes of K and V cache one token occupies across all layers (one copy)."""
        return int(self.num_layers * self.kv_values_per_layer * kv_dtype_bytes)
