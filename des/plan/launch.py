"""The ``vllm serve`` commands a scenario corresponds to: what to run so that the servers
are the engines des simulated.

:func:`launch_commands` turns each pool of ``scenario.layout`` into one
:class:`LaunchCommand`: the colocated pool of ``continuous`` serving, or the prefill and
the decode pool of ``disaggregated`` serving, each started ``instances`` times. Every
option name is vLLM 0.19.1's (:mod:`des.plan.vllm_args`, read from its
``vllm/engine/arg_utils.py``; ``tests/test_launch.py`` checks each emitted name and value
against those sets).

**The checkpoint.** ``vllm serve`` takes a Hugging Face repository, which the catalog holds
in two places: a model's ``variants`` (quantised checkpoints, each with its ``precision``) and
its ``source`` (the URL of the original's ``config.json``: ``https://huggingface.co/ORG/NAME/...``).
A variant whose ``weights`` and ``quantized_layers`` are the scenario's wins; else the
original serves the model's own format (``default_precision``, bf16 if none). vLLM reads an
AWQ, GPTQ, FP8 or MXFP4 repository's format from its ``config.json``
(``quantization_config``: ``ModelConfig._verify_quantization``, ``vllm/config/model.py``) and
picks the kernels itself (``awq_marlin``, ``gptq_marlin`` where the GPU has them), so a
variant needs no ``--quantization``. Two formats have no checkpoint of their own: fp8
weights of a bf16 original are quantised as vLLM loads them (``--quantization fp8``, its
online dynamic FP8, every linear layer), and fp16 weights run the bf16 original with
``--dtype float16``. Any other format without a variant (int4 or int8 of a model the
catalog has no such checkpoint of) cannot be launched and is a :class:`ScenarioError`.

**The engine settings, always stated.** The command states every setting des simulates
with whose vLLM default could differ, so that it reproduces the simulated engine whatever
vLLM's defaults (which move between releases and with the hardware: ``max_num_seqs`` and
``max_num_batched_tokens`` default by GPU and entry point; a setting the scenario leaves out
is the value des resolved from vLLM 0.19.1's defaults, :mod:`des.engine.defaults`):
``--tensor-parallel-size``, ``--pipeline-parallel-size``,
``--data-parallel-size``, ``--max-num-seqs``, ``--max-num-batched-tokens``,
``--gpu-memory-utilization``, ``--block-size``, ``--max-model-len`` (the pool's limit, else
the catalog model's: vLLM would take ``max_position_embeddings`` from the config, which can
differ, e.g. Llama-4-Scout's 10M), ``--[no-]enable-chunked-prefill``,
``--[no-]enable-prefix-caching``, and unless the engine runs eager
``--max-cudagraph-capture-size`` (the largest step the pool's memory plan captures: des's 512
by default, against vLLM's ``min(2 × max_num_seqs × (1 + k), 512)``, ``vllm/config/vllm.py``).
The rest appear when the scenario leaves vLLM's default: ``--enforce-eager``,
``--no-async-scheduling`` (left out, async scheduling is vLLM's own choice: on, but off for
n-gram speculation, ``VllmConfig.__post_init__``, where des still overlaps the CPU's work
unless told not to), ``--kv-cache-dtype fp8``,
``--num-gpu-blocks-override``, ``--enable-expert-parallel`` with ``--all2all-backend`` (the
MoE exchange is vLLM's all-to-all only with expert parallelism over data-parallel ranks,
``FusedMoEParallelConfig.use_all2all_kernels``; des's ``all_to_all`` is DeepEP's dispatch
and combine, ``deepep_high_throughput``, the kernels that take any step size),
``--speculative-config`` (``method``, ``num_speculative_tokens``, ``model`` for a draft or
EAGLE head; des's ``draft`` is vLLM's ``draft_model``; n-gram lookup keeps vLLM's window,
``prompt_lookup_min = max = 5``, which des does not model), ``--stream-interval``, and
``--api-server-count``. des gives every data-parallel engine its own front-end
(:mod:`des.cost.frontend`), so ``serving.api_server_count`` API servers per engine are
``api_server_count × dp`` processes for vLLM, whose default is ``dp``: the option appears
when ``api_server_count`` is above 1. ``serving.frontend: engine`` simulates the ``LLM`` class,
which no ``vllm serve`` command runs (an error). ``cost_model.estimate_cudagraph_memory``
is the environment variable ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1`` (:attr:`LaunchCommand.env`).

**Disaggregated serving** runs vLLM's NIXL connector on both pools,
``--kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'`` (as vLLM's
``docs/features/nixl_connector_usage.md`` starts its prefiller and decoder: the connector does
not tell roles apart, the proxy does), with a proxy in front that sends each request to a
prefill server and then to a decode server: vLLM's
``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`` (``--prefiller-hosts``,
``--decoder-hosts``; it asks a prefill server for one token, unstreamed, then streams the
decode server's answer, which is des's ``first_token_from: decode``, and it picks servers
round-robin) or llm-d. NIXL pulls the KV when the prompt is done, which is des's
``kv_transfer.mode: pull``; ``push`` and ``layerwise`` overlap are other engines' (SGLang,
Dynamo, Mooncake) and an error here. Each pool's ``instances`` are its servers
(the pool's ``instances``); under an autoscaler, those serving at t = 0.

**Servers on a node.** Servers that share a machine need their own GPUs, their own API port
and, with NIXL, their own side-channel port, which ``instances`` copies of one command do not
have. Each command's :attr:`LaunchCommand.servers` places its servers (:func:`place`): every
GPU type on nodes of :data:`NODE_GPUS` GPUs, filled in the plan's order (prefill servers,
then decode), each server on consecutive devices of one node (``CUDA_VISIBLE_DEVICES``;
``HIP_VISIBLE_DEVICES`` on AMD GPUs, which vLLM's ROCm platform copies into
``CUDA_VISIBLE_DEVICES``, ``_sync_hip_cuda_env_vars`` in ``vllm/platforms/rocm.py``), ports
``--port 8000, 8001, ...`` on each node (vLLM's default is 8000) and, for disaggregated
serving, ``VLLM_NIXL_SIDE_CHANNEL_PORT`` from NIXL's default 5600, a server's data-parallel
ranks taking ``base + dp_rank`` (``docs/features/nixl_connector_usage.md``: "each vLLM worker
needs a unique port on its host"; its same-host example starts the prefiller with
``CUDA_VISIBLE_DEVICES=0 VLLM_NIXL_SIDE_CHANNEL_PORT=5600 ... --port 8100`` and the decoder
with ``CUDA_VISIBLE_DEVICES=1 VLLM_NIXL_SIDE_CHANNEL_PORT=5601 ... --port 8200``). A server of
more GPUs than a node is a multi-node deployment and gets no device list.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Any

from des import catalog
from des.catalog.precision import Precision
from des.catalog.specs import ModelSpec
from des.cost.roofline import RooflineConfig
from des.engine.layout import Layout, PoolLayout
from des.engine.policy import Role
from des.engine.schedulers.settings import ContinuousSettings
from des.engine.speculative import SpeculativeConfig
from des.errors import ScenarioError
from des.scenario import Scenario

#: A Hugging Face model repository in a URL: ``https://huggingface.co/ORG/NAME/...``.
_HF_REPO = re.compile(r"https?://huggingface\.co/(?!datasets/|spaces/)([A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)")

#: Fields of a catalog model that describe it rather than its architecture: an inline model
#: that changes only these still is the catalog's checkpoint.
_DESCRIPTIVE = frozenset({
    "name", "description", "source", "variants", "default_precision", "routing", "max_model_len",
    "published_params", "published_active_params", "published_active_counts_embedding",
})  # fmt: skip

#: vLLM's NIXL P/D connector on both pools (``docs/features/nixl_connector_usage.md``).
NIXL_KV_TRANSFER = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
#: vLLM's ``--speculative-config`` method of each des proposer (``vllm/config/speculative.py``).
SPECULATIVE_METHOD = {"ngram": "ngram", "draft": "draft_model", "eagle": "eagle", "mtp": "mtp"}
#: vLLM's ``--all2all-backend`` of each des MoE exchange (``vllm/config/parallel.py``).
ALL2ALL_BACKEND = {"allgather_reducescatter": "allgather_reducescatter", "all_to_all": "deepep_high_throughput"}
#: The proxy that routes between the pools of disaggregated serving.
PD_PROXY = (
    "a proxy sends each request to a prefill server, then to a decode server: vLLM's "
    "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py (--prefiller-hosts, --decoder-hosts) or llm-d; "
    "on separate machines set VLLM_NIXL_SIDE_CHANNEL_HOST to each server's address "
    "(docs/features/nixl_connector_usage.md)"
)


#: GPUs per machine the servers are placed on (an 8-GPU HGX/DGX or MI300X platform).
NODE_GPUS = 8
#: The first API port on a node (vLLM's default ``--port``) and NIXL's default side-channel
#: port (``VLLM_NIXL_SIDE_CHANNEL_PORT``, ``docs/features/nixl_connector_usage.md``).
FIRST_PORT, FIRST_SIDE_CHANNEL_PORT = 8000, 5600
#: GPU architectures vLLM runs on ROCm, whose devices ``HIP_VISIBLE_DEVICES`` selects.
ROCM_ARCHITECTURES = frozenset({"cdna3"})


@dataclass(frozen=True)
class Server:
    """One server of a pool, placed (:func:`place`): on machine ``node`` of its GPU type
    (numbered from 0), on GPUs ``devices`` there (empty: it spans machines), serving on
    ``port``; ``env``: the device list and NIXL's side-channel port before ``argv`` (the
    pool's command with ``--port``)."""

    node: int
    devices: tuple[int, ...]
    port: int
    env: dict[str, str]
    argv: list[str]

    @property
    def shell(self) -> str:
        """``NAME=value ... vllm serve ... --port N``, one shell line."""
        return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in self.env.items()), shlex.join(self.argv)])

    def as_dict(self) -> dict[str, Any]:
        return {
            "node": self.node, "devices": list(self.devices), "port": self.port, "env": dict(self.env),
            "argv": list(self.argv), "text": self.shell,
        }  # fmt: skip


