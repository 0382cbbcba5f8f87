"""Readers of what real servers and public datasets record: request traces and request logs.

**Trace formats** (``workload.arrival: {process: trace, path, format}``): each module
reads one format into the trace table of :mod:`des.workload.formats.base` and is
registered in :data:`TRACE_FORMATS` under its name:

- ``csv``, ``jsonl`` (:mod:`~des.workload.formats.table`): des's own table;
- ``mooncake`` (:mod:`~des.workload.formats.mooncake`): Mooncake's JSONL with block hashes;
- ``azure`` (:mod:`~des.workload.formats.azure`): Azure's LLM inference trace CSVs;
- ``burstgpt`` (:mod:`~des.workload.formats.burstgpt`): BurstGPT's CSVs;
- ``vllm-bench`` (:mod:`~des.workload.formats.vllm_bench_trace`): a ``vllm bench serve``
  result.

Without a ``format``, :func:`infer_format` picks one from the file name: ``.csv`` ->
csv, ``.jsonl``/``.ndjson`` -> jsonl, ``.json`` -> vllm-bench, anything else -> csv.

Every reader reads its file the same way (:mod:`des.workload.formats.files`): compressed
as its name says (``.gz``, ``.bz2``, ``.xz``, ``.zip``, ...; ``t.jsonl.gz`` is JSON lines),
UTF-8 with or without a byte order mark.

**Request logs** (``des compare``), one row per request with its measured latencies:

- :mod:`des.workload.formats.vllm_bench`: the JSON of ``vllm bench serve --save-result
  --save-detailed`` (``benchmarks/benchmark_serving.py`` before it);
- :mod:`des.workload.formats.vllm_records`: vLLM's own request records (JSON lines of
  ``RequestStateStats``, on their wall and monotonic clocks) and its ``llm_request``
  OpenTelemetry spans (OTLP/JSON);
- :mod:`des.workload.formats.request_log`: a CSV or JSONL of one row per request;
- :mod:`des.workload.formats.vllm_server_log`: not requests but the server's KV cache
  size, preemptions and engine settings, from its log or a ``/metrics`` scrape.

Each returns a pandas DataFrame with one row per request (``arrival_time``,
``prompt_tokens``, ``output_tokens``, ``ttft``, ``e2e``, ``tpot``, ``itl``, ``success``;
seconds and tokens; vLLM's records add ``queue_delay`` and ``preemptions``, a benchmark
under ``max_concurrency`` adds ``issue_time``) and the file's run-level facts in
``frame.attrs["meta"]``; the ``vllm-bench`` trace format reuses the first.

Problems are one-line ``ValueError``s naming the file (and the row and value).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from des.registry import Registry
from des.workload.formats.azure import AZURE
from des.workload.formats.base import MissingColumns, ReadOptions, TraceFormat
from des.workload.formats.burstgpt import BURSTGPT
from des.workload.formats.files import data_suffix
from des.workload.formats.mooncake import MOONCAKE
from des.workload.formats.table import CSV, JSONL
from des.workload.formats.vllm_bench_trace import VLLM_BENCH

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = ("arrival_time", "prompt_tokens", "output_tokens", "ttft", "e2e", "tpot", "itl", "success")

TRACE_FORMATS: Registry[TraceFormat] = Registry("trace format")
for _fmt in (CSV, JSONL, MOONCAKE, AZURE, BURSTGPT, VLLM_BENCH):
    TRACE_FORMATS.register(_fmt.name, _fmt)

#: The format of a file whose name ends in none of the formats' suffixes.
FALLBACK = "csv"


def infer_format(path: Path) -> str:
    """The format a trace file's name implies (see the module); a compression suffix is set
    aside (``t.jsonl.gz``: jsonl)."""
    suffix = data_suffix(path)
    for name in TRACE_FORMATS:
        if suffix in TRACE_FORMATS.get(name).suffixes:
            return name
    return FALLBACK


def read_trace(path: Path, format: str | None = None, options: ReadOptions | None = None) -> pd.DataFrame:
    """The trace at ``path`` read in ``format`` (default: :func:`infer_format`) as a trace table.

    Raises :class:`~des.registry.UnknownKind` for an unknown format and ValueError for a
    bad file; a file that lacks its format's columns but has another format's gets a hint.
    """
    name = format or infer_format(path)
    fmt = TRACE_FORMATS.get(name)
    try:
        return fmt.read(path, options or ReadOptions())
    except MissingColumns as exc:
        like = [
            other
            for other in TRACE_FORMATS
            if other != name and set(TRACE_FORMATS.get(other).signature) <= set(exc.present)
        ]
        if not like:
            raise
        how = " or ".join(f"format: {other}" for other in like)
        inferred = f", not the {name} inferred from its name" if not format else ""
        formats = " or ".join(like)
        raise ValueError(f"{exc}; these are the columns of the {formats} format: set {how}{inferred}") from None


__all__ = ["COLUMNS", "TRACE_FORMATS", "ReadOptions", "TraceFormat", "infer_format", "read_trace"]
