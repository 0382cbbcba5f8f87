"""Attention variants: multi-head latent attention (KV bytes, TP replication, parameter count,
absorbed decode FLOPs), windowed layers (KV capacity from vLLM's hybrid KV cache manager, the
windowed context sums and their incremental upkeep in the scheduler, exact equality with full
attention while every context is inside the window), multi-query attention, gpt-oss's sinks
and biases, and skewed expert routing."""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import des
from des import catalog
from des.catalog.memory import kv_bytes_per_token, plan_memory
from des.catalog.precision import Precision
from des.catalog.routing import Zipf, distinct_table, expected_distinct, inclusion_probabilities
from des.catalog.specs import ModelSpec
from des.cost.base import BatchShape
from des.cost.roofline import build_roofline, expected_experts
from des.engine.schedulers.continuous import ContinuousScheduler
from des.errors import ScenarioError
from des.tools.costmodel import decode_shape


def variant(name: str, **fields_) -> ModelSpec:
    """The catalog model ``name`` with ``fields_`` changed (None removes a field)."""
    base = {k: v for k, v in catalog.resolve("models", name).items() if k not in fields_ or fields_[k] is not None}
    return ModelSpec.model_validate({**base, **{k: v for k, v in fields_.items() if v is not None}})


# -- multi-head latent attention ----------------------------------------------------------


@pytest.mark.parametrize(("kv", "nbytes"), [("bf16", 2), ("fp8", 1)])
def test_deepseek_v3_caches_a_576_value_latent_per_layer_on_every_tp_rank(kv, nbytes):
    m = catalog.model("deepseek-v3")
    p = Precision(kv_cache_dtype=kv)
    assert m.kv_bytes_per_token(nbytes) == (512 + 64) * nbytes * 61
    # the latent is not split across tensor-parallel GPUs: each holds it whole
    for tp in (1, 2, 8):
        assert kv_bytes_per_token(m, p, tp) == (512 + 64) * nbytes * 61 * tp
    plan = plan_memory(catalog.gpu("h200"), m, precision=Precision(weights="fp8", kv_cache_dtype=kv), tp=8)
    assert plan.kv_bytes_per_token == (512 + 64) * nbytes * 61 * 8
    assert plan.window_kv_bytes == 0


def test_mla_decode_reads_the_whole_latent_on_each_gpu_and_runs_absorbed_flops():
    g, m = catalog.gpu("h200"), catalog.model("deepseek-v3")
    e = g.efficiency
    one, eight = build_roofline(g, m, Precision(weights="fp8")), build_roofline(g, m, Precision(weights="fp8"), tp=8)
    latent_read = 61 * 576 * 2 / (g.memory_bandwidth * (e.kv_bandwidth or e.weight_bandwidth))
    # absorbed decode: per head, scores over 512 + 64 dims and a weighted sum over 512
    pair = 61 * 2 * 128 * (2 * 512 + 64)
    e_dec = e.decode_compute or e.attention_compute or e.gemm_compute
    for r, tp in ((one, 1), (eight, 8)):
        assert r.mixed_compute_s_per_context == pytest.approx(pair / tp / (g.sustained_flops("bf16") * e_dec))
        assert r.dec_s_per_context == pytest.approx(max(pair / tp / (g.sustained_flops("bf16") * e_dec), latent_read))
    # prefill runs plain attention over up-projected keys (128 + 64) and values (128)
    e_att = e.attention_compute or e.gemm_compute
    assert one.pre_s_per_pair == pytest.approx(61 * 2 * 128 * (192 + 128) / (g.sustained_flops("bf16") * e_att))
    # tensor parallelism splits the heads' FLOPs, not the latent's bytes
    assert eight.dec_s_per_context >= latent_read
    assert eight.step_time(decode_shape(64, 4096)) < one.step_time(decode_shape(64, 4096))


def test_mla_parameters_come_from_the_low_rank_projections():
    m = catalog.model("deepseek-v3")
    h, H = 7168, 128
    q = h * 1536 + 1536 * H * (128 + 64)  # q_a_proj, q_b_proj
    kv = h * (512 + 64) + 512 * H * (128 + 128)  # kv_a_proj_with_mqa, kv_b_proj
    o = H * 128 * h
    assert m.attention_linear_params == q + kv + o
    # norms: input and post-attention (2 h), q_a_layernorm (1536), kv_a_layernorm (512)
    assert m.layer_small_params == 2 * h + 1536 + 512
    assert m.attention_kind == "mla" and m.q_dim == H * 192 and m.kv_dim == 576


