"""Trace formats: each sample in ``scenarios/traces/`` reads to the requests its file holds.

Every expectation is computed here from the raw file with the standard library (``csv``,
``json``, ``decimal``), independently of the pandas readers under test, and a few are
written out by hand. Malformed files of each format are in ``tests/test_bad_input.py``.
"""

from __future__ import annotations

import csv
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import des
from des.registry import UnknownKind
from des.workload.arrivals import Trace
from des.workload.formats import TRACE_FORMATS, infer_format, read_trace
from des.workload.formats.base import NO_CONVERSATION, NO_PREFIX_GROUP, NO_PREFIX_TOKENS, OPTIONAL
from des.workload.formats.vllm_bench import write_vllm_bench
from tests.helpers import ROOT, des_cli

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
    assert TRACE_FORMATS.names() == ["csv", "jsonl", "mooncake", "azure", "burstgpt", "vllm-bench"]
    for name in TRACE_FORMATS:
        assert TRACE_FORMATS.get(name).name == name
    with pytest.raises(UnknownKind, match="unknown trace format 'parquet'; valid: csv, jsonl, mooncake"):
        TRACE_FORMATS.get("parquet")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("t.csv", "csv"),
        ("T.CSV", "csv"),
        ("t.jsonl", "jsonl"),
        ("t.ndjson", "jsonl"),
        ("bench.json", "vllm-bench"),
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
    assert replay(TRACES / "mooncake-sample.jsonl", format="mooncake").trace_format.name == "mooncake"


def test_read_trace_reads_each_sample_in_its_format():
    for name, fmt in [
        ("mooncake-sample.jsonl", "mooncake"),
        ("azure-sample.csv", "azure"),
        ("burstgpt-sample.csv", "burstgpt"),
        ("vllm-bench-sample.json", None),
        ("chat-sample.csv", None),
    ]:
        frame = read_trace(TRACES / name, fmt)
        assert list(frame.columns[:3]) == ["arrival_time", "prompt_tokens", "output_tokens"]
        assert set(frame.columns[3:]) <= set(OPTIONAL)
        assert frame["arrival_time"].is_monotonic_increasing, name
        assert frame["prompt_tokens"].dtype == np.int64 and frame["output_tokens"].dtype == np.int64
        assert (frame[["prompt_tokens", "output_tokens"]] >= 1).all().all(), name


# -- mooncake --------------------------------------------------------------------------------


def mooncake_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_mooncake_sample_reads_to_its_requests_in_seconds():
    path = TRACES / "mooncake-sample.jsonl"
    trace = replay(path, format="mooncake")
    rows = sorted_by_time(mooncake_lines(path), "timestamp")
    t = trace.table
    assert list(t.columns) == ["arrival_time", "prompt_tokens", "output_tokens", "hash_ids"]
    t0 = rows[0]["timestamp"]
    # milliseconds to seconds by default (time_scale unset), exactly: 2999 ms is 2.999 s
    assert t["arrival_time"].tolist() == [(r["timestamp"] - t0) / 1000 for r in rows]
    assert t["arrival_time"].tolist()[:3] == [0.0, 0.0, 2.999]
    assert t["prompt_tokens"].tolist() == [r["input_length"] for r in rows]
    assert t["output_tokens"].tolist() == [r["output_length"] for r in rows]
    assert t["hash_ids"].tolist() == [tuple(r["hash_ids"]) for r in rows]
    assert all(type(h) is tuple for h in t["hash_ids"])
    assert t["hash_ids"].iloc[0] == (0, 1, 2, 3, 4, 5)
    assert trace.hash_block_tokens == 512 and trace.time_scale is None and trace.unit_seconds == 0.001
    # the sample's follow-ups reuse an earlier prompt's blocks: the ids the lead turns into cache hits
    firsts = {h[:3] for h in t["hash_ids"]}
    assert len(firsts) < len(t)


