"""`des compare` on vLLM's own files, read as vLLM writes them (tests/fixtures/vllm, README there):
the benchmark's result (new, under a concurrency limit, old), the engine's request records on
their two clocks, OpenTelemetry spans, the server's log and /metrics. Each reader's numbers are
checked against values worked out by hand from the fixture; formats are told from content; a
bad file is one line naming the field, exit 2; the replay holds a benchmark's max_concurrency
as its client did; preemptions and KV capacity stand beside the latencies; and the command
ends in a terminal as a person runs it.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import des
from des.errors import ScenarioError
from des.tools.compare import ENGINE_METRICS, catalog_model, compare, detect_format, read_measured, simulated_rows
from des.workload.formats import read_trace
from des.workload.formats.vllm_bench import read_vllm_bench
from des.workload.formats.vllm_records import read_otel_spans, read_vllm_records
from des.workload.formats.vllm_server_log import parse_server_log, read_server_log
from tests.helpers import des_cli
from tests.test_terminal import in_pty

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "vllm"
#: Monotonic timestamps in the records are written to the microsecond (6 decimals).
US = 2e-6


# -- readers: the numbers of each fixture ---------------------------------------------------


def test_bench_serve_keeps_send_times_failures_and_latencies():
    frame = read_vllm_bench(FIXTURES / "bench-serve.json")
    assert frame["success"].tolist() == [True, True, False, True, True, True]
    assert frame["arrival_time"].to_numpy() == pytest.approx([0, 0.231, 0.402, 0.888, 1.11, 1.544], abs=1e-9)
    assert frame["e2e"].iloc[0] == pytest.approx(0.0412 + 7 * 0.0125, abs=1e-12)
    assert "issue_time" not in frame  # no max_concurrency: sent when issued
    meta = frame.attrs["meta"]
    assert meta["model_id"] == "meta-llama/Llama-3.1-8B-Instruct" and meta["arrivals"] == "start_times"


def test_bench_serve_under_max_concurrency_replays_as_a_closed_loop():
    frame = read_vllm_bench(FIXTURES / "bench-serve-concurrency.json")
    # sent when a slot freed (start_times), issued all at once (start_times - queue_times)
    assert frame["arrival_time"].to_numpy() == pytest.approx([0, 0, 0.2, 0.3, 0.45], abs=1e-9)
    assert frame["issue_time"].to_numpy() == pytest.approx([0] * 5, abs=1e-9)
    measured = read_measured(FIXTURES / "bench-serve-concurrency.json")
    assert measured.max_concurrency == 2
    assert measured.engine()["kv_capacity_tokens"] == 41408  # --metadata kv_cache_tokens=41408


def test_as_a_trace_a_limited_benchmark_without_send_times_says_how_to_hold_it_back(tmp_path):
    data = json.loads((FIXTURES / "bench-serve-concurrency.json").read_text())
    del data["start_times"], data["queue_times"]
    table = read_trace(_write(tmp_path / "b.json", data))
    assert (table["arrival_time"] == 0).all()  # issued at once (request rate inf)
    assert "set workload.arrival.max_concurrency: 2" in " ".join(table.attrs["notes"])


def test_the_old_benchmark_script_has_no_send_times_so_they_are_drawn():
    frame = read_vllm_bench(FIXTURES / "benchmark-serving-legacy.json", seed=3)
    assert frame["arrival_time"].iloc[0] == 0.0  # its first request went at once
    assert frame.attrs["meta"]["arrivals"].startswith("drawn from request_rate 2.0")
    assert frame["e2e"].to_numpy() == pytest.approx([0.05 + 3 * 0.015, 0.02 + 5 * 0.015, 0.04 + 0.03, 0.03 + 0.135])


def test_request_records_with_first_token_latency_give_vllms_own_ttft():
    """Per-request offset c_i = arrival + first_token_latency - first_token_ts: the TTFT is vLLM's,
    the end is the TTFT plus the engine's decode interval (one clock)."""
    frame = read_vllm_records(FIXTURES / "request-records.jsonl")
    ok = frame["success"].to_numpy()
    assert ok.tolist() == [True, True, True, False]  # cmpl-d4 was aborted before its first token
    assert frame["arrival_time"].tolist() == [0.0, 0.25, 0.5, 0.75]
    assert frame["ttft"][ok].to_numpy() == pytest.approx([0.0605, 0.0454, 0.1206], abs=US)
    assert frame["e2e"][ok].to_numpy() == pytest.approx([0.5605, 0.2454, 1.3206], abs=US)
    # first scheduling minus arrival: the TTFT less the engine's scheduled -> first token interval
    assert frame["queue_delay"][ok].to_numpy() == pytest.approx([0.0105, 0.0054, 0.0306], abs=US)
    assert frame["preemptions"].tolist() == [0, 0, 1, 0]
    assert frame["output_tokens"].tolist() == [11, 5, 31, 0] and frame["prompt_tokens"].tolist() == [120, 64, 900, 40]
    assert frame.attrs["meta"]["clocks"].startswith("per request")


