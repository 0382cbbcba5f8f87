"""des's own trace table, as CSV (format ``csv``) or JSON lines (format ``jsonl``).

Columns (a header row in CSV, keys of each line's object in JSONL; others are ignored):

- ``arrival_time`` (seconds from any origin, e.g. epoch timestamps), ``prompt_tokens``,
  ``output_tokens`` (integers >= 1): required;
- ``conversation_id`` (integer >= 0): the chat the row is a turn of; its rows are its
  turns in arrival order. Blank (JSON ``null`` or no key) for a row outside any chat;
- ``prefix_group`` (integer >= 0): rows of one group open with the same shared prefix
  (a system prompt, a few-shot preamble); blank for none;
- ``prefix_tokens`` (integer >= 1): the length of the row's group prefix, the same on
  every row of the group and at most the row's prompt; blank on rows without a group.
  Without this column the length comes from the scenario (``workload.shared_prefix``);
- ``hash_ids`` (JSONL only: a list of integers >= 0): the identities of the prompt's
  blocks of ``hash_block_tokens`` tokens, as in Mooncake's traces (see
  :mod:`des.workload.formats.mooncake`). Since they say what every block of the prompt
  is, a trace with ``hash_ids`` has no ``conversation_id`` or ``prefix_group``.

Problems keep the messages the original CSV/JSONL reader gave (``lacks column(s)``, ``has
no rows``, ``row N: <column> <value> is not ...``); JSONL is read line by line with the
``json`` module, so a malformed line is named by its number.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from des.workload.formats.base import (
    COLUMNS,
    NO_CONVERSATION,
    NO_PREFIX_GROUP,
    ReadOptions,
    TraceFormat,
    fail,
    hash_lists,
    load_csv,
    load_jsonl,
    optional_ids,
    prefix_lengths,
    require,
    table,
    where,
)
from des.workload.formats.checks import positive_ints, times_from

if TYPE_CHECKING:
    import pandas as pd


def read_csv(path: Path, options: ReadOptions) -> pd.DataFrame:
    """A des trace table written as CSV."""
    frame = load_csv(path)
    if "hash_ids" in frame.columns:
        raise fail(path, "has a hash_ids column, but lists of block ids need JSON lines: write the trace as JSONL")
    return _rows(path, frame, options)


def read_jsonl(path: Path, options: ReadOptions) -> pd.DataFrame:
    """A des trace table written as JSON lines."""
    return _rows(path, load_jsonl(path), options)


def _rows(path: Path, frame: pd.DataFrame, options: ReadOptions) -> pd.DataFrame:
    require(path, frame, COLUMNS)
    arrival = times_from(frame["arrival_time"], where(path, "arrival_time"))
    prompt = positive_ints(frame["prompt_tokens"], where(path, "prompt_tokens"))
    output = positive_ints(frame["output_tokens"], where(path, "output_tokens"))
    optional: dict[str, Any] = {}
    if "hash_ids" in frame.columns:
        both = [c for c in ("conversation_id", "prefix_group") if c in frame.columns]
        if both:
            raise fail(
                path,
                f"has hash_ids and {' and '.join(both)}: hash_ids already say what every prompt block is, "
                "so they cannot be combined",
            )
        optional["hash_ids"] = hash_lists(path, frame["hash_ids"], prompt, options.hash_block_tokens)
    if "conversation_id" in frame.columns:
        optional["conversation_id"] = optional_ids(
            path, frame["conversation_id"], "conversation_id", NO_CONVERSATION, "not part of a conversation"
        )
    if "prefix_group" in frame.columns:
        optional["prefix_group"] = groups = optional_ids(
            path, frame["prefix_group"], "prefix_group", NO_PREFIX_GROUP, "no shared prefix"
        )
        if "prefix_tokens" in frame.columns:
            optional["prefix_tokens"] = prefix_lengths(path, frame["prefix_tokens"], groups, prompt)
    elif "prefix_tokens" in frame.columns:
        raise fail(path, "has prefix_tokens but no prefix_group column: whose prefix is it?")
    return table(arrival, prompt, output, optional)


_COLUMNS = "arrival_time (s), prompt_tokens, output_tokens; optional conversation_id, prefix_group, prefix_tokens"
CSV = TraceFormat("csv", read_csv, _COLUMNS, suffixes=(".csv",), signature=COLUMNS)
JSONL = TraceFormat("jsonl", read_jsonl, _COLUMNS + ", hash_ids", suffixes=(".jsonl", ".ndjson"), signature=COLUMNS)
