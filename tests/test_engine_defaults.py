"""The engine settings a scenario leaves out are vLLM's for its GPU and entry point
(des/engine/defaults.py, read from vLLM 0.19.1's EngineArgs.get_batch_defaults and
_set_default_max_num_seqs_and_batched_tokens_args)."""

from __future__ import annotations

import pytest

import des
from des import catalog
from des.engine.defaults import VLLM_DEFAULTS, VLLM_RELEASE, engine_defaults


def settings(gpu: str, frontend: str = "api_server", *sets: str) -> tuple[int, int, float]:
    """(max_num_seqs, max_num_batched_tokens, gpu_memory_utilization) the scenario's pool runs."""
    sc = des.load_scenario(None, [f"gpu={gpu}", f"serving.frontend={frontend}", *sets])
    policy = sc.layout.pools[0].policy
    return policy.max_batch, policy.profile_tokens, policy.gpu_memory_utilization


@pytest.mark.parametrize(
    ("gpu", "api_server", "engine"),
    [
        ("rtx4090", (256, 2048), (256, 8192)),  # 24 GiB
        ("l40s", (256, 2048), (256, 8192)),  # 45 GiB
        ("a100-80gb", (256, 2048), (256, 8192)),  # 80 GiB, but vLLM keeps an A100 on the small values
        ("h100-80gb", (1024, 8192), (1024, 16384)),  # 79.6 GiB as CUDA reports it
        ("h200", (1024, 8192), (1024, 16384)),
        ("rtx-pro-6000", (1024, 8192), (1024, 16384)),  # 96 GiB: large by memory, whatever its class
        ("mi300x", (1024, 8192), (1024, 16384)),
    ],
)
def test_each_gpu_and_entry_point_gets_vllms_defaults(gpu, api_server, engine):
    assert settings(gpu) == (*api_server, 0.9)
    assert settings(gpu, "engine") == (*engine, 0.9)


def test_a_value_the_scenario_sets_is_never_replaced():
    assert settings("h100-80gb", "api_server", "scheduler.max_num_seqs=64") == (64, 8192, 0.9)
    assert settings("h100-80gb", "api_server", "scheduler.gpu_memory_utilization=0.95")[2] == 0.95
    # a pool's own setting wins over both
    pool = ["scheduler.max_num_seqs=64", "cluster.pools.0.scheduler.max_num_seqs=32"]
    assert settings("rtx4090", "api_server", *pool)[0] == 32
    # a token budget set below vLLM's sequences caps them, as vLLM does (max_num_seqs <= budget)
    assert settings("h100-80gb", "api_server", "scheduler.max_num_batched_tokens=512") == (512, 512, 0.9)


def test_without_chunked_prefill_the_budget_holds_a_whole_context():
    """vLLM raises an unset budget to max_model_len when chunked prefill is off, and caps it at
    max_num_seqs x max_model_len."""
    h100 = catalog.gpu("h100-80gb")
    off = engine_defaults({"enable_chunked_prefill": False}, h100, "api_server", 32768)
    assert off.values["max_num_batched_tokens"] == 32768 and off.values["max_num_seqs"] == 1024
    short = engine_defaults({"max_num_seqs": 2}, h100, "api_server", 1024)
    assert short.values == {"gpu_memory_utilization": 0.9, "max_num_batched_tokens": 2048}
    assert settings("rtx4090", "api_server", "scheduler.enable_chunked_prefill=false")[1] == 32768  # Qwen2.5-7B


def test_the_run_says_which_defaults_it_applied_and_why():
    applied = engine_defaults({}, catalog.gpu("a100-80gb"), "engine", 32768)
    line = applied.describe()
    assert line.startswith("gpu_memory_utilization 0.9, max_num_batched_tokens 8192, max_num_seqs 256")
    assert f"vLLM {VLLM_RELEASE}'s defaults for the LLM class" in line and "an A100" in line
    given = engine_defaults(
        {"max_num_seqs": 8, "max_num_batched_tokens": 64, "gpu_memory_utilization": 0.5},
        catalog.gpu("h100-80gb"),
        "api_server",
        32768,
    )
    assert given.values == {} and given.describe().startswith("none")
    sc = des.load_scenario(None, ["horizon.duration=5", "warmup=0", "workload.arrival.rate=1"])
    summary = des.simulate(sc).summary
    assert summary["engine_defaults"] == sc.deployment.engine_defaults
    assert (
        "max_num_seqs 256" in summary["engine_defaults"] and "rtx4090: 24.0 GiB < 70 GiB" in summary["engine_defaults"]
    )
    # every setting stated: nothing applied
    stated = ["scheduler.max_num_seqs=8", "scheduler.max_num_batched_tokens=64", "scheduler.gpu_memory_utilization=0.9"]
    assert des.load_scenario(None, stated).deployment.engine_defaults == "none"


def test_the_release_table_is_the_one_read():
    table = VLLM_DEFAULTS[VLLM_RELEASE]
    assert VLLM_RELEASE == "0.19.1" and table.large_memory == 70 * (1 << 30) and table.small_names == ("a100",)
    assert table.gpu_memory_utilization == 0.9
