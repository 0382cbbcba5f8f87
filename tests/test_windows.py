"""windows.parquet (des.metrics.windows): the run over time, and the verdict of a run whose
arrival rate follows a schedule."""

from __future__ import annotations

import numpy as np
import pytest

import des
from des.render import run as render


def test_each_window_holds_what_its_requests_and_steps_say():
    sc = des.load_scenario(
        None, ["horizon.duration=200", "warmup=0", "metrics.window=50", "cluster.replicas=2", "slo.ttft=0.2"]
    )
    res = des.simulate(sc)
    w, req, steps = res.windows, res.requests, res.steps
    assert w is not None
    end = res.summary["makespan"]
    assert list(w["start"]) == [0, 50, 100, 150, 200][: len(w)] and w["end"].iloc[-1] == pytest.approx(end)
    assert w["arrived"].sum() == len(req) and w["completed"].sum() == res.summary["num_completed"]
    for _, row in w.iterrows():
        lo, hi = row["start"], row["end"]
        last = hi == w["end"].iloc[-1]
        inside = (req["arrival_time"] >= lo) & ((req["arrival_time"] < hi) | last)
        done = req[inside & (req["status"] == "completed")]
        assert row["arrived"] == inside.sum()
        if done.empty:  # the drain after the last arrival
            assert np.isnan(row["ttft_p99"]) and np.isnan(row["slo_attainment"]) and row["slo_met"] is None
        else:
            assert row["ttft_p99"] == pytest.approx(np.percentile(done["ttft"], 99), rel=1e-12)
            assert row["slo_attainment"] == pytest.approx((done["ttft"] <= 0.2).mean(), rel=1e-12)
            assert row["slo_met"] == (row["slo_attainment"] >= 0.99)
        step_end = steps["start"] + steps["duration"]
        tokens = steps.loc[(step_end >= lo) & ((step_end < hi) | last), "tokens_emitted"].sum()
        assert row["output_tokens_per_s"] == pytest.approx(tokens / (hi - lo), rel=1e-12)
        assert row["instances_paying"] == row["instances_serving"] == 2
    assert res.summary["gpu_hours"] == pytest.approx(2 * end / 3600, rel=1e-12)
    assert res.summary["cost"] == pytest.approx(res.summary["gpu_hours"] * 0.69, rel=1e-12)  # the catalog's 4090
    assert w["gpu_hours"].sum() == pytest.approx(res.summary["gpu_hours"], rel=1e-12)


def test_a_scheduled_rate_is_not_judged_stable_and_says_how_its_windows_went():
    day = {"process": "nhpp", "schedule": {"kind": "piecewise", "times": [0, 100], "rates": [2, 30]}}
    sc = des.load_scenario(
        None, [("workload.arrival", day), "horizon.duration=200", "warmup=0", "metrics.window=25", "slo.ttft=2"]
    )
    s = des.simulate(sc).summary
    assert s["stationary"] is False and s["stable"] is None
    assert s["windows"] >= 8 and s["windows_breached"] >= 1 and s["first_breach_time"] >= 100
    line = render.stability_line(s, {"ttft": 2})
    assert line.startswith("does not apply") and f"SLO missed in {s['windows_breached']} of {s['windows']}" in line
    steady = des.simulate(des.load_scenario(None, ["horizon.duration=200", "warmup=0"])).summary
    assert steady["stationary"] is True and steady["stable"] is True and steady["windows_breached"] is None


def test_prices_in_the_scenario_override_the_catalogs():
    sc = des.load_scenario(None, ["horizon.duration=60", "warmup=0", "prices.rtx4090=2.0"])
    s = des.simulate(sc).summary
    assert s["cost"] == pytest.approx(s["gpu_hours"] * 2.0, rel=1e-12)
    out_tokens = s["cost"] / s["cost_per_million_tokens"] * 1e6
    assert out_tokens > 0
