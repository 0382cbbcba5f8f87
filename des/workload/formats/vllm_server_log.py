"""What a vLLM server says of its KV cache and preemptions, in its log or its ``/metrics`` text.

``des compare --server-log FILE`` reads these lines from a server's log (what ``vllm
serve`` prints) or from a saved scrape of its Prometheus endpoint (``curl
host:8000/metrics > metrics.txt`` after the run), whichever the file is:

- ``GPU KV cache size: 41,408 tokens`` (``vllm/v1/core/kv_cache_utils.py``, logged once
  per worker at start-up): the KV capacity in tokens;
- ``# GPU blocks: 2588, # CPU blocks: 2048`` (older engines; ``# cuda blocks``): the
  capacity in blocks;
- ``vllm:cache_config_info{block_size="16",...,num_gpu_blocks="2588",...} 1.0``
  (``/metrics``): blocks and block size, so tokens too;
- ``vllm:num_preemptions_total{...} 12.0`` (``/metrics``, summed over engines): the
  preemptions since the server started (a scrape after the run counts its warm-up too);
- ``total_num_cumulative_preemption=12`` in the V0 engine's preemption warnings: the
  largest is the count since start-up;

and the engine settings the server ran with, which ``des compare`` reruns with where the
user sets none (:meth:`ServerFacts.settings`):

- the engine's config line (``vllm/v1/engine/core.py`` logs ``"Initializing a V1 LLM
  engine (v%s) with config: %s"`` with ``VllmConfig.__str__``, ``vllm/config/vllm.py``:
  ``model='…', …, max_seq_len=32768, …, tensor_parallel_size=1, …,
  enable_prefix_caching=True, enable_chunked_prefill=True, …``): the values resolved at
  start-up, so they come first;
- the API server's ``non-default args: {'model': '…', 'max_model_len': 32768, …}``
  (``log_non_default_args``, ``vllm/entrypoints/utils.py``: the options given on the
  command line, as a Python dict): ``max_model_len``, ``max_num_seqs``,
  ``max_num_batched_tokens``, ``gpu_memory_utilization``, ``block_size``,
  ``enable_prefix_caching``, ``enable_chunked_prefill``, ``tensor_parallel_size``;
- ``Maximum concurrency for 32,768 tokens per request`` (``kv_cache_utils.py``): the
  context length, when neither line above states it;
- ``vllm:cache_config_info``'s ``gpu_memory_utilization`` and ``enable_prefix_caching``.

:func:`read_server_log` returns :class:`ServerFacts`; a file in which none of these lines
appears is a ``ValueError`` saying so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from des.workload.formats.files import user_bytes

KV_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
KV_BLOCKS = re.compile(r"# (?:GPU|cuda|gpu) blocks: (\d+)")
CACHE_INFO = re.compile(r"^vllm:cache_config_info\{([^}]*)\}", re.MULTILINE)
PREEMPTIONS_TOTAL = re.compile(r"^vllm:num_preemptions(?:_total)?(?:\{[^}]*\})?\s+([0-9.eE+]+)", re.MULTILINE)
V0_PREEMPTIONS = re.compile(r"total_num_cumulative_preemption=(\d+)")
LABEL = re.compile(r'(\w+)="([^"]*)"')
#: The engine's config line (V1: ``Initializing a V1 LLM engine (v0.11.0) with config: ...``; V0: ``an LLM engine``).
ENGINE_CONFIG = re.compile(r"Initializing an? (?:V\d )?LLM engine \(v[^)]*\) with config: (.*)$", re.MULTILINE)
#: The API server's options given on the command line, a Python dict's repr.
NON_DEFAULT_ARGS = re.compile(r"non-default args: (\{.*\})\s*$", re.MULTILINE)
MAX_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request")
INT, FLOAT, BOOL = r"(-?\d+)", r"([0-9.eE+-]+)", r"(True|False)"
#: Engine settings (ServerFacts field, its pattern): the config line's names, the dict's keys.
CONFIG_FIELDS = {
    "max_model_len": ("max_seq_len", INT),
    "tensor_parallel_size": ("tensor_parallel_size", INT),
    "enable_prefix_caching": ("enable_prefix_caching", BOOL),
    "enable_chunked_prefill": ("enable_chunked_prefill", BOOL),
}
ARGS_FIELDS = {
    "max_model_len": INT,
    "max_num_seqs": INT,
    "max_num_batched_tokens": INT,
    "gpu_memory_utilization": FLOAT,
    "block_size": INT,
    "enable_prefix_caching": BOOL,
    "enable_chunked_prefill": BOOL,
    "tensor_parallel_size": INT,
}
#: The settings a rerun takes from the log: every ServerFacts engine field but the GPU count.
SETTINGS = (
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "block_size",
    "enable_prefix_caching",
    "enable_chunked_prefill",
)


@dataclass(frozen=True)
class ServerFacts:
    """A server's KV capacity (tokens, blocks, tokens per block), preemption count and the
    engine settings it ran with (``max_model_len`` is vLLM's ``max_seq_len``;
    ``tensor_parallel_size``: GPUs per engine); None where unsaid."""

    kv_capacity_tokens: int | None = None
    kv_blocks: int | None = None
    block_size: int | None = None
    preemptions: int | None = None
    source: str = ""
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    tensor_parallel_size: int | None = None

    def any(self) -> bool:
        return any(getattr(self, f.name) is not None for f in fields(self) if f.name != "source")

    def settings(self) -> dict[str, Any]:
        """The engine settings the log states (scenario ``scheduler`` key -> value), in :data:`SETTINGS` order."""
        return {k: getattr(self, k) for k in SETTINGS if getattr(self, k) is not None}


def read_server_log(path: Path) -> ServerFacts:
    """The KV capacity, preemptions and engine settings a vLLM log or ``/metrics`` scrape states (see the module)."""
    text = user_bytes(path, "log file").decode("utf-8")
    return parse_server_log(text, path.name, str(path))


def _value(pattern: str, text: str) -> Any:
    """The first group of ``pattern`` in ``text`` as a number or bool (None: absent, or not one)."""
    m = re.search(pattern, text)
    if m is None:
        return None
    raw = m.group(1)
    if raw in ("True", "False"):
        return raw == "True"
    try:
        return int(raw) if re.fullmatch(r"-?\d+", raw) else float(raw)
    except ValueError:
        return None


def engine_settings(text: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The engine settings the log states (ServerFacts field -> value): its config line's first,
    then the non-default args', then the per-request context line's and ``cache_config_info``'s.
    A length, count or share that is not positive (``-1``: vLLM's "fit what memory holds") is unsaid."""
    found: dict[str, Any] = {}
    if m := ENGINE_CONFIG.search(text):
        line = m.group(1)
        for key, (name, pattern) in CONFIG_FIELDS.items():
            found[key] = _value(rf"(?:^|[\s,]){name}={pattern}(?=,|$)", line)
    if m := NON_DEFAULT_ARGS.search(text):
        args = m.group(1)
        for key, pattern in ARGS_FIELDS.items():
            if found.get(key) is None:
                found[key] = _value(rf"'{key}': {pattern}(?=,|\}})", args)
    if found.get("max_model_len") is None and (m := MAX_CONCURRENCY.search(text)):
        found["max_model_len"] = int(m.group(1).replace(",", ""))
    for key in ("gpu_memory_utilization", "enable_prefix_caching"):
        if found.get(key) is None and labels and key in labels:
            found[key] = _value(f"^{ARGS_FIELDS[key]}$", labels[key])
    out: dict[str, Any] = {}
    for key, value in found.items():
        kind = ARGS_FIELDS[key]
        if (kind == BOOL and isinstance(value, bool)) or (kind == INT and type(value) is int and value > 0):
            out[key] = value
        elif kind == FLOAT and type(value) in (int, float) and 0 < value <= 1:
            out[key] = float(value)
    return out


