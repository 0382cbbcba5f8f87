"""The catalog entries of the models deployed now (gpt-oss-20b and -120b, DeepSeek-V3, Llama 4
Scout, a Qwen2.5 draft model) and their quantised variants: counted parameters against the
published ones, native weight formats, and what fits where."""

from __future__ import annotations

import math

import pytest
import yaml

import des
from des import catalog
from des.catalog.memory import plan_memory, weight_bytes
from des.catalog.precision import WEIGHT_BYTES, Precision
from des.errors import ScenarioError
from tests.helpers import des_cli

NEW = ["gpt-oss-20b", "gpt-oss-120b", "deepseek-v3", "llama-4-scout", "qwen2.5-0.5b"]


def scenario(**changes):
    base = {
        "seed": 0,
        "gpu": "rtx4090",
        "horizon": {"num_requests": 60},
        "workload": {
            "arrival": {"process": "poisson", "rate": 2.0},
            "prompt_tokens": {"dist": "fixed", "value": 512},
            "output_tokens": {"dist": "fixed", "value": 64},
        },
    }
    return {**base, **changes}


@pytest.mark.parametrize("name", NEW)
def test_new_entries_count_their_published_parameters(name):
    """Within the tolerances of the existing catalog tests: 0.6 % on the total
    (tests/test_roofline.py), 2 % on the active count (tests/test_moe.py), as the card counts it."""
    m = catalog.model(name)
    assert m.source.startswith("https://huggingface.co/")
    assert m.num_params == pytest.approx(m.published_params, rel=0.006)
    if m.published_active_params is not None:
        assert m.published_active_counted == pytest.approx(m.published_active_params, rel=0.02)


def test_gpt_oss_totals_are_the_cards_to_four_figures():
    assert catalog.model("gpt-oss-20b").num_params == pytest.approx(20.91e9, rel=5e-4)
    assert catalog.model("gpt-oss-120b").num_params == pytest.approx(116.83e9, rel=5e-4)
    # the card's active count leaves out the embedding lookup and keeps the LM head
    m = catalog.model("gpt-oss-120b")
    assert m.active_params - m.embedding_params == pytest.approx(5.13e9, rel=0.01)


def test_deepseek_v3_layers_experts_and_mtp_module():
    m = catalog.model("deepseek-v3")
    assert m.num_dense_layers == 3 and m.num_moe_layers == 58
    assert m.num_shared_experts == 1 and m.num_experts == 256 and m.num_experts_per_tok == 8
    # README_WEIGHTS.md: the MTP module adds 11.5B parameters of its own (embedding and head shared)
    assert m.mtp_params == pytest.approx(11.5e9, rel=0.02)
    assert m.default_precision == {"weights": "fp8"}


def test_llama_4_scout_attends_within_chunks_on_three_layers_of_four():
    m = catalog.model("llama-4-scout")
    assert m.attention_chunk_size == 8192 and m.window == 8192
    assert m.window_layers == 36 and m.full_layers == 12
    assert m.num_experts_per_tok == 1 and m.num_shared_experts == 1
    # the vision tower is resident but never runs for text: in the total, not the active count
    assert m.num_params - m.active_params > m.vision_params > 0


def test_gpt_oss_runs_its_mxfp4_experts_unless_told_otherwise():
    s = des.load_scenario(scenario(model="gpt-oss-20b"))
    assert s.precision == Precision(weights="mxfp4", quantized_layers="experts")
    # naming the native weights is the same; naming others replaces them whole
    same = des.load_scenario(scenario(model="gpt-oss-20b", precision={"weights": "mxfp4"}))
    assert same.precision == s.precision
    fp8_kv = des.load_scenario(scenario(model="gpt-oss-20b", precision={"kv_cache_dtype": "fp8"}))
    assert fp8_kv.precision == Precision(weights="mxfp4", quantized_layers="experts", kv_cache_dtype="fp8")
    m = catalog.model("gpt-oss-20b")
    experts = 24 * 32 * 3 * 2880 * 2880
    assert weight_bytes(m, s.precision) == round(experts * (0.5 + 1 / 32) + (m.num_params - experts) * 2)
    # bf16 is the dequantised checkpoint, every layer in bf16: 42 GB, no 4090 holds it
    assert weight_bytes(m, Precision(weights="bf16")) == 2 * m.num_params
    with pytest.raises(ScenarioError) as info:
        des.load_scenario(scenario(model="gpt-oss-20b", precision={"weights": "bf16"}))
    where, message = info.value.problems[0]
    assert where == "model" and "does not fit on 1 x rtx4090" in message


