"""Runs that never ended or blew up, and answers that were silently wrong (issue #37,
reliability-review-4's R1, R2, T2, T3, W6-W8, W10, W11, C4): the windows table follows the
traffic, not the clock; settings whose cost has no bound are refused with one line stating
the bound; vLLM's own refusals are des's; counters count like events; errors name the key
as written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import des
from des.scenario import MIN_WINDOW

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


def loads(*overrides: str | tuple[str, object], base: dict | None = None) -> des.Scenario:
    return des.load_scenario(base or BASE, list(overrides))


def trace(tmp_path: Path, times: list[float]) -> str:
    path = tmp_path / f"t{len(list(tmp_path.iterdir()))}.csv"
    path.write_text("arrival_time,prompt_tokens,output_tokens\n" + "".join(f"{t!r},200,20\n" for t in times))
    return str(path)


def replay(path: str, *overrides: str | tuple[str, object]) -> des.Scenario:
    return loads(("workload.arrival", {"process": "trace", "path": path}), "horizon={}", "warmup=0", *overrides)


# -- R1: the windows table grows with the traffic, not the clock ----------------------------


def test_a_stretch_where_nothing_happens_is_one_row_standing_for_its_windows(tmp_path):
    # two bursts a million seconds apart: 100,001 windows of 10 s, all but three idle
    res = des.simulate(replay(trace(tmp_path, [0, 1, 2, 1e6, 1e6 + 1]), "metrics.window=10"))
    w = res.windows
    assert w is not None and res.summary["windows"] == len(w) <= 5
    assert (w["start"].to_numpy()[1:] == w["end"].to_numpy()[:-1]).all() and w["start"].iloc[0] == 0
    assert w["end"].iloc[-1] == pytest.approx(res.summary["makespan"])
    idle = w[w["end"] - w["start"] > 10]
    assert len(idle) == 1 and idle["start"].iloc[0] == 10 and idle["end"].iloc[0] == 1e6
    row = idle.iloc[0]
    assert row[["arrived", "completed", "rejected", "unfinished", "output_tokens_per_s"]].sum() == 0
    assert np.isnan(row["ttft_p99"]) and row["slo_met"] is None
    # its instances are those of each window it stands for, its GPU-hours their sum
    assert row["instances_paying"] == pytest.approx(1.0) and row["instances_serving"] == pytest.approx(1.0)
    assert row["gpu_hours"] == pytest.approx((1e6 - 10) / 3600, rel=1e-12)
    assert row["cost"] == pytest.approx(row["gpu_hours"] * 0.69, rel=1e-12)  # the catalog's 4090
    busy = w.drop(idle.index)
    assert (busy["end"] - busy["start"] <= 10).all() and busy["arrived"].sum() == 5
    assert busy["completed"].sum() == 5 and busy["ttft_p99"].notna().sum() == 2
    assert res.summary["gpu_hours"] == pytest.approx(w["gpu_hours"].sum(), rel=1e-12)


def test_a_trace_of_epoch_timestamps_is_a_couple_of_rows(tmp_path):
    # 20 requests in 10 s at 1.7e9 s: 5.7 million windows of 300 s before the change
    path = trace(tmp_path, [1_700_000_000 + 0.5 * i for i in range(20)])
    sc = loads(("workload.arrival", {"process": "trace", "path": path, "absolute_times": True}), "horizon={}",
               "warmup=0")  # fmt: skip
    res = des.simulate(sc)
    w = res.windows
    assert w is not None and len(w) == 2 and w["arrived"].tolist() == [0, 20]
    assert w["gpu_hours"].sum() == pytest.approx(res.summary["gpu_hours"], rel=1e-12)


def test_an_ordinary_runs_windows_tile_it_one_by_one():
    res = des.simulate(loads("metrics.window=1", "horizon.duration=10", "warmup=0"))
    w = res.windows
    assert w is not None and w["start"].tolist() == list(range(len(w))) and len(w) >= 10


@pytest.mark.parametrize("window", ["1e-6", "1e-9", "0.5ms"])
def test_a_window_shorter_than_a_millisecond_is_refused(window):
    [(path, message)] = problems(f"metrics.window={window}")
    assert path == "metrics.window" and f"shorter than {MIN_WINDOW:g} s" in message
    assert loads("metrics.window=1ms").metrics.window == MIN_WINDOW
