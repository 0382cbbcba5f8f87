"""Mooncake's request traces (format ``mooncake``): JSON lines of Kimi's production traffic.

Checked against ``kvcache-ai/Mooncake``: ``FAST25-release/README.md`` and the released
``FAST25-release/traces/{conversation,synthetic}_trace.jsonl``. Each line is an object

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}

- ``timestamp``: the arrival in **milliseconds** since the trace's first request
  (integers in the released traces, non-decreasing, several requests per millisecond
  allowed). The format's unit is the millisecond, so a replay's ``time_scale`` defaults
  to 0.001 and the table's ``arrival_time`` stays in milliseconds until the replay
  scales it.
- ``input_length``, ``output_length``: prompt and output tokens (integers >= 1; the
  released traces' shortest output is 1 token).
- ``hash_ids``: "the remapped block hash" of the prompt, one id per block of **512
  tokens**, the last block partial: ``len(hash_ids) == ceil(input_length / 512)`` on all
  16,024 lines of the two released traces (dynamo's data generator documents
  ``input_length // block_size``, without the partial block; both counts are accepted).
  The ids are *prefix-chained*: an id names a block together with everything before it
  (in the released traces every id occurs at one position only, always after the same
  ids), so two prompts share their first ``k`` blocks exactly when their first ``k`` ids
  are equal. des chains block keys itself (:mod:`des.engine.content`), so ids that name
  only their own block's content replay the same way. ``hash_ids`` may be left out of a
  line (the row then states no block identities); every id must be an integer >= 0.

Other keys (e.g. ``input_text`` or ``session_id`` that some tools add) are ignored. A
line with 0 output tokens is an error, not a skipped failure: the released traces have
none, and the format does not say what one would mean.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from des.workload.formats.base import ReadOptions, TraceFormat, hash_lists, load_jsonl, require, table, where
from des.workload.formats.checks import positive_ints, times_from

if TYPE_CHECKING:
    import pandas as pd

REQUIRED = ("timestamp", "input_length", "output_length")


def read_mooncake(path: Path, options: ReadOptions) -> pd.DataFrame:
    """A Mooncake trace as a trace table (``arrival_time`` in milliseconds, as recorded)."""
    frame = load_jsonl(path)
    require(path, frame, REQUIRED)
    arrival = times_from(frame["timestamp"], where(path, "timestamp"), "milliseconds")
    prompt = positive_ints(frame["input_length"], where(path, "input_length"))
    output = positive_ints(frame["output_length"], where(path, "output_length"))
    optional: dict[str, Any] = {}
    if "hash_ids" in frame.columns:
        optional["hash_ids"] = hash_lists(path, frame["hash_ids"], prompt, options.hash_block_tokens)
    return table(arrival, prompt, output, optional)


MOONCAKE = TraceFormat(
    "mooncake",
    read_mooncake,
    "timestamp (ms), input_length, output_length; optional hash_ids (one per 512-token block)",
    unit="milliseconds",
    ticks_per_second=1000,
    signature=REQUIRED,
)
