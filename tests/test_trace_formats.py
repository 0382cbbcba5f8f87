"""Trace formats: each sample in ``scenarios/traces/`` reads to the requests its file holds.

Every expectation is computed here from the raw file with the standard library (``csv``,
``json``, ``decimal``), independently of the pandas readers under test, and a few are
written out by hand. Malformed files of each format are in ``tests/test_bad_input.py``.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import des
from des.registry import UnknownKind
from des.workload.arrivals import Trace
from des.workload.formats import TRACE_FORMATS, infer_format, read_trace
from des.workload.formats.base import NO_CONVERSATION, NO_PREFIX_GROUP, NO_PREFIX_TOKENS, OPTIONAL
from tests.helpers import ROOT

TRACES = ROOT / "scenarios" / "traces"


def replay(path: Path, **arrival: Any) -> Trace:
    """The Trace of a scenario replaying ``path`` (unit step cost, so runs are instant)."""
    sc = des.load_scenario(
        {
            "name": "formats",
            "workload": {"arrival": {"process": "trace", "path": str(path), **arrival}},
            "cost_model": {"kind": "constant", "step_time": 0.01},
        }
    )
    assert isinstance(sc.workload.arrival, Trace)
    return sc.workload.arrival


def csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def sorted_by_time(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: float(r[key]))  # sorted() is stable, as the readers must be


# -- the registry and the default format ----------------------------------------------------


def test_every_format_is_registered_under_its_name():
    assert TRACE_FORMATS.names() == ["csv", "jsonl"]
    for name in TRACE_FORMATS:
        assert TRACE_FORMATS.get(name).name == name
    with pytest.raises(UnknownKind, match="unknown trace format 'parquet'; valid: csv, jsonl"):
        TRACE_FORMATS.get("parquet")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("t.csv", "csv"),
        ("T.CSV", "csv"),
        ("t.jsonl", "jsonl"),
        ("t.ndjson", "jsonl"),
        ("t.txt", "csv"),
        ("trace", "csv"),
        ("t.tar.jsonl", "jsonl"),
    ],
)
def test_the_format_is_inferred_from_the_file_name(name, expected):
    assert infer_format(Path(name)) == expected


def test_an_inferred_format_reads_the_file_and_an_explicit_one_overrides_it(tmp_path):
    rows = '{"arrival_time": 0, "prompt_tokens": 3, "output_tokens": 4}\n'
    nd = tmp_path / "t.ndjson"
    nd.write_text(rows)
    assert replay(nd).trace_format.name == "jsonl" and replay(nd).format is None
    odd = tmp_path / "t.log"  # any other name is read as CSV unless told
    odd.write_text(rows)
    assert replay(odd, format="jsonl").table["output_tokens"].tolist() == [4]


def test_read_trace_reads_each_sample_in_its_format():
    for name, fmt in [("chat-sample.csv", None), ("card-8.csv", "csv")]:
        frame = read_trace(TRACES / name, fmt)
        assert list(frame.columns[:3]) == ["arrival_time", "prompt_tokens", "output_tokens"]
        assert set(frame.columns[3:]) <= set(OPTIONAL)
        assert frame["arrival_time"].is_monotonic_increasing, name
        assert frame["prompt_tokens"].dtype == np.int64 and frame["output_tokens"].dtype == np.int64
        assert (frame[["prompt_tokens", "output_tokens"]] >= 1).all().all(), name


# -- des's own table: conversations, shared prefixes, block hashes ---------------------------------


def test_chat_sample_reads_conversations_and_prefix_groups():
    path = TRACES / "chat-sample.csv"
    trace = replay(path)
    rows = sorted_by_time(csv_rows(path), "arrival_time")
    t = trace.table
    assert list(t.columns) == [
        "arrival_time",
        "prompt_tokens",
        "output_tokens",
        "conversation_id",
        "prefix_group",
        "prefix_tokens",
    ]
    for col in ("conversation_id", "prefix_group", "prefix_tokens"):
        assert t[col].dtype == np.int64
    assert t["arrival_time"].tolist() == [float(r["arrival_time"]) - float(rows[0]["arrival_time"]) for r in rows]
    assert t["conversation_id"].tolist() == [
        int(r["conversation_id"]) if r["conversation_id"] else NO_CONVERSATION for r in rows
    ]
    assert t["prefix_group"].tolist() == [
        int(r["prefix_group"]) if r["prefix_group"] else NO_PREFIX_GROUP for r in rows
    ]
    assert t["prefix_tokens"].tolist() == [
        int(r["prefix_tokens"]) if r["prefix_tokens"] else NO_PREFIX_TOKENS for r in rows
    ]
    # a chat's turns are its rows in arrival order; each turn's prompt holds the previous turn
    for _, chat in t[t["conversation_id"] != NO_CONVERSATION].groupby("conversation_id"):
        assert len(chat) >= 2
        prompts, outputs = chat["prompt_tokens"].to_numpy(), chat["output_tokens"].to_numpy()
        assert (prompts[1:] > prompts[:-1] + outputs[:-1]).all()
    assert sorted(set(t["prefix_tokens"])) == [0, 300, 800]


def test_jsonl_states_optional_columns_with_nulls_and_hash_ids(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"arrival_time": 2, "prompt_tokens": 600, "output_tokens": 5, "conversation_id": 7, "prefix_group": 1,'
        ' "prefix_tokens": 100}\n'
        '{"arrival_time": 1, "prompt_tokens": 50, "output_tokens": 5, "conversation_id": null}\n'
        "\n"
        '{"arrival_time": 3, "prompt_tokens": 700, "output_tokens": 5, "conversation_id": 7, "prefix_group": 1,'
        ' "prefix_tokens": 100}\n'
    )
    t = replay(path).table
    assert t["conversation_id"].tolist() == [NO_CONVERSATION, 7, 7]
    assert t["prefix_group"].tolist() == [NO_PREFIX_GROUP, 1, 1]
    assert t["prefix_tokens"].tolist() == [NO_PREFIX_TOKENS, 100, 100]
    hashed = tmp_path / "h.jsonl"
    hashed.write_text(
        '{"arrival_time": 0, "prompt_tokens": 1000, "output_tokens": 5, "hash_ids": [0, 18446744073709551615]}\n'
        '{"arrival_time": 1, "prompt_tokens": 10, "output_tokens": 5}\n'
    )
    t = replay(hashed).table
    assert list(t.columns) == ["arrival_time", "prompt_tokens", "output_tokens", "hash_ids"]
    assert t["hash_ids"].tolist() == [(0, 18446744073709551615), ()]  # ids of any size, kept exact


def test_old_traces_keep_their_three_columns():
    t = replay(TRACES / "card-8.csv").table
    assert list(t.columns) == ["arrival_time", "prompt_tokens", "output_tokens"]
    assert t["arrival_time"].tolist() == [float(i) for i in range(8)]


# -- replaying them ------------------------------------------------------------------------


SAMPLES = [
    ("chat-sample.csv", None, 24),
]


@pytest.mark.parametrize(("name", "fmt", "n"), SAMPLES, ids=[s[0] for s in SAMPLES])
def test_every_sample_simulates_and_round_trips_the_resolved_scenario(name, fmt, n):
    trace = replay(TRACES / name, **({"format": fmt} if fmt else {}))
    sc = des.load_scenario(
        {
            "name": "replay",
            "workload": {"arrival": trace.model_dump(mode="json")},
            "cost_model": {"kind": "constant", "step_time": 0.01},
        }
    )
    again = des.load_scenario(sc)  # what scenario.yaml holds reads back to the same replay
    assert isinstance(again.workload.arrival, Trace) and again.workload.arrival.table.equals(trace.table)
    result = des.simulate(sc)
    assert result.summary["num_requests"] == n and result.summary["num_completed"] == n
    assert np.allclose(np.sort(result.requests["arrival_time"]), trace.table["arrival_time"])
