"""The ``vllm serve`` commands of a scenario (des.plan.launch): exact commands for the
default and a disaggregated scenario, every option name and value checked against what
vLLM 0.19.1's source defines (des.plan.vllm_args) over a grid of shapes, and one error line
for each scenario no vLLM server is."""

from __future__ import annotations

import json
import shlex

import pytest

import des
from des import catalog
from des.catalog.precision import Precision
from des.errors import ScenarioError
from des.plan.launch import LaunchCommand, checkpoint, hf_repo, launch_commands
from des.plan.vllm_args import (
    ALL2ALL_BACKENDS,
    ENGINE_FLAGS,
    KV_CACHE_DTYPES,
    KV_CONNECTORS,
    KV_ROLES,
    KV_TRANSFER_KEYS,
    MODEL_DTYPES,
    QUANTIZATION_METHODS,
    SPECULATIVE_CONFIG_KEYS,
    SPECULATIVE_METHODS,
    VLLM_SERVE_FLAGS,
)

#: The engine settings every command states (the default scenario leaves the batching settings and the
#: memory share to `vllm serve`'s defaults on an RTX 4090: des.engine.defaults).
ENGINE = [
    "--tensor-parallel-size", "1", "--pipeline-parallel-size", "1", "--data-parallel-size", "1",
    "--max-num-seqs", "256", "--max-num-batched-tokens", "2048", "--gpu-memory-utilization", "0.9",
    "--block-size", "16", "--max-model-len", "32768", "--enable-chunked-prefill", "--enable-prefix-caching",
    "--max-cudagraph-capture-size", "512",
]  # fmt: skip
NIXL = ["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}']

MOE_H100 = ["gpu=h100-80gb", "model=qwen3-30b-a3b"]
DISAGGREGATED = [
    "scheduler.kind=disaggregated",
    "scheduler.decode.instances=2",
    "scheduler.decode.max_num_seqs=512",
    "scheduler.prefill.enable_prefix_caching=false",
]

#: Shapes of scenario the commands must cover: name -> overrides of the default scenario.
GRID: dict[str, list[str]] = {
    "default": [],
    "replicas": ["cluster.replicas=3", "cluster.router=least_outstanding"],
    "tp2": ["cluster.tp=2"],
    "pp2": ["cluster.pp=2"],
    "dp2-ep-moe": [*MOE_H100, "cluster.dp=2", "cluster.expert_parallel=true"],
    "dp2-ep-all-to-all": [
        *MOE_H100, "cluster.dp=2", "cluster.expert_parallel=true", "cluster.all2all_backend=all_to_all",
    ],
    "awq-variant": ["precision.weights=int4-awq"],
    "gptq-variant-moe": [*MOE_H100, "precision.weights=int4-gptq"],
    "fp8-variant": ["gpu=h100-80gb", "model=qwen3-8b", "precision.weights=fp8"],
    "fp8-online": ["gpu=h100-80gb", "model=llama-3.1-8b", "precision.weights=fp8"],
    "fp16": ["precision.weights=fp16"],
    "fp8-kv": ["precision.kv_cache_dtype=fp8"],
    "mxfp4-native": ["gpu=h100-80gb", "model=gpt-oss-20b"],
    "ngram": ["scheduler.speculative={method: ngram, num_speculative_tokens: 3, acceptance_rate: 0.6}"],
    "draft": [
        "scheduler.speculative={method: draft, model: qwen2.5-0.5b, num_speculative_tokens: 4, acceptance_rate: 0.7}"
    ],
    "eagle": [
        "scheduler.speculative={method: eagle, model: yuhuili/EAGLE-Qwen2-7B-Instruct, num_speculative_tokens: 2, "
        "acceptance_rate: 0.7}"
    ],
    "mtp": [
        "gpu=h200", "model=deepseek-v3", "cluster.tp=8",
        "scheduler.speculative={method: mtp, num_speculative_tokens: 1, acceptance_rate: 0.8}",
    ],
    "disaggregated": DISAGGREGATED,
    "disaggregated-unlike-gpus": [
        "gpu=h100-80gb", "model=llama-3.1-8b", "scheduler.kind=disaggregated", "scheduler.decode.gpu=a100-80gb",
        "scheduler.decode.tp=2", "scheduler.kv_transfer={path: rdma}",
    ],
    "enforce-eager": ["cost_model.enforce_eager=true"],
    "no-async-graph-memory": ["cost_model.async_scheduling=false", "cost_model.estimate_cudagraph_memory=true"],
    "serving": ["serving={stream_interval: 4, api_server_count: 2}"],
    "limits": ["scheduler.max_model_len=8192", "scheduler.num_gpu_blocks_override=1000"],
    "no-chunking": ["scheduler.enable_chunked_prefill=false", "scheduler.max_model_len=2048"],
    "constant-cost": ["cost_model={kind: constant, step_time: 0.02}"],
    "inline-gpu": ["gpu={base: rtx4090, name: my-card, memory_bytes: 25769803776}"],
}  # fmt: skip


def commands(overrides: list[str]) -> list[LaunchCommand]:
    return launch_commands(des.load_scenario(None, overrides))


def flags(cmd: LaunchCommand) -> dict[str, str | None]:
    """The command's options by name, each with its value (None: a switch)."""
    out: dict[str, str | None] = {}
    args = cmd.argv[3:]
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            nxt = args[i + 1] if i + 1 < len(args) else None
            out[arg] = None if nxt is None or nxt.startswith("--") else nxt
    return out


@pytest.fixture(scope="module")
def grid() -> dict[str, list[LaunchCommand]]:
    return {name: commands(overrides) for name, overrides in GRID.items()}


def test_default_scenario_command() -> None:
    (cmd,) = launch_commands(des.load_scenario(None))
    assert (cmd.role, cmd.instances, cmd.gpu, cmd.gpus_per_instance) == ("colocated", 1, "rtx4090", 1)
    assert cmd.argv == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", *ENGINE]
    assert cmd.env == {} and cmd.note == ""
    assert cmd.text == "vllm serve Qwen/Qwen2.5-7B-Instruct " + " ".join(ENGINE)


def test_disaggregated_commands() -> None:
    prefill, decode = commands(DISAGGREGATED)
    assert (prefill.role, prefill.instances, prefill.gpu) == ("prefill", 1, "rtx4090")
    assert (decode.role, decode.instances, decode.gpu) == ("decode", 2, "rtx4090")
    no_caching = [a if a != "--enable-prefix-caching" else "--no-enable-prefix-caching" for a in ENGINE]
    assert prefill.argv == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", *no_caching, *NIXL]
    more_seqs = [a if a != "256" else "512" for a in ENGINE]
    assert decode.argv == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", *more_seqs, *NIXL]
    for cmd in (prefill, decode):
        assert "toy_proxy_server.py" in cmd.note and "first_token_from" in cmd.note
    assert "round-robin, des routes least_kv" in decode.note and "round-robin" not in prefill.note  # 1 prefill
    assert "'" + NIXL[1] + "'" in prefill.text  # the JSON is one shell word


@pytest.mark.parametrize("name", GRID)
def test_every_option_is_vllms(grid: dict[str, list[LaunchCommand]], name: str) -> None:
    """Every option any command emits is one vLLM 0.19.1 defines, with a value it accepts,
    and the shell line splits back into the arguments."""
    for cmd in grid[name]:
        assert cmd.argv[:2] == ["vllm", "serve"] and "/" in cmd.argv[2]
        used = flags(cmd)
        assert set(used) <= VLLM_SERVE_FLAGS, set(used) - VLLM_SERVE_FLAGS
        assert not [a for a in cmd.argv[3:] if a.startswith("-") and not a.startswith("--")]  # no short aliases
        assert used.get("--kv-cache-dtype", "auto") in KV_CACHE_DTYPES
        assert used.get("--quantization", "fp8") in QUANTIZATION_METHODS
        assert used.get("--dtype", "auto") in MODEL_DTYPES
        assert used.get("--all2all-backend", "naive") in ALL2ALL_BACKENDS
        spec = json.loads(used.get("--speculative-config") or '{"method": "ngram"}')
        assert spec["method"] in SPECULATIVE_METHODS and set(spec) <= SPECULATIVE_CONFIG_KEYS
        kv = json.loads(used.get("--kv-transfer-config") or '{"kv_role": "kv_both", "kv_connector": "NixlConnector"}')
        assert kv["kv_role"] in KV_ROLES and kv["kv_connector"] in KV_CONNECTORS and set(kv) <= KV_TRANSFER_KEYS
        assert shlex.split(cmd.text) == cmd.argv
        assert json.loads(json.dumps(cmd.as_dict()))["argv"] == cmd.argv
        assert len(cmd.servers) == cmd.instances
        for server in cmd.servers:  # each server: the pool's command on a port of its own
            assert server.argv == [*cmd.argv, "--port", str(server.port)] and "--port" in VLLM_SERVE_FLAGS
            assert shlex.split(server.shell)[len(server.env) :] == server.argv


def test_flag_set_is_vllm_0_19() -> None:
    """The set is vLLM 0.19's: options removed before it are not there, its own are."""
    for gone in ("--speculative-model", "--num-scheduler-steps", "--use-v2-block-manager", "--disable-log-requests"):
        assert gone not in VLLM_SERVE_FLAGS
    assert {"--max-cudagraph-capture-size", "--stream-interval", "--all2all-backend"} <= ENGINE_FLAGS
    assert {"--no-enable-chunked-prefill", "--no-enable-prefix-caching", "--no-async-scheduling"} <= VLLM_SERVE_FLAGS


def test_parallel_splits(grid: dict[str, list[LaunchCommand]]) -> None:
    (tp2,), (pp2,), (dp2,), (a2a,) = grid["tp2"], grid["pp2"], grid["dp2-ep-moe"], grid["dp2-ep-all-to-all"]
    assert flags(tp2)["--tensor-parallel-size"] == "2" and tp2.gpus_per_instance == 2
    assert flags(pp2)["--pipeline-parallel-size"] == "2" and pp2.gpus_per_instance == 2
    assert dp2.argv[2] == "Qwen/Qwen3-30B-A3B" and dp2.gpus_per_instance == 2
    assert flags(dp2)["--data-parallel-size"] == "2" and "--enable-expert-parallel" in dp2.argv
    assert flags(dp2)["--all2all-backend"] == "allgather_reducescatter"
    assert flags(a2a)["--all2all-backend"] == "deepep_high_throughput"
    (replicas,) = grid["replicas"]
    assert replicas.instances == 3 and "least_outstanding" in replicas.note
    prefill, decode = grid["disaggregated-unlike-gpus"]
    assert (prefill.gpu, prefill.gpus_per_instance, decode.gpu, decode.gpus_per_instance) == (
        "h100-80gb", 1, "a100-80gb", 2,
    )  # fmt: skip
    assert flags(decode)["--tensor-parallel-size"] == "2"


def test_checkpoints(grid: dict[str, list[LaunchCommand]]) -> None:
    """Variants by repository without --quantization (vLLM reads their format from the
    config), fp8 of a bf16 original quantised as it loads, fp16 as a dtype."""
    (awq,), (gptq,), (fp8,), (online,) = (
        grid["awq-variant"],
        grid["gptq-variant-moe"],
        grid["fp8-variant"],
        grid["fp8-online"],
    )
    assert awq.argv[2] == "Qwen/Qwen2.5-7B-Instruct-AWQ" and "--quantization" not in awq.argv
    assert gptq.argv[2] == "Qwen/Qwen3-30B-A3B-GPTQ-Int4" and "--quantization" not in gptq.argv
    assert fp8.argv[2] == "Qwen/Qwen3-8B-FP8" and "--quantization" not in fp8.argv
    assert online.argv[2] == "meta-llama/Llama-3.1-8B-Instruct" and flags(online)["--quantization"] == "fp8"
    (fp16,), (mxfp4,), (kv,) = grid["fp16"], grid["mxfp4-native"], grid["fp8-kv"]
    assert fp16.argv[2] == "Qwen/Qwen2.5-7B-Instruct" and flags(fp16)["--dtype"] == "float16"
    assert mxfp4.argv[2] == "openai/gpt-oss-20b" and "--quantization" not in mxfp4.argv
    assert flags(kv)["--kv-cache-dtype"] == "fp8"
    assert "--kv-cache-dtype" not in grid["default"][0].argv


def test_every_catalog_checkpoint_resolves() -> None:
    """Every catalog model has a repository for its own format, and each variant is its own."""
    for name in catalog.model_names():
        model = catalog.model(name)
        repo, extra = checkpoint(model, Precision.model_validate(model.default_precision or {}))
        assert repo == hf_repo(model) and extra == [], name
        for variant in model.variants:
            assert checkpoint(model, Precision.model_validate(variant.precision)) == (variant.repo, [])


def test_speculative_config(grid: dict[str, list[LaunchCommand]]) -> None:
    def spec(name: str) -> dict:
        return json.loads(flags(grid[name][0])["--speculative-config"] or "")

    assert spec("ngram") == {"method": "ngram", "num_speculative_tokens": 3}
    assert spec("draft") == {
        "method": "draft_model",
        "model": "Qwen/Qwen2.5-0.5B-Instruct",
        "num_speculative_tokens": 4,
    }
    assert spec("eagle") == {"method": "eagle", "model": "yuhuili/EAGLE-Qwen2-7B-Instruct", "num_speculative_tokens": 2}
    assert spec("mtp") == {"method": "mtp", "num_speculative_tokens": 1}
    assert "--speculative-config" not in commands(["scheduler.speculative={method: ngram, num_speculative_tokens: 0, "
                                                  "acceptance_rate: 0.5}"])[0].argv  # fmt: skip


def test_engine_settings(grid: dict[str, list[LaunchCommand]]) -> None:
    (eager,), (noasync,), (serving,), (limits,), (nochunk,) = (
        grid[n] for n in ("enforce-eager", "no-async-graph-memory", "serving", "limits", "no-chunking")
    )
    assert "--enforce-eager" in eager.argv and "--max-cudagraph-capture-size" not in eager.argv
    assert "--no-async-scheduling" in noasync.argv and noasync.env == {"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "1"}
    assert noasync.shell == "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 " + noasync.text
    assert (flags(serving)["--stream-interval"], flags(serving)["--api-server-count"]) == ("4", "2")
    assert (flags(limits)["--max-model-len"], flags(limits)["--num-gpu-blocks-override"]) == ("8192", "1000")
    assert "--no-enable-chunked-prefill" in nochunk.argv and "--enable-chunked-prefill" not in nochunk.argv
    (inline,) = grid["inline-gpu"]
    assert inline.gpu == "my-card"


def test_api_servers_per_data_parallel_engine() -> None:
    """des gives every data-parallel engine its own front-end: 2 per engine over 2 ranks are 4."""
    (cmd,) = commands([*MOE_H100, "cluster.dp=2", "cluster.expert_parallel=true", "serving.api_server_count=2"])
    assert flags(cmd)["--api-server-count"] == "4"


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        (["scheduler={kind: static, max_batch_size: 8}"], "scheduler.kind", "static batching"),
        (["serving.frontend=engine"], "serving.frontend", "LLM class"),
        (
            [
                "model={num_layers: 28, hidden_size: 3584, intermediate_size: 18944, num_attention_heads: 28, "
                "num_key_value_heads: 4, vocab_size: 152064}"
            ],
            "model.source",
            "no Hugging Face repository",
        ),
        (["model={base: qwen2.5-7b, num_layers: 20}"], "model", "num_layers differs"),
        (["model={base: qwen2.5-7b, num_layers: 20}", "precision.weights=int4-awq"], "model", "its variants"),
        (
            ["model=llama-3.1-8b", "scheduler.max_model_len=32768", "precision.weights=int4-awq"],
            "precision.weights",
            "only to fp8",
        ),
        (
            ["scheduler.kind=disaggregated", "scheduler.kv_transfer={mode: push}"],
            "scheduler.kv_transfer.mode",
            "NixlConnector",
        ),
        ([*MOE_H100, "cluster.dp=2", "cluster.all2all_backend=all_to_all"], "cluster.all2all_backend", "expert"),
    ],
)
def test_unlaunchable_scenarios(overrides: list[str], field: str, words: str) -> None:
    """A scenario des runs but no vLLM server is: one problem, naming the field."""
    scenario = des.load_scenario(None, overrides)
    with pytest.raises(ScenarioError) as err:
        launch_commands(scenario)
    ((path, message),) = err.value.problems
    assert path == field and words in message, message


