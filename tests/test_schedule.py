"""Rate schedules: their integral Λ and its inverse, their means, and their validation.

Λ is checked against hand-worked values and numerical quadrature; Λ⁻¹ against Λ on
random points (hypothesis); every bad schedule is one error line naming its field,
from ``des run`` with exit status 2 and no traceback.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import integrate

import des
from des.errors import ScenarioError
from des.workload.arrivals import NHPP
from des.workload.schedule import Diurnal, Piecewise, operational
from tests.helpers import des_cli

STEP = Piecewise(times=[0, 10, 20, 30], rates=[5, 0, 2, 0])


def test_piecewise_integral_is_the_hand_worked_one():
    # 5/s for 10 s, nothing for 10 s, 2/s for 10 s, then nothing to the horizon
    t = [0, 5, 10, 15, 20, 25, 30, 1e6, math.inf]
    assert STEP.cumulative(t).tolist() == [0, 25, 50, 50, 50, 60, 70, 70, 70]
    assert STEP.inverse([0, 25, 60, 70]).tolist() == [0, 5, 25, np.nextafter(30, 0)]
    assert STEP.inverse(70.5) == math.inf  # the schedule never brings more than 70
    assert STEP.rate_at([0, 9.99, 10, 29, 31]).tolist() == [5, 5, 0, 2, 0]


def test_inverse_of_a_flat_stretch_is_its_start_and_never_inside_a_zero_segment():
    # Λ = 50 on [10, 20]: the first time it is reached is 10 (just before: segment 0 ends there)
    assert STEP.inverse(50.0) == np.nextafter(10, 0)
    y = np.linspace(0, 70, 100_001)[1:]
    t = STEP.inverse(y)
    assert not np.any((t >= 10) & (t < 20)) and np.all(t < 30)
    real = STEP.real_time()  # the scalar form a time change uses, in operational time
    scalar = np.array([real(v / STEP.mean) for v in y.tolist()])
    assert np.allclose(scalar, t, rtol=1e-14, atol=0) and not np.any((scalar >= 10) & (scalar < 20))


def test_piecewise_mean_counts_the_open_ended_last_rate_as_long_as_the_interval_before_it():
    assert Piecewise(times=[0], rates=[3.5]).mean == 3.5
    assert Piecewise(times=[0, 3600, 7200], rates=[5, 10, 5]).mean == pytest.approx(20 / 3)
    assert STEP.mean == (50 + 0 + 20 + 0) / 40
    assert Piecewise(times=[0, 60], rates=[0, 5]).mean == 2.5  # a quiet start then traffic: never 0


def test_mean_rate_over_a_horizon_is_the_integral_over_it():
    assert STEP.mean_rate(40) == 70 / 40
    d = Diurnal(mean=7, peak_to_trough=3, peak_time=5000, period=86400)
    assert d.mean_rate(86400) == pytest.approx(7, rel=1e-12)
    assert d.mean_rate(86400 * 3) == pytest.approx(7, rel=1e-12)
    assert d.mean_rate(3600) == pytest.approx(integrate.quad(d.rate_at, 0, 3600)[0] / 3600, rel=1e-10)


@pytest.mark.parametrize("r", [1.0, 2.0, 10.0, 1e6])
def test_diurnal_has_the_stated_mean_peak_and_trough(r):
    d = Diurnal.model_validate({"mean": 4, "peak_to_trough": r, "peak_time": "14h"})
    t = np.linspace(0, 86400, 864_001)
    rate = d.rate_at(t)
    assert rate.max() == pytest.approx(d.peak) and d.rate_at(14 * 3600) == pytest.approx(d.peak)
    assert rate.max() / rate.min() == pytest.approx(r, rel=1e-6)
    assert d.cumulative(86400) == pytest.approx(4 * 86400, rel=1e-12)
    for b in (1234.5, 50_000.0, 86_400.0 * 2.5):
        assert d.cumulative(b) == pytest.approx(integrate.quad(d.rate_at, 0, b, limit=200)[0], rel=1e-9)


@st.composite
def piecewise(draw):
    n = draw(st.integers(1, 12))
    widths = draw(st.lists(st.floats(1e-3, 1e4), min_size=n - 1, max_size=n - 1))
    rates = draw(st.lists(st.one_of(st.just(0.0), st.floats(1e-3, 1e4)), min_size=n, max_size=n))
    if not any(rates):
        rates[-1] = 1.0
    return Piecewise(times=[0.0, *np.cumsum(widths).tolist()], rates=rates)


@st.composite
def diurnal(draw):
    return Diurnal(
        mean=draw(st.floats(1e-3, 1e5)),
        peak_to_trough=draw(st.floats(1.0, 1e4)),
        peak_time=draw(st.floats(-1e5, 1e5)),
        period=draw(st.floats(1.0, 1e6)),
    )


@settings(max_examples=200, deadline=None, derandomize=True)
@given(schedule=st.one_of(piecewise(), diurnal()), u=st.lists(st.floats(0, 1), min_size=1, max_size=20))
@example(  # a point inside a long zero stretch: its level's images are the stretch's two ends
    schedule=Piecewise(times=[0, 245, 246, 2431, 18407], rates=[2986, 0, 0, 0, 1149.75]), u=[0.5]
)
def test_integral_and_inverse_are_inverses(schedule, u):
    """Λ(Λ⁻¹(y)) = y for every y the schedule reaches, and Λ⁻¹(Λ(t)) = t where λ(t) > 0
    (a zero-rate stretch maps back to its start), to rounding of the larger of the two."""
    if isinstance(schedule, Piecewise):
        span = float(schedule._t[-1]) * 1.5 + 10
    else:
        span = schedule.period * 4
    t = np.array(u) * span
    y = schedule.cumulative(t)
    back = schedule.inverse(y)
    tol = 1e-9 * max(span, 1.0)
    positive = schedule.rate_at(t) > 0
    assert np.all(np.abs(back - t)[positive] <= tol), (t, back)
    assert np.all(back <= t + tol)  # never later than a time that has the count
    assert np.allclose(schedule.cumulative(back), y, rtol=1e-9, atol=1e-9 * float(schedule.cumulative(span)))
    # the scalar inverse of Λ/mean a time change uses, one point at a time, is the same map
    # (compared at the same Λ: at a flat stretch's level a rounding of y/mean·mean may land
    # on either side of the stretch, both images of the level)
    real = schedule.real_time()
    tau = y / schedule.mean
    assert np.allclose([real(v) for v in tau.tolist()], schedule.inverse(tau * schedule.mean), rtol=0, atol=tol)
    assert operational(schedule, float(t[0])) == pytest.approx(float(schedule.cumulative(t[0])) / schedule.mean)


def test_a_schedule_reads_a_csv_of_rate_per_interval(tmp_path):
    for column in ("time", "start"):
        path = tmp_path / f"{column}.csv"
        path.write_text(f"{column}, rate\n0, 5\n10, 0\n20, 2\n30, 0\n")
        s = Piecewise(path=path)
        assert s.cumulative([10, 30]).tolist() == [50, 70] and s.mean == STEP.mean


def test_a_schedule_csv_is_relative_to_the_scenario(tmp_path):
    (tmp_path / "day.csv").write_text("time,rate\n0,2\n30,6\n")
    sc = des.load_scenario(None, ["horizon.duration=60", "warmup=0"]).resolved()
    sc["workload"]["arrival"] = {"process": "nhpp", "schedule": {"kind": "piecewise", "path": "day.csv"}}
    (tmp_path / "s.yaml").write_text(__import__("yaml").safe_dump(sc))
    nhpp = des.load_scenario(tmp_path / "s.yaml").workload.arrival
    assert isinstance(nhpp, NHPP) and nhpp.schedule.cumulative(60) == 240


BASE = """\
horizon: {duration: 60}
warmup: 0
cost_model: {kind: constant, step_time: 0.02}
workload:
  prompt_tokens: {dist: fixed, value: 64}
  output_tokens: {dist: fixed, value: 8}
