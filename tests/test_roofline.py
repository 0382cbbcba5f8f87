"""The roofline step-time model and the catalog: physics (bounds, monotonicity, the soft knee,
CUDA-graph padding, async CPU overlap, tensor parallelism), the single-factor model it
extends, memory arithmetic, and errors for bad catalog input. The fit to measured kernels
is tested in tests/test_calibrate.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import des
from des import catalog
from des.catalog.efficiency import Efficiency
from des.catalog.memory import plan_memory, weight_bytes
from des.catalog.precision import Precision
from des.catalog.quantization import WEIGHT_ONLY_COMPUTE, weight_only
from des.catalog.specs import GPUSpec
from des.cost.base import BatchShape, CostContext
from des.cost.roofline import Engine, activation_bytes, build_roofline, graph_size
from des.errors import ScenarioError
from des.tools.costmodel import decode_shape, prefill_shape
from tests.helpers import des_cli

GPUS = catalog.gpu_names()
MODELS = catalog.model_names()
#: The dense models: the pre-MoE formulas below (the old model) know nothing of experts.
DENSE = [name for name in MODELS if not catalog.model(name).is_moe]
#: The models :func:`work` counts: per-head attention and every layer of one kind (latent
#: attention, shared experts and dense first layers are counted in tests/test_attention_variants.py).
COUNTED = [
    name
    for name in MODELS
    if not (catalog.model(name).is_mla or catalog.model(name).num_shared_experts or catalog.model(name).first_k_dense)
]


def work(model, shape: BatchShape, kv_bytes=2.0, w_bytes=2.0):
    """FLOPs and bytes of a step, counted independently of the implementation."""
    L, h = model.num_layers, model.hidden_size
    q = model.num_attention_heads * model.d_head
    kv = model.num_key_value_heads * model.d_head
    attention = h * q + 2 * h * kv + q * h
    layer = attention + 3 * h * model.intermediate_size
    read = L * layer  # weights a step reads at least
    active = L * layer  # weights a token runs
    if model.is_moe:  # every layer sparse in the catalog's MoE models: router, k of E experts
        assert model.num_moe_layers == L
        expert = 3 * h * model.moe_intermediate_size
        active = L * (attention + h * model.num_experts + model.num_experts_per_tok * expert)
    t = shape.prefill_tokens + shape.decode_tokens
    if model.is_moe:  # a step of at least one token touches at least k experts per layer
        read = active if t else L * (attention + h * model.num_experts)
    flops = (
        2 * active * t
        + 4 * L * q * (shape.prefill_pairs + shape.decode_context)
        + 2 * h * model.vocab_size * shape.num_emitting
    )
    per_token_kv = 2 * L * kv * kv_bytes
    bytes_ = (
        read * w_bytes
        + (h * model.vocab_size * 2 if shape.num_emitting else 0)
        + per_token_kv * (shape.prefill_context + shape.decode_context + t)
    )
    return flops, bytes_


shapes = st.builds(
    lambda chunks, decodes: _shape(chunks, decodes),
    st.lists(st.tuples(st.integers(0, 8000), st.integers(1, 4096)), max_size=4),
    st.lists(st.integers(1, 16000), max_size=64),
)


def _shape(chunks, decodes):
    s = BatchShape()
    for prior, n in chunks:
        s.add_chunk(prior, n, True)
    for c in decodes:
        s.add_decode(c)
    return s


@settings(max_examples=150, deadline=None, derandomize=True)
@given(shape=shapes, gpu=st.sampled_from(GPUS), model=st.sampled_from(COUNTED))
def test_no_step_beats_its_flops_or_its_weight_and_kv_bytes_at_the_factors_allowed(shape, gpu, model):
    """A step is never faster than its FLOPs at the highest compute factor of the GPU, nor than
    reading its weights and the KV it attends to at full bandwidth, nor than its CPU time."""
    g, m = catalog.gpu(gpu), catalog.model(model)
    r = build_roofline(g, m)
    flops, bytes_ = work(m, shape)
    e = g.efficiency
    fastest = max(e.gemm_compute, e.compute_decode, e.attention_compute or 0.0)
    t = r.step_time(shape)
    assert t >= flops / (g.sustained_flops("bf16") * fastest) * (1 - 1e-12)
    kv_written = 2 * m.num_layers * m.kv_dim * 2 * (shape.prefill_tokens + shape.decode_tokens)
    assert t >= (bytes_ - kv_written) / g.memory_bandwidth * (1 - 1e-12)
    assert t >= e.step_overhead + e.seq_overhead * shape.num_seqs


@pytest.mark.parametrize("gpu", GPUS)
def test_monotone_in_batch_context_and_prompt(gpu):
    r = build_roofline(catalog.gpu(gpu), catalog.model("qwen2.5-7b"))
    for ctx in (128, 1024, 8192):
        times = [r.step_time(decode_shape(b, ctx)) for b in range(1, 600, 7)]
        assert all(a <= b for a, b in zip(times, times[1:], strict=False))
    for b in (1, 16, 128):
        times = [r.step_time(decode_shape(b, c)) for c in range(0, 20000, 500)]
        assert all(a < b for a, b in zip(times, times[1:], strict=False))
    times = [r.step_time(prefill_shape(p)) for p in range(1, 9000, 97)]
    assert all(a < b for a, b in zip(times, times[1:], strict=False))
    # a chunk after a longer prefix, and decodes riding along with a chunk, cost more
    for chunk in (16, 512, 2048):
        times = [r.step_time(_shape([(prior, chunk)], [])) for prior in range(0, 16000, 1000)]
        assert all(a <= b for a, b in zip(times, times[1:], strict=False))
        times = [r.step_time(_shape([(0, chunk)], [1000] * n)) for n in range(0, 200, 9)]
        assert all(a <= b for a, b in zip(times, times[1:], strict=False))


def test_ridge_point_of_4090_is_where_the_two_roofs_meet_and_the_knee_is_soft():
    g = catalog.gpu("rtx4090")
    e = g.efficiency
    r = build_roofline(g, catalog.model("qwen2.5-7b"), engine=Engine(enforce_eager=True))
    # bf16 weights: 2 bytes per parameter, 2 FLOPs per parameter and token
    assert r.ridge_tokens == pytest.approx(
        g.sustained_flops("bf16") * e.gemm_compute / (g.memory_bandwidth * e.weight_bandwidth)
    )
    assert 150 <= r.ridge_tokens <= 210
    w = r.gemm_weight_s
    for tokens in (1, 16, 64, 128, 179):
        # below the ridge the GEMMs cost their weight streaming plus a share k of their compute:
        # not flat, as a sharp roofline says, but rising with the tokens
        got = r.breakdown(decode_shape(tokens, 512))["gemm"]
        assert got == pytest.approx(w * (1 + e.gemm_knee * tokens / r.ridge_tokens))
    # the sharp roofline is flat up to the ridge; the profile's GEMMs take 29 % longer at 128
    # tokens than at 1 (data/rtx4090-vllm-kernel-profile), and so does the model, within 10 %
    grow = r.breakdown(decode_shape(128, 512))["gemm"] / r.breakdown(decode_shape(1, 512))["gemm"]
    assert 1.15 < grow < 1.4
    # far above it, compute-bound: doubling the tokens nearly doubles the GEMM time
    t1, t2 = r.breakdown(prefill_shape(2048))["gemm"], r.breakdown(prefill_shape(4096))["gemm"]
    assert 1.9 < t2 / t1 < 2.0


def test_gemm_time_is_continuous_across_the_knee_and_its_slope_only_rises():
    r = build_roofline(catalog.gpu("rtx4090"), catalog.model("qwen2.5-7b"), engine=Engine(enforce_eager=True))
    ridge = r.ridge_tokens
    tokens = np.arange(1, 2 * int(ridge) + 2)
    gemm = np.array([r.breakdown(prefill_shape(int(t)))["gemm"] for t in tokens])
    steps = np.diff(gemm)
    assert (steps > 0).all()
    # no jump anywhere: each extra token adds between k and 1 (+k) compute-token's worth
    per_token = r.gemm_s_per_prefill_token
    k = r.knee
    assert steps.min() >= k * per_token * (1 - 1e-9) and steps.max() <= per_token * (1 + 1e-9)
    # exactly at the ridge both sides give W (1 + k)
    at = r.gemm_weight_s * (1 + k)
    below = r._roof(r.gemm_weight_s, r.gemm_weight_s * (1 - 1e-12))
    above = r._roof(r.gemm_weight_s, r.gemm_weight_s * (1 + 1e-12))
    assert below == pytest.approx(at, rel=1e-9) and above == pytest.approx(at, rel=1e-9)


def old_step_time(gpu, model, precision, tp, eff, shape: BatchShape) -> float:
    """The single-factor roofline of des before issue #11, verbatim in its arithmetic (its peak
    now the FLOP/s at the GPU's sustained clock, which the compute factors are shares of since #18,
    and for a weight-only kernel's products its share of that since #19; with tensor parallelism
    the collectives vLLM runs beside the layers' since #31: the embedding's all-reduce and the
    logits' all-gather, at the same link cost)."""
    peak = gpu.sustained_flops(precision.compute_dtype)
    if weight_only(gpu, precision):
        peak *= WEIGHT_ONLY_COMPUTE
    peak16 = gpu.sustained_flops("bf16")
    bw = gpu.memory_bandwidth * eff["mbu"]
    L = model.num_layers
    p_lin = L * model.layer_linear_params
    kv_per_token = model.kv_bytes_per_token(precision.kv_bytes)
    attn_flops_per_pair = 4 * L * model.q_dim
    head_params = model.lm_head_params
    if tp > 1:
        ring = 2 * (tp - 1) / tp
        ar_per_token = (2 * L + 1) * ring * model.hidden_size * 2 / gpu.interconnect_bandwidth
        ar_fixed = (2 * L + 1) * gpu.interconnect_latency
        gather_row = (tp - 1) * model.vocab_size / tp * 2 / gpu.interconnect_bandwidth
    else:
        ar_per_token = ar_fixed = gather_row = 0.0
    lin_p = 2 * p_lin / (peak * eff["mfu_prefill"]) / tp
    lin_d = 2 * p_lin / (peak * eff["mfu_decode"]) / tp
    lin_w = p_lin * precision.weight_bytes_per_param / bw / tp
    pair_p = attn_flops_per_pair / (peak16 * eff["mfu_prefill"]) / tp
    pair_d = attn_flops_per_pair / (peak16 * eff["mfu_decode"]) / tp
    kv_read = kv_per_token / bw / tp
    head_row = 2 * head_params / (peak16 * eff["mfu_decode"]) / tp
    head_w = head_params * 2 / bw / tp
    t = shape.prefill_tokens + shape.decode_tokens
    linear = max(lin_p * shape.prefill_tokens + lin_d * shape.decode_tokens, lin_w)
    attn_prefill = max(pair_p * shape.prefill_pairs, kv_read * shape.prefill_context)
    attn_decode = max(pair_d * shape.decode_context, kv_read * shape.decode_context)
    head = max(head_row * shape.num_emitting, head_w) if shape.num_emitting else 0.0
    comm = ar_fixed + ar_per_token * t if ar_fixed else 0.0
    if gather_row and shape.num_emitting:
        comm += gpu.interconnect_latency + gather_row * shape.num_emitting
    return linear + attn_prefill + attn_decode + head + kv_read * t + comm + eff["step_overhead"]