def test_mla_without_a_query_rank_has_one_query_projection():
    m = variant("deepseek-v3", q_lora_rank=None)
    assert m.attention_linear_params == (7168 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168)


def test_mla_steps_cost_no_less_than_their_latent_reads_and_their_flops():
    """The independent bound of tests/test_roofline.py for the MLA model: a step is never
    faster than the latent it reads at full bandwidth or its attention FLOPs at the fastest factor."""
    g, m = catalog.gpu("h200"), catalog.model("deepseek-v3")
    r = build_roofline(g, m, Precision(weights="fp8"), tp=8)
    e = g.efficiency
    fastest = max(e.gemm_compute, e.compute_decode, e.attention_compute or 0.0, e.decode_compute or 0.0)
    for batch, ctx in ((1, 100), (32, 4096), (256, 16000)):
        s = decode_shape(batch, ctx)
        t = r.step_time(s)
        assert t >= 61 * 576 * 2 * s.decode_context / g.memory_bandwidth
        assert t >= 61 * 2 * 128 * (2 * 512 + 64) * s.decode_context / 8 / (g.sustained_flops("bf16") * fastest)


def test_mla_fields_must_come_together():
    with pytest.raises(ScenarioError) as info:
        des.load_scenario(None, ["model.kv_lora_rank=512"])
    path, message = info.value.problems[0]
    assert path.startswith("model") and "qk_rope_head_dim" in message and "\n" not in message


# -- multi-query and grouped-query attention ---------------------------------------------


def test_multi_query_attention_holds_one_kv_head_copied_on_every_gpu():
    mqa = variant("qwen2.5-7b", num_key_value_heads=1)
    p = Precision()
    one_gpu = 2 * 28 * 1 * 128 * 2  # K and V, 28 layers, one head of 128, bf16
    assert mqa.kv_bytes_per_token() == one_gpu
    for tp in (1, 2, 4):
        assert kv_bytes_per_token(mqa, p, tp) == one_gpu * tp  # the one head on every GPU
    gqa = catalog.model("qwen2.5-7b")  # 4 KV heads: split up to tp = 4, copied beyond
    assert kv_bytes_per_token(gqa, p, 4) == kv_bytes_per_token(gqa, p, 1) == 4 * one_gpu
    assert kv_bytes_per_token(gqa, p, 28) == 28 * one_gpu


# -- gpt-oss's sinks and biases -------------------------------------------------------------


def test_gpt_oss_counts_its_sinks_and_its_attention_router_and_expert_biases():
    m = catalog.model("gpt-oss-20b")
    h, q, kv, E, i = 2880, 64 * 64, 8 * 64, 32, 2880
    assert m.attention_linear_params == h * q + 2 * h * kv + q * h
    bias = q + 2 * kv + h  # q, k, v and o_proj
    sinks = 64  # one per head
    router_and_experts = E + E * (2 * i + h)  # router bias; gate_up (2 I) and down (h) per expert
    assert m.layer_small_params == bias + sinks + 2 * h
    assert m.expert_bias_params == router_and_experts
    plain = variant("gpt-oss-20b", attention_sinks=False, o_proj_bias=False, expert_bias=False)
    assert m.num_params - plain.num_params == 24 * (sinks + h + router_and_experts)


# -- windowed layers ----------------------------------------------------------------------