def test_gpt_oss_20b_in_mxfp4_fits_a_4090_with_kv_left():
    s = des.load_scenario(scenario(model="gpt-oss-20b"))
    plan = s.memory_plan()
    assert plan.weights < 14e9  # 12.8 GiB: 4.25-bit experts, bf16 attention and embeddings
    # the 12 full-attention layers hold 2 x 8 heads x 64 x 2 bytes per token each; the 12
    # sliding ones 144 tokens (9 blocks) for each of the max_num_seqs sequences (256: vllm serve's on a 4090)
    full_layer = 2 * 8 * 64 * 2
    assert s.layout.pools[0].policy.max_batch == 256
    reserve = 256 * 144 * 12 * full_layer
    left = plan.budget - plan.non_kv
    assert plan.kv_capacity_tokens == (left - reserve) // (12 * full_layer * 16) * 16
    assert plan.kv_capacity_tokens > 250_000  # 267,952 at vllm serve's 0.9 and 256 sequences
    result = des.simulate(s)
    assert result.summary["num_completed"] == 60 and result.summary["kv_capacity_tokens"] == plan.kv_capacity_tokens


def test_gpt_oss_cost_reads_bf16_attention_and_mxfp4_experts():
    g, m = catalog.gpu("rtx4090"), catalog.model("gpt-oss-20b")
    native = Precision(weights="mxfp4", quantized_layers="experts")
    r, whole = build(g, m, native), build(g, m, Precision(weights="mxfp4"))
    e = g.efficiency
    per_byte = 1 / (g.memory_bandwidth * e.weight_bandwidth)
    assert r.gemm_weight_s == pytest.approx(m.always_linear_params * 2 * per_byte)
    assert r.moe_expert_weight_s == pytest.approx(24 * 3 * 2880 * 2880 * WEIGHT_BYTES["mxfp4"] * per_byte)
    assert whole.gemm_weight_s < r.gemm_weight_s and whole.moe_expert_weight_s == r.moe_expert_weight_s


def build(g, m, p):
    from des.cost.roofline import build_roofline

    return build_roofline(g, m, p)


def test_deepseek_v3_refuses_eight_4090s_in_one_line_with_a_way_out(tmp_path):
    with pytest.raises(ScenarioError) as info:
        des.load_scenario(scenario(model="deepseek-v3", cluster={"tp": 8}))
    (where, message), *rest = info.value.problems
    assert where == "model" and not rest and "\n" not in message
    assert message.startswith("deepseek-v3 does not fit on 8 x rtx4090: weights 626.83 GiB")
    assert "it fits with cluster.tp: 32" in message
    path = tmp_path / "ds.yaml"
    path.write_text(yaml.safe_dump(scenario(model="deepseek-v3", cluster={"tp": 8})))
    out = des_cli("run", str(path))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "does not fit on 8 x rtx4090" in out.stderr


def test_deepseek_v3_fits_eight_h200s_in_its_fp8():
    m = catalog.model("deepseek-v3")
    plan = plan_memory(catalog.gpu("h200"), m, precision=Precision(weights="fp8"), tp=8)
    assert plan.weights == weight_bytes(m, Precision(weights="fp8"))
    # the latent on each of the 8 GPUs: 576 values x 61 layers x 2 bytes x 8
    assert plan.kv_bytes_per_token == 576 * 61 * 2 * 8
    assert plan.kv_capacity_tokens > 100_000


