"""Trace replay as a planner meets it: epoch timestamps, rates over the arrival window,
time and rate scaling, paths given on the command line, and the trace's own figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import des
from des.workload.arrivals import Trace
from des.workload.trace import trace_stats
from tests.helpers import ROOT, des_cli

EPOCH = 1_700_000_000.0


def write_trace(path: Path, times: np.ndarray, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    n = len(times)
    frame = pd.DataFrame(
        {
            "arrival_time": times,
            "prompt_tokens": rng.integers(64, 512, n),
            "output_tokens": rng.integers(16, 128, n),
        }
    )
    frame.to_csv(path, index=False, float_format="%.6f")
    return path


def poisson_times(n: int, rate: float, start: float, seed: int = 1) -> np.ndarray:
    return start + np.cumsum(np.random.default_rng(seed).exponential(1 / rate, n))


def replay(source, *overrides: str) -> Trace:
    """The Trace of a scenario (dict or path)."""
    arrival = des.load_scenario(source, list(overrides)).workload.arrival
    assert isinstance(arrival, Trace)
    return arrival


def scenario(path: Path, **arrival) -> dict:
    return {
        "name": "trace",
        "workload": {"arrival": {"process": "trace", "path": str(path), **arrival}},
        "scheduler": {"kind": "continuous"},
    }


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    """The same 400 requests at 2 req/s, once with epoch timestamps and once from 0."""
    folder = tmp_path_factory.mktemp("traces")
    times = poisson_times(400, 2.0, 0.0)
    times -= times[0]
    return (
        write_trace(folder / "epoch.csv", times + EPOCH),
        write_trace(folder / "zero.csv", times),
        times,
    )


def test_epoch_timestamps_replay_from_zero_with_sane_rates(traces):
    epoch, zero, times = traces
    shifted = des.simulate(des.load_scenario(scenario(epoch)))
    from_zero = des.simulate(des.load_scenario(scenario(zero)))
    assert shifted.requests["arrival_time"].iloc[0] == 0.0
    assert np.allclose(shifted.requests["arrival_time"], from_zero.requests["arrival_time"], rtol=0, atol=1e-5)
    s = shifted.summary
    # offered load is the requests over the arrival window [0, last arrival], not over the drain
    span = float(shifted.requests["arrival_time"].max())
    assert s["offered_rps"] == pytest.approx(len(times) / span)
    assert s["offered_rps"] == pytest.approx(2.0, rel=0.15)  # 400 Poisson gaps: sd 5 %
    assert s["throughput_rps"] == pytest.approx(s["offered_rps"], rel=0.05)
    assert s["gpu_busy_fraction"] > 0.1
    assert s["stable"]


def test_absolute_times_keep_the_recorded_clock(traces):
    epoch, _, _ = traces
    arrival = replay(scenario(epoch, absolute_times=True, rate_scale=1.0), "horizon.num_requests=5")
    assert arrival.offset == 0.0
    assert arrival.table["arrival_time"].iloc[0] == pytest.approx(EPOCH)


def test_time_scale_converts_units_and_rate_scale_multiplies_the_load(traces):
    _, zero, times = traces
    ms = zero.with_name("ms.csv")
    write_trace(ms, times * 1000.0)
    base = replay(scenario(zero)).table["arrival_time"].to_numpy()
    in_ms = replay(scenario(ms, time_scale=0.001)).table["arrival_time"].to_numpy()
    assert np.allclose(in_ms, base, rtol=1e-9, atol=1e-6)
    doubled = replay(scenario(zero, rate_scale=2.0)).table["arrival_time"].to_numpy()
    assert np.allclose(doubled, base / 2)
    fast = des.simulate(des.load_scenario(scenario(zero, rate_scale=2.0))).summary
    slow = des.simulate(des.load_scenario(scenario(zero))).summary
    assert fast["offered_rps"] == pytest.approx(2 * slow["offered_rps"])


def test_trace_stats_measures_rate_and_burstiness():
    st = trace_stats(np.array([10.0, 11.0, 14.0]))  # gaps 1 and 3: mean 2, sd 1
    assert (st.requests, st.span, st.rate, st.cv) == (3, 4.0, 0.5, 0.5)
    assert trace_stats(np.array([0.0, 0.0, 0.0])).rate is None
    gaps = np.random.default_rng(0).exponential(1.0, 40_000)
    st = trace_stats(np.cumsum(gaps))
    # the cv of n exponential gaps has a standard error of about 1 / sqrt(n) = 0.005
    assert st.cv == pytest.approx(1.0, abs=0.025)


def test_set_path_is_relative_to_the_current_directory(tmp_path, traces):
    _, zero, _ = traces
    work = tmp_path / "work"
    work.mkdir()
    (work / "mine.csv").write_text(zero.read_text())
    # the scenario file lives elsewhere; the override names a file in the shell's directory
    proc = des_cli(
        "run",
        str(ROOT / "scenarios" / "card-continuous.yaml"),
        "--set",
        "workload.arrival.path=mine.csv",
        "--set",
        "cost_model={kind: roofline}",
        "--out",
        str(tmp_path / "out"),
        cwd=work,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["num_requests"] == 400


def test_des_run_says_it_moved_the_trace_and_prints_its_rate_and_cv(tmp_path, traces):
    epoch, _, _ = traces
    path = tmp_path / "s.yaml"
    path.write_text(json.dumps(scenario(epoch)))
    proc = des_cli("run", str(path), "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "moved to t = 0" in text and "absolute_times" in text
    st = replay(path).stats()
    assert f"gap cv {st.cv:.2f}" in text and f"{st.rate:.3g} req/s" in text