def test_sliding_window_layers_leave_more_kv_capacity_than_full_attention():
    g, m = catalog.gpu("rtx4090"), catalog.model("gpt-oss-20b")
    full = variant("gpt-oss-20b", sliding_window=None, num_window_layers=None)
    p = Precision(weights="mxfp4", quantized_layers="experts")
    windowed, plain = plan_memory(g, m, precision=p), plan_memory(g, full, precision=p)
    assert windowed.budget == plain.budget and windowed.non_kv == plain.non_kv
    assert windowed.kv_capacity_tokens > 1.8 * plain.kv_capacity_tokens  # half the layers stop growing
    # the 12 sliding layers keep at most ceil(128 / 16) + 1 blocks for each of the 128 sequences
    per_layer = 2 * 8 * 64 * 2
    reserve = 128 * (8 + 1) * 16 * 12 * per_layer
    assert windowed.window_kv_bytes == reserve
    left = windowed.budget - windowed.non_kv
    assert windowed.num_blocks == (left - reserve) // (12 * per_layer * 16)
    assert plain.num_blocks == left // (24 * per_layer * 16)
    assert windowed.kv_bytes_per_token == 12 * per_layer  # the blocks count the full layers only
    assert windowed.kv_bytes <= windowed.budget - windowed.non_kv
    assert plain.kv_bytes_per_token == 24 * per_layer and plain.window_kv_bytes == 0


def test_a_window_never_leaves_less_capacity_than_counting_every_layer_in_full():
    """With a window as long as the context (Llama 4's 8192-token chunks, few blocks), setting
    the windowed layers' worst case aside would hold less than counting them in full: the
    plan takes the larger."""
    g = catalog.gpu("h100-80gb")
    m = variant("qwen2.5-7b", sliding_window=30000, num_window_layers=14)
    full = catalog.model("qwen2.5-7b")
    assert plan_memory(g, m).kv_capacity_tokens == plan_memory(g, full).kv_capacity_tokens
    assert plan_memory(g, m).window_kv_bytes == 0


def test_window_fields_are_checked():
    for override, word in (
        (["model.sliding_window=128", "model.attention_chunk_size=8192"], "attention_chunk_size"),
        (["model.num_window_layers=4"], "num_window_layers"),
        (["model.sliding_window=128", "model.num_window_layers=99"], "num_window_layers"),
    ):
        with pytest.raises(ScenarioError) as info:
            des.load_scenario(None, override)
        path, message = info.value.problems[0]
        assert path.startswith("model") and word in path + message and "\n" not in message


def window_shape(chunks, decodes, window):
    s = BatchShape(window=window)
    for prior, n in chunks:
        s.add_chunk(prior, n, True)
    for c in decodes:
        s.add_decode(c)
    return s


@settings(max_examples=120, deadline=None, derandomize=True)
@given(
    chunks=st.lists(st.tuples(st.integers(0, 3000), st.integers(1, 1000)), max_size=3),
    decodes=st.lists(st.integers(1, 4094), max_size=48),
    tp=st.sampled_from([1, 2]),
)
def test_windowed_attention_costs_exactly_full_attention_while_contexts_fit_the_window(chunks, decodes, tp):
    """Every context below the 4096-token window: the windowed sums equal the full ones, and
    the step time is the full-attention model's to the last bit."""
    chunks = [(p, n) for p, n in chunks if p + n <= 4096]
    if not chunks and not decodes:
        return
    g = catalog.gpu("h100-80gb")
    windowed = variant("mistral-7b", sliding_window=4096, num_window_layers=16)
    full = catalog.model("mistral-7b")
    s = window_shape(chunks, decodes, 4096)
    assert s.decode_window_context == s.decode_context
    assert s.prefill_window_pairs == s.prefill_pairs and s.prefill_window_context == s.prefill_context
    a, b = build_roofline(g, windowed, tp=tp), build_roofline(g, full, tp=tp)
    assert a.step_time(s) == b.step_time(s)
    assert a.breakdown(s) == b.breakdown(s)


def test_windowed_layers_attend_over_the_window_only_beyond_it():
    g = catalog.gpu("h100-80gb")
    half = variant("mistral-7b", sliding_window=1024, num_window_layers=16)
    allw = variant("mistral-7b", sliding_window=1024)
    full = catalog.model("mistral-7b")
    rh, ra, rf = (build_roofline(g, m) for m in (half, allw, full))
    long = decode_shape(64, 16000, 1024)
    assert long.decode_window_context == 64 * 1024
    # attention of a decode step: half the layers read 16 001 tokens, half 1024
    att = {name: r.breakdown(long)["attention_decode"] for name, r in (("h", rh), ("a", ra), ("f", rf))}
    assert att["a"] < att["h"] < att["f"]
    d_eff = long.decode_context - 0.5 * (long.decode_context - long.decode_window_context)
    want = rf.dec_fixed_s + rf.dec_s_per_seq * 64 + rf.dec_s_per_context * d_eff
    assert att["h"] == pytest.approx(want, rel=1e-12)
    # a prefill chunk far past the window: each query sees 1024 keys on the windowed layers
    s = window_shape([(10000, 512)], [], 1024)
    assert s.prefill_window_pairs == 512 * 1024 and s.prefill_window_context == 1023 + 512
    # a chunk that crosses it: the first queries see their prefix, the rest the window
    s = window_shape([(1000, 100)], [], 1024)
    assert s.prefill_window_pairs == sum(min(1000 + j, 1024) for j in range(1, 101))
    # a shape built without the window is costed as full attention (never cheaper)
    assert rh.step_time(decode_shape(64, 16000)) == rf.step_time(decode_shape(64, 16000))


