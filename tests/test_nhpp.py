"""Time-varying arrivals: the nhpp by thinning, and ``modulate`` by a change of time.

Statistical checks use fixed seeds and tolerances from the standard error, never tuned:

- Counts of a Poisson process (an nhpp, or a Poisson trace moved by a schedule) in
  disjoint windows are independent Poisson variables of mean ``μ = Λ(b) − Λ(a)``, whose
  variance is ``μ``. Each window must lie within 4 SE (``4·√μ``): with K windows a
  correct sampler fails one with probability about ``K · 6.3e-5`` (normal tails; 0.3 %
  for 50 windows, the most here). Their sum of ``(c − μ)²/μ`` must stay below the 0.999
  quantile of χ² with K degrees of freedom, which checks the whole shape at once.
- Counts of a modulated gamma or MMPP process have their own variance: R independent
  replications give each window's mean count and its SE, ``sd/√R``; the same 4-SE
  rule, family-wise over K windows (Student's t with R − 1 ≥ 299 degrees of freedom is
  within 2 % of the normal there).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

import des
from des.scenario import scenario_warnings
from des.simulation import _generators
from des.workload.arrivals import MMPP, NHPP, Gamma, OnOff, Poisson, Trace, expected_count, expected_time
from des.workload.schedule import Diurnal, Piecewise, TimeChanged


def epochs(gaps, horizon: float = math.inf, n: int | None = None) -> np.ndarray:
    """Arrival times from a gap sampler, summed as the open loop sums them, before ``horizon``."""
    t, out = 0.0, list[float]()
    while n is None or len(out) < n:
        t += gaps()
        if t >= horizon:
            break
        out.append(t)
    return np.array(out)


def poisson_windows(times: np.ndarray, schedule, edges: np.ndarray, scale: float = 1.0) -> None:
    """Counts between ``edges`` within 4 SE of ``scale·ΔΛ`` (exactly 0 where that is 0), and
    their χ² below its 0.999 quantile."""
    counts = np.histogram(times, bins=edges)[0]
    mu = scale * np.diff(schedule.cumulative(edges))
    zero = mu == 0
    assert np.all(counts[zero] == 0), counts[zero]
    c, m = counts[~zero], mu[~zero]
    assert np.all(np.abs(c - m) <= 4 * np.sqrt(m)), np.max(np.abs(c - m) / np.sqrt(m))
    assert np.sum((c - m) ** 2 / m) <= stats.chi2.ppf(0.999, len(m))


STEPS = Piecewise(times=[0, 100, 200, 300, 400], rates=[5, 0, 20, 2, 10])


def test_piecewise_thinning_brings_the_scheduled_rate_in_every_window():
    # 20 independent runs pooled: their counts are Poisson of 20 x the schedule's integral
    times = np.concatenate([epochs(STEPS.thinned_gaps(np.random.default_rng(seed), 500), 500) for seed in range(20)])
    poisson_windows(times, STEPS, np.arange(0, 501, 10.0), scale=20)


def test_diurnal_thinning_brings_the_scheduled_rate_in_every_window():
    day = Diurnal(mean=20, peak_to_trough=4, peak_time=300, period=1000)
    times = epochs(day.thinned_gaps(np.random.default_rng(11), 5000), 5000)
    poisson_windows(times, day, np.arange(0, 5001, 50.0))
    assert len(times) == pytest.approx(20 * 5000, abs=4 * math.sqrt(20 * 5000))


def replicated_windows(process, schedule, horizon: float, edges: np.ndarray, reps: int, skip: float) -> None:
    """Mean counts over ``reps`` runs of a modulated ``process`` in each window from ``skip``
    (seconds) on, within 4 SE of ``rate · ΔΛ_m`` (SE from the runs' spread)."""
    counts = np.array(
        [
            np.histogram(epochs(process.arrival_gaps(np.random.default_rng(r), horizon), horizon), edges)[0]
            for r in range(reps)
        ]
    )
    keep = edges[:-1] >= skip
    mean, se = counts.mean(axis=0)[keep], counts.std(axis=0, ddof=1)[keep] / math.sqrt(reps)
    expected = process.rate * np.diff(schedule.cumulative(edges))[keep] / schedule.mean
    zero = expected == 0
    assert np.all(mean[zero] == 0)
    assert np.all(np.abs(mean - expected)[~zero] <= 4 * se[~zero]), np.max(np.abs(mean - expected)[~zero] / se[~zero])


def test_a_modulated_gamma_follows_the_schedule_in_every_window():
    shape = Piecewise(times=[0, 200, 400], rates=[1, 4, 0.5])
    gamma = Gamma(rate=5, cv=2, modulate=shape)
    # a renewal process started at 0 is stationary only after a few gaps: windows from 20 s on
    replicated_windows(gamma, shape, 600, np.arange(0, 601, 20.0), reps=300, skip=20)


def test_a_modulated_mmpp_follows_the_schedule_in_every_window():
    day = Diurnal(mean=1, peak_to_trough=3, peak_time=50, period=200)
    mmpp = MMPP(rates=[2, 12], mean_sojourn=[10, 5], modulate=day)  # starts stationary: every window counts
    replicated_windows(mmpp, day, 400, np.arange(0, 401, 10.0), reps=300, skip=0)


def poisson_trace(path, rate: float, span: float, seed: int) -> np.ndarray:
    t = np.cumsum(np.random.default_rng(seed).exponential(1 / rate, int(rate * span * 1.2)))
    t = t[t < span]
    lines = ["arrival_time,prompt_tokens,output_tokens", *(f"{x!r},16,4" for x in t.tolist())]
    path.write_text("\n".join(lines) + "\n")
    return t


def test_a_modulated_trace_follows_the_schedule_in_every_window(tmp_path):
    # a Poisson trace moved by Λ_m⁻¹ is an nhpp of rate 10·m(t): its window counts are Poisson
    poisson_trace(tmp_path / "t.csv", 10.0, 2000.0, seed=5)
    shape = Piecewise(times=[0, 500, 1000, 1500], rates=[1, 3, 0, 2])
    trace = Trace(path=tmp_path / "t.csv", absolute_times=True, modulate=shape)
    times = trace.table["arrival_time"].to_numpy()
    assert np.all(np.diff(times) >= 0) and not np.any((times >= 1000) & (times < 1500))
    poisson_windows(times, shape, np.arange(0, 2001, 50.0), scale=10 / shape.mean)


# -- exact equalities --------------------------------------------------------------------


@pytest.mark.parametrize(
    "schedule",
    [
        {"kind": "piecewise", "times": [0], "rates": [4.0]},
        {"kind": "piecewise", "times": [0, 50, 100], "rates": [4.0, 4.0, 4.0]},  # constant however written
        {"kind": "diurnal", "mean": 4.0, "peak_to_trough": 1, "peak_time": "14h"},
    ],
    ids=["one-rate", "equal-rates", "flat-diurnal"],
)
def test_a_constant_schedule_draws_the_gaps_of_poisson_byte_for_byte(schedule):
    nhpp, poisson = NHPP(schedule=schedule), Poisson(rate=4.0)
    a = nhpp.gaps(np.random.default_rng(9))
    b = poisson.gaps(np.random.default_rng(9))
    assert [a() for _ in range(100_000)] == [b() for _ in range(100_000)]
    assert nhpp.rate == 4.0
    # with a horizon the gaps stop there, at the same arrivals
    a, b = nhpp.gaps(np.random.default_rng(9), 300.0), poisson.gaps(np.random.default_rng(9), 300.0)
    assert epochs(a, 300.0).tolist() == epochs(b, 300.0).tolist() and a() == math.inf


SCENARIO: dict[str, Any] = {
    "seed": 4,
    "horizon": {"duration": 300},
    "warmup": 0,
    "cost_model": {"kind": "constant", "step_time": 0.02},
    "workload": {
        "arrival": {"process": "poisson", "rate": 6.0},
        "prompt_tokens": {"dist": "fixed", "value": 64},
        "output_tokens": {"dist": "geometric", "mean": 8},
    },
}


def scenario(arrival: dict) -> des.Scenario:
    return des.load_scenario({**SCENARIO, "workload": {**SCENARIO["workload"], "arrival": arrival}})


def test_a_run_of_a_constant_nhpp_is_the_poisson_run():
    a = des.simulate(scenario({"process": "nhpp", "schedule": {"kind": "piecewise", "times": [0], "rates": [6.0]}}))
    b = des.simulate(scenario({"process": "poisson", "rate": 6.0}))
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps) and len(a.requests) > 1000