def test_request_records_without_it_take_one_offset_short_by_the_smallest_frontend_delay():
    """c = max(arrival - queued_ts): the quickest request's frontend delay (2 ms here) counts as 0,
    so every latency is 2 ms short, and the frontend's 0.4-0.6 ms of output handling is not seen."""
    with_ftl = read_vllm_records(FIXTURES / "request-records.jsonl")
    frame = read_vllm_records(FIXTURES / "request-records-no-first-token-latency.jsonl")
    assert frame["ttft"].to_numpy() == pytest.approx([0.058, 0.043, 0.118], abs=US)
    assert frame["e2e"].to_numpy() == pytest.approx([0.558, 0.243, 1.318], abs=US)
    ipc = np.array([0.0005, 0.0004, 0.0006])
    assert frame["ttft"].to_numpy() == pytest.approx(with_ftl["ttft"][:3].to_numpy() - ipc - 0.002, abs=US)
    assert "preemptions" not in frame and frame.attrs["meta"]["clocks"].startswith("one for the run")


def test_a_finish_reason_kept_as_vllms_number_marks_aborts_and_errors(tmp_path):
    """FinishReason is an IntEnum (STOP 0, LENGTH 1, ABORT 2, ERROR 3, REPETITION 4)."""
    path = _records(tmp_path, lambda r: [x.update(finish_reason=code) for x, code in zip(r, (1, 3, 4, 2), strict=True)])
    assert read_vllm_records(path)["success"].tolist() == [True, False, True, False]


def test_otel_spans_read_vllms_llm_request_spans_only():
    frame = read_otel_spans(FIXTURES / "otel-spans.jsonl")
    assert len(frame) == 4  # the API server's span is not a request record
    assert frame["success"].tolist() == [True, True, True, False]  # status code 2
    assert frame["arrival_time"].to_numpy() == pytest.approx([0, 0.25, 0.5, 0.75], abs=1e-6)
    assert frame["ttft"][:3].tolist() == [0.0605, 0.0454, 0.1206]
    assert frame["e2e"][:3].tolist() == [0.5605, 0.2454, 1.3206]
    assert frame["prompt_tokens"].tolist() == [120, 64, 900, 40]  # intValue written as a string
    assert frame["output_tokens"].tolist() == [11, 5, 31, 0]


def test_jaeger_exports_of_the_same_spans_read_the_same():
    jaeger = read_measured(FIXTURES / "jaeger-trace.json")
    assert jaeger.format == "otel"
    otlp = read_otel_spans(FIXTURES / "otel-spans.jsonl")
    cols = ["prompt_tokens", "output_tokens", "ttft", "e2e", "success"]
    pd.testing.assert_frame_equal(jaeger.rows[cols], otlp[cols])
    assert jaeger.rows["arrival_time"].to_numpy() == pytest.approx(otlp["arrival_time"].to_numpy(), abs=1e-6)


def test_server_log_and_metrics_state_kv_capacity_and_preemptions():
    log = read_server_log(FIXTURES / "server.log")
    assert (log.kv_capacity_tokens, log.kv_blocks, log.preemptions) == (41408, None, None)
    scrape = read_server_log(FIXTURES / "metrics.txt")
    assert (scrape.kv_capacity_tokens, scrape.kv_blocks, scrape.block_size) == (2588 * 16, 2588, 16)
    assert scrape.preemptions == 17
    # the V0 engine's preemption warnings: the largest cumulative count
    v0 = parse_server_log(
        "WARNING ... total_num_cumulative_preemption=1\nINFO # GPU blocks: 2048, # CPU blocks: 512\n"
        "WARNING ... total_num_cumulative_preemption=51\n"
    )
    assert (v0.kv_blocks, v0.preemptions, v0.kv_capacity_tokens) == (2048, 51, None)


# -- formats from content -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("bench-serve.json", "vllm-bench"),
        ("benchmark-serving-legacy.json", "vllm-bench"),
        ("request-records.jsonl", "vllm-records"),
        ("otel-spans.jsonl", "otel"),
        ("jaeger-trace.json", "otel"),
    ],
)
def test_the_format_is_told_from_the_content_not_the_name(tmp_path, name, fmt):
    assert detect_format(FIXTURES / name) == fmt
    renamed = tmp_path / "export.txt"
    shutil.copy(FIXTURES / name, renamed)
    assert detect_format(renamed) == fmt
    assert read_measured(renamed).format == fmt


def test_a_des_table_is_still_a_table(tmp_path):
    csv = tmp_path / "log"
    csv.write_text("arrival_time,prompt_tokens,output_tokens,ttft,e2e\n0,10,5,0.1,0.5\n")
    jsonl = tmp_path / "log2"
    jsonl.write_text('{"arrival_time": 0, "prompt_tokens": 10, "output_tokens": 5, "ttft": 0.1, "e2e": 0.5}\n' * 2)
    assert (detect_format(csv), detect_format(jsonl)) == ("csv", "jsonl")