def _checked_shape(checks: list[int], starved: list[int]):
    """ContinuousScheduler._shape that also recounts the windowed decode context from the
    running sequences themselves (their contexts written out, not the aggregates)."""
    original = ContinuousScheduler._shape

    def shape(self, batch):
        s = original(self, batch)
        dec = self.decoding
        cap = self.kv.window - 1
        skipped = set(map(id, batch.starved))
        contexts = [
            seq.req.computed + dec.tau - seq.base
            for seq in self.running
            if seq.phase == 2 and id(seq) not in skipped  # decoding, not starved
        ]
        assert s.decode_context == sum(contexts) + len(contexts)
        assert s.decode_window_context == sum(min(c, cap) + 1 for c in contexts)
        checks.append(len(contexts))
        starved.append(len(batch.starved))
        return s

    return shape


@pytest.mark.parametrize("caching", [True, False])
def test_the_scheduler_keeps_the_windowed_context_sum_exactly(monkeypatch, caching):
    """A run with a 200-token window, prompts and outputs across it, preemptions from a small
    KV cache: at every step the incremental sum equals the recount (starved members are
    exercised directly in the next test)."""
    checks: list[int] = []
    starved: list[int] = []
    monkeypatch.setattr(ContinuousScheduler, "_shape", _checked_shape(checks, starved))
    model = {"base": "qwen2.5-7b", "sliding_window": 200, "num_window_layers": 14}
    scenario = des.load_scenario(
        {
            "seed": 3,
            "model": model,
            "gpu": "h100-80gb",
            "horizon": {"num_requests": 300},
            "workload": {
                "arrival": {"process": "poisson", "rate": 40.0},
                "prompt_tokens": {"dist": "uniform", "low": 1, "high": 400},
                "output_tokens": {"dist": "uniform", "low": 1, "high": 400},
            },
            "scheduler": {
                "max_num_seqs": 48,
                "max_num_batched_tokens": 64,
                "num_gpu_blocks_override": 500,
                "enable_prefix_caching": caching,
            },
        }
    )
    result = des.simulate(scenario)
    assert result.summary["num_completed"] == 300
    assert result.summary["preemptions"] > 0  # the small cache preempts: starts, stops, restarts
    assert sum(checks) > 10_000 and max(checks) > 10


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(["start", "stop", "step"]), st.integers(0, 300), st.integers(0, 10**6)),
        min_size=1,
        max_size=120,
    ),
    window=st.sampled_from([1, 2, 17, 64]),
)
def test_the_decoding_sets_windowed_sum_survives_joins_leaves_and_starved_steps(ops, window):
    """Members join at any context, leave, and go a step without a token (starved); the
    kept Σ min(context, window − 1) equals the recount after every operation."""
    from des.engine.request import Request
    from des.engine.schedulers.decoding import DECODING, LEFT, DecodingSet, Seq

    dec = DecodingSet(16, caching=False, window=window)
    members: list[Seq] = []
    ids = iter(range(10**6))
    for op, context, pick in ops:
        if op == "start":
            req = Request(next(ids), 0.0, prompt_tokens=max(context, 1), output_tokens=10**6)
            req.computed, req.generated = context, 1
            seq = Seq(req, req.id)
            dec.start(seq)
            members.append(seq)
        elif op == "stop" and members:
            seq = members.pop(pick % len(members))
            dec.materialize(seq)
            dec.stop(seq)
            seq.phase = LEFT
        elif op == "step":
            starved = [m for i, m in enumerate(members) if (pick >> (i % 20)) & 1]
            for m in starved:
                dec.materialize(m)
            dec.advance(starved)
        contexts = [m.req.computed + dec.tau - m.base for m in members]
        assert all(m.phase is DECODING for m in members)
        assert dec.total_context == sum(contexts)
        assert dec.window_context == sum(min(c, window - 1) for c in contexts)


