"""vLLM's command-line argument names, as read from its source, for checking launch commands.

What :mod:`des.plan.launch` emits is checked against these sets (``tests/test_launch.py``):
a flag vLLM renamed or dropped would make ``vllm serve`` refuse the command, so the
names are data read from one vLLM release, not typed from memory.

Read from vLLM 0.19.1 (the PyPI wheel ``vllm-0.19.1-cp38-abi3-manylinux_2_31_x86_64.whl``,
whose ``vllm/_version.py`` names commit ``b1388b1fb``): every string starting with ``--``
passed to ``add_argument`` in ``vllm/engine/arg_utils.py`` (``EngineArgs.add_cli_args`` and
``AsyncEngineArgs.add_cli_args``, 181 names), and the three ``vllm serve`` adds itself in
``vllm/entrypoints/openai/cli_args.py`` (``make_arg_parser``). Not listed: the short aliases
(``-tp``, ``-dp``, ``-q`` ...), the OpenAI front-end's server options (``--host``, ``--port``
... from ``FrontendArgs``), of which des emits only ``--port`` (:data:`FRONTEND_FLAGS`).
Below them: the values the options des fills from a fixed set accept (``Literal`` types of
vLLM's config classes) and the keys its JSON options take (the fields of ``SpeculativeConfig``
and ``KVTransferConfig``, and the connectors vLLM registers), from the same files of the same release.
"""

from __future__ import annotations

#: The vLLM release the names below were read from.
VLLM_VERSION = "0.19.1"
#: Its commit (``vllm/_version.py``: ``__commit_id__ = 'gb1388b1fb'``).
VLLM_COMMIT = "b1388b1fb"