def test_mooncake_time_scale_replaces_the_unit_and_rate_scale_divides():
    path = TRACES / "mooncake-sample.jsonl"
    base = replay(path, format="mooncake").table["arrival_time"].to_numpy()
    as_seconds = replay(path, format="mooncake", time_scale=1.0).table["arrival_time"].to_numpy()
    np.testing.assert_allclose(as_seconds, base * 1000, rtol=1e-12)
    doubled = replay(path, format="mooncake", rate_scale=2.0).table["arrival_time"].to_numpy()
    np.testing.assert_allclose(doubled, base / 2, rtol=1e-15)


def test_mooncake_ids_may_be_left_out_and_follow_the_block_size(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"timestamp": 5, "input_length": 1024, "output_length": 2, "hash_ids": [7, 8]}\n'
        '{"timestamp": 5, "input_length": 1025, "output_length": 2, "hash_ids": [7, 8, 9]}\n'
        '{"timestamp": 6, "input_length": 1025, "output_length": 2, "hash_ids": [7, 8]}\n'
        '{"timestamp": 4, "input_length": 10, "output_length": 1, "input_text": "ignored"}\n'
    )
    t = replay(path, format="mooncake").table
    # sorted stably: the 4 ms row first, the two 5 ms rows in file order
    assert t["arrival_time"].tolist() == [0.0, 0.001, 0.001, 0.002]
    assert t["hash_ids"].tolist() == [(), (7, 8), (7, 8, 9), (7, 8)]
    assert replay(path, format="mooncake", time_scale=1.0).table["arrival_time"].tolist() == [0.0, 1.0, 1.0, 2.0]
    path.write_text('{"timestamp": 0, "input_length": 1024, "output_length": 2, "hash_ids": [7, 8, 9, 10]}\n')
    assert replay(path, format="mooncake", hash_block_tokens=256).hash_block_tokens == 256
    with pytest.raises(des.ScenarioError, match="4 hash_ids for 1024 prompt tokens, but blocks of 128 tokens need 8"):
        replay(path, format="mooncake", hash_block_tokens=128)
    with pytest.raises(des.ScenarioError, match="blocks of 512 tokens need 2"):
        replay(path, format="mooncake")


def test_mooncake_without_hash_ids_has_no_hash_column(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2}\n')
    assert list(replay(path, format="mooncake").table.columns) == ["arrival_time", "prompt_tokens", "output_tokens"]


# -- azure -----------------------------------------------------------------------------------


def azure_seconds(stamp: str) -> Decimal:
    """Seconds of the day of a 2023-release TIMESTAMP, exactly."""
    _, clock = stamp.split(" ")
    h, m, s = clock.split(":")
    return Decimal(h) * 3600 + Decimal(m) * 60 + Decimal(s)


def test_azure_sample_reads_to_its_requests():
    path = TRACES / "azure-sample.csv"
    trace = replay(path, format="azure")
    rows = sorted_by_time([{**r, "t": azure_seconds(r["TIMESTAMP"])} for r in csv_rows(path)], "t")
    t = trace.table
    assert list(t.columns) == ["arrival_time", "prompt_tokens", "output_tokens"]
    expected = [float(r["t"] - rows[0]["t"]) for r in rows]
    np.testing.assert_allclose(t["arrival_time"], expected, rtol=0, atol=1e-9)
    assert t["arrival_time"].iloc[1] == pytest.approx(0.0000896, abs=1e-9)  # .6806796 - .6805900
    assert t["prompt_tokens"].tolist() == [int(r["ContextTokens"]) for r in rows]
    assert t["output_tokens"].tolist() == [int(r["GeneratedTokens"]) for r in rows]
    # the recorded clock is the time of day, in seconds since 00:00 UTC
    kept = replay(path, format="azure", absolute_times=True).table["arrival_time"]
    assert kept.iloc[0] == pytest.approx(18 * 3600 + 15 * 60 + 46.68059, abs=1e-9)