# -- bad files: one line, the field named, exit 2 ---------------------------------------------


def _records(tmp_path: Path, edit) -> Path:
    rows = [json.loads(x) for x in (FIXTURES / "request-records.jsonl").read_text().splitlines()]
    edit(rows)
    path = tmp_path / "records.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _spans(tmp_path: Path, edit) -> Path:
    lines = [json.loads(x) for x in (FIXTURES / "otel-spans.jsonl").read_text().splitlines()]
    edit(lines)
    path = tmp_path / "spans.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _first_span_attr(lines, key, value):
    for a in lines[0]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["attributes"]:
        if a["key"] == key:
            a["value"] = value


BAD = [
    ("records-missing", lambda p: _records(p, lambda r: r[1].pop("last_token_ts")), "RESULT",
     ["line 2 lacks last_token_ts"]),
    ("records-order", lambda p: _records(p, lambda r: r[0].update(last_token_ts=r[0]["first_token_ts"] - 1)),
     "RESULT", ["line 1", "last_token_ts", "before first_token_ts"]),
    ("records-no-clock-link", lambda p: _records(p, lambda r: [x.pop(k, None) for x in r for k in
                                                               ("first_token_latency", "queued_ts")]),
     "RESULT", ["line 1", "neither first_token_latency nor queued_ts", "monotonic"]),
    ("records-two-hosts", lambda p: _records(p, lambda r: r[2].update(first_token_ts=r[2]["first_token_ts"] - 30,
                                                                        last_token_ts=r[2]["last_token_ts"] - 30,
                                                                        scheduled_ts=r[2]["scheduled_ts"] - 30,
                                                                        queued_ts=r[2]["queued_ts"] - 30)),
     "RESULT", ["spread over 30", "mix runs or hosts"]),
    ("records-prompt", lambda p: _records(p, lambda r: r[0].update(num_prompt_tokens=-3)), "RESULT",
     ["line 1: num_prompt_tokens is -3"]),
    ("spans-none", lambda p: _spans(p, lambda x: x[0]["resourceSpans"][0]["scopeSpans"][0].update(spans=[]) or
                                    x.pop(2)), "RESULT", ["no 'llm_request' span"]),
    ("spans-ttft", lambda p: _spans(p, lambda x: _first_span_attr(x, "gen_ai.latency.time_to_first_token",
                                                                   {"stringValue": "soon"})),
     "RESULT", ["gen_ai.latency.time_to_first_token is 'soon'"]),
    ("bench-limit", lambda p: _write(p / "b.json", json.loads((FIXTURES / "bench-serve-concurrency.json")
                                                               .read_text()) | {"max_concurrency": 0}),
     "RESULT", ["max_concurrency is 0"]),
    ("unknown", lambda p: _write(p / "notes.txt", "hello\n"), "--format", ["cannot tell what", "notes.txt"]),
]  # fmt: skip


def _write(path: Path, content) -> Path:
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


@pytest.mark.parametrize(("case", "make", "field", "echo"), BAD, ids=[b[0] for b in BAD])
def test_a_file_des_cannot_read_is_one_line_naming_the_field(tmp_path, case, make, field, echo):
    path = make(tmp_path)
    with pytest.raises(ScenarioError) as info:
        read_measured(path)
    where, problem = info.value.problems[0]
    assert where == field and all(e in problem for e in echo), problem


@pytest.mark.parametrize("case", ["records-two-hosts", "unknown"])
def test_the_command_says_it_in_one_line_and_exits_2(tmp_path, case):
    _, make, field, echo = next(b for b in BAD if b[0] == case)
    done = des_cli("compare", str(make(tmp_path)), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}: ") and all(e in lines[0] for e in echo)
    assert not (tmp_path / "out").exists()  # nothing written