OLD_ENGINE = Engine(enforce_eager=True, async_scheduling=False)


@settings(max_examples=120, deadline=None, derandomize=True)
@given(
    shape=shapes,
    gpu=st.sampled_from(GPUS),
    model=st.sampled_from(DENSE),
    tp=st.sampled_from([1, 2, 4]),
    weights=st.sampled_from(["bf16", "fp8", "int4-awq"]),
    mfu=st.tuples(st.floats(0.1, 1.0), st.floats(0.1, 1.0)),
    mbu=st.floats(0.1, 1.0),
    overhead=st.floats(0.0, 0.01),
)
def test_single_factor_efficiency_gives_the_old_model_exactly(shape, gpu, model, tp, weights, mfu, mbu, overhead):
    """With only mfu_prefill, mfu_decode, mbu and step_overhead (every refinement at its default),
    the two-number interconnect shorthand and the old engine (no CUDA graphs, CPU time added),
    step times are those of the old model."""
    old = {"mfu_prefill": mfu[0], "mfu_decode": mfu[1], "mbu": mbu, "step_overhead": overhead}
    legacy = {"interconnect_bandwidth": 3.0e11, "interconnect_latency": 8e-6}
    g = GPUSpec.model_validate({**catalog.resolve("gpus", gpu), **legacy})
    m, p = catalog.model(model), Precision(weights=weights)
    r = build_roofline(g, m, p, tp, Efficiency.model_validate(old), OLD_ENGINE)
    assert r.step_time(shape) == pytest.approx(old_step_time(g, m, p, tp, old, shape), rel=1e-12)