@dataclass(frozen=True)
class LaunchCommand:
    """One pool's server command: start ``instances`` servers of ``argv`` (``vllm serve
    MODEL ...``) on ``gpu`` (the catalog name, or an inline GPU's) with ``env`` set.
    ``role``: ``colocated``, ``prefill`` or ``decode``; ``gpus_per_instance``: the GPUs one
    server takes (tp × pp × dp); ``note``: what else the deployment needs (a load balancer,
    the P/D proxy); ``servers``: each of the ``instances`` servers placed on a node, with its
    devices and ports (:func:`place`); ``text``: ``argv`` as one shell-quoted line
    (``shlex.split(text) == argv``)."""

    role: Role
    instances: int
    gpu: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    gpus_per_instance: int = 1
    note: str = ""
    servers: tuple[Server, ...] = ()
    text: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", shlex.join(self.argv))

    @property
    def shell(self) -> str:
        """The command line with its environment before it (``NAME=value ... vllm serve ...``)."""
        return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in self.env.items()), self.text])

    def as_dict(self) -> dict[str, Any]:
        """Plain data for ``plan.json``."""
        return {
            "role": self.role,
            "instances": self.instances,
            "gpu": self.gpu,
            "gpus_per_instance": self.gpus_per_instance,
            "argv": list(self.argv),
            "env": dict(self.env),
            "text": self.text,
            "note": self.note,
            "servers": [server.as_dict() for server in self.servers],
        }