def test_inline_model_with_its_own_repository() -> None:
    """An inline model is launched from the repository its source names; one whose base
    changes only descriptive fields (its context) is still the catalog's checkpoint."""
    own = commands([
        "model={base: qwen2.5-7b, name: my-qwen, num_layers: 20, source: 'https://huggingface.co/me/qwen-20l'}"
    ])  # fmt: skip
    assert own[0].argv[2] == "me/qwen-20l"
    (shorter,) = commands(["model={base: qwen2.5-7b, max_model_len: 8192}"])
    assert shorter.argv[2] == "Qwen/Qwen2.5-7B-Instruct" and flags(shorter)["--max-model-len"] == "8192"


def _placed(cmds: list[LaunchCommand]) -> list[tuple[str, int, dict[str, str], int]]:
    return [(c.role, s.node, s.env, s.port) for c in cmds for s in c.servers]


def test_servers_sharing_a_node_get_their_own_devices_and_ports() -> None:
    """A split on one 8-GPU machine: each server its own consecutive GPUs, API port and NIXL
    side-channel port (docs/features/nixl_connector_usage.md's same-host example), as a
    shell line; on AMD GPUs the device list is HIP_VISIBLE_DEVICES."""
    from des.plan.space import Candidate

    base = des.load_scenario(None, ["gpu=mi300x", "model=llama-3.1-70b", "cluster.tp=4"]).resolved()
    split = Candidate("mi300x", 4, "disaggregated", prefill_instances=1, decode_instances=1).overrides(base)
    prefill, decode = launch_commands(des.load_scenario(split))
    assert _placed([prefill, decode]) == [
        ("prefill", 0, {"HIP_VISIBLE_DEVICES": "0,1,2,3", "VLLM_NIXL_SIDE_CHANNEL_PORT": "5600"}, 8000),
        ("decode", 0, {"HIP_VISIBLE_DEVICES": "4,5,6,7", "VLLM_NIXL_SIDE_CHANNEL_PORT": "5601"}, 8001),
    ]
    assert decode.servers[0].shell.startswith(
        "HIP_VISIBLE_DEVICES=4,5,6,7 VLLM_NIXL_SIDE_CHANNEL_PORT=5601 vllm serve meta-llama/Llama-3.1-70B-Instruct "
    ) and decode.servers[0].shell.endswith(" --port 8001")
    # on NVIDIA GPUs, CUDA_VISIBLE_DEVICES; a third server overflows onto a second machine
    cuda = launch_commands(des.load_scenario(None, DISAGGREGATED + ["cluster.tp=4"]))
    assert _placed(cuda) == [
        ("prefill", 0, {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "VLLM_NIXL_SIDE_CHANNEL_PORT": "5600"}, 8000),
        ("decode", 0, {"CUDA_VISIBLE_DEVICES": "4,5,6,7", "VLLM_NIXL_SIDE_CHANNEL_PORT": "5601"}, 8001),
        ("decode", 1, {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "VLLM_NIXL_SIDE_CHANNEL_PORT": "5600"}, 8000),
    ]
    # data-parallel ranks take a side-channel port each (base + dp_rank); colocated servers need none
    moe = commands([*MOE_H100, "cluster.dp=2", "cluster.expert_parallel=true", "cluster.replicas=2"])
    assert _placed(moe) == [
        ("colocated", 0, {"CUDA_VISIBLE_DEVICES": "0,1"}, 8000),
        ("colocated", 0, {"CUDA_VISIBLE_DEVICES": "2,3"}, 8001),
    ]
    from des.plan.launch import place

    [wide] = place([LaunchCommand("decode", 2, "h100-80gb", ["vllm", "serve", "m", "--data-parallel-size", "2"],
                                  gpus_per_instance=2)], nixl=True)  # fmt: skip
    assert [s.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] for s in wide.servers] == ["5600", "5602"]


def test_the_plan_prints_each_servers_line() -> None:
    from des.render.plan import answer_text

    cmds = [c.as_dict() for c in commands(DISAGGREGATED)]
    win = {"slo_metrics": {}, "cost_per_million_tokens": 1.0, "kwh_per_million_tokens": 1.0, "launch": cmds}
    verdicts = {"pass": 1, "marginal": 0, "fail": 0, "pruned": 0}
    body = {"answer": "x", "winner": win, "verdicts": verdicts, "pruned": {}, "candidates": 1, "simulated": 1}
    launched = [line for line in answer_text(body).splitlines() if line.startswith("  launch")]
    assert [line.split(" vllm serve ")[0] for line in launched] == [
        "  launch prefill CUDA_VISIBLE_DEVICES=0 VLLM_NIXL_SIDE_CHANNEL_PORT=5600",
        "  launch decode CUDA_VISIBLE_DEVICES=1 VLLM_NIXL_SIDE_CHANNEL_PORT=5601",
        "  launch decode CUDA_VISIBLE_DEVICES=2 VLLM_NIXL_SIDE_CHANNEL_PORT=5602",
    ]
    assert [line.rsplit(" ", 1)[-1] for line in launched] == ["8000", "8001", "8002"]