def test_azure_2024_timestamps_with_offsets_and_without_fractions(tmp_path):
    path = tmp_path / "code_1week.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 00:00:00.009930+00:00,2162,5\n"
        "2024-05-10 00:00:01+00:00,2399,6\n"
        "2024-05-10 02:00:00.5+02:00,76,15\n"  # 00:00:00.5 UTC
        "2024-05-10 00:00:02,2376,1\n"  # no offset: UTC
    )
    t = replay(path, format="azure").table
    np.testing.assert_allclose(t["arrival_time"], [0.0, 0.49007, 0.99007, 1.99007], rtol=0, atol=1e-9)
    assert t["prompt_tokens"].tolist() == [2162, 76, 2399, 2376]


# -- burstgpt --------------------------------------------------------------------------------


def test_burstgpt_sample_skips_failed_requests_and_says_so():
    path = TRACES / "burstgpt-sample.csv"
    trace = replay(path, format="burstgpt")
    rows = csv_rows(path)
    ok = sorted_by_time([r for r in rows if int(r["Response tokens"]) > 0], "Timestamp")
    failed = len(rows) - len(ok)
    assert (len(rows), failed) == (40, 4)
    t = trace.table
    assert list(t.columns) == ["arrival_time", "prompt_tokens", "output_tokens"]
    t0 = float(ok[0]["Timestamp"])
    assert t["arrival_time"].tolist() == [float(r["Timestamp"]) - t0 for r in ok]
    assert t["prompt_tokens"].tolist() == [int(r["Request tokens"]) for r in ok]
    assert t["output_tokens"].tolist() == [int(r["Response tokens"]) for r in ok]
    assert trace.notes == ["burstgpt-sample.csv: skipped 4 of 40 rows: Response tokens 0 (failed requests)"]
    assert trace.offset == 5.0  # seconds from 00:00 of the first day, moved to t = 0


@pytest.mark.parametrize("model", ["ChatGPT", "GPT-4"])
def test_burstgpt_keeps_one_model_when_asked(model):
    path = TRACES / "burstgpt-sample.csv"
    trace = replay(path, format="burstgpt", model=model)
    rows = [r for r in csv_rows(path) if r["Model"] == model]
    ok = sorted_by_time([r for r in rows if int(r["Response tokens"]) > 0], "Timestamp")
    assert 0 < len(ok) < 36
    assert trace.table["prompt_tokens"].tolist() == [int(r["Request tokens"]) for r in ok]
    failed = len(rows) - len(ok)
    assert trace.notes == (
        [f"burstgpt-sample.csv: skipped {failed} of {len(rows)} rows: Response tokens 0 (failed requests)"]
        if failed
        else []
    )


@pytest.mark.parametrize(("model", "log_type"), [(None, "API log"), (None, "Conversation log"), ("GPT-4", "API log")])
def test_burstgpt_keeps_one_log_type_when_asked(model, log_type):
    path = TRACES / "burstgpt-sample.csv"
    trace = replay(path, format="burstgpt", model=model, log_type=log_type)
    rows = [r for r in csv_rows(path) if r["Log Type"] == log_type and model in (None, r["Model"])]
    ok = sorted_by_time([r for r in rows if int(r["Response tokens"]) > 0], "Timestamp")
    assert 0 < len(ok) < 36
    assert trace.table["prompt_tokens"].tolist() == [int(r["Request tokens"]) for r in ok]


def test_burstgpt_names_the_log_types_it_has():
    with pytest.raises(des.ScenarioError) as err:
        replay(TRACES / "burstgpt-sample.csv", format="burstgpt", log_type="Web log")
    (path, message), *_ = err.value.problems
    assert path.endswith("log_type") and "'Web log'" in message
    assert message.endswith("its log types: API log, Conversation log")


# -- vllm-bench ------------------------------------------------------------------------------


