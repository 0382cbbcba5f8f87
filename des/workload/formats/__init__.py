"""Readers (and writers) of request logs measured on real servers, as per-request tables.

- :mod:`des.workload.formats.vllm_bench`: the JSON of ``vllm bench serve --save-result
  --save-detailed`` (``benchmarks/benchmark_serving.py`` before it);
- :mod:`des.workload.formats.request_log`: a CSV or JSONL of one row per request.

Each reader returns a pandas DataFrame with one row per request (``arrival_time``,
``prompt_tokens``, ``output_tokens``, ``ttft``, ``e2e``, ``tpot``, ``itl``, ``success``;
seconds and tokens) and the file's run-level facts in ``frame.attrs["meta"]``; problems
are one-line ``ValueError``s naming the file. ``des compare`` replays these rows; a trace
format can reuse the same readers.
"""

from __future__ import annotations

COLUMNS = ("arrival_time", "prompt_tokens", "output_tokens", "ttft", "e2e", "tpot", "itl", "success")