def test_a_window_longer_than_every_context_changes_no_result():
    """Same blocks, every context inside the window: byte-identical summaries."""
    base = {
        "seed": 1,
        "gpu": "rtx4090",
        "horizon": {"num_requests": 200},
        "workload": {
            "arrival": {"process": "poisson", "rate": 6.0},
            "prompt_tokens": {"dist": "lognormal", "mean": 300, "sigma": 0.5, "max": 2000},
            "output_tokens": {"dist": "geometric", "mean": 100, "max": 1000},
        },
        "scheduler": {"num_gpu_blocks_override": 3000},
    }
    plain = des.simulate(des.load_scenario({**base, "model": "qwen2.5-7b"})).summary
    windowed_model = {"base": "qwen2.5-7b", "sliding_window": 4000, "num_window_layers": 20}
    windowed = des.simulate(des.load_scenario({**base, "model": windowed_model})).summary
    assert windowed == plain


# -- skewed routing -----------------------------------------------------------------------


@pytest.mark.parametrize(("experts", "k"), [(128, 8), (32, 4), (256, 8), (16, 1)])
def test_zipf_routing_touches_fewer_experts_than_uniform(experts, k):
    table = distinct_table(experts, k, Zipf(zipf=1.2))
    assert table is not None
    for t in (1, 2, 8, 64, 512, 4096):
        uniform = expected_experts(experts, 1 - k / experts, t)
        assert table[t] <= uniform + 1e-9
        if 1 < t <= 512:
            assert table[t] < uniform
        assert table[t] == pytest.approx(expected_distinct(experts, k, Zipf(zipf=1.2), t), rel=1e-12)
    assert table[0] == 0.0 and table[1] == pytest.approx(k, rel=1e-12)  # one token: its k picks
    assert all(a <= b for a, b in zip(table, table[1:], strict=False)) and table[-1] <= experts
    q = inclusion_probabilities(experts, k, 1.2)
    assert q.sum() == pytest.approx(k) and (q <= 1).all() and (np.diff(q) <= 1e-15).all()


@pytest.mark.parametrize("s", [1e-6, 1e-9, 0.0])
def test_zipf_routing_tends_to_uniform_as_its_exponent_tends_to_zero(s):
    table = distinct_table(128, 8, Zipf(zipf=s))
    assert table is not None
    for t in (1, 3, 16, 100, 1000, 20000):
        assert table[t] == pytest.approx(expected_experts(128, 1 - 8 / 128, t), rel=1e-5, abs=1e-9)


def test_uniform_routing_stays_the_closed_form_and_skew_lowers_small_steps_weight_time():
    g = catalog.gpu("h100-80gb")
    m = catalog.model("qwen3-30b-a3b")
    default = build_roofline(g, m)
    explicit = build_roofline(g, variant("qwen3-30b-a3b", routing="uniform"))
    assert default.moe_distinct is None
    assert all(getattr(default, f.name) == getattr(explicit, f.name) for f in fields(default))
    skewed = build_roofline(g, variant("qwen3-30b-a3b", routing={"zipf": 1.0}))
    assert skewed.moe_distinct is not None
    small, huge = decode_shape(16, 512), decode_shape(512, 512)
    assert skewed.breakdown(small)["gemm"] < default.breakdown(small)["gemm"]
    assert skewed.step_time(small) < default.step_time(small)
    # a step far larger than the table reads its last entry, saturated like uniform's
    assert skewed.distinct_experts(10**6) == skewed.moe_distinct[-1]
    assert math.isclose(skewed.step_time(huge), default.step_time(huge), rel_tol=0.02)


def test_bad_routing_is_one_clear_line():
    with pytest.raises(ScenarioError) as info:
        des.load_scenario(None, ["model=qwen3-30b-a3b", "model.routing=skewed"])
    path, message = info.value.problems[0]
    assert path.startswith("model.routing") and "\n" not in message