FLAT = [
    {"kind": "piecewise", "times": [0], "rates": [3.0]},
    {"kind": "piecewise", "times": [0, 100], "rates": [3.0, 3.0]},
    {"kind": "diurnal", "mean": 2.0, "peak_to_trough": 1.0, "peak_time": 0},
]
PROCESSES = [
    Gamma(rate=5, cv=3),
    MMPP(rates=[1, 9], mean_sojourn=[5, 2]),
    OnOff(on_rate=12, mean_on=1, mean_off=3),
    Poisson(rate=7),
]


@pytest.mark.parametrize("flat", FLAT, ids=["one-rate", "equal-rates", "flat-diurnal"])
@pytest.mark.parametrize("process", PROCESSES, ids=lambda p: p.process)
def test_a_constant_modulate_leaves_a_process_exactly_as_it_was(process, flat):
    modulated = process.model_copy(
        update={"modulate": Piecewise(**flat) if flat["kind"] == "piecewise" else Diurnal(**flat)}
    )
    a, b = (
        modulated.arrival_gaps(np.random.default_rng(2), 500.0),
        process.arrival_gaps(np.random.default_rng(2), 500.0),
    )
    assert epochs(a, 500.0).tolist() == epochs(b, 500.0).tolist()


@pytest.mark.parametrize("flat", FLAT, ids=["one-rate", "equal-rates", "flat-diurnal"])
def test_a_constant_modulate_leaves_a_replay_exactly_as_it_was(tmp_path, flat):
    poisson_trace(tmp_path / "t.csv", 5.0, 400.0, seed=1)
    plain = Trace(path=tmp_path / "t.csv")
    modulated = Trace(path=tmp_path / "t.csv", modulate=flat)
    assert modulated.table.equals(plain.table) and modulated.notes == plain.notes


