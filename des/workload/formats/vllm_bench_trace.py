"""A ``vllm bench serve`` result replayed as a trace (format ``vllm-bench``).

The JSON that ``vllm bench serve --save-result --save-detailed`` writes is read by
:func:`des.workload.formats.vllm_bench.read_vllm_bench` (the reader ``des compare``
uses; see that module for the fields and the vLLM sources they were checked against).
The trace keeps, per request in send order, ``input_lens`` (prompt tokens),
``output_lens`` (output tokens) and its send time: ``start_times`` where the release
saves them (seconds, moved so the first request is at 0), else times drawn the way the
benchmark draws them from its ``request_rate`` and ``burstiness`` (seed 0, so the same
file always gives the same times; only statistically like the real run's, and a note
says so). A file whose rate ramped up and that has no ``start_times`` cannot be replayed,
and says why. Under a ``max_concurrency`` the recorded ``start_times`` are when requests
were let through; without them the times are when the benchmark issued them, and a note
says to set ``workload.arrival.max_concurrency`` to hold them back as its client did.

Failed requests (a non-empty ``errors`` entry, or ``output_lens`` 0 when the file has no
``errors``) produced no output to replay: they are skipped, and a note says how many.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from des.workload.formats.base import ReadOptions, TraceFormat, fail, skipped, table
from des.workload.formats.checks import existing_file, positive_ints
from des.workload.formats.files import NestedTooDeep, utf8_bytes
from des.workload.formats.vllm_bench import read_vllm_bench

if TYPE_CHECKING:
    import pandas as pd

#: The seed of arrivals drawn for a result without ``start_times`` (fixed: a trace replays the same).
DRAW_SEED = 0


def read_vllm_bench_trace(path: Path, options: ReadOptions) -> pd.DataFrame:
    """The successful requests of a ``vllm bench serve --save-detailed`` result as a trace table."""
    existing_file(path)
    try:
        frame = read_vllm_bench(path, seed=DRAW_SEED)
    except NestedTooDeep:
        raise
    except ValueError as exc:
        if _holds_a_list(path):
            raise ValueError(
                f"{exc}; des reads a table of requests from CSV or JSON lines (.csv, .jsonl), not from a JSON array"
            ) from None
        raise
    ok = frame["success"].to_numpy(dtype=bool)
    if not ok.any():
        raise fail(path, f"has no successful request to replay (all {len(frame):,} failed)")
    rows = frame[ok].reset_index(drop=True)
    where = f"{str(path)!r} successful request {{row}}:"
    prompt = positive_ints(rows["prompt_tokens"], where + " input_lens")
    output = positive_ints(rows["output_tokens"], where + " output_lens")
    notes = skipped(path, int((~ok).sum()), len(frame), "failed requests (an error, or no output)")
    meta = frame.attrs.get("meta", {})
    how = meta.get("arrivals", "start_times")
    if how != "start_times":
        notes.append(f"{path.name}: send times {how}")
        if meta.get("max_concurrency") is not None:
            notes.append(
                f"{path.name}: max_concurrency {meta['max_concurrency']} held requests back; set "
                f"workload.arrival.max_concurrency: {meta['max_concurrency']} to replay that"
            )
    return table(np.asarray(rows["arrival_time"], dtype=float), prompt, output, notes=notes)


def _holds_a_list(path: Path) -> bool:
    """Whether the file's JSON opens with ``[``: an array of rows, not a benchmark result."""
    try:
        return utf8_bytes(path).lstrip().startswith(b"[")
    except (OSError, ValueError):
        return False


VLLM_BENCH = TraceFormat(
    "vllm-bench",
    read_vllm_bench_trace,
    "input_lens, output_lens, start_times (s; else drawn from request_rate); failed requests skipped",
    suffixes=(".json",),
    signature=("input_lens", "output_lens"),
)
