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
  largest is the count since start-up.

:func:`read_server_log` returns :class:`ServerFacts`; a file in which none of these lines
appears is a ``ValueError`` saying so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from des.workload.formats.files import user_bytes

KV_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
KV_BLOCKS = re.compile(r"# (?:GPU|cuda|gpu) blocks: (\d+)")
CACHE_INFO = re.compile(r"^vllm:cache_config_info\{([^}]*)\}", re.MULTILINE)
PREEMPTIONS_TOTAL = re.compile(r"^vllm:num_preemptions(?:_total)?(?:\{[^}]*\})?\s+([0-9.eE+]+)", re.MULTILINE)
V0_PREEMPTIONS = re.compile(r"total_num_cumulative_preemption=(\d+)")
LABEL = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class ServerFacts:
    """A server's KV capacity (tokens, blocks, tokens per block) and preemption count; None where unsaid."""

    kv_capacity_tokens: int | None = None
    kv_blocks: int | None = None
    block_size: int | None = None
    preemptions: int | None = None
    source: str = ""

    def any(self) -> bool:
        return any(v is not None for v in (self.kv_capacity_tokens, self.kv_blocks, self.preemptions))


def read_server_log(path: Path) -> ServerFacts:
    """The KV capacity and preemptions a vLLM log or ``/metrics`` scrape states (see the module)."""
    text = user_bytes(path, "log file").decode("utf-8")
    return parse_server_log(text, path.name, str(path))


def parse_server_log(text: str, name: str = "log", where: str = "log") -> ServerFacts:
    """:func:`read_server_log` of the text itself."""
    tokens = blocks = block_size = preemptions = None
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
    if tokens is None and blocks is not None and block_size is not None:
        tokens = blocks * block_size
    totals = PREEMPTIONS_TOTAL.findall(text)
    if totals:
        preemptions = int(round(sum(float(t) for t in totals)))
    elif v0 := V0_PREEMPTIONS.findall(text):
        preemptions = max(int(x) for x in v0)
    facts = ServerFacts(tokens, blocks, block_size, preemptions, name)
    if not facts.any():
        raise ValueError(
            f"{where!r}: states neither the KV cache size ('GPU KV cache size: N tokens', '# GPU blocks: N', "
            "vllm:cache_config_info) nor preemptions (vllm:num_preemptions_total): is it a vLLM server log "
            "or /metrics scrape?"
        )
    return facts
