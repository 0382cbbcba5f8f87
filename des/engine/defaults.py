"""The engine settings ``vllm serve`` and vLLM's ``LLM`` class run when a scenario leaves them out.

vLLM's scheduler dataclass defaults to ``max_num_seqs`` 128 and ``max_num_batched_tokens``
2048 (``SchedulerConfig.DEFAULT_MAX_NUM_SEQS``, ``DEFAULT_MAX_NUM_BATCHED_TOKENS``), but no
entry point runs those: ``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args``
(``vllm/engine/arg_utils.py``) fills an unset value from ``get_batch_defaults``, by the
*usage context* (``UsageContext.OPENAI_API_SERVER`` for ``vllm serve``, ``LLM_CLASS`` for
the ``LLM`` class: des's ``serving.frontend`` ``api_server`` and ``engine``,
:mod:`des.cost.frontend`) and by the GPU: one whose total memory
(``current_platform.get_device_total_memory()``, what CUDA reports: the catalog's
``memory_bytes``) is at least 70 GiB and whose name does not contain ``a100`` (vLLM PR
#17885: a larger token budget cost the A100 throughput) gets the larger values. Then, for
a value the user left unset:

- ``max_num_batched_tokens`` is raised to ``max_model_len`` when chunked prefill is off
  (a prompt must fit one step), and capped at ``max_num_seqs × max_model_len``;
- ``max_num_seqs`` is capped at ``max_num_batched_tokens``.

``gpu_memory_utilization`` is ``CacheConfig``'s 0.9 (``vllm/config/cache.py``) for every
entry point and GPU. A value the scenario sets is never replaced.

:data:`VLLM_DEFAULTS` holds these tables by vLLM release (one entry per release read; add
another to follow a later one) and :data:`VLLM_RELEASE` names the one des applies. The
launch commands name vLLM 0.19.1's options too (:mod:`des.plan.vllm_args`). The rule has
moved before (read from the PyPI wheels' ``arg_utils.py``): 0.8.0 gave every GPU 1024
sequences and only a GPU *named* H100 or H200 the 8192/16384-token budgets; 0.9.0 brought the
70 GiB test, the A100 exception and 256 sequences below it; 0.19.1 keeps that rule, adds the
caps above and lets ``max_num_seqs`` differ by usage context (it does not yet).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from des.catalog.specs import GPUSpec

GiB = 1 << 30


@dataclass(frozen=True)
class BatchDefaults:
    """One release's defaults of the two batching settings for one class of GPU, by usage
    context (``api_server``: ``vllm serve``; ``engine``: the ``LLM`` class). Sizes in
    sequences and tokens."""

    max_num_seqs: Mapping[str, int]
    max_num_batched_tokens: Mapping[str, int]


@dataclass(frozen=True)
class ReleaseDefaults:
    """What one vLLM release fills in: the batching defaults of GPUs of at least
    ``large_memory`` bytes (unless their name holds one of ``small_names``) and of the
    others, and ``gpu_memory_utilization`` (a share of each GPU's memory)."""

    release: str
    source: str
    large_memory: int
    small_names: tuple[str, ...]
    large: BatchDefaults
    small: BatchDefaults
    gpu_memory_utilization: float

    def batch(self, gpu: GPUSpec) -> tuple[BatchDefaults, str]:
        """The batching defaults of ``gpu`` and why (a phrase)."""
        name = gpu.name.lower()
        excluded = next((s for s in self.small_names if s in name), None)
        if gpu.memory_bytes >= self.large_memory and excluded is None:
            return self.large, f"{gpu.memory_bytes / GiB:.1f} GiB >= {self.large_memory / GiB:g} GiB"
        if excluded is not None:
            return self.small, f"an {excluded.upper()} (vLLM keeps its smaller defaults)"
        return self.small, f"{gpu.memory_bytes / GiB:.1f} GiB < {self.large_memory / GiB:g} GiB"


#: vLLM's defaults by release, read from its source.
VLLM_DEFAULTS: dict[str, ReleaseDefaults] = {
    "0.19.1": ReleaseDefaults(
        release="0.19.1",
        source=(
            "vllm/engine/arg_utils.py EngineArgs.get_batch_defaults and "
            "_set_default_max_num_seqs_and_batched_tokens_args; vllm/config/cache.py CacheConfig"
        ),
        large_memory=70 * GiB,
        small_names=("a100",),
        large=BatchDefaults({"api_server": 1024, "engine": 1024}, {"api_server": 8192, "engine": 16384}),
        small=BatchDefaults({"api_server": 256, "engine": 256}, {"api_server": 2048, "engine": 8192}),
        gpu_memory_utilization=0.9,
    ),
}
#: The release whose defaults des applies.
VLLM_RELEASE = "0.19.1"


@dataclass(frozen=True)
class AppliedDefaults:
    """The settings of one pool's engines that the scenario left out and vLLM's defaults
    filled (``values``: setting -> value), from ``release``, with the reason (``why``)."""

    release: str
    frontend: str
    values: Mapping[str, Any]
    why: str

    def describe(self) -> str:
        """One line: what was filled in and why."""
        if not self.values:
            return "none (every engine setting given)"
        settings = ", ".join(f"{k} {v}" for k, v in self.values.items())
        return f"{settings} (vLLM {self.release}'s defaults for {self.frontend}, {self.why})"


def engine_defaults(
    given: Mapping[str, Any],
    gpu: GPUSpec,
    frontend: str,
    max_model_len: int,
    release: str = VLLM_RELEASE,
) -> AppliedDefaults:
    """The values vLLM ``release`` gives the settings of continuous batching that ``given``
    (the settings the scenario states, its pool's over its top level) leaves out, on
    ``gpu`` behind ``frontend`` (``api_server`` or ``engine``) with contexts of
    ``max_model_len`` tokens (the pool's limit, else the model's)."""
    table = VLLM_DEFAULTS[release]
    batch, why = table.batch(gpu)
    usage = "engine" if frontend == "engine" else "api_server"
    filled: dict[str, Any] = {}
    seqs = given.get("max_num_seqs")
    seqs = batch.max_num_seqs[usage] if seqs is None else seqs
    if given.get("max_num_batched_tokens") is None:
        budget = batch.max_num_batched_tokens[usage]
        if given.get("enable_chunked_prefill") is False:
            budget = max(max_model_len, budget)
        filled["max_num_batched_tokens"] = budget = min(seqs * max_model_len, budget)
    else:
        budget = given["max_num_batched_tokens"]
    if given.get("max_num_seqs") is None:
        filled["max_num_seqs"] = min(seqs, budget)
    if given.get("gpu_memory_utilization") is None:
        filled["gpu_memory_utilization"] = table.gpu_memory_utilization
    entry = "vllm serve" if usage == "api_server" else "the LLM class"
    return AppliedDefaults(release, entry, {k: filled[k] for k in sorted(filled)}, f"{gpu.name}: {why}")


__all__ = ["AppliedDefaults", "BatchDefaults", "ReleaseDefaults", "VLLM_DEFAULTS", "VLLM_RELEASE", "engine_defaults"]