def test_the_time_change_by_a_flat_schedule_is_the_identity_to_a_few_ulps():
    """The general path (no shortcut for a constant schedule): τ ↦ (τ·mean − Λ(tᵢ))/rᵢ + tᵢ
    rounds three times (the product, the difference, the quotient) and once more adding tᵢ,
    so an arrival moves by at most a few units in the last place of its time."""
    flat = Piecewise(times=[0, 50, 120], rates=[3.0, 3.0, 3.0])
    base = Gamma(rate=5, cv=3)
    moved = TimeChanged(lambda h: base.gaps(np.random.default_rng(8), h), flat.real_time(), math.inf, math.inf)
    a, b = epochs(moved, n=20_000), epochs(base.gaps(np.random.default_rng(8)), n=20_000)
    np.testing.assert_array_max_ulp(a, b, maxulp=4)


# -- zero rates and the horizon ----------------------------------------------------------

ZEROS = Piecewise(times=[0, 5, 30, 31, 60, 61.5, 90], rates=[3, 0, 50, 0, 2, 0, 8])
QUIET = [(5, 30), (31, 60), (61.5, 90)]


def quiet(times: np.ndarray) -> int:
    return int(sum(np.sum((times >= a) & (times < b)) for a, b in QUIET))


def test_no_arrival_ever_falls_in_a_zero_rate_segment():
    for seed in range(30):
        times = epochs(ZEROS.thinned_gaps(np.random.default_rng(seed), 200), 200)
        assert quiet(times) == 0 and len(times) > 0
        moved = Poisson(rate=4, modulate=ZEROS).arrival_gaps(np.random.default_rng(seed), 200)
        assert quiet(epochs(moved, 200)) == 0
        mmpp = MMPP(rates=[0, 9], mean_sojourn=[1, 1], modulate=ZEROS).arrival_gaps(np.random.default_rng(seed), 200)
        assert quiet(epochs(mmpp, 200)) == 0