#: Every long option of ``EngineArgs.add_cli_args`` / ``AsyncEngineArgs.add_cli_args``
#: (``vllm/engine/arg_utils.py`` of vLLM 0.19.1, commit b1388b1fb).
ENGINE_FLAGS: frozenset[str] = frozenset({
    "--additional-config", "--aggregate-engine-logging", "--all2all-backend", "--allow-deprecated-quantization",
    "--allowed-local-media-path", "--allowed-media-domains", "--async-scheduling", "--attention-backend",
    "--attention-config", "--block-size", "--calculate-kv-scales", "--code-revision", "--collect-detailed-traces",
    "--compilation-config", "--config-format", "--convert", "--cp-kv-cache-interleave-size", "--cpu-offload-gb",
    "--cpu-offload-params", "--cudagraph-capture-sizes", "--cudagraph-metrics", "--data-parallel-address",
    "--data-parallel-backend", "--data-parallel-external-lb", "--data-parallel-hybrid-lb", "--data-parallel-rank",
    "--data-parallel-rpc-port", "--data-parallel-size", "--data-parallel-size-local", "--data-parallel-start-rank",
    "--dbo-decode-token-threshold", "--dbo-prefill-token-threshold", "--dcp-comm-backend",
    "--dcp-kv-cache-interleave-size", "--decode-context-parallel-size", "--default-mm-loras",
    "--disable-cascade-attn", "--disable-chunked-mm-input", "--disable-custom-all-reduce",
    "--disable-hybrid-kv-cache-manager", "--disable-log-stats", "--disable-nccl-for-dp-synchronization",
    "--disable-sliding-window", "--distributed-executor-backend", "--distributed-timeout-seconds", "--download-dir",
    "--dtype", "--ec-transfer-config", "--enable-chunked-prefill", "--enable-dbo", "--enable-elastic-ep",
    "--enable-ep-weight-filter", "--enable-eplb", "--enable-expert-parallel", "--enable-flashinfer-autotune",
    "--enable-layerwise-nvtx-tracing", "--enable-log-requests", "--enable-logging-iteration-details",
    "--enable-lora", "--enable-mfu-metrics", "--enable-mm-embeds", "--enable-prefix-caching",
    "--enable-prompt-embeds", "--enable-return-routed-experts", "--enable-sleep-mode",
    "--enable-tower-connector-lora", "--enforce-eager", "--eplb-config", "--expert-placement-strategy",
    "--fail-on-environ-validation", "--fully-sharded-loras", "--gdn-prefill-backend", "--generation-config",
    "--gpu-memory-utilization", "--hf-config-path", "--hf-overrides", "--hf-token", "--ignore-patterns",
    "--interleave-mm-strings", "--io-processor-plugin", "--kernel-config", "--kv-cache-dtype",
    "--kv-cache-dtype-skip-layers", "--kv-cache-memory-bytes", "--kv-cache-metrics", "--kv-cache-metrics-sample",
    "--kv-events-config", "--kv-offloading-backend", "--kv-offloading-size", "--kv-sharing-fast-prefill",
    "--kv-transfer-config", "--language-model-only", "--limit-mm-per-prompt", "--load-format",
    "--logits-processors", "--logprobs-mode", "--long-prefill-token-threshold", "--lora-dtype",
    "--lora-target-modules", "--mamba-block-size", "--mamba-cache-dtype", "--mamba-cache-mode",
    "--mamba-ssm-cache-dtype", "--master-addr", "--master-port", "--max-cpu-loras", "--max-cudagraph-capture-size",
    "--max-logprobs", "--max-long-partial-prefills", "--max-lora-rank", "--max-loras", "--max-model-len",
    "--max-num-batched-tokens", "--max-num-partial-prefills", "--max-num-seqs", "--max-parallel-loading-workers",
    "--media-io-kwargs", "--mm-encoder-attn-backend", "--mm-encoder-only", "--mm-encoder-tp-mode",
    "--mm-processor-cache-gb", "--mm-processor-cache-type", "--mm-processor-kwargs",
    "--mm-shm-cache-max-object-size-mb", "--mm-tensor-ipc", "--model", "--model-impl",
    "--model-loader-extra-config", "--moe-backend", "--nnodes", "--node-rank", "--num-gpu-blocks-override",
    "--offload-backend", "--offload-group-size", "--offload-num-in-group", "--offload-params",
    "--offload-prefetch-step", "--optimization-level", "--otlp-traces-endpoint", "--override-attention-dtype",
    "--override-generation-config", "--performance-mode", "--pipeline-parallel-size", "--pooler-config",
    "--prefill-context-parallel-size", "--prefix-caching-hash-algo", "--profiler-config", "--pt-load-map-location",
    "--quantization", "--ray-workers-use-nsight", "--reasoning-config", "--reasoning-parser",
    "--reasoning-parser-plugin", "--renderer-num-workers", "--revision", "--runner", "--safetensors-load-strategy",
    "--scheduler-cls", "--scheduler-reserve-full-isl", "--scheduling-policy", "--seed", "--served-model-name",
    "--show-hidden-metrics-for-version", "--shutdown-timeout", "--skip-mm-profiling", "--skip-tokenizer-init",
    "--specialize-active-lora", "--speculative-config", "--stream-interval", "--structured-outputs-config",
    "--tensor-parallel-size", "--tokenizer", "--tokenizer-mode", "--tokenizer-revision", "--trust-remote-code",
    "--ubatch-size", "--use-tqdm-on-load", "--video-pruning-rate", "--weight-transfer-config", "--worker-cls",
    "--worker-extension-cls",
})  # fmt: skip

#: What ``vllm serve`` adds before the engine's and the front-end's options
#: (``vllm/entrypoints/openai/cli_args.py``, ``make_arg_parser``, same release).
SERVE_FLAGS: frozenset[str] = frozenset({"--headless", "--api-server-count", "--config"})

#: Switches registered with ``argparse.BooleanOptionalAction``, so that ``--no-NAME`` turns
#: them off: ``get_kwargs`` (``vllm/engine/arg_utils.py``) gives every field typed ``bool``
#: that action. Listed are the ones des emits, each checked to be a ``bool`` field of its
#: config class: ``SchedulerConfig.enable_chunked_prefill`` and ``.async_scheduling``
#: (``vllm/config/scheduler.py``), ``CacheConfig.enable_prefix_caching``
#: (``vllm/config/cache.py``), ``ModelConfig.enforce_eager`` (``vllm/config/model.py``),
#: ``ParallelConfig.enable_expert_parallel`` (``vllm/config/parallel.py``).
NEGATABLE: frozenset[str] = frozenset({
    "--enable-chunked-prefill", "--enable-prefix-caching", "--async-scheduling", "--enforce-eager",
    "--enable-expert-parallel",
})  # fmt: skip