"""

SCHEDULE = "workload.arrival.schedule"
BAD = [
    (
        "{kind: piecewise, times: [0, 10], rates: [1, -1]}",
        f"{SCHEDULE}.rates",
        "rates[1] = -1 (from t = 10 s) is negative",
    ),
    ("{kind: piecewise, times: [0, 10, 5], rates: [1, 1, 1]}", f"{SCHEDULE}.times", "comes before the time before it"),
    ("{kind: piecewise, times: [0, 10, 10], rates: [1, 1, 1]}", f"{SCHEDULE}.times", "repeats the time before it"),
    ("{kind: piecewise, times: [0, 10], rates: [1]}", f"{SCHEDULE}.rates", "1 rates for 2 times"),
    ("{kind: piecewise, times: [0, 10], rates: [0, 0]}", f"{SCHEDULE}.rates", "all 0"),
    ("{kind: piecewise, times: [5, 10], rates: [1, 1]}", f"{SCHEDULE}.times", "must start at 0"),
    ("{kind: piecewise, times: [0], rates: [2e7]}", f"{SCHEDULE}.rates", "beyond 1e+07"),
    ("{kind: piecewise, times: [], rates: []}", f"{SCHEDULE}.times", "none given"),
    ("{kind: piecewise, rates: [1]}", f"{SCHEDULE}.times", "required"),
    ("{kind: piecewise, path: day.csv, times: [0], rates: [1]}", f"{SCHEDULE}.path", "not both"),
    ("{kind: diurnal, mean: 3, peak_to_trough: 0.5, peak_time: 0}", f"{SCHEDULE}.peak_to_trough", "must be ≥ 1"),
    ("{kind: diurnal, mean: 3, peak_to_trough: 2, peak_time: 0, period: 0}", f"{SCHEDULE}.period", "must be > 0"),
    ("{kind: diurnal, mean: 3, peak_to_trough: 2, peak_time: 0, period: -5}", f"{SCHEDULE}.period", "must be > 0"),
    ("{kind: diurnal, mean: 0, peak_to_trough: 2, peak_time: 0}", f"{SCHEDULE}.mean", "must be > 0"),
    ("{kind: diurnal, mean: 9e6, peak_to_trough: 2, peak_time: 0}", f"{SCHEDULE}.mean", "beyond 1e+07"),
    ("{kind: diurnal, mean: 3, peak_to_trough: 2}", f"{SCHEDULE}.peak_time", "required"),
    ("{kind: weekly}", f"{SCHEDULE}.kind", "unknown value 'weekly'"),
    ("{kind: piecewise, path: missing.csv}", f"{SCHEDULE}.path", "no such file"),
    (
        "{kind: piecewise, path: negative.csv}",
        f"{SCHEDULE}.path",
        "negative.csv line 3: rate -2 (from t = 10 s) is negative",
    ),
    ("{kind: piecewise, path: text.csv}", f"{SCHEDULE}.path", "text.csv line 3: rate 'x' is not a number"),
    ("{kind: piecewise, path: columns.csv}", f"{SCHEDULE}.path", "needs the columns time (or start)"),
    ("{kind: piecewise, path: empty.csv}", f"{SCHEDULE}.path", "empty.csv is empty"),
    ("{kind: piecewise, path: unsorted.csv}", f"{SCHEDULE}.path", "unsorted.csv line 4: time 5 s comes before"),
    ("{kind: piecewise, path: header.csv}", f"{SCHEDULE}.path", "header.csv has no rows"),
]


def _files(folder):
    (folder / "s.yaml").write_text(BASE + "  arrival: {process: poisson, rate: 1}\n")
    (folder / "day.csv").write_text("time,rate\n0,1\n")
    (folder / "negative.csv").write_text("time,rate\n0,1\n10,-2\n")
    (folder / "text.csv").write_text("start,rate\n0,1\n10,x\n")
    (folder / "columns.csv").write_text("when,rate\n0,1\n")
    (folder / "empty.csv").write_text("")
    (folder / "unsorted.csv").write_text("time,rate\n0,1\n10,2\n5,3\n")
    (folder / "header.csv").write_text("time,rate\n")


@pytest.mark.parametrize(
    "schedule, field, words", BAD, ids=[f"{b[1].rsplit('.', 1)[1]}-{i}" for i, b in enumerate(BAD)]
)
def test_a_bad_schedule_is_one_error_naming_its_field(tmp_path, monkeypatch, schedule, field, words):
    _files(tmp_path)
    monkeypatch.chdir(tmp_path)  # an override's relative path is relative to where des runs
    with pytest.raises(ScenarioError) as err:
        des.load_scenario(tmp_path / "s.yaml", [f"workload.arrival={{process: nhpp, schedule: {schedule}}}"])
    (line,) = err.value.lines()
    assert line.startswith(f"error: {field}: ") and words in line, line


MODULATE_BAD = [
    (
        "{process: closed, concurrency: 4, modulate: {kind: diurnal, mean: 1, peak_to_trough: 2, peak_time: 0}}",
        "workload.arrival.modulate",
        "a closed loop has no arrival rate to modulate",
    ),
    (
        "{process: poisson, rate: 9e6, modulate: {kind: diurnal, mean: 1, peak_to_trough: 2, peak_time: 0}}",
        "workload.arrival.modulate",
        "become 1.2e+07 there, beyond 1e+07",
    ),
    (
        "{process: gamma, rate: 2, cv: 2, modulate: {kind: piecewise, times: [0, 5], rates: [1, -1]}}",
        "workload.arrival.modulate.rates",
        "rates[1] = -1 (from t = 5 s) is negative",
    ),
    (
        "{process: mmpp, rates: [1, 5], mean_sojourn: [3, 3], modulate: {kind: piecewise, times: [0], rates: [0]}}",
        "workload.arrival.modulate.rates",
        "all 0",
    ),
    (
        "{process: nhpp, schedule: {kind: piecewise, times: [0], rates: [1]}, modulate: {kind: piecewise}}",
        "workload.arrival.modulate",
        "unknown key",
    ),
]


@pytest.mark.parametrize("arrival, field, words", MODULATE_BAD, ids=["closed", "peak", "gamma", "mmpp", "nhpp"])
def test_a_bad_modulate_is_one_error_naming_its_field(tmp_path, arrival, field, words):
    _files(tmp_path)
    with pytest.raises(ScenarioError) as err:
        des.load_scenario(tmp_path / "s.yaml", [f"workload.arrival={arrival}"])
    (line,) = err.value.lines()
    assert line.startswith(f"error: {field}: ") and words in line, line


@pytest.mark.parametrize(
    "arrival, line",
    [
        (
            "{process: nhpp, schedule: {kind: piecewise, path: negative.csv}}",
            "error: workload.arrival.schedule.path: negative.csv line 3: rate -2 (from t = 10 s) is negative",
        ),
        (
            "{process: nhpp, schedule: {kind: piecewise, times: [0, 10, 10], rates: [1, 2, 3]}}",
            "error: workload.arrival.schedule.times: times[2] = 10 s repeats the time before it: times must "
            "increase strictly",
        ),
        (
            "{process: nhpp, schedule: {kind: diurnal, mean: 3, peak_to_trough: 0.5, peak_time: 0}}",
            "error: workload.arrival.schedule.peak_to_trough: must be ≥ 1, the peak rate over the trough's "
            "(1 is a constant rate; got 0.5)",
        ),
        (
            "{process: closed, concurrency: 2, modulate: {kind: piecewise, times: [0], rates: [1]}}",
            "error: workload.arrival.modulate: a closed loop has no arrival rate to modulate: each user sends when "
            "its last answer is back (use an open process, e.g. poisson, with modulate, or an nhpp)",
        ),
    ],
)
def test_des_run_prints_one_line_and_exits_2(tmp_path, arrival, line):
    _files(tmp_path)
    proc = des_cli("run", "s.yaml", "--set", f"workload.arrival={arrival}", "--out", "out", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == line and "Traceback" not in proc.stderr