def test_the_old_catalog_factors_give_the_old_step_times():
    """The RTX 4090's factors before #11 (0.79, 0.79, 0.82, 3 ms): the old golden numbers' model.
    Its compute factor was a share of the spec sheet's peak at 2520 MHz; since #18 a factor is a
    share of the peak at the sustained 2730 MHz, so the same share reads 0.79 × 2520 / 2730."""
    mfu = 0.79 * 2520 / 2730
    old = {"mfu_prefill": mfu, "mfu_decode": mfu, "mbu": 0.82, "step_overhead": 0.003}
    sc = des.load_scenario(None, [("cost_model", {"kind": "roofline", "efficiency": old, **OLD_SETTINGS})])
    r = sc.cost_model.build(CostContext(sc.gpu, sc.model, sc.precision))
    for shape in (decode_shape(1, 512), decode_shape(64, 1024), prefill_shape(2048), _shape([(300, 700)], [50] * 9)):
        assert r.step_time(shape) == pytest.approx(old_step_time(sc.gpu, sc.model, sc.precision, 1, old, shape))
    # the old report's numbers: 49.6 tok/s at batch 1 and 216 ms for a 2048-token prefill
    assert 1 / r.step_time(decode_shape(1, 512)) == pytest.approx(49.6, abs=0.05)
    assert r.step_time(prefill_shape(2048)) == pytest.approx(0.216, abs=0.0005)