def test_gaps_end_at_the_horizon():
    g = ZEROS.thinned_gaps(np.random.default_rng(0), 95.0)
    times = epochs(g, 95.0)
    assert times.max() < 95.0 and g() == math.inf == g()  # once ended, ended
    # a schedule that is 0 to the horizon ends the arrivals, whatever the horizon
    ends = Piecewise(times=[0, 10], rates=[5, 0])
    for gaps in (
        ends.thinned_gaps(np.random.default_rng(1)),
        Gamma(rate=5, modulate=ends).arrival_gaps(np.random.default_rng(1)),
    ):
        times = epochs(gaps)  # no horizon: stops because the gaps become inf
        assert len(times) > 0 and times.max() < 10 and gaps() == math.inf


def test_a_run_ends_when_its_schedule_falls_to_zero():
    r = des.simulate(
        scenario({"process": "nhpp", "schedule": {"kind": "piecewise", "times": [0, 20], "rates": [5, 0]}})
    )
    s = r.summary
    assert r.requests["arrival_time"].max() < 20 and s["num_completed"] == s["num_requests"] == len(r.requests)


# -- runs ------------------------------------------------------------------------------


def test_an_nhpp_run_accounts_for_every_request_and_repeats_exactly():
    arrival = {
        "process": "nhpp",
        "schedule": {"kind": "diurnal", "mean": 5, "peak_to_trough": 6, "peak_time": 150, "period": 300},
    }
    sc = scenario(arrival)
    a, b = des.simulate(sc), des.simulate(sc)
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)
    s, req = a.summary, a.requests
    assert s["num_requests"] == len(req) == s["num_completed"] + s["num_rejected"] + s["num_unfinished"]
    assert (req["status"] == "completed").all()  # a drained run at light load serves them all
    # the arrivals are exactly the thinned gaps of the run's own "arrivals" stream
    nhpp = sc.workload.arrival
    assert isinstance(nhpp, NHPP)
    expected = epochs(nhpp.gaps(_generators(4)["arrivals"], 300.0), 300.0)
    assert req["arrival_time"].tolist() == expected.tolist()
    other = des.simulate(des.load_scenario(sc, ["seed=5"]))
    assert not other.requests["arrival_time"].equals(req["arrival_time"])


def test_a_modulated_run_takes_the_schedule_s_shape():
    shape = {"kind": "piecewise", "times": [0, 100, 200], "rates": [1, 3, 0.5]}
    r = des.simulate(scenario({"process": "gamma", "rate": 4, "cv": 2, "modulate": shape}))
    per = np.histogram(r.requests["arrival_time"], bins=[0, 100, 200, 300])[0]
    assert per[1] > per[0] > per[2]  # 4/1.5 = 2.7, 8, 1.3 req/s on average
    assert r.summary["num_completed"] == r.summary["num_requests"]