def test_json_output_carries_the_engine_facts(tmp_path):
    done = des_cli(
        "compare", str(FIXTURES / "otel-spans.jsonl"), "--server-log", str(FIXTURES / "server.log"), "--json",
        "--out", str(tmp_path / "o"), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    assert facts["kv_capacity_tokens"]["measured"] == 41408
    assert facts["kv_capacity_blocks"]["measured"] is None and facts["preemptions"]["measured"] is None
    assert facts["preemptions"]["simulated"] == 0 and facts["ttft_p50"]["measured"] == 0.0605


def test_a_server_log_with_nothing_to_say_is_a_server_log_error(tmp_path):
    log = _write(tmp_path / "empty.log", "INFO started\n")
    with pytest.raises(ScenarioError) as info:
        read_measured(FIXTURES / "bench-serve.json", server_log=log)
    assert info.value.problems[0][0] == "--server-log" and "GPU KV cache size" in info.value.problems[0][1]


# -- the replay and the comparison ---------------------------------------------------------------


def test_max_concurrency_holds_requests_back_as_the_client_did(tmp_path):
    """Five requests due at 0, two at a time, 3 tokens each at a constant 20 ms step: two finish at
    60 ms, the next two are sent then and finish at 120 ms, the last is sent then: 180 ms."""
    trace = _write(tmp_path / "t.csv", "arrival_time,prompt_tokens,output_tokens\n" + "0,100,3\n" * 5)
    sc = des.load_scenario(
        None,
        [
            ("workload", {"arrival": {"process": "trace", "path": str(trace), "max_concurrency": 2}}),
            ("horizon", {"drain": True}),
            ("warmup", 0.0),
            ("cost_model", {"kind": "constant", "step_time": 0.02}),
        ],
    )
    r = des.simulate(sc).requests.sort_values("request_id")
    assert r["arrival_time"].round(12).tolist() == [0.0, 0.0, 0.06, 0.06, 0.12]
    assert r["finish_time"].round(12).tolist() == [0.06, 0.06, 0.12, 0.12, 0.18]


def test_the_comparison_reports_preemptions_and_kv_capacity_beside_the_latencies():
    measured = read_measured(FIXTURES / "request-records.jsonl", server_log=FIXTURES / "metrics.txt")
    cmp = compare(measured, None, ["scheduler.max_num_seqs=16"])
    facts = cmp.engine_facts()
    assert list(facts) == list(ENGINE_METRICS)
    # the log's: the records' preemptions (1, not the scrape's 17 since start-up), the scrape's KV cache
    assert facts["preemptions"]["measured"] == 1
    assert facts["kv_capacity_tokens"]["measured"] == 41408 and facts["kv_capacity_blocks"]["measured"] == 2588
    # des's: its own run's count and memory plan
    rerun = des.simulate(cmp.scenario)
    assert facts["preemptions"]["simulated"] == rerun.summary["preemptions"]
    assert facts["kv_capacity_tokens"]["simulated"] == rerun.summary["kv_capacity_tokens"]
    assert facts["kv_capacity_blocks"]["simulated"] == rerun.summary["kv_capacity_tokens"] / 16
    assert facts["kv_capacity_tokens"]["error"] == pytest.approx(rerun.summary["kv_capacity_tokens"] / 41408 - 1)
    flat = cmp.as_dict()
    assert flat["kv_capacity_tokens_measured"] == 41408 and flat["preemptions_measured"] == 1
    # the records' queue delay (arrival to first scheduling) is compared too
    stats = cmp.table.set_index("metric")
    assert stats.loc["queue_delay_mean", "measured"] == pytest.approx((0.0105 + 0.0054 + 0.0306) / 3, abs=US)
    assert stats.loc["queue_delay_mean", "simulated"] == pytest.approx(
        rerun.requests.query("status == 'completed'")["queue_delay"].mean(), rel=1e-12
    )
    # latencies as the reader gave them, replayed for the three finished requests
    assert len(cmp.simulated) == 3 and cmp.table.set_index("metric").loc["ttft_mean", "measured"] == pytest.approx(
        (0.0605 + 0.0454 + 0.1206) / 3, abs=US
    )


#: The logs are of a Llama-3.1-8B server on an RTX 4090 started with --max-model-len 32768 (server.log):
#: its 131,072-token context does not fit there, and vLLM (so des) would not start with it.
LEN = ["scheduler.max_model_len=32768"]
LEN_CLI = ["--set", LEN[0]]


def test_without_a_scenario_the_replay_runs_on_the_gpu_and_model_the_log_names(tmp_path):
    measured = read_measured(FIXTURES / "bench-serve-concurrency.json")
    cmp = compare(measured, None, LEN)
    assert (cmp.scenario.gpu.name, cmp.scenario.model.name) == ("rtx4090", "llama-3.1-8b")
    assert cmp.scenario.workload.arrival.max_concurrency == 2
    sim = des.simulate(cmp.scenario).requests.sort_values("arrival_time")
    # never more than two in the system: each request arrives no earlier than the second-last finish
    ends = np.sort(sim["finish_time"].to_numpy())
    arrivals = sim["arrival_time"].to_numpy()
    assert (arrivals[2:] >= ends[: len(ends) - 2] - 1e-12).all()
    # a scenario file keeps its own engine
    own = _write(tmp_path / "s.yaml", yaml.safe_dump({"gpu": "h100-80gb", "model": "qwen2.5-7b"}))
    assert compare(measured, own).scenario.gpu.name == "h100-80gb"


@pytest.mark.parametrize(
    ("model_id", "name"),
    [
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"),
        ("mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b"),
        ("Qwen/Qwen3-32B", "qwen3-32b"),
        ("someone/unknown-13b", None),
        ("", None),
    ],
)
def test_catalog_model_of_a_hugging_face_id(model_id, name):
    assert catalog_model(model_id) == name


def test_the_written_scenario_reruns_the_closed_loop_replay(tmp_path):
    out = tmp_path / "cmp"
    done = des_cli("compare", str(FIXTURES / "bench-serve-concurrency.json"), *LEN_CLI, "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"scenario  {out / 'scenario.yaml'}" in done.stdout
    written = yaml.safe_load((out / "scenario.yaml").read_text())
    assert written["workload"]["arrival"]["max_concurrency"] == 2
    rerun, _ = simulated_rows(des.simulate(des.load_scenario(out / "scenario.yaml")).requests)
    saved = pd.read_parquet(out / "requests.parquet")
    assert np.array_equal(np.sort(rerun["e2e"]), np.sort(saved["e2e"]))


# -- as a person runs it ---------------------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_des_compare_in_a_terminal(tmp_path):
    out = tmp_path / "tty"
    status, text = in_pty(
        ["compare", str(FIXTURES / "bench-serve-concurrency.json"), "--server-log", str(FIXTURES / "metrics.txt"),
         *LEN_CLI, "--out", str(out)],
        cwd=tmp_path,
    )  # fmt: skip
    plain = ANSI.sub("", text)
    assert status == 0, plain
    assert "Traceback" not in plain
    for words in ("at most 2 requests in flight", "preemptions", "KV capacity, tokens", "41,408", "2,588", "17"):
        assert words in plain, (words, plain)
    assert f"des run {out / 'scenario.yaml'}" in plain.replace("\r\n", "\n").replace("\n", "")
    # the same files as from a pipe
    piped = tmp_path / "pipe"
    done = des_cli(
        "compare", str(FIXTURES / "bench-serve-concurrency.json"), "--server-log", str(FIXTURES / "metrics.txt"),
        *LEN_CLI, "--out", str(piped), cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for name in ("comparison.json", "trace.csv", "scenario.yaml"):
        assert (out / name).read_bytes() == (piped / name).read_bytes(), name


# -- reliability review 4 (W12, T7, C2) and newcomer review 4 (Q6) ---------------------------


def _bench(tmp_path: Path, **fields) -> Path:
    data = json.loads((FIXTURES / "bench-serve.json").read_text()) | fields
    return _write(tmp_path / "bench.json", data)


def test_a_model_the_catalog_lacks_is_not_replayed_as_another_unasked(tmp_path):
    """W12: ``model_id: nonexistent/Model-1T`` was replayed on Qwen2.5-7B with exit 0 and no word."""
    path = _bench(tmp_path, model_id="nonexistent/Model-1T")
    measured = read_measured(path)
    with pytest.raises(ScenarioError) as info:
        compare(measured, None, ["gpu=rtx4090"])
    [(field, message)] = info.value.problems
    assert field == "RESULT"
    assert message.startswith(f"{str(path)!r}: its model_id 'nonexistent/Model-1T' is no catalog model"), message
    assert "--set model=NAME" in message and "qwen2.5-7b" in message and "a SCENARIO" in message
    # --set model gives the one to replay on: no note
    assert compare(measured, None, ["gpu=rtx4090", "model=llama-3.1-8b", *LEN]).notes == []
    # a SCENARIO naming a model: replayed on it, with a note saying so
    own = _write(tmp_path / "s.yaml", yaml.safe_dump({"model": "llama-3.1-8b", "scheduler": {"max_model_len": 32768}}))
    cmp = compare(measured, own)
    assert cmp.scenario.model.name == "llama-3.1-8b"
    assert cmp.notes == [
        "the log's model_id 'nonexistent/Model-1T' is no catalog model; replaying on SCENARIO's llama-3.1-8b"
    ]
    # a SCENARIO that names none would take the default's: refused as without one
    bare = _write(tmp_path / "bare.yaml", yaml.safe_dump({"gpu": "rtx4090"}))
    with pytest.raises(ScenarioError):
        compare(measured, bare)


def test_the_command_says_so_in_one_line(tmp_path):
    path = _bench(tmp_path, model_id="../../etc/passwd")
    done = des_cli("compare", str(path), "--set", "gpu=rtx4090", "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: RESULT: {str(path)!r}: its model_id '../../etc/passwd'")
    assert not (tmp_path / "o").exists()


def test_a_log_naming_no_gpu_or_model_warns_that_the_default_is_compared(tmp_path):
    """Q6: a log naming neither was compared against RTX 4090 + Qwen2.5-7B, said only in the header."""
    measured = read_measured(FIXTURES / "request-records.jsonl")
    assert compare(measured).notes == [
        "the log names no GPU and no model; comparing against the default scenario's rtx4090 and qwen2.5-7b: "
        "give what it ran on with --set gpu=NAME --set model=NAME, or a SCENARIO"
    ]
    # a log naming its model (bench-serve.json: Llama-3.1-8B-Instruct) but no GPU
    named = read_measured(FIXTURES / "bench-serve.json")
    assert compare(named, None, LEN).notes == [
        "the log names no GPU; comparing against the default scenario's rtx4090: "
        "give what it ran on with --set gpu=NAME, or a SCENARIO"
    ]
    assert compare(named, None, ["gpu=h100-80gb", *LEN]).notes == []
    own = _write(tmp_path / "s.yaml", yaml.safe_dump({"gpu": "h100-80gb", "model": "qwen2.5-7b"}))
    assert compare(measured, own).notes == []
    done = des_cli("compare", str(FIXTURES / "request-records.jsonl"), "--json", "--out", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["warning: " + compare(measured).notes[0]]


def test_llmservingsim_request_records_are_read_by_their_length_names(tmp_path):
    """Q6: LLMServingSim's vLLM benchmark writes ``RequestStateStats`` timestamps with the lengths as
    ``input_toks`` and ``output_toks``; they read as ``num_prompt_tokens`` and ``num_generation_tokens``
    do (and ``completion_tokens``, the OpenAI usage name)."""
    rows = [json.loads(x) for x in (FIXTURES / "request-records.jsonl").read_text().splitlines()]
    theirs = read_vllm_records(FIXTURES / "request-records.jsonl")
    for prompt, output in (("input_toks", "output_toks"), ("prompt_tokens", "completion_tokens")):
        renamed = [
            {(prompt if k == "num_prompt_tokens" else output if k == "num_generation_tokens" else k): v
             for k, v in r.items()} for r in rows
        ]  # fmt: skip
        path = _write(tmp_path / f"{prompt}.jsonl", "".join(json.dumps(r) + "\n" for r in renamed))
        assert detect_format(path) == "vllm-records"
        pd.testing.assert_frame_equal(read_vllm_records(path), theirs)


def test_a_record_lacking_its_lengths_says_what_it_needs_and_what_it_has(tmp_path):
    path = _records(tmp_path, lambda r: [x.pop("num_generation_tokens") for x in r])
    with pytest.raises(ScenarioError) as info:
        read_measured(path)
    [(field, message)] = info.value.problems
    assert field == "RESULT"
    assert "line 1 lacks num_generation_tokens or completion_tokens or output_toks" in message, message
    first = json.loads((FIXTURES / "request-records.jsonl").read_text().splitlines()[0])
    assert message.endswith("; has: " + ", ".join(k for k in first if k != "num_generation_tokens")), message


def test_token_counts_beyond_int64_name_the_field_and_the_value(tmp_path):
    """C2: ``input_lens[0] = 1e30`` leaked a numpy cast warning and an error naming a temporary
    requests.csv, workload.arrival.path and -9223372036854775808."""
    lens = json.loads((FIXTURES / "bench-serve.json").read_text())["input_lens"]
    path = _bench(tmp_path, input_lens=[1e30, *lens[1:]])
    done = des_cli("compare", str(path), "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (
        f"error: RESULT: {str(path)!r}: input_lens[0] is 1e+30, not a whole number from 0 to 1,000,000,000\n"
    )


@pytest.mark.parametrize("flag", ["RESULT", "--server-log"])
def test_a_device_is_refused_not_read_whole(tmp_path, flag):
    """T7: ``des compare /dev/zero`` (or ``--server-log /dev/zero``) read it whole: MemoryError."""
    args = ["/dev/zero"] if flag == "RESULT" else [str(FIXTURES / "bench-serve.json"), "--server-log", "/dev/zero"]
    done = des_cli("compare", *args, "--out", str(tmp_path / "o"), cwd=tmp_path)
    assert done.returncode == 2 and done.stderr == f"error: {flag}: '/dev/zero': is a device, not a file\n"
    assert not (tmp_path / "o").exists()


def test_files_and_pipes_are_read_up_to_the_bound(tmp_path, monkeypatch):
    import os
    import threading

    from des.workload.formats import files

    monkeypatch.setattr(files, "MAX_FILE_BYTES", 10)
    monkeypatch.setattr(files, "_CHUNK", 4)
    assert files.read_bytes(_write(tmp_path / "ok.txt", "0123456789")) == b"0123456789"
    with pytest.raises(files.FileProblem, match=r"holds 11 bytes, beyond the .* des reads from one file"):
        files.read_bytes(_write(tmp_path / "big.txt", "0123456789A"))
    fifo = tmp_path / "pipe"
    for content, expected in ((b"012345678", b"012345678"), (b"0123456789AB", None)):
        os.mkfifo(fifo)
        writer = threading.Thread(target=fifo.write_bytes, args=(content,))
        writer.start()
        if expected is None:
            with pytest.raises(files.FileProblem, match=r"holds more than 10 bytes"):
                files.read_bytes(fifo)
        else:
            assert files.read_bytes(fifo) == expected
        writer.join()
        fifo.unlink()


# -- the engine settings the server's log states ---------------------------------------------------

#: A vLLM 0.11 server's start-up, as it logs it: the API server's options given on the command line
#: (``log_non_default_args``: a Python dict), then the engine core's config line (``VllmConfig.__str__``,
#: vllm/config/vllm.py; ``max_seq_len`` is the resolved max_model_len).
NON_DEFAULT = (
    "(APIServer pid=4121) INFO 11-30 10:14:05 [utils.py:233] non-default args: {'model_tag': "
    "'meta-llama/Llama-3.1-8B-Instruct', 'model': 'meta-llama/Llama-3.1-8B-Instruct', 'max_model_len': 32768, "
    "'gpu_memory_utilization': 0.85, 'max_num_seqs': 64, 'enable_prefix_caching': False}\n"
)
ENGINE_LINE = (
    "(EngineCore_DP0 pid=4260) INFO 11-30 10:14:12 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: "
    "model='meta-llama/Llama-3.1-8B-Instruct', speculative_config=None, tokenizer='meta-llama/Llama-3.1-8B-Instruct', "
    "skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, "
    "dtype=torch.bfloat16, max_seq_len={len}, download_dir=None, load_format=auto, tensor_parallel_size={tp}, "
    "pipeline_parallel_size=1, data_parallel_size=1, disable_custom_all_reduce=False, quantization=None, "
    "enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, structured_outputs_config=StructuredOutputsConfig("
    "backend='auto', disable_fallback=False, disable_any_whitespace=False, disable_additional_properties=False, "
    "reasoning_parser=''), observability_config=ObservabilityConfig(show_hidden_metrics_for_version=None, "
    "otlp_traces_endpoint=None, collect_detailed_traces=None), seed=0, "
    "served_model_name=meta-llama/Llama-3.1-8B-Instruct, enable_prefix_caching=False, enable_chunked_prefill=True, "
    'pooler_config=None, compilation_config={{"level":3,"debug_dump_path":"","cache_dir":"","backend":"",'
    '"custom_ops":[],"splitting_ops":["vllm.unified_attention","vllm.unified_attention_with_output"],'
    '"use_inductor":true,"compile_sizes":[],"cudagraph_mode":[2,1],"max_capture_size":512}}\n'
)
KV_LINE = "(EngineCore_DP0 pid=4260) INFO 11-30 10:14:44 [kv_cache_utils.py:1087] GPU KV cache size: 41,408 tokens\n"
#: bench-serve-concurrency.json: Llama-3.1-8B-Instruct on an RTX 4090 (--metadata gpu=rtx4090).
LLAMA_4090 = FIXTURES / "bench-serve-concurrency.json"


def _startup(tmp_path: Path, length: int = 32768, tp: int = 1, args: str = NON_DEFAULT) -> Path:
    return _write(tmp_path / "server.log", args + ENGINE_LINE.format(len=length, tp=tp) + KV_LINE)


def test_the_server_log_states_the_engine_settings_it_ran(tmp_path):
    facts = read_server_log(_startup(tmp_path))
    assert (facts.max_model_len, facts.tensor_parallel_size, facts.kv_capacity_tokens) == (32768, 1, 41408)
    assert (facts.enable_prefix_caching, facts.enable_chunked_prefill) == (False, True)
    assert (facts.max_num_seqs, facts.gpu_memory_utilization) == (64, 0.85)  # from the non-default args only
    assert facts.max_num_batched_tokens is None and facts.block_size is None  # unsaid
    assert facts.settings() == {
        "max_model_len": 32768,
        "max_num_seqs": 64,
        "gpu_memory_utilization": 0.85,
        "enable_prefix_caching": False,
        "enable_chunked_prefill": True,
    }
    # the config line (resolved at start-up) over the options; the options alone; a block size given
    both = parse_server_log(NON_DEFAULT + ENGINE_LINE.format(len=16384, tp=2))
    assert (both.max_model_len, both.tensor_parallel_size) == (16384, 2)
    args = parse_server_log(
        "INFO non-default args: {'model': 'x', 'max_num_batched_tokens': 4096, 'block_size': 32, "
        "'enable_chunked_prefill': False, 'tensor_parallel_size': 4, 'max_model_len': 8192}\n"
    )
    assert (args.max_num_batched_tokens, args.block_size, args.enable_chunked_prefill) == (4096, 32, False)
    assert (args.tensor_parallel_size, args.max_model_len, args.kv_capacity_tokens) == (4, 8192, None)
    # vLLM's -1 ("the longest context memory holds") says nothing of the length
    assert parse_server_log("INFO non-default args: {'max_model_len': -1, 'max_num_seqs': 8}").max_model_len is None
    # the fixture server.log: its options and its per-request context line
    assert read_server_log(FIXTURES / "server.log").settings() == {
        "max_model_len": 32768,
        "gpu_memory_utilization": 0.9,
    }


def test_a_llama_8b_4090_comparison_runs_with_the_logs_context_instead_of_being_refused(tmp_path):
    with pytest.raises(ScenarioError, match="max_model_len"):
        compare(read_measured(LLAMA_4090))  # the model's 131,072-token context: vLLM would not start
    measured = read_measured(LLAMA_4090, server_log=_startup(tmp_path))
    cmp = compare(measured)
    assert (cmp.scenario.gpu.name, cmp.scenario.model.name) == ("rtx4090", "llama-3.1-8b")
    policy = cmp.scenario.layout.pools[0].policy
    assert cmp.scenario.scheduler.max_model_len == 32768 and policy.max_num_seqs == 64
    assert (policy.gpu_memory_utilization, policy.enable_prefix_caching, policy.enable_chunked_prefill) == (
        0.85,
        False,
        True,
    )
    assert cmp.from_log == {
        "max_model_len": 32768,
        "max_num_seqs": 64,
        "gpu_memory_utilization": 0.85,
        "enable_prefix_caching": False,
        "enable_chunked_prefill": True,
    }
    assert len(cmp.simulated) == len(measured.completed) and cmp.notes == []
    assert cmp.as_dict()["settings_from_server_log"].startswith("max_model_len 32,768, max_num_seqs 64")
    # the written scenario reruns with them
    assert cmp.rerun_scenario()["scheduler"]["max_model_len"] == 32768
    # the command says which it took, and runs
    done = des_cli("compare", str(LLAMA_4090), "--server-log", str(_startup(tmp_path)), "--out", str(tmp_path / "o"))
    assert done.returncode == 0, done.stderr
    assert "settings from the server's log (neither SCENARIO nor --set gives them): max_model_len 32,768" in " ".join(
        done.stdout.split()
    )


def test_a_setting_the_user_gives_wins_over_the_log(tmp_path):
    log = _startup(tmp_path)
    measured = read_measured(LLAMA_4090, server_log=log)
    cmp = compare(measured, None, ["scheduler.max_model_len=16384", "scheduler.enable_prefix_caching=true"])
    assert cmp.scenario.scheduler.max_model_len == 16384 and cmp.scenario.layout.pools[0].policy.enable_prefix_caching
    assert "max_model_len" not in cmp.from_log and "enable_prefix_caching" not in cmp.from_log
    assert cmp.from_log["max_num_seqs"] == 64
    # a SCENARIO's own, at its top level or in a pool
    own = _write(
        tmp_path / "s.yaml",
        yaml.safe_dump(
            {
                "gpu": "rtx4090",
                "model": "llama-3.1-8b",
                "scheduler": {"max_model_len": 8192},
                "cluster": {"pools": [{"name": "main", "scheduler": {"max_num_seqs": 32}}]},
            }
        ),
    )
    cmp = compare(measured, own)
    assert cmp.scenario.scheduler.max_model_len == 8192 and cmp.scenario.layout.pools[0].policy.max_num_seqs == 32
    assert cmp.from_log == {
        "gpu_memory_utilization": 0.85,
        "enable_prefix_caching": False,
        "enable_chunked_prefill": True,
    }
    # without a SCENARIO the embedded default's block size (16) is no user's: the log's wins
    flat = parse_server_log("INFO non-default args: {'block_size': 32, 'max_model_len': 16384}")
    assert compare(replace(measured, server=flat)).scenario.scheduler.block_size == 32


def test_a_log_without_engine_settings_changes_nothing(tmp_path):
    plain = read_measured(LLAMA_4090)
    kv_only = read_measured(LLAMA_4090, server_log=_write(tmp_path / "kv.log", KV_LINE))
    assert kv_only.server is not None
    assert kv_only.server.settings() == {} and kv_only.server.tensor_parallel_size is None
    a, b = compare(plain, None, LEN), compare(kv_only, None, LEN)
    assert b.from_log == {} and b.notes == a.notes
    assert a.rerun_scenario() == b.rerun_scenario()
    pd.testing.assert_frame_equal(a.simulated, b.simulated)
    with pytest.raises(ScenarioError, match="max_model_len"):
        compare(kv_only)  # still refused: the log does not say what context the server ran


def test_a_gpu_count_the_log_states_is_checked_not_changed(tmp_path):
    measured = read_measured(LLAMA_4090, server_log=_startup(tmp_path, tp=2))
    cmp = compare(measured)
    assert [p.tp for p in cmp.scenario.cluster.pools] == [1]
    assert cmp.notes == [
        "the server log states tensor_parallel_size 2, the replay runs 1 GPU(s) per instance "
        "(kept: give the server's with --set cluster.pools.0.tp=2, or a SCENARIO)"
    ]
    assert compare(measured, None, ["cluster.pools.0.tp=2"]).notes == []
    # a context beyond the replay's model (the server ran another): kept the model's, said so
    qwen = compare(measured, None, ["model=qwen2.5-7b", "gpu=h100-80gb", "cluster.pools.0.tp=2"])
    assert "max_model_len" in qwen.from_log  # qwen2.5-7b's context is 32,768: the log's fits
    longer = read_measured(LLAMA_4090, server_log=_startup(tmp_path, length=65536))
    kept = compare(longer, None, ["model=qwen2.5-7b", "gpu=h100-80gb"])
    assert "max_model_len" not in kept.from_log
    assert "the server log's max_model_len 65,536 is longer than qwen2.5-7b's 32,768-token context" in kept.notes[0]