OLD_SETTINGS = {"enforce_eager": True, "async_scheduling": False}


def vllm_capture_sizes(max_size: int) -> list[int]:
    """vLLM V1's default capture sizes (vllm/config/vllm.py: _set_cudagraph_sizes), written out."""
    sizes = [i for i in [1, 2, 4] if i <= max_size]
    if max_size >= 8:
        sizes += list(range(8, min(max_size + 1, 256), 8))
    if max_size >= 256:
        sizes += list(range(256, max_size + 1, 16))
    return sizes


@pytest.mark.parametrize("max_size", [1, 3, 4, 7, 8, 100, 255, 256, 300, 512, 1000])
def test_steps_pad_to_vllms_cuda_graph_capture_sizes(max_size):
    g, m = catalog.gpu("rtx4090"), catalog.model("qwen2.5-7b")
    sizes = vllm_capture_sizes(max_size)
    engine = Engine(max_cudagraph_capture_size=max_size)
    assert engine.graph_max == sizes[-1]
    r = build_roofline(g, m, engine=engine)
    eager = build_roofline(g, m, engine=Engine(enforce_eager=True))
    for tokens in range(1, max_size + 40):
        padded = min((s for s in sizes if s >= tokens), default=tokens)
        assert graph_size(tokens) == padded or tokens > sizes[-1]
        for shape in (decode_shape(tokens, 300), _shape([(0, tokens)], [])):
            got, ref = r.breakdown(shape), eager.breakdown(shape)
            # the GEMMs and element-wise kernels compute the padded rows; attention, LM head
            # and sampler only the real ones
            pad = padded - tokens
            assert got["gemm"] == pytest.approx(
                eager._roof(eager.gemm_weight_s, ref_compute(eager, shape) + eager.gemm_s_per_decode_token * pad)
            )
            for group in ("attention_prefill", "attention_decode", "lm_head", "sampler"):
                assert got[group] == ref[group]
            if pad:
                assert got["elementwise"] > ref["elementwise"]
            else:
                assert got["elementwise"] == ref["elementwise"]


def ref_compute(r, shape: BatchShape) -> float:
    return r.gemm_s_per_prefill_token * shape.prefill_tokens + r.gemm_s_per_decode_token * shape.decode_tokens