def test_the_scenario_s_expectations_use_the_exact_integral():
    quiet_then_busy = {"process": "nhpp", "schedule": {"kind": "piecewise", "times": [0, 100], "rates": [1, 10]}}
    busy_then_quiet = {"process": "nhpp", "schedule": {"kind": "piecewise", "times": [0, 100], "rates": [10, 1]}}
    counted = {**SCENARIO, "horizon": {"num_requests": 500}}

    def warnings(arrival, warmup):
        sc = des.load_scenario({**counted, "warmup": warmup, "workload": {**SCENARIO["workload"], "arrival": arrival}})
        return [w for w in scenario_warnings(sc) if w.startswith("warmup")]

    # both have mean 5.5 req/s (500 requests in 91 s at that rate), but arrive in 140 s and in 50 s
    assert expected_time(NHPP.model_validate(quiet_then_busy), 500) == 140
    assert expected_time(NHPP.model_validate(busy_then_quiet), 500) == 50
    assert warnings(quiet_then_busy, 100) == []
    (line,) = warnings(busy_then_quiet, 60)
    assert "the 50 s its 500 requests take to arrive on the schedule" in line
    g = Gamma(rate=4, modulate=Piecewise(times=[0, 100], rates=[1, 3]))
    assert expected_count(g, 100) == pytest.approx(4 * 100 / 2) and expected_time(g, 200) == pytest.approx(100)
    with pytest.raises(des.ScenarioError, match="horizon: the schedule for 20 s is 1.5e\\+08 requests"):
        des.load_scenario(
            {
                **SCENARIO,
                "horizon": {"duration": 20},
                "workload": {
                    **SCENARIO["workload"],
                    "arrival": {
                        "process": "nhpp",
                        "schedule": {"kind": "piecewise", "times": [0, 5], "rates": [1, 1e7]},
                    },
                },
            }
        )


def test_a_replay_modulated_to_a_stop_drops_the_rows_it_never_reaches(tmp_path):
    # m = 2 on [0, 50), 0 after (mean 0.5): operational time runs to 100 by t = 50, then stops
    recorded = poisson_trace(tmp_path / "t.csv", 4.0, 150.0, seed=3)
    stop = Piecewise(times=[0, 50], rates=[1, 0])
    trace = Trace(path=tmp_path / "t.csv", absolute_times=True, modulate=stop)
    times = trace.table["arrival_time"].to_numpy()
    kept = int(np.sum(recorded <= 100))
    assert len(times) == kept and times.max() < 50
    assert np.allclose(times, recorded[:kept] / 2, rtol=1e-15, atol=0)  # t = τ/2 before the stop
    assert any(f"{len(recorded) - kept:,} rows come after all the requests" in n for n in trace.notes)
    arrival = {
        "process": "trace",
        "path": str(tmp_path / "t.csv"),
        "absolute_times": True,
        "modulate": stop.model_dump(),
    }
    sc = des.load_scenario({**SCENARIO, "horizon": {"duration": 200}, "workload": {"arrival": arrival}})
    r = des.simulate(sc)
    assert r.requests["arrival_time"].tolist() == times.tolist()
    assert r.summary["num_completed"] == len(times)


def test_a_resampled_modulated_replay_resamples_the_recording_and_keeps_the_schedule(tmp_path):
    from des.study.resample import resampled_scenario

    recorded = poisson_trace(tmp_path / "t.csv", 4.0, 300.0, seed=6)
    shape = {"kind": "piecewise", "times": [0.0, 100.0], "rates": [1.0, 3.0]}
    arrival = {"process": "trace", "path": str(tmp_path / "t.csv"), "rate_scale": 2.0, "modulate": shape}
    base = des.load_scenario({**SCENARIO, "horizon": {"duration": 400}, "workload": {"arrival": arrival}}).resolved()
    out = resampled_scenario(base, tmp_path, seed=1)["workload"]["arrival"]
    assert out["modulate"] == {**shape, "path": None} and out["rate_scale"] == 2.0
    drawn = Trace(path=out["path"], format="jsonl", absolute_times=True).table["arrival_time"]
    # resampled from the recording's own 300 s, not from its modulated replay's 267 s (rate_scale 1)
    assert recorded.max() - 5 < drawn.max() < recorded.max() + 5