def launch_commands(scenario: Scenario) -> list[LaunchCommand]:
    """The ``vllm serve`` command of each pool of ``scenario.layout``, in the plan's order
    (one for colocated serving; prefill, then decode for disaggregated serving).

    Raises :class:`ScenarioError` naming the field when des can simulate the scenario but no
    vLLM server is it: static batching, the in-process ``LLM`` front-end, a model with no
    Hugging Face repository, a weight format with no checkpoint, a KV transfer NIXL does not
    do, an all-to-all exchange without expert parallelism, a token budget below
    ``max_num_seqs`` (``vllm/config/scheduler.py`` refuses it).
    """
    plan = scenario.layout
    if not all(isinstance(pool.policy, ContinuousSettings) for pool in plan.pools):
        raise ScenarioError((
            "scheduler.kind",
            f"{scenario.scheduler.kind} batching is not a vLLM engine (vLLM batches continuously): no vllm serve "
            "command runs it (use kind: continuous)",
        ))  # fmt: skip
    if scenario.serving is not None and scenario.serving.frontend != "api_server":
        raise ScenarioError((
            "serving.frontend",
            f"{scenario.serving.frontend!r} simulates vLLM's in-process LLM class, which no vllm serve command runs "
            "(use api_server)",
        ))  # fmt: skip
    repo, checkpoint_flags = checkpoint(scenario.model, scenario.precision)
    _check_link(scenario, plan)
    commands = [_command(scenario, plan, pool, repo, checkpoint_flags) for pool in plan.pools]
    rocm = {pool.gpu.name: pool.gpu.architecture in ROCM_ARCHITECTURES for pool in plan.pools}
    return place(commands, nixl=plan.link is not None, rocm=rocm)