def test_async_scheduling_overlaps_cpu_time_with_the_gpu():
    g, m = catalog.gpu("rtx4090"), catalog.model("qwen2.5-7b")
    slow_cpu = g.efficiency.model_copy(update={"step_overhead": 0.030, "seq_overhead": 1e-4})
    overlap = build_roofline(g, m, efficiency=slow_cpu)
    serial = build_roofline(g, m, efficiency=slow_cpu, engine=Engine(async_scheduling=False))
    for shape in (decode_shape(1, 100), decode_shape(200, 100), prefill_shape(4096)):
        parts = overlap.breakdown(shape)
        assert parts["cpu"] == pytest.approx(0.030 + 1e-4 * shape.num_seqs)
        assert overlap.step_time(shape) == pytest.approx(max(parts["gpu"], parts["cpu"]))
        assert serial.step_time(shape) == pytest.approx(parts["gpu"] + parts["cpu"])
    # the catalog's CPU time (0.5 ms + 12 us per sequence) hides under a 7B model's GPU time
    r = build_roofline(g, m)
    assert r.step_time(decode_shape(128, 1000)) == pytest.approx(r.breakdown(decode_shape(128, 1000))["gpu"])


def test_step_time_is_the_breakdowns_sum():
    for gpu in ("rtx4090", "h100-80gb"):
        for tp in (1, 2):
            r = build_roofline(catalog.gpu(gpu), catalog.model("qwen2.5-14b"), tp=tp)
            for shape in (
                decode_shape(3, 10),
                decode_shape(77, 5000),
                prefill_shape(300),
                _shape([(10, 99)], [7] * 40),
            ):
                parts = r.breakdown(shape)
                gpu_time = sum(v for k, v in parts.items() if k not in ("gpu", "cpu"))
                assert parts["gpu"] == pytest.approx(gpu_time)
                assert r.step_time(shape) == pytest.approx(max(parts["gpu"], parts["cpu"]), rel=1e-12)


PUBLISHED_KV = {
    "qwen2.5-7b": 57_344,
    "qwen2.5-14b": 196_608,
    "qwen2.5-32b": 262_144,
    "qwen2.5-72b": 327_680,
    "qwen3-8b": 147_456,
    "qwen3-32b": 262_144,
    "llama-3.1-8b": 131_072,
    "llama-3.1-70b": 327_680,
    "llama-2-7b": 524_288,
    "mistral-7b": 131_072,
    "qwen3-30b-a3b": 98_304,  # 2 x 48 layers x 4 KV heads x 128 x 2 bytes
    "qwen3-235b-a22b": 192_512,  # 2 x 94 x 4 x 128 x 2
    "mixtral-8x7b": 131_072,  # 2 x 32 x 8 x 128 x 2
    "gpt-oss-20b": 49_152,  # 2 x 24 x 8 x 64 x 2 (every layer's, sliding or not)
    "gpt-oss-120b": 73_728,  # 2 x 36 x 8 x 64 x 2
    "deepseek-v3": 70_272,  # (512 + 64) x 61 x 2: the MLA latent
    "llama-4-scout": 196_608,  # 2 x 48 x 8 x 128 x 2
    "qwen2.5-0.5b": 12_288,  # 2 x 24 x 2 x 64 x 2
}


@pytest.mark.parametrize("name", MODELS)
def test_memory_arithmetic_for_every_catalog_model(name):
    m = catalog.model(name)
    # published totals are rounded to three significant figures
    assert m.num_params == pytest.approx(m.published_params, rel=0.006)
    assert m.kv_bytes_per_token() == PUBLISHED_KV[name]
    assert m.kv_bytes_per_token(1) == PUBLISHED_KV[name] // 2
    assert weight_bytes(m) == 2 * m.num_params
    linear = m.linear_params  # every expert is resident
    if not m.is_moe:
        assert linear == m.num_layers * m.layer_linear_params
    assert weight_bytes(m, Precision(weights="fp8")) == linear + 2 * (m.num_params - linear)
    int4 = weight_bytes(m, Precision(weights="int4-awq"))
    assert int4 == round(linear * (0.5 + 2.5 / 128) + 2 * (m.num_params - linear))