#: The one front-end option des emits: each server's ``--port`` (``FrontendArgs.port``, default
#: 8000, ``vllm/entrypoints/openai/cli_args.py``), so that servers sharing a node listen apart.
FRONTEND_FLAGS: frozenset[str] = frozenset({"--port"})

#: Every option name a ``vllm serve`` command des writes may use.
VLLM_SERVE_FLAGS: frozenset[str] = (
    ENGINE_FLAGS | SERVE_FLAGS | FRONTEND_FLAGS | frozenset("--no-" + flag.removeprefix("--") for flag in NEGATABLE)
)

# The values des passes to options that take one of a fixed set, from the same release.

#: ``--kv-cache-dtype`` (``CacheDType``, ``vllm/config/cache.py``).
KV_CACHE_DTYPES = frozenset({"auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"})
#: ``--dtype`` (``ModelDType``, ``vllm/config/model.py``).
MODEL_DTYPES = frozenset({"auto", "half", "float16", "bfloat16", "float", "float32"})
#: ``--quantization`` (``QuantizationMethods``, ``vllm/model_executor/layers/quantization/__init__.py``).
QUANTIZATION_METHODS = frozenset({
    "awq", "fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4", "modelopt_mxfp8", "modelopt_mixed", "gguf",
    "gptq_marlin", "awq_marlin", "gptq", "compressed-tensors", "bitsandbytes", "experts_int8", "quark", "moe_wna16",
    "torchao", "inc", "mxfp4", "mxfp8", "petit_nvfp4", "cpu_awq",
})  # fmt: skip
#: ``--all2all-backend`` (``All2AllBackend``, ``vllm/config/parallel.py``).
ALL2ALL_BACKENDS = frozenset({
    "naive", "pplx", "deepep_high_throughput", "deepep_low_latency", "mori", "nixl_ep", "allgather_reducescatter",
    "flashinfer_all2allv", "flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided",
})  # fmt: skip
#: ``--speculative-config``'s ``method`` (``SpeculativeMethod``, ``vllm/config/speculative.py``;
#: the per-model MTP names there are deprecated aliases of ``mtp``).
SPECULATIVE_METHODS = frozenset({
    "ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "eagle", "eagle3", "extract_hidden_states", "mtp",
    "ngram_gpu",
})  # fmt: skip
#: ``--kv-transfer-config``'s ``kv_role`` (``KVRole``, ``vllm/config/kv_transfer.py``).
KV_ROLES = frozenset({"kv_producer", "kv_consumer", "kv_both"})

# The keys of the JSON options des writes, from the same release.

#: Fields of ``SpeculativeConfig`` (``vllm/config/speculative.py``) a ``--speculative-config`` may set.
SPECULATIVE_CONFIG_KEYS = frozenset({
    "enforce_eager", "num_speculative_tokens", "model", "method", "draft_tensor_parallel_size", "quantization",
    "moe_backend", "max_model_len", "revision", "code_revision", "disable_padded_drafter_batch",
    "use_local_argmax_reduction", "prompt_lookup_max", "prompt_lookup_min", "speculative_token_tree",
    "parallel_drafting", "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob", "rejection_sample_method",
    "synthetic_acceptance_rate",
})  # fmt: skip
#: Fields of ``KVTransferConfig`` (``vllm/config/kv_transfer.py``) a ``--kv-transfer-config`` may set.
KV_TRANSFER_KEYS = frozenset({
    "kv_connector", "engine_id", "kv_buffer_device", "kv_buffer_size", "kv_role", "kv_rank", "kv_parallel_size",
    "kv_ip", "kv_port", "kv_connector_extra_config", "kv_connector_module_path", "enable_permute_local_kv",
    "kv_load_failure_policy",
})  # fmt: skip
#: KV connectors vLLM registers (``vllm/distributed/kv_transfer/kv_connector/factory.py``).
KV_CONNECTORS = frozenset({
    "ExampleConnector", "ExampleHiddenStatesConnector", "P2pNcclConnector", "LMCacheMPConnector", "NixlConnector",
    "MultiConnector", "MoRIIOConnector", "OffloadingConnector", "DecodeBenchConnector", "MooncakeConnector",
    "SimpleCPUOffloadConnector",
})  # fmt: skip
