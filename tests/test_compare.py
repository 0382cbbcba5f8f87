"""`des compare`: a des run written out as a vllm bench result or a per-request log compares to
itself with zero error; a perturbed copy shows exactly the perturbation; the readers of the
measured formats keep what vLLM writes (send times, failures, gaps) and say what they lack.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import des
from des.errors import ScenarioError
from des.tools.compare import LATENCIES, STATS, compare, read_measured, simulated_rows
from des.workload.formats import COLUMNS
from des.workload.formats.request_log import read_request_log, write_request_log
from des.workload.formats.vllm_bench import read_vllm_bench, write_vllm_bench

#: Engine settings of the run the fixtures record (and of every replay that must match it).
ENGINE = ["scheduler.max_num_seqs=16", "scheduler.max_num_batched_tokens=1024"]


def trace_table(n: int = 150, seed: int = 3) -> pd.DataFrame:
    """Arrivals on a 1/1024 s grid from 0, so every sum and difference of them is exact."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(np.round(rng.exponential(0.25, n) * 1024) / 1024)
    return pd.DataFrame(
        {
            "arrival_time": arrival - arrival[0],
            "prompt_tokens": rng.integers(16, 1800, n),
            "output_tokens": rng.integers(1, 260, n),
        }
    )


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    """A des run of a trace, written out in every measured format."""
    folder = tmp_path_factory.mktemp("fixtures")
    trace = folder / "trace.csv"
    trace_table().to_csv(trace, index=False)
    replay = [("workload", {"arrival": {"process": "trace", "path": str(trace)}}), ("horizon", {}), ("warmup", 0)]
    sc = des.load_scenario(None, [*replay, *ENGINE])
    rows, rejected = simulated_rows(des.simulate(sc).requests)
    assert rejected == 0 and len(rows) == 150
    write_vllm_bench(rows, folder / "run.json", {"model_id": "Qwen/Qwen2.5-7B-Instruct"})
    write_request_log(rows, folder / "run.csv")
    write_request_log(rows, folder / "run.jsonl", timestamps=True)
    return folder, rows


def errors_of(path: Path, overrides=ENGINE) -> dict[str, float]:
    return compare(read_measured(path), None, overrides).errors()


@pytest.mark.parametrize("name", ["run.json", "run.csv"])
def test_a_des_run_compares_to_itself_with_zero_error(recorded, name):
    folder, _ = recorded
    errors = errors_of(folder / name)
    expected = {"throughput_rps", "output_tokens_per_s"} | {f"{m}_{s}" for m in LATENCIES for s in STATS}
    if name == "run.csv":
        expected -= {f"itl_{s}" for s in STATS}  # a CSV log has no inter-token gaps
    assert set(errors) == expected
    assert all(e == 0.0 for e in errors.values()), errors


def test_timestamps_compare_to_themselves_within_one_rounding(recorded):
    """first_token_time and finish_time are arrival + latency in floating point: one rounding each."""
    folder, _ = recorded
    errors = errors_of(folder / "run.jsonl")
    assert "itl_p99" in errors
    assert max(abs(e) for e in errors.values()) < 1e-12, errors


@pytest.mark.parametrize("factor", [1.1, 0.8])
def test_a_perturbed_run_shows_its_perturbation(recorded, tmp_path, factor):
    folder, rows = recorded
    data = json.loads((folder / "run.json").read_text())
    data["ttfts"] = [t * factor for t in data["ttfts"]]
    data["latencies"] = [t * factor for t in data["latencies"]]
    data["itls"] = [[g * factor for g in gaps] for gaps in data["itls"]]
    path = tmp_path / "perturbed.json"
    path.write_text(json.dumps(data))
    errors = errors_of(path)
    for metric in (f"{m}_{s}" for m in LATENCIES for s in STATS):
        assert errors[metric] == pytest.approx(1 / factor - 1, rel=1e-9, abs=1e-12), metric
    # throughput: the same requests over the span from the first arrival to the last completion
    span = lambda e2e: float((rows["arrival_time"] + e2e).max())  # noqa: E731
    assert errors["throughput_rps"] == pytest.approx(span(rows["e2e"] * factor) / span(rows["e2e"]) - 1, rel=1e-9)


def test_other_engine_settings_change_the_replay(recorded):
    folder, _ = recorded
    errors = errors_of(folder / "run.json", ["scheduler.max_num_seqs=2", "scheduler.max_num_batched_tokens=1024"])
    assert errors["ttft_p99"] > 0.5 and errors["throughput_rps"] < 0


def test_the_readers_return_the_documented_columns(recorded):
    folder, rows = recorded
    for frame in (read_vllm_bench(folder / "run.json"), read_request_log(folder / "run.csv")):
        assert tuple(frame.columns) == COLUMNS
        assert frame["success"].all() and len(frame) == len(rows)
        assert np.array_equal(frame["arrival_time"], rows["arrival_time"])
        assert np.array_equal(frame["ttft"], rows["ttft"]) and np.array_equal(frame["e2e"], rows["e2e"])
    meta = read_vllm_bench(folder / "run.json").attrs["meta"]
    assert meta["model_id"] == "Qwen/Qwen2.5-7B-Instruct" and meta["arrivals"] == "start_times"
    assert meta["completed"] == 150


