"""A rate schedule's ``rate_scale``: every rate multiplied, what capacity searches and plans push on."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import des
from des.study.capacity import default_param
from des.workload.arrivals import expected_count

DAY = {
    "process": "nhpp",
    "schedule": {"kind": "diurnal", "mean": 4, "peak_to_trough": 3, "peak_time": 600, "period": 1200},
}
STEPS = {"process": "nhpp", "schedule": {"kind": "piecewise", "times": [0, 100], "rates": [2, 6]}}


@pytest.mark.parametrize("arrival", [DAY, STEPS])
def test_rate_scale_multiplies_every_rate(arrival):
    base = des.load_scenario(None, [("workload.arrival", arrival), "horizon.duration=1200", "warmup=0"])
    doubled = des.load_scenario(base.resolved(), ["workload.arrival.rate_scale=2"])
    a, b = base.workload.arrival, doubled.workload.arrival
    assert b.rate == pytest.approx(2 * a.rate, rel=1e-12)  # type: ignore[union-attr]
    t = np.linspace(0, 1200, 13)
    assert np.allclose(b.scaled.rate_at(t), 2 * a.scaled.rate_at(t))  # type: ignore[union-attr]
    assert expected_count(b, 1200) == pytest.approx(2 * expected_count(a, 1200), rel=1e-12)  # type: ignore[operator]
    assert default_param(base.resolved()) == "workload.arrival.rate_scale"


def test_a_scale_of_one_is_the_schedule_itself_byte_for_byte():
    sets: list[str | tuple[str, Any]] = [("workload.arrival", STEPS), "horizon.duration=300", "warmup=0"]
    one = des.simulate(des.load_scenario(None, sets))
    same = des.simulate(des.load_scenario(None, [*sets, "workload.arrival.rate_scale=1"]))
    assert one.requests.equals(same.requests)
    # and the run's arrivals follow the scaled rate: within 4 Poisson SE of the doubled integral
    twice = des.simulate(des.load_scenario(None, [*sets, "workload.arrival.rate_scale=2"]))
    expected = 2 * (2 * 100 + 6 * 200)
    assert abs(len(twice.requests) - expected) <= 4 * np.sqrt(expected)


def test_a_scale_beyond_what_a_run_can_simulate_is_one_line():
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(None, [("workload.arrival", STEPS), "workload.arrival.rate_scale=1e7"])
    assert err.value.problems[0][0] == "workload.arrival.rate_scale"