def test_qwen_7b_is_7_62_b_parameters_and_57344_kv_bytes():
    m = catalog.model("qwen2.5-7b")
    assert round(m.num_params / 1e9, 2) == 7.62
    assert m.kv_bytes_per_token() == 57_344


def test_kv_capacity_follows_the_memory_budget():
    g, m = catalog.gpu("rtx4090"), catalog.model("qwen2.5-7b")
    p90, p92 = plan_memory(g, m, gpu_memory_utilization=0.90), plan_memory(g, m, gpu_memory_utilization=0.92)
    left = (
        math.ceil(g.memory_bytes * 0.92) - weight_bytes(m) - p92.rope_cache - p92.activations - g.runtime_reserve_bytes
    )
    assert p92.num_blocks == left // (57_344 * 16)
    assert p90.num_blocks < p92.num_blocks
    fp8 = plan_memory(g, m, gpu_memory_utilization=0.92, precision=Precision(kv_cache_dtype="fp8"))
    assert fp8.num_blocks >= 2 * p92.num_blocks - 1
    assert plan_memory(g, m, gpu_memory_utilization=0.92, tp=2).num_blocks > 2 * p92.num_blocks  # budgets add
    with pytest.raises(ScenarioError, match="does not fit"):
        plan_memory(g, catalog.model("qwen2.5-14b"))  # 29.5 GB of bf16 weights on a 24 GB card


@pytest.mark.parametrize("gpu", ["rtx4090", "h100-80gb"])
def test_tensor_parallel_splits_what_is_split_and_adds_exactly_its_all_reduces(gpu):
    """With tp GPUs each does 1/tp of the GEMMs, LM head, attention heads and KV; fixed kernel
    times, per-sequence times, the replicated norms and the sampler are not split; and each
    layer adds two ring all-reduces of the step's activations, the embedding one more, and a
    step with emitting rows the all-gather of their logits."""
    g, m = catalog.gpu(gpu), catalog.model("qwen2.5-14b")
    r1, r2 = build_roofline(g, m, tp=1), build_roofline(g, m, tp=2)
    for field in ("gemm_weight_s", "gemm_s_per_prefill_token", "gemm_s_per_decode_token", "head_weight_s",
                  "head_s_per_row", "dec_s_per_context", "pre_s_per_pair", "stream_s_per_context",
                  "mixed_s_per_context", "mixed_compute_s_per_context", "kv_write_s_per_token"):  # fmt: skip
        assert getattr(r2, field) == pytest.approx(getattr(r1, field) / 2), field
    for field in ("dec_fixed_s", "dec_s_per_seq", "pre_fixed_s", "mixed_s_per_seq", "el_fixed_s", "samp_fixed_s",
                  "samp_s_per_row", "samp_row_bytes", "cpu_step_s", "cpu_seq_s", "knee", "pre_tile_pairs",
                  "gemm_fixed_s", "head_fixed_s"):  # fmt: skip
        assert getattr(r2, field) == getattr(r1, field), field
    layer1, step1 = activation_bytes(m, 1)
    layer2, step2 = activation_bytes(m, 2)
    norms = 2 * 4 * m.hidden_size * 2
    assert layer2 - norms == pytest.approx((layer1 - norms) / 2) and step2 == step1
    for shape in (decode_shape(32, 1000), prefill_shape(2048), _shape([(100, 512)], [300] * 20)):
        b1, b2 = r1.breakdown(shape), r2.breakdown(shape)
        for group, fixed in (("gemm", r1.gemm_fixed_s), ("lm_head", r1.head_fixed_s)):  # a kernel's fixed time stays
            assert b2[group] - fixed == pytest.approx((b1[group] - fixed) / 2)
        assert b2["sampler"] == b1["sampler"]
        tokens = shape.prefill_tokens + shape.decode_tokens
        tokens = graph_size(tokens) if tokens <= 512 else tokens
        allreduce = (2 * m.num_layers + 1) * g.link.seconds(tokens * m.hidden_size * 2, 2)
        assert b1["allreduce"] == 0.0 and b2["allreduce"] == pytest.approx(allreduce)
        gather = g.link.gather_cost(2)
        rows = shape.num_emitting
        logits = gather.latency + rows * m.vocab_size // 2 * 2 / gather.bus_bandwidth if rows else 0.0
        assert b1["logits_gather"] == 0.0 and b2["logits_gather"] == pytest.approx(logits)
        assert r2.step_time(shape) == pytest.approx(max(b2["gpu"], b2["cpu"]))
        assert r2.step_time(shape) < r1.step_time(shape)