def bench(n: int = 4, **fields) -> dict:
    """A minimal vllm bench result with ``n`` requests (what older releases save: no start_times)."""
    data = {
        "date": "20250101-000000",
        "request_rate": 2.0,
        "burstiness": 1.0,
        "max_concurrency": None,
        "duration": 10.0,
        "completed": n,
        "input_lens": [100] * n,
        "output_lens": [10] * n,
        "ttfts": [0.05] * n,
        "itls": [[0.02] * 9 for _ in range(n)],
        "errors": [""] * n,
    }
    data.update(fields)
    return data


def test_without_start_times_arrivals_are_drawn_as_vllm_draws_them(tmp_path):
    path = tmp_path / "old.json"
    n = 4000
    path.write_text(json.dumps(bench(n, request_rate=8.0, failed=0)))  # vllm bench serve: has "failed"
    frame = read_vllm_bench(path, seed=7)
    arrival = frame["arrival_time"].to_numpy()
    gaps = np.diff(arrival, prepend=0.0)
    # rescaled so the last request goes at n / rate, as vLLM does
    assert arrival[-1] == pytest.approx(n / 8.0, rel=1e-12)
    assert (gaps > 0).all()
    # Poisson (burstiness 1): exponential gaps have a coefficient of variation of 1; the sample cv of
    # n of them has a standard error of about sqrt(1/n) (delta method: var(s)/mean^2 ~ 1/n); 4 of them
    cv = gaps.std() / gaps.mean()
    assert abs(cv - 1) < 4 * math.sqrt(1 / n)
    assert frame.attrs["meta"]["arrivals"].startswith("drawn from request_rate 8.0")
    assert np.array_equal(read_vllm_bench(path, seed=7)["arrival_time"], frame["arrival_time"])
    # e2e without latencies: ttft plus the gaps
    assert frame["e2e"].iloc[0] == pytest.approx(0.05 + 9 * 0.02)
    assert frame["tpot"].iloc[0] == pytest.approx(0.02)
    path.write_text(json.dumps(bench(5, request_rate="inf")))
    assert (read_vllm_bench(path)["arrival_time"] == 0).all()


def test_the_old_benchmark_script_sent_its_first_request_at_once_and_did_not_rescale(tmp_path):
    """benchmarks/benchmark_serving.py (no failed, latencies, start_times): send, then sleep a gap."""
    path = tmp_path / "legacy.json"
    n = 4000
    path.write_text(json.dumps(bench(n, request_rate=8.0)))
    arrival = read_vllm_bench(path, seed=7)["arrival_time"].to_numpy()
    assert arrival[0] == 0.0
    gaps = np.diff(arrival)
    # n - 1 exponential gaps of mean 1/8 s, not rescaled: their mean is within 4 standard errors
    # (sd of an exponential = its mean; SE = mean / sqrt(n - 1))
    assert abs(gaps.mean() - 1 / 8) < 4 * (1 / 8) / math.sqrt(n - 1)
    assert arrival[-1] != pytest.approx(n / 8.0, rel=1e-9)


def test_failed_requests_are_not_replayed(recorded, tmp_path):
    folder, _ = recorded
    data = json.loads((folder / "run.json").read_text())
    for i in (3, 40):
        data["errors"][i] = "Server disconnected"
        data["output_lens"][i] = 0
        data["ttfts"][i] = 0.0
        data["latencies"][i] = 0.0
        data["itls"][i] = []
    path = tmp_path / "failed.json"
    path.write_text(json.dumps(data))
    measured = read_measured(path)
    assert (~measured.rows["success"]).sum() == 2 and len(measured.completed) == 148
    cmp = compare(measured, None, ENGINE)
    assert len(cmp.simulated) == 148


def test_compare_command_prints_the_table_and_writes_the_figure(recorded, tmp_path):
    folder, _ = recorded
    out = tmp_path / "cmp"
    sets = [x for item in ENGINE for x in ("--set", item)]
    done = subprocess.run(
        [sys.executable, "-m", "des.cli", "compare", str(folder / "run.json"), *sets, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "factors   rtx4090: " in done.stdout  # where the step-time factors come from
    for metric in ("throughput_rps", "ttft_p99", "tpot_mean", "itl_p50", "e2e_p90"):
        line = next(x for x in done.stdout.splitlines() if metric in x)
        assert "+0.0 %" in line, line
    assert (out / "cdf.png").stat().st_size > 30_000
    facts = json.loads((out / "comparison.json").read_text())
    assert facts["ttft_p99_error"] == 0.0 and facts["simulated_completed"] == 150
    # the written scenario reruns the replay: des run gives the same requests
    rerun = des.simulate(des.load_scenario(out / "scenario.yaml"))
    again, _ = simulated_rows(rerun.requests)
    assert np.array_equal(np.sort(again["e2e"]), np.sort(pd.read_parquet(out / "requests.parquet")["e2e"]))


def test_set_may_not_change_what_the_result_decides(recorded):
    folder, _ = recorded
    with pytest.raises(ScenarioError) as info:
        errors_of(folder / "run.json", ["workload.arrival.rate=3"])
    assert info.value.problems[0][0] == "--set"
