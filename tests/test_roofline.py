"""The roofline step-time model and the catalog: physics, calibration bands, memory
arithmetic, tensor parallelism, and errors for bad catalog input."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import des
from des import catalog
from des.catalog.memory import Precision, plan_memory, weight_bytes
from des.cost.base import BatchShape
from des.cost.roofline import build_roofline
from des.costmodel import decode_shape, prefill_shape
from des.errors import ScenarioError

GPUS = catalog.gpu_names()
MODELS = catalog.model_names()


def work(model, shape: BatchShape, kv_bytes=2.0, w_bytes=2.0):
    """FLOPs and bytes of a step, counted independently of the implementation."""
    L, h = model.num_layers, model.hidden_size
    q = model.num_attention_heads * model.d_head
    kv = model.num_key_value_heads * model.d_head
    layer = h * q + 2 * h * kv + q * h + 3 * h * model.intermediate_size
    t = shape.prefill_tokens + shape.decode_tokens
    flops = (
        2 * L * layer * t
        + 4 * L * q * (shape.prefill_pairs + shape.decode_context)
        + 2 * h * model.vocab_size * shape.num_emitting
    )
    per_token_kv = 2 * L * kv * kv_bytes
    bytes_ = (
        L * layer * w_bytes
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
@given(shape=shapes, gpu=st.sampled_from(GPUS), model=st.sampled_from(MODELS))
def test_no_step_beats_its_flops_at_peak_or_its_bytes_at_full_bandwidth(shape, gpu, model):
    g, m = catalog.gpu(gpu), catalog.model(model)
    r = build_roofline(g, m)
    flops, bytes_ = work(m, shape)
    t = r.step_time(shape)
    assert t >= flops / g.peak_flops("bf16") * (1 - 1e-12)
    assert t >= bytes_ / g.memory_bandwidth * (1 - 1e-12)
    assert t >= g.efficiency.step_overhead


@pytest.mark.parametrize("gpu", GPUS)
def test_monotone_in_batch_context_and_prompt(gpu):
    r = build_roofline(catalog.gpu(gpu), catalog.model("qwen2.5-7b"))
    for ctx in (128, 1024, 8192):
        times = [r.step_time(decode_shape(b, ctx)) for b in range(1, 300, 7)]
        assert all(a <= b for a, b in zip(times, times[1:], strict=False))
    for b in (1, 16, 128):
        times = [r.step_time(decode_shape(b, c)) for c in range(0, 20000, 500)]
        assert all(a < b for a, b in zip(times, times[1:], strict=False))
    times = [r.step_time(prefill_shape(p)) for p in range(1, 9000, 250)]
    assert all(a < b for a, b in zip(times, times[1:], strict=False))


def test_ridge_point_of_4090_qwen_7b_is_near_160_tokens():
    r = build_roofline(catalog.gpu("rtx4090"), catalog.model("qwen2.5-7b"))
    assert 145 <= r.ridge_tokens <= 175
    # below the ridge a decode step is bandwidth-bound: 8x the batch costs < 10 % more
    assert r.step_time(decode_shape(16, 512)) < 1.1 * r.step_time(decode_shape(2, 512))
    # above it, compute-bound: doubling the batch nearly doubles the linear-layer time
    t1, t2 = r.step_time(decode_shape(400, 64)), r.step_time(decode_shape(800, 64))
    assert t2 / t1 > 1.8


PUBLISHED_KV = {
    "qwen2.5-7b": 57_344,
    "qwen2.5-14b": 196_608,
    "llama-3.1-8b": 131_072,
    "llama-2-7b": 524_288,
    "mistral-7b": 131_072,
}


@pytest.mark.parametrize("name", MODELS)
def test_memory_arithmetic_for_every_catalog_model(name):
    m = catalog.model(name)
    # published totals are rounded to three significant figures
    assert m.num_params == pytest.approx(m.published_params, rel=0.006)
    assert m.kv_bytes_per_token() == PUBLISHED_KV[name]
    assert m.kv_bytes_per_token(1) == PUBLISHED_KV[name] // 2
    assert weight_bytes(m) == 2 * m.num_params
    linear = m.num_layers * m.layer_linear_params
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
    left = int(g.memory_bytes * 0.92) - weight_bytes(m) - p92.activations - g.runtime_reserve_bytes
    assert p92.num_blocks == left // (57_344 * 16)
    assert p90.num_blocks < p92.num_blocks
    assert plan_memory(g, m, precision=Precision(kv_cache_dtype="fp8")).num_blocks >= 2 * p92.num_blocks - 1
    assert plan_memory(g, m, tp=2).num_blocks > 2 * p92.num_blocks  # weights split, budgets add
    with pytest.raises(ScenarioError, match="does not fit"):
        plan_memory(g, catalog.model("qwen2.5-14b"))  # 29.5 GB of bf16 weights on a 24 GB card


def test_single_request_decode_and_prefill_on_the_4090_within_the_measured_bands():
    g = catalog.gpu("rtx4090")
    llama2 = catalog.model("llama-2-7b")
    engine_free = g.efficiency.model_copy(update={"step_overhead": 0.0})
    # llama.cpp tg128 Llama-2-7B F16: 61.0 tok/s measured (~82 % of bandwidth)
    r = build_roofline(g, llama2, Precision(weights="fp16"), efficiency=engine_free)
    assert 1 / r.step_time(decode_shape(1, 64)) == pytest.approx(61.0, rel=0.05)
    # the same weights at the copy bandwidth (895-924 GB/s) would be 66-69 tok/s: the model is below
    assert 1 / r.step_time(decode_shape(1, 64)) < 13.48e9**-1 * 895e9
    # a vLLM-style engine on Qwen2.5-7B: bigger weights and 3 ms of CPU per step
    q = build_roofline(g, catalog.model("qwen2.5-7b"))
    assert 40 < 1 / q.step_time(decode_shape(1, 512)) < 55
    # bf16 prefill (fp32 accumulate, 165 TFLOP/s) is slower than llama.cpp's fp16-accumulate 11,048 tok/s
    pp = 512 / build_roofline(g, llama2, Precision(weights="fp16"), efficiency=engine_free).step_time(
        prefill_shape(512)
    )
    assert 0.6 * 11_048 < pp < 11_048
    assert 0.150 < q.step_time(prefill_shape(2048)) < 0.300


@pytest.mark.parametrize("gpu", ["rtx4090", "h100-80gb"])
def test_tensor_parallel_halves_the_work_and_adds_exactly_its_all_reduces(gpu):
    g, m = catalog.gpu(gpu), catalog.model("qwen2.5-14b")
    r1, r2 = build_roofline(g, m, tp=1), build_roofline(g, m, tp=2)
    for shape in (decode_shape(32, 1000), prefill_shape(2048), _shape([(100, 512)], [300] * 20)):
        b1, b2 = r1.breakdown(shape), r2.breakdown(shape)
        for group in ("linear", "attention_prefill", "attention_decode", "lm_head", "kv_write"):
            assert b2[group][0] == pytest.approx(b1[group][0] / 2)
            assert b2[group][1] == pytest.approx(b1[group][1] / 2)
        tokens = shape.prefill_tokens + shape.decode_tokens
        allreduce = (
            2
            * m.num_layers
            * (g.interconnect_latency + 2 * (2 - 1) / 2 * tokens * m.hidden_size * 2 / g.interconnect_bandwidth)
        )
        assert b2["allreduce"][1] == pytest.approx(allreduce)
        halves = sum(max(b1[k]) for k in ("linear", "attention_prefill", "attention_decode", "lm_head", "kv_write")) / 2
        assert r2.step_time(shape) == pytest.approx(halves + allreduce + g.efficiency.step_overhead)


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
    with pytest.raises(ScenarioError, match="valid: llama-2-7b"):
        catalog.model("gpt-5")


def test_costmodel_command(tmp_path):
    png = tmp_path / "roof.png"
    out = subprocess.run(
        [sys.executable, "-m", "des.cli", "costmodel", "--gpu", "rtx4090", "--model", "qwen2.5-7b", "--plot", str(png)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "ridge" in out.stdout and "122,448" in out.stdout and "decode step" in out.stdout
    assert png.stat().st_size > 20_000
    bad = subprocess.run(
        [sys.executable, "-m", "des.cli", "costmodel", "--gpu", "v100"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: --gpu") and "rtx4090" in bad.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "des.cli", "costmodel", "--model", "qwen2.5-14b"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "does not fit" in bad.stderr and "Traceback" not in bad.stderr
