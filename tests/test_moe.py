"""Mixture-of-experts models: parameter counts, the roofline's expert weights and FLOPs
(every expert active is the dense model; one expert of one is the dense model), the expected
distinct experts against a Monte-Carlo draw, the catalog entries, and des costmodel."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import des
from des import catalog
from des.catalog.memory import plan_memory, weight_bytes
from des.catalog.precision import Precision
from des.catalog.specs import ModelSpec
from des.cost.base import BatchShape
from des.cost.roofline import build_roofline, expected_experts
from des.cost.work import step_work
from des.errors import ScenarioError
from des.tools.costmodel import decode_shape, prefill_shape
from tests.helpers import des_cli
from tests.test_roofline import _shape as des_shape

MOE = ["qwen3-30b-a3b", "qwen3-235b-a22b", "mixtral-8x7b"]
GEMM = ("gemm_weight_s", "gemm_s_per_prefill_token", "gemm_s_per_decode_token")
MOE_FIELDS = ("moe_expert_weight_s", "moe_experts", "moe_miss", "moe_inline_s_per_token")


def moe_and_dense(experts: int, width: int = 4736) -> tuple[ModelSpec, ModelSpec]:
    """Qwen2.5-7B's shapes with its MLP as ``experts`` experts of ``width``, every one active,
    and the dense model whose MLP is their concatenation (width ``experts × width``)."""
    base = catalog.resolve("models", "qwen2.5-7b")
    dense = ModelSpec.model_validate({**base, "intermediate_size": experts * width})
    moe = ModelSpec.model_validate(
        {**base, "num_experts": experts, "num_experts_per_tok": experts, "moe_intermediate_size": width}
    )
    return moe, dense


def dense_with_router(moe: ModelSpec, dense: ModelSpec, precision: Precision, tp: int):
    """The dense model's roofline plus the MoE's router, a GEMM of ``hidden × E`` weights per
    layer: the three GEMM coefficients are linear in the weights, so they scale by
    ``(P + R) / P``; the MoE fields hold no expert term (its experts are the dense MLP)."""
    r = build_roofline(catalog.gpu("h100-80gb"), dense, precision, tp)
    p = dense.num_layers * dense.layer_linear_params
    router = moe.num_moe_layers * moe.hidden_size * (moe.num_experts or 0)
    return replace(r, **{f: getattr(r, f) * (p + router) / p for f in GEMM})


def _shape(chunks, decodes):
    return des_shape(chunks, decodes)


shapes = st.builds(
    _shape,
    st.lists(st.tuples(st.integers(0, 8000), st.integers(1, 4096)), max_size=3),
    st.lists(st.integers(1, 16000), max_size=64),
).filter(lambda s: s.prefill_tokens + s.decode_tokens > 0)  # an engine never runs an empty step


@settings(max_examples=80, deadline=None, derandomize=True)
@given(
    shape=shapes,
    experts=st.sampled_from([1, 4]),
    tp=st.sampled_from([1, 2]),
    weights=st.sampled_from(["bf16", "int4-awq"]),
)
def test_every_expert_active_is_the_dense_model_with_its_router(shape, experts, tp, weights):
    """k = E: the step touches all E experts (1 − (1 − k/E)^T = 1 exactly), so its weights and
    FLOPs are the dense MLP's plus the router's, step for step. Equal to float rounding only
    (rel 1e-12): the MoE sums its weight seconds as the always-read part plus E × one expert's,
    the dense model as one product. k = E = 1 is the same statement with one expert."""
    moe, dense = moe_and_dense(experts)
    p = Precision(weights=weights)
    got = build_roofline(catalog.gpu("h100-80gb"), moe, p, tp)
    want = dense_with_router(moe, dense, p, tp)
    assert got.moe_miss == 0.0 and got.moe_experts == experts
    for f in fields(got):
        if f.name not in GEMM + MOE_FIELDS:
            assert getattr(got, f.name) == getattr(want, f.name), f.name
    assert got.gemm_weight_s + experts * got.moe_expert_weight_s == pytest.approx(want.gemm_weight_s, rel=1e-12)
    assert got.step_time(shape) == pytest.approx(want.step_time(shape), rel=1e-12)
    assert got.breakdown(shape)["gemm"] == pytest.approx(want.breakdown(shape)["gemm"], rel=1e-12)


def test_one_expert_of_one_counts_the_dense_parameters_plus_its_router():
    moe, dense = moe_and_dense(1, width=18944)
    assert moe.linear_params == moe.active_linear_params
    assert moe.num_params == dense.num_params + moe.num_layers * moe.hidden_size
    assert moe.num_params == moe.active_params
    assert weight_bytes(moe) == 2 * moe.num_params


@pytest.mark.parametrize("tokens", [1, 3, 16, 64, 150])
def test_expected_distinct_experts_matches_a_monte_carlo_draw(tokens):
    """Each of T tokens picks k = 8 of E = 128 experts without replacement, uniformly; the
    mean number of distinct experts over N draws lies within 4 standard errors of
    E · (1 − (1 − k/E)^T)."""
    E, k, n = 128, 8, 2000
    rng = np.random.default_rng(19)
    picks = np.argpartition(rng.random((n, tokens, E)), k, axis=2)[:, :, :k].reshape(n, -1)
    touched = np.zeros((n, E), dtype=bool)
    touched[np.arange(n)[:, None], picks] = True
    distinct = touched.sum(axis=1)
    want = expected_experts(E, 1 - k / E, tokens)
    se = distinct.std(ddof=1) / np.sqrt(n)
    if tokens == 1:  # no spread: exactly k
        assert want == k and (distinct == k).all()
    else:
        assert se > 0
        assert abs(distinct.mean() - want) < 4 * se
    assert expected_experts(0, 1.0, tokens) == 0.0


def test_small_steps_read_fewer_experts_and_large_ones_all_of_them():
    g, m = catalog.gpu("h100-80gb"), catalog.model("qwen3-30b-a3b")
    r = build_roofline(g, m)
    # one token reads k = 8 experts per layer, 512 read all but ~0
    one, many = expected_experts(r.moe_experts, r.moe_miss, 1), expected_experts(r.moe_experts, r.moe_miss, 512)
    assert one == pytest.approx(8) and many == pytest.approx(128, rel=1e-12)
    # the weight roof of a one-token decode: attention, routers and 8 experts per layer
    w = r.gemm_weight_s + 8 * r.moe_expert_weight_s
    e = g.efficiency
    always = m.num_layers * (m.attention_linear_params + m.hidden_size * 128)
    read = always + 8 * m.num_layers * m.expert_params
    assert w == pytest.approx(read * 2 / (g.memory_bandwidth * e.weight_bandwidth))
    # FLOPs come from the active weights, not all of them
    flops = 2 * m.active_linear_params
    assert r.gemm_s_per_decode_token == pytest.approx(flops / (g.sustained_flops("bf16") * e.compute_decode))
    assert r.step_time(decode_shape(1, 512)) < r.step_time(decode_shape(64, 512)) < r.step_time(prefill_shape(4096))


@pytest.mark.parametrize("name", MOE)
def test_catalog_moe_entries_match_their_published_totals(name):
    m = catalog.model(name)
    assert m.is_moe and m.num_moe_layers == m.num_layers
    assert m.num_params == pytest.approx(m.published_params, rel=0.01)
    # the model cards give the active count to two or three figures (3.3B, 22B, 12.9B)
    assert m.active_params == pytest.approx(m.published_active_params, rel=0.02)
    # every expert resident: the plan holds all of them
    assert weight_bytes(m) == 2 * m.num_params
    h, L = m.hidden_size, m.num_layers
    assert m.num_experts and m.num_experts_per_tok and m.moe_intermediate_size
    attention = h * m.q_dim + 2 * h * m.kv_dim + m.q_dim * h
    expert = 3 * h * m.moe_intermediate_size
    assert m.linear_params == L * (attention + h * m.num_experts + m.num_experts * expert)
    assert m.active_linear_params == L * (attention + h * m.num_experts + m.num_experts_per_tok * expert)


def test_dense_layers_and_shared_experts_are_counted():
    base = catalog.resolve("models", "qwen3-30b-a3b")
    m = ModelSpec.model_validate({**base, "first_k_dense": 3, "num_shared_experts": 2, "decoder_sparse_step": 2})
    # sparse layers: i >= 3 with (i + 1) even: 3, 5, ..., 47
    assert m.num_moe_layers == 23 and m.num_dense_layers == 25
    h = m.hidden_size
    shared = 3 * h * 2 * 768
    assert m.always_linear_params == (48 * m.attention_linear_params + 25 * 3 * h * 6144 + 23 * (h * 128 + shared))
    assert m.active_linear_params - m.always_linear_params == 23 * 8 * 3 * h * 768


@pytest.mark.parametrize(
    ("override", "field"),
    [
        (["model.num_experts=4"], "model.num_experts"),
        (["model.num_experts=4", "model.num_experts_per_tok=8", "model.moe_intermediate_size=64"], "model"),
        (["model.num_shared_experts=1"], "model.num_shared_experts"),
    ],
)
def test_bad_moe_fields_name_the_problem(override, field):
    with pytest.raises(ScenarioError) as info:
        des.load_scenario(None, override)
    path, message = info.value.problems[0]
    assert path.startswith(field)
    assert "num_experts" in message and "\n" not in message


def test_qwen3_30b_a3b_fits_an_h100_and_not_a_4090():
    m = catalog.model("qwen3-30b-a3b")
    plan = plan_memory(catalog.gpu("h100-80gb"), m)
    assert plan.weights == weight_bytes(m) and plan.kv_capacity_tokens > 100_000
    out = des_cli("costmodel", "--gpu", "h100-80gb", "--model", "qwen3-30b-a3b")
    assert out.returncode == 0, out.stderr
    assert "qwen3-30b-a3b" in out.stdout and "decode step" in out.stdout
    bad = des_cli("costmodel", "--model", "qwen3-30b-a3b")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert bad.stderr.startswith("error: model: qwen3-30b-a3b does not fit on 1 x rtx4090")
    assert len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("tokens", [1, 8, 64, 4096])
def test_the_work_a_step_does_reads_the_experts_the_roofline_reads(tokens):
    # the roofline's share of a step (des.metrics.utilisation) divides the bytes the step
    # moves by its time: both must count the same distinct experts, else an MoE step
    # shows more than 100 % of the memory bandwidth (it did: 184 % for Qwen3-30B-A3B AWQ)
    model, gpu = catalog.model("qwen3-30b-a3b"), catalog.gpu("rtx4090")
    precision = Precision(weights="int4-awq")
    work = step_work(gpu, model, precision)
    E, k = model.num_experts, model.num_experts_per_tok
    assert E is not None and k is not None
    # every expert read: the layer matrices in full (all weights less the bf16 rest)
    every = work.weight_bytes + work.expert_bytes * E
    assert every == pytest.approx(weight_bytes(model, precision) - 2.0 * (model.num_params - model.linear_params))
    shape = BatchShape(num_seqs=tokens, decode_tokens=tokens, decode_context=tokens * 100, num_emitting=tokens)
    read = work.hbm_bytes(shape) - work.head_bytes - work.kv_bytes_per_token * (tokens * 100 + tokens)
    assert read == pytest.approx(work.weight_bytes + work.expert_bytes * expected_experts(E, 1 - k / E, tokens))
    if tokens == 1:
        assert read == pytest.approx(work.weight_bytes + k * work.expert_bytes)


def test_an_moe_run_stays_under_the_memory_roofline():
    sc = des.load_scenario(None, ["model=qwen3-30b-a3b", "precision.weights=int4-awq", "horizon.duration=90"])
    r = des.simulate(sc)
    assert 0 < r.summary["bandwidth_utilization"] <= 1.0