@pytest.mark.parametrize("name", catalog.model_names())
def test_every_variant_names_a_repository_and_a_precision_des_runs(name):
    m = catalog.model(name)
    for v in m.variants:
        assert "/" in v.repo and not v.repo.startswith("http")
        Precision.model_validate(v.precision)
    if m.default_precision is not None:
        assert any(v.precision == m.default_precision for v in m.variants)


def test_the_awq_checkpoints_people_download_are_listed():
    repos = {v.repo: v.precision for name in catalog.model_names() for v in catalog.model(name).variants}
    assert repos["Qwen/Qwen2.5-14B-Instruct-AWQ"] == {"weights": "int4-awq"}
    assert repos["Qwen/Qwen2.5-7B-Instruct-AWQ"] == {"weights": "int4-awq"}
    assert repos["Qwen/Qwen3-30B-A3B-GPTQ-Int4"] == {"weights": "int4-gptq"}
    assert repos["openai/gpt-oss-20b"] == {"weights": "mxfp4", "quantized_layers": "experts"}


def test_qwen_14b_awq_and_the_draft_model_fit_a_4090():
    awq = des.load_scenario(scenario(model="qwen2.5-14b", precision={"weights": "int4-awq"})).memory_plan()
    assert awq.kv_capacity_tokens > 50_000
    draft = catalog.model("qwen2.5-0.5b")
    assert draft.tie_word_embeddings and draft.kv_bytes_per_token() == 2 * 24 * 2 * 64 * 2
    assert math.isclose(weight_bytes(draft), 2 * draft.num_params)
    assert des.load_scenario(scenario(model="qwen2.5-0.5b")).memory_plan().kv_capacity_tokens > 1_000_000


def test_costmodel_shows_gpt_oss_in_its_own_format_by_default():
    out = des_cli("costmodel", "--model", "gpt-oss-20b")
    assert out.returncode == 0, out.stderr
    assert "gpt-oss-20b" in out.stdout and "mxfp4" in out.stdout
    bf16 = des_cli("costmodel", "--model", "gpt-oss-20b", "--weights", "bf16")
    assert bf16.returncode == 2 and "does not fit on 1 x rtx4090" in bf16.stderr


def test_a_native_format_the_gpu_cannot_run_says_it_is_the_models_own():
    with pytest.raises(ScenarioError) as info:
        des.load_scenario(scenario(model="gpt-oss-20b", gpu="mi300x"))
    (where, message), *_ = info.value.problems
    assert where == "precision.weights" and "gpt-oss-20b's own format" in message and "\n" not in message
    # the dequantised checkpoint runs there
    assert des.load_scenario(scenario(model="gpt-oss-20b", gpu="mi300x", precision={"weights": "bf16"}))


def test_a_downloaded_repository_resolves_to_its_catalog_name_and_precision():
    name, v = catalog.find_variant("qwen/qwen2.5-14b-instruct-awq")
    assert name == "qwen2.5-14b" and v.precision == {"weights": "int4-awq"}
    name, v = catalog.find_variant("openai/gpt-oss-120b")
    assert name == "gpt-oss-120b" and v.precision == catalog.model(name).default_precision
    assert len(catalog.variants()) == len({v.repo for _, v in catalog.variants()})  # each repo once
    with pytest.raises(ScenarioError) as info:
        catalog.find_variant("Qwen/Qwen2.5-14B-Instruct-AWK")
    where, message = info.value.problems[0]
    assert where == "model" and "did you mean 'Qwen/Qwen2.5-14B-Instruct-AWQ'" in message


def test_quantising_only_the_experts_of_a_dense_model_is_refused():
    with pytest.raises(ScenarioError) as info:
        des.load_scenario(scenario(model="qwen2.5-7b", precision={"weights": "mxfp4", "quantized_layers": "experts"}))
    where, message = info.value.problems[0]
    assert where == "precision.quantized_layers" and "qwen2.5-7b has none" in message