def test_qwen_14b_runs_on_two_4090s_with_tp():
    sc = des.load_scenario(
        None, ["model=qwen2.5-14b", "cluster.tp=2", "horizon.duration=60", "warmup=10", "workload.arrival.rate=2"]
    )
    s = des.simulate(sc).summary
    assert s["num_completed"] == s["num_requests"] > 50


def test_quantised_weights_decode_faster_and_fp8_kv_holds_twice_the_tokens():
    g, m = catalog.gpu("rtx4090"), catalog.model("qwen2.5-7b")
    bf16 = build_roofline(g, m).step_time(decode_shape(1, 512))
    awq = build_roofline(g, m, Precision(weights="int4-awq")).step_time(decode_shape(1, 512))
    assert awq < 0.5 * bf16
    a = des.load_scenario(None, ["precision.kv_cache_dtype=fp8"]).memory_plan().kv_capacity_tokens
    b = des.load_scenario(None).memory_plan().kv_capacity_tokens
    assert a >= 2 * b - 16


@pytest.mark.parametrize(
    "bad, path",
    [
        (
            {
                "memory_bytes": 1,
                "memory_bandwidth": -5,
                "flops": {"bf16": 1e14},
                "efficiency": {"mfu_prefill": 0.5, "mfu_decode": 0.5, "mbu": 0.5, "step_overhead": 0},
            },
            "gpu.memory_bandwidth",
        ),
        ({"base": "rtx4090", "efficiency": {"mbu": 1.5}}, "gpu.efficiency.mbu"),
        ({"base": "rtx4090", "flops": {"bf17": 1e14}}, "gpu.flops.bf17"),
        ({"memory_bytes": 1e10, "memory_bandwidth": 1e12, "flops": {"bf16": 1e14}}, "gpu.efficiency"),
        ("tpu-v9", "gpu"),
    ],
)
def test_bad_catalog_entries_name_the_field(bad, path):
    with pytest.raises(ScenarioError) as info:
        des.load_scenario(
            {
                "gpu": bad,
                "horizon": {"duration": 10},
                "workload": {
                    "arrival": {"process": "poisson", "rate": 1},
                    "prompt_tokens": {"dist": "fixed", "value": 10},
                    "output_tokens": {"dist": "fixed", "value": 10},
                },
            }
        )
    assert path in [p for p, _ in info.value.problems]


def test_bad_model_entry():
    with pytest.raises(ScenarioError) as info:
        des.load_scenario(None, ["model.num_key_value_heads=5"])
    assert info.value.problems[0][0] == "model.num_key_value_heads"
    with pytest.raises(ScenarioError, match="valid: deepseek-v3, .*llama-2-7b"):
        catalog.model("gpt-5")


def test_costmodel_command(tmp_path):
    png = tmp_path / "roof.png"
    out = des_cli("costmodel", "--gpu", "rtx4090", "--model", "qwen2.5-7b", "--plot", str(png))
    assert out.returncode == 0, out.stderr
    # 108,576 KV tokens at 0.90 with vllm serve's defaults on a 24 GiB card (256 sequences,
    # 2,048 tokens a step): the default scenario's plan (tests/test_memory.py pins its terms)
    plan = des.load_scenario(None).memory_plan()
    assert plan.kv_capacity_tokens == 108_576
    assert "ridge" in out.stdout and f"{plan.kv_capacity_tokens:,} tokens at gpu_memory_utilization 0.90" in out.stdout
    assert "max_num_seqs 256: vllm serve's defaults" in out.stdout and "decode step" in out.stdout
    assert "activation peak" in out.stdout and "runtime reserve" in out.stdout
    assert png.stat().st_size > 20_000
    bad = des_cli("costmodel", "--gpu", "v100")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --gpu") and "rtx4090" in bad.stderr
    bad = des_cli("costmodel", "--model", "qwen2.5-14b")
    assert bad.returncode == 2 and "does not fit" in bad.stderr and "Traceback" not in bad.stderr