def parse_server_log(text: str, name: str = "log", where: str = "log") -> ServerFacts:
    """:func:`read_server_log` of the text itself."""
    tokens = blocks = block_size = preemptions = None
    labels: dict[str, str] = {}
    if m := KV_TOKENS.search(text):
        tokens = int(m.group(1).replace(",", ""))
    if m := KV_BLOCKS.search(text):
        blocks = int(m.group(1))
    if m := CACHE_INFO.search(text):
        labels = dict(LABEL.findall(m.group(1)))
        if labels.get("num_gpu_blocks", "").isdigit():
            blocks = int(labels["num_gpu_blocks"])
        if labels.get("block_size", "").isdigit():
            block_size = int(labels["block_size"])
    settings = engine_settings(text, labels)
    if block_size is None:
        block_size = settings.pop("block_size", None)
    else:
        settings.pop("block_size", None)
    if tokens is None and blocks is not None and block_size is not None:
        tokens = blocks * block_size
    totals = PREEMPTIONS_TOTAL.findall(text)
    if totals:
        preemptions = int(round(sum(float(t) for t in totals)))
    elif v0 := V0_PREEMPTIONS.findall(text):
        preemptions = max(int(x) for x in v0)
    facts = ServerFacts(tokens, blocks, block_size, preemptions, name, **settings)
    if not facts.any():
        raise ValueError(
            f"{where!r}: states neither the KV cache size ('GPU KV cache size: N tokens', '# GPU blocks: N', "
            "vllm:cache_config_info), preemptions (vllm:num_preemptions_total) nor the engine's settings "
            "('Initializing a V1 LLM engine ... with config: ...', 'non-default args: {...}'): is it a vLLM "
            "server log or /metrics scrape?"
        )
    return facts