def test_vllm_bench_sample_replays_its_successful_requests_at_their_send_times():
    path = TRACES / "vllm-bench-sample.json"
    trace = replay(path)  # .json: vllm-bench
    data = json.loads(path.read_text())
    ok = [i for i, e in enumerate(data["errors"]) if not e]
    assert len(ok) == 28 and len(data["errors"]) == 30
    t = trace.table
    assert list(t.columns) == ["arrival_time", "prompt_tokens", "output_tokens"]
    starts = data["start_times"]
    first = min(starts[i] for i in ok)
    np.testing.assert_allclose(t["arrival_time"], [starts[i] - first for i in ok], rtol=0, atol=1e-12)
    assert t["prompt_tokens"].tolist() == [data["input_lens"][i] for i in ok]
    assert t["output_tokens"].tolist() == [data["output_lens"][i] for i in ok]
    assert trace.notes == ["vllm-bench-sample.json: skipped 2 of 30 rows: failed requests (an error, or no output)"]


def test_vllm_bench_without_start_times_draws_them_the_same_way_every_time(tmp_path):
    data = json.loads((TRACES / "vllm-bench-sample.json").read_text())
    del data["start_times"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    a, b = replay(path), replay(path)
    assert a.table.equals(b.table)
    assert len(a.table) == 28 and a.table["arrival_time"].is_monotonic_increasing
    assert any("drawn from request_rate 4.0" in note for note in a.notes), a.notes


def test_vllm_bench_round_trips_a_written_result(tmp_path):
    frame = pd.DataFrame(
        {
            "arrival_time": [0.0, 0.5, 0.25],
            "prompt_tokens": [10, 20, 30],
            "output_tokens": [3, 2, 1],
            "ttft": [0.1, 0.1, 0.1],
            "e2e": [0.3, 0.2, 0.1],
            "itl": [[0.1, 0.1], [0.1], []],
            "success": [True, True, True],
        }
    )
    path = tmp_path / "r.json"
    write_vllm_bench(frame, path)
    t = replay(path).table
    assert t["arrival_time"].tolist() == [0.0, 0.25, 0.5]
    assert t["prompt_tokens"].tolist() == [10, 30, 20] and t["output_tokens"].tolist() == [3, 1, 2]


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
    ("mooncake-sample.jsonl", "mooncake", 40),
    ("azure-sample.csv", "azure", 40),
    ("burstgpt-sample.csv", "burstgpt", 36),
    ("vllm-bench-sample.json", None, 28),
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


def test_des_run_names_the_format_and_warns_of_skipped_rows(tmp_path):
    proc = des_cli(
        "run",
        "--set",
        f"workload.arrival={{process: trace, path: {TRACES / 'burstgpt-sample.csv'}, format: burstgpt}}",
        "--set",
        "horizon.duration=null",
        "--set",
        "warmup=0",
        "--out",
        str(tmp_path / "out"),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    warned = " ".join(proc.stderr.split())  # rich wraps long lines at the terminal's width
    assert warned == (
        "warning: workload.arrival: burstgpt-sample.csv: skipped 4 of 40 rows: Response tokens 0 (failed requests)"
    )
    text = " ".join(proc.stdout.split())
    assert "trace burstgpt-sample.csv (burstgpt; first arrival (recorded at 5) moved to t = 0" in text
    assert "36 requests" in text
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["num_requests"] == 36


def test_des_run_says_a_mooncake_trace_is_in_milliseconds(tmp_path):
    proc = des_cli(
        "run",
        "--set",
        f"workload.arrival={{process: trace, path: {TRACES / 'mooncake-sample.jsonl'}, format: mooncake}}",
        "--set",
        "horizon.duration=null",
        "--set",
        "warmup=0",
        "--out",
        str(tmp_path / "out"),
        "--quiet",
        cwd=tmp_path,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    from des.render.run import workload_line

    sc = des.load_scenario(tmp_path / "out" / "scenario.yaml")
    line = workload_line(sc)
    assert line.startswith("trace mooncake-sample.jsonl (mooncake, times in milliseconds; times as recorded)"), line
