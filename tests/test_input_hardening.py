"""Inputs a reliability review got through (issue #16): impossible hardware, absurd
horizons and cluster sizes, times a double cannot resolve, YAML quirks, and error lines
that were two lines or named the wrong key. Each is refused with one ``error:`` line
naming its field; the settings next to them that are fine still run."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

import des
from des.config import MAX_TIME, load_yaml
from des.engine.layout import MAX_INSTANCES
from des.render import progress
from des.render import run as render
from des.scenario import scenario_warnings
from des.simulation import RunProgress
from tests.helpers import des_cli

BASE = {
    "name": "base",
    "seed": 0,
    "horizon": {"duration": 30},
    "warmup": 5,
    "workload": {
        "arrival": {"process": "poisson", "rate": 4.0},
        "prompt_tokens": {"dist": "lognormal", "mean": 512, "sigma": 0.6},
        "output_tokens": {"dist": "geometric", "mean": 128},
    },
    "scheduler": {"kind": "continuous", "max_num_seqs": 128, "max_num_batched_tokens": 2048},
}


def problems(*overrides: str | tuple[str, object], base: dict | None = None) -> list[tuple[str, str]]:
    """The problems ``load_scenario`` reports for the base scenario with ``overrides``."""
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(base or BASE, list(overrides))
    return err.value.problems


def loads(*overrides: str | tuple[str, object]) -> des.Scenario:
    return des.load_scenario(BASE, list(overrides))


# -- hardware vLLM would refuse (item 3) -------------------------------------------------------


@pytest.mark.parametrize("tp", [3, 64, 10**29])
def test_a_tensor_parallel_degree_that_splits_no_attention_heads_evenly_is_refused(tp):
    [(path, message)] = problems(("cluster.tp", tp))
    assert path == "cluster.tp"
    assert f"Total number of attention heads (28) must be divisible by tensor parallel size ({tp})" in message


@pytest.mark.parametrize("tp", [7, 14])
def test_a_degree_that_divides_the_heads_but_not_the_kv_heads_is_refused(tp):
    [(path, message)] = problems(("cluster.tp", tp))  # Qwen2.5-7B: 28 heads, 4 KV heads
    assert path == "cluster.tp" and "4 KV heads" in message


@pytest.mark.parametrize("tp", [1, 2, 4, 28])
def test_degrees_vllm_accepts_are_accepted(tp):
    assert loads(("cluster.tp", tp)).layout.pools[0].tp == tp


def test_a_pools_own_tensor_parallel_degree_is_named_at_the_pool():
    [(path, _)] = problems(("scheduler", {"kind": "disaggregated", "prefill": {"tp": 3}}))
    assert path == "scheduler.prefill.tp"


def test_a_context_limit_beyond_the_models_is_refused_where_it_is_written():
    [(path, message)] = problems("scheduler.max_model_len=200000")
    assert path == "scheduler.max_model_len" and "32768" in message
    [(path, _)] = problems(("scheduler", {"kind": "disaggregated", "decode": {"max_model_len": 40000}}))
    assert path == "scheduler.decode.max_model_len"
    [(path, _)] = problems(("scheduler", {"kind": "disaggregated", "max_model_len": 40000}))
    assert path == "scheduler.max_model_len"  # one line for both pools that take it
    ok = loads("scheduler.max_model_len=32768")
    assert ok.layout.context_limit(ok.model) == 32768


@pytest.mark.parametrize("blocks", [10**29, 50_000])
def test_more_kv_blocks_than_the_memory_holds_are_refused(blocks):
    fits = loads().memory_plan().num_blocks
    [(path, message)] = problems(("scheduler.num_gpu_blocks_override", blocks))
    assert path == "scheduler.num_gpu_blocks_override"
    assert f"({fits} blocks) left on 1 x rtx4090" in message
    assert loads(("scheduler.num_gpu_blocks_override", fits)).memory_plan().num_blocks == fits


# -- sizes and times beyond what a run can reach (items 6 and 10) -----------------------------


def test_a_horizon_beyond_what_a_double_times_is_refused():
    [(path, message)] = problems("horizon.duration=1e300")
    assert path == "horizon.duration" and "beyond 1e+10 s" in message
    assert loads(("horizon.duration", MAX_TIME), "warmup=0", "workload.arrival.rate=0.001").horizon.duration == MAX_TIME


@pytest.mark.parametrize(
    ("key", "value"),
    [("cluster.replicas", 10**29), ("scheduler", {"kind": "disaggregated", "decode": {"instances": 10**29}})],
)
def test_clusters_beyond_what_can_be_built_are_refused(key, value):
    [(path, message)] = problems((key, value))
    assert path.endswith(("replicas", "instances")) and f"<= {MAX_INSTANCES}" in message


def trace(tmp_path: Path, times: list[float]) -> str:
    path = tmp_path / f"t{len(list(tmp_path.iterdir()))}.csv"
    path.write_text("arrival_time,prompt_tokens,output_tokens\n" + "".join(f"{t},10,5\n" for t in times))
    return str(path)


def test_a_replay_reaching_times_a_double_cannot_resolve_is_refused(tmp_path):
    path = trace(tmp_path, [0, 1, 2])
    for arrival in ({"process": "trace", "path": path, "time_scale": 1e300},
                    {"process": "trace", "path": trace(tmp_path, [0, 1e15])}):  # fmt: skip
        [(where, message)] = problems(("workload.arrival", arrival), "horizon={}", "warmup=0")
        assert where == "workload.arrival" and "beyond 1e+10 s" in message
    ok = loads(("workload.arrival", {"process": "trace", "path": path}), "horizon={}", "warmup=0")
    assert des.simulate(ok).summary["num_completed"] == 3


def test_a_piped_run_that_takes_long_says_how_far_it_is(monkeypatch):
    """Without a terminal there is no bar: a run prints a line every HEARTBEAT seconds, none
    before the first HEARTBEAT has passed."""
    buffer = io.StringIO()
    monkeypatch.setattr(progress, "ERR", Console(file=buffer, force_terminal=False, width=200))
    tick, _ = progress.progress("run")
    assert tick is not None
    tick(RunProgress(12.5, 600.0, 40, None, 7, False))
    assert buffer.getvalue() == ""  # a short run says nothing
    monkeypatch.setattr(progress, "HEARTBEAT", 0.0)
    tick, _ = progress.progress("run")
    assert tick is not None
    tick(RunProgress(12.5, 600.0, 40, None, 7, False))
    assert buffer.getvalue() == "simulating: 12.5 of 600 s simulated, 40 requests, 7 in system\n"
    assert progress.progress("run", quiet=True)[0] is None


# -- YAML and types (item 9) --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("scheduler.max_num_seqs", True, "not a boolean (got true)"),
        ("scheduler.max_num_seqs", "64", "not the string '64'"),
        ("workload.arrival.rate", "4", "not the string '4'"),
        ("workload.arrival", {"process": "mmpp", "rates": [1, True], "mean_sojourn": [1, 2]}, "not a boolean"),
        ("gpu", {"base": "rtx4090", "memory_bandwidth": "9e11"}, "not the string '9e11'"),
    ],
)
def test_booleans_and_strings_where_numbers_belong_are_errors(key, value, says):
    [(path, message)] = problems((key, value))
    assert path.startswith(key) and says in message


def test_yaml_reads_floats_as_yaml_1_2_writes_them():
    assert load_yaml("a: 1e9\nb: 1.2e10\nc: -2.5E-3\nd: 12\ne: '1e9'") == {
        "a": 1e9, "b": 1.2e10, "c": -2.5e-3, "d": 12, "e": "1e9",
    }  # fmt: skip
    assert loads("workload.arrival.rate=5e0").resolved()["workload"]["arrival"]["rate"] == 5.0


def test_a_key_written_twice_is_an_error_in_a_file_and_in_a_set(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("seed: 0\nseed: 5\nworkload: {arrival: {process: poisson, rate: 4.0}}\n")
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(path)
    [(where, message)] = err.value.problems
    assert where == "scenario" and "line 2" in message and "duplicate key 'seed'" in message
    [(where, message)] = problems("workload.arrival={process: poisson, rate: 4, rate: 8}")
    assert where == "--set" and "duplicate key 'rate'" in message
    merged = load_yaml("a: &x {k: 1, j: 2}\nb: {<<: *x, k: 3}")  # a merge key's keys may be overridden
    assert merged["b"] == {"k": 3, "j": 2}


# -- error lines (D11) -----------------------------------------------------------------------------


def test_a_nul_byte_is_one_error_line(tmp_path):
    path = tmp_path / "nul.yaml"
    path.write_bytes(b'seed: 0\nname: "a\x00b"\n')
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(path)
    [(where, message)] = err.value.problems
    assert where == "scenario" and "\n" not in message and "U+0000" in message


def test_an_unknown_key_of_the_default_kind_is_named_and_not_the_keys_it_then_lacks():
    assert problems("cost_model.foo=1") == [("cost_model.foo", "unknown key")]
    assert problems("cost_model.efficiency={foo: 1}") == [("cost_model.efficiency.foo", "unknown key")]
    assert problems(("scheduler", {"max_batch_size": 4, "foo": 1}))[0][0] == "scheduler.kind"  # static's key


@pytest.mark.parametrize(
    "args",
    [
        ["--set", "cluster.tp=3"],
        ["--set", "scheduler.max_model_len=200000"],
        ["--set", "scheduler.num_gpu_blocks_override=100000000000000000000000000000"],
        ["--set", "cluster.replicas=100000000000000000000000000000"],
        ["--set", "horizon.duration=1e300"],
        ["--set", "scheduler.max_num_seqs=true"],
        ["--set", "cost_model.foo=1"],
    ],
)
def test_the_cli_refuses_each_with_one_error_line_and_writes_nothing(tmp_path, args):
    out = tmp_path / "out"
    res = des_cli("run", "--out", str(out), *args)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert not out.exists() or not any(out.iterdir())


def test_a_piped_run_of_the_default_scenario_prints_no_progress_line(tmp_path):
    res = des_cli("run", "--out", str(tmp_path / "run"))
    assert res.returncode == 0 and "simulating:" not in res.stderr


# -- which window each figure uses (item 11) ---------------------------------------------------


def steady_trace(tmp_path: Path, warmup: float) -> des.Scenario:
    """Three requests at t = 0, 1, 2 s, prompts of 4 tokens and 2-token answers, on a GPU whose
    every step takes 1 s: prefills [0, 1], [1, 2], [2, 3], each with the previous one's last
    decode; the last decode [3, 4]. Finishes at 2, 3 and 4 s."""
    path = tmp_path / "steady.csv"
    path.write_text("arrival_time,prompt_tokens,output_tokens\n0,4,2\n1,4,2\n2,4,2\n")
    return des.load_scenario(
        {
            "workload": {"arrival": {"process": "trace", "path": str(path)}},
            "cost_model": {"kind": "constant", "step_time": 1.0},
            "warmup": warmup,
        }
    )


def test_the_window_rates_name_their_window_and_the_served_rate_covers_the_run(tmp_path):
    s = des.simulate(steady_trace(tmp_path, 0.0)).summary
    assert (s["arrival_window_start"], s["arrival_window_end"], s["makespan"]) == (0.0, 2.0, 4.0)
    assert s["offered_rps"] == pytest.approx(3 / 2)  # 3 arrivals in [0, 2]
    assert s["throughput_rps"] == pytest.approx(1 / 2)  # only the first finishes inside it
    assert s["served_rps"] == pytest.approx(3 / 4)  # all three over the 4 s the run lasts
    assert s["served_tokens_per_s"] == pytest.approx(6 / 4)
    line = render.load_line(s)
    assert "over the arrival window [0, 2] s" in line and "served 0.75 req/s" in line and "at 4 s" in line


def test_a_warm_up_past_the_last_arrival_measures_nothing_and_says_so(tmp_path):
    sc = steady_trace(tmp_path, 5.0)
    [warning] = [w for w in scenario_warnings(sc) if w.startswith("warmup:")]
    assert "last request arrives at 2 s" in warning
    s = des.simulate(sc).summary
    assert s["num_measured"] == 0 and s["throughput_rps"] is None and s["ttft_mean"] is None
    assert s["stable"] is None  # nothing arrived in the window: no verdict, not "stable"
    assert s["served_rps"] == pytest.approx(3 / 4)
    assert "empty" in render.load_line(s) and render.stability_line(s).startswith("unknown")


def test_one_request_reports_what_it_was_served_at():
    s = des.simulate(loads("horizon={num_requests: 1}", "warmup=0")).summary
    assert s["num_completed"] == 1 and s["throughput_rps"] == 0
    assert s["served_rps"] == pytest.approx(1 / s["makespan"])
    [warning] = [w for w in scenario_warnings(loads("horizon={num_requests: 10}")) if w.startswith("warmup:")]
    assert "2.5 s its 10 requests take to arrive at 4 req/s" in warning


def test_a_horizon_holding_more_requests_than_a_run_can_is_refused():
    [(path, message)] = problems("workload.arrival.rate=1e7", "horizon.duration=600")
    assert path == "horizon" and "6e+09 requests" in message
    [(path, _)] = problems("horizon={num_requests: 1000000000}")
    assert path == "horizon.num_requests"
    ok = loads("workload.arrival.rate=1e7", "horizon={duration: 600, num_requests: 1000}", "warmup=0")
    assert ok.horizon.num_requests == 1000  # a count bounds it