def place(commands: list[LaunchCommand], nixl: bool, rocm: dict[str, bool] | None = None) -> list[LaunchCommand]:
    """``commands`` with their servers placed (the module's docstring): each GPU type's
    machines of :data:`NODE_GPUS` GPUs filled in order, each server on consecutive devices of
    one, with an API port of its own there and, with ``nixl``, a side-channel port for each of
    its data-parallel ranks. ``rocm``: whether a GPU type (by name) runs vLLM on ROCm."""
    free: dict[str, list[int]] = {}  # per GPU type: the next free device on each of its machines
    ports: dict[tuple[str, int], tuple[int, int]] = {}  # per machine: the next API and side-channel ports
    out = []
    for cmd in commands:
        dp = _value(cmd.argv, "--data-parallel-size", 1)
        servers = []
        for _ in range(cmd.instances):
            nodes = free.setdefault(cmd.gpu, [])
            need = cmd.gpus_per_instance
            devices: tuple[int, ...]
            if need > NODE_GPUS:  # a multi-node server: whole machines of its own
                node, devices = len(nodes), ()
                nodes += [NODE_GPUS] * -(-need // NODE_GPUS)
            else:
                node = next((i for i, used in enumerate(nodes) if used + need <= NODE_GPUS), len(nodes))
                if node == len(nodes):
                    nodes.append(0)
                devices = tuple(range(nodes[node], nodes[node] + need))
                nodes[node] += need
            port, side = ports.get((cmd.gpu, node), (FIRST_PORT, FIRST_SIDE_CHANNEL_PORT))
            ports[(cmd.gpu, node)] = (port + 1, side + dp)
            env = {}
            if devices:
                var = "HIP_VISIBLE_DEVICES" if (rocm or {}).get(cmd.gpu) else "CUDA_VISIBLE_DEVICES"
                env[var] = ",".join(map(str, devices))
            if nixl:
                env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(side)
            env |= cmd.env
            servers.append(Server(node, devices, port, env, [*cmd.argv, "--port", str(port)]))
        out.append(replace(cmd, servers=tuple(servers)))
    return out


def _value(argv: list[str], flag: str, default: int) -> int:
    """The integer after ``flag`` in ``argv`` (``default`` when it is not there)."""
    return int(argv[argv.index(flag) + 1]) if flag in argv else default


def hf_repo(model: ModelSpec) -> str | None:
    """The Hugging Face repository (``ORG/NAME``) in a model's ``source``, or None."""
    found = _HF_REPO.search(model.source)
    return found.group(1) if found else None


def checkpoint(model: ModelSpec, precision: Precision, where: str = "model") -> tuple[str, list[str]]:
    """The repository vLLM loads to serve ``model`` at ``precision``, and the options that
    make it that precision (``--quantization fp8``, ``--dtype float16``, or none): a matching
    variant, else the original (see the module's docstring). ``where``: the field an error names."""
    _catalog_architecture(model, where)
    for variant in model.variants:
        quant = Precision.model_validate({k: v for k, v in variant.precision.items() if k != "kv_cache_dtype"})
        if (quant.weights, quant.quantized_layers) == (precision.weights, precision.quantized_layers):
            return variant.repo, []
    repo = _original(model, where)
    native = Precision.model_validate(model.default_precision or {})
    if (precision.weights, precision.quantized_layers) == (native.weights, native.quantized_layers):
        return repo, []
    field_of = (lambda name: f"precision.{name}") if where == "model" else (lambda name: where)
    if native.weights == "bf16" and precision.quantized_layers == "all":
        if precision.weights == "fp8":
            return repo, ["--quantization", "fp8"]
        if precision.weights == "fp16":
            return repo, ["--dtype", "float16"]
    if precision.weights == "fp16":  # a bf16 variant, run in fp16
        bf16_repo, flags = checkpoint(model, precision.model_copy(update={"weights": "bf16"}), where)
        if not flags:
            return bf16_repo, ["--dtype", "float16"]
    known = ", ".join(f"{v.repo} ({v.precision.get('weights')})" for v in model.variants) or "none"
    layers = "" if precision.quantized_layers == "all" else f" with quantized_layers: {precision.quantized_layers}"
    raise ScenarioError((
        field_of("weights" if precision.quantized_layers == "all" else "quantized_layers"),
        f"{precision.weights}{layers} has no checkpoint of {model.name} vLLM can load: its repository {repo} is "
        f"{native.weights}, the catalog's variants are {known}, and vLLM quantizes a bf16 checkpoint as it loads "
        "it only to fp8 (every layer)",
    ))  # fmt: skip


def _original(model: ModelSpec, where: str) -> str:
    """The repository of the model's own checkpoint (its ``source``); raises ScenarioError
    when there is none."""
    repo = hf_repo(model)
    if repo is None:
        raise ScenarioError((
            f"{where}.source",
            f"model {model.name!r} names no Hugging Face repository (source: https://huggingface.co/ORG/NAME), so "
            "no vllm serve command can load it",
        ))  # fmt: skip
    return repo


def _catalog_architecture(model: ModelSpec, where: str) -> None:
    """Raises ScenarioError when an inline model keeps a catalog entry's name and source (a
    ``base:`` override) but changes its architecture: the entry's checkpoints are not it."""
    if model.name not in catalog.model_names():
        return
    entry = catalog.model(model.name)
    if model.source != entry.source:
        return
    changed = sorted(
        name for name in type(model).model_fields
        if name not in _DESCRIPTIVE and getattr(model, name) != getattr(entry, name)
    )  # fmt: skip
    if changed:
        raise ScenarioError((
            where,
            f"{', '.join(changed)} {'differs' if len(changed) == 1 else 'differ'} from {model.name}'s, whose "
            f"checkpoints ({hf_repo(entry)} and its variants) vLLM would load (give a model of another architecture "
            "the source of its own checkpoint)",
        ))  # fmt: skip


def _check_link(scenario: Scenario, plan: Layout) -> None:
    """A KV transfer vLLM's NIXL connector does: pulled once the prompt is done."""
    link = plan.link
    if link is None:
        return
    if link.mode != "pull":
        raise ScenarioError((
            scenario.named("cluster.kv_transfer.mode"),
            f"{link.mode!r} reserves decode blocks as the prefill starts (SGLang's, Dynamo's); vLLM's NixlConnector "
            "pulls the KV once the prompt is done (use pull)",
        ))  # fmt: skip


def _setting(scenario: Scenario, pool: PoolLayout, name: str) -> str:
    """Where the batching setting ``name`` of ``pool`` is written: the pool's own, else the policy's."""
    i = scenario.layout.pools.index(pool)
    own = name in scenario.cluster.pools[i].overrides
    return scenario.named(f"cluster.pools.{i}.scheduler.{name}" if own else f"scheduler.{name}")


def _command(
    scenario: Scenario, plan: Layout, pool: PoolLayout, repo: str, checkpoint_flags: list[str]
) -> LaunchCommand:
    """The command of one pool."""
    policy = pool.policy
    assert isinstance(policy, ContinuousSettings)  # other batching was refused
    model, par = scenario.model, pool.parallel
    if policy.max_num_batched_tokens < policy.max_num_seqs:
        raise ScenarioError((
            _setting(scenario, pool, "max_num_batched_tokens"),
            f"{policy.max_num_batched_tokens} tokens is fewer than max_num_seqs ({policy.max_num_seqs}), which vLLM "
            "refuses at start-up (SchedulerConfig: 'max_num_batched_tokens must be greater than or equal to "
            "max_num_seqs')",
        ))  # fmt: skip
    argv = ["vllm", "serve", repo, *checkpoint_flags]
    argv += ["--tensor-parallel-size", str(pool.tp), "--pipeline-parallel-size", str(par.pp)]
    argv += ["--data-parallel-size", str(par.dp)]
    if par.expert_parallel:
        argv.append("--enable-expert-parallel")
        if par.moe_group(model) > 1:
            argv += ["--all2all-backend", ALL2ALL_BACKEND[par.all2all]]
    elif par.all2all != "allgather_reducescatter" and par.moe_group(model) > 1:
        raise ScenarioError((
            scenario.named(f"cluster.pools.{plan.pools.index(pool)}.all2all_backend"),
            f"{par.all2all!r}: vLLM exchanges tokens all-to-all only with expert parallelism "
            "(FusedMoEParallelConfig.use_all2all_kernels; set expert_parallel: true)",
        ))  # fmt: skip
    argv += ["--max-num-seqs", str(policy.max_num_seqs), "--max-num-batched-tokens", str(policy.max_num_batched_tokens)]
    argv += ["--gpu-memory-utilization", repr(policy.gpu_memory_utilization), "--block-size", str(policy.block_size)]
    argv += ["--max-model-len", str(policy.max_model_len or model.max_model_len)]
    argv.append("--enable-chunked-prefill" if policy.enable_chunked_prefill else "--no-enable-chunked-prefill")
    argv.append("--enable-prefix-caching" if policy.enable_prefix_caching else "--no-enable-prefix-caching")
    if policy.num_gpu_blocks_override is not None:
        argv += ["--num-gpu-blocks-override", str(policy.num_gpu_blocks_override)]
    if scenario.precision.kv_cache_dtype == "fp8":
        argv += ["--kv-cache-dtype", "fp8"]
    graphs, env = pool.graphs, {}
    if graphs.max_size == 0:
        argv.append("--enforce-eager")
    else:
        argv += ["--max-cudagraph-capture-size", str(graphs.max_size)]
    if graphs.charged:
        env["VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"] = "1"
    cost = scenario.cost_model
    if isinstance(cost, RooflineConfig) and not cost.async_scheduling:
        argv.append("--no-async-scheduling")
    if policy.speculative is not None and policy.speculative.active:
        argv += ["--speculative-config", _speculative(policy.speculative, scenario.named("speculative.model"))]
    serving = scenario.serving
    if serving is not None:
        if serving.stream_interval != 1:
            argv += ["--stream-interval", str(serving.stream_interval)]
        if serving.api_server_count != 1:
            argv += ["--api-server-count", str(serving.api_server_count * par.dp)]
    if plan.link is not None:
        argv += ["--kv-transfer-config", json.dumps(NIXL_KV_TRANSFER, separators=(",", ":"))]
    return LaunchCommand(
        role=pool.role,
        instances=pool.instances,
        gpu=pool.gpu.name,
        argv=argv,
        env=env,
        gpus_per_instance=pool.tp * par.pp * par.dp,
        note=_note(scenario, plan, pool),
    )


def _speculative(spec: SpeculativeConfig, where: str = "speculative.model") -> str:
    """``--speculative-config``'s JSON: vLLM's method, the proposer's repository where it
    has one (a catalog draft model's checkpoint, an EAGLE head as named), the tokens proposed."""
    config: dict[str, Any] = {"method": SPECULATIVE_METHOD[spec.method]}
    if spec.method == "draft":
        assert spec.model is not None
        config["model"] = checkpoint(catalog.model(spec.model), Precision(), where)[0]
    elif spec.method == "eagle":
        config["model"] = spec.model
    config["num_speculative_tokens"] = spec.num_speculative_tokens
    return json.dumps(config, separators=(",", ":"))


def _note(scenario: Scenario, plan: Layout, pool: PoolLayout) -> str:
    """What the deployment needs besides the command."""
    notes = []
    if pool.role == "colocated" and pool.instances > 1:
        notes.append(f"{pool.instances} servers behind a load balancer (des routes {pool.router})")
    if pool.autoscaler is not None:
        notes.append("instances: those serving at t = 0; an autoscaler starts and stops more")
    if plan.link is not None:
        notes.append(f"{pool.role} pool of disaggregated serving; {PD_PROXY}")
        if pool.instances > 1 and pool.router != "round_robin":
            notes.append(f"the toy proxy picks {pool.role} servers round-robin, des routes {pool.router}")
        if plan.first_token_from == "prefill":
            notes.append(
                "des dates the first token at the prefill's end (first_token_from: prefill); vLLM's toy proxy "
                "streams the decode server's tokens (first_token_from: decode)"
            )
    return "; ".join(notes)


__all__ = ["LaunchCommand", "Server", "launch_commands", "place", "checkpoint", "hf_repo", "NIXL_KV_TRANSFER"]
