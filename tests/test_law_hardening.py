"""Workload laws and arrival processes at absurd parameters (reliability review 3, D2 and D6).

A parameter whose moments, or whose samples, a float (or an int64 token count) cannot
hold is refused at validation with one ``error: <dotted.field>: ...`` line naming it
(exit 2, no traceback); a law that is only extreme (a truncation deep in a tail, a mean of
1e29 cut by ``max``) is sampled exactly and prints no numpy warning. The command-line cases
run concurrently in subprocesses, each with a timeout, from the review's base scenario.

Statistical checks use fixed seeds and tolerances of 4 standard errors.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from scipy import special, stats

import des
from des.metrics import stability
from des.metrics.steady import mser5
from des.scenario import scenario_warnings
from des.simulation import _generators
from des.workload import arrivals
from des.workload._buffer import Buffered
from des.workload.arrivals import MMPP, Gamma, OnOff
from des.workload.lengths import MAX_LENGTH, Geometric, LogNormal, Uniform

N = 200_000

#: The review's base scenario: an RTX 4090 serving Qwen2.5-7B under Poisson load for 30 s.
BASE_YAML = """\
name: base
seed: 0
gpu: rtx4090
model: qwen2.5-7b
horizon: {duration: 30}
warmup: 5
workload:
  arrival: {process: poisson, rate: 4.0}
  prompt_tokens: {dist: lognormal, mean: 512, sigma: 0.6}
  output_tokens: {dist: geometric, mean: 128}
scheduler: {kind: continuous, max_num_seqs: 128, max_num_batched_tokens: 2048}
"""

BASE: dict = {
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

#: Python's rendering of a warning (``RuntimeWarning: ...``, ``RankWarning: ...``).
WARNING_TEXT = re.compile(r"\w*Warning\b")


def problems(overrides: list[str]) -> list[tuple[str, str]]:
    with pytest.raises(des.ScenarioError) as info:
        des.load_scenario(BASE, overrides)
    return info.value.problems


def one_problem_at(overrides: list[str], path: str) -> str:
    """The message of the single problem ``overrides`` cause, which must be at ``path``."""
    found = problems(overrides)
    assert len(found) == 1, found
    assert found[0][0] == path, found
    assert "\n" not in found[0][1]
    return found[0][1]


# -- the command line: exit 2 and one error line, or a run that finishes quietly ----------------


@dataclass(frozen=True)
class Cli:
    id: str
    sets: tuple[str, ...]  # ROOT stands for the folder of the base scenario and the sample traces
    error: str | None  # the dotted path of the single error line; None: the run must succeed
    prints: str | None = None  # a run printing its summary (not --quiet) must print this


CLI_CASES = [
    Cli("lognormal-mean-1e300", ("workload.prompt_tokens.mean=1e300",), "workload.prompt_tokens.mean"),
    Cli("geometric-mean-1e29", ("workload.output_tokens.mean=" + "1" + "0" * 29,), "workload.output_tokens.mean"),
    Cli("geometric-mean-1e300", ("workload.output_tokens.mean=1e300",), "workload.output_tokens.mean"),
    Cli("lognormal-sigma-1e300", ("workload.prompt_tokens.sigma=1e300",), "workload.prompt_tokens.sigma"),
    Cli(
        "fixed-value-1e30",
        ("workload.prompt_tokens={dist: fixed, value: 1" + "0" * 30 + "}",),
        "workload.prompt_tokens.value",
    ),
    Cli(
        "truncation-deep-in-the-tail",
        ("workload.prompt_tokens={dist: lognormal, mean: 512, sigma: 0.1, min: 5000, max: 6000}",),
        None,
    ),
    Cli("unreachable-minimum", ("workload.prompt_tokens.min=1000000000",), None),
    Cli("geometric-mean-1e29-cut-by-max", ("workload.output_tokens={dist: geometric, mean: 1e29, max: 1000}",), None),
    Cli(
        "think-time-sigma-1e300",
        (
            "workload.conversations={turns: {dist: fixed, value: 3}, "
            "think_time: {dist: lognormal, mean: 5, sigma: 1e300}}",
        ),
        "workload.conversations.think_time.sigma",
    ),
    Cli("arrival-rate-1e300", ("workload.arrival.rate=1e300",), "workload.arrival.rate"),
    Cli("arrival-rate-10**29", ("workload.arrival.rate=1" + "0" * 29,), "workload.arrival.rate"),
    # one arrival per ~2.5e8 on/off cycles: the gap draw looped through them past the 30 s horizon
    Cli(
        "onoff-almost-never-on", ("workload.arrival={process: onoff, on_rate: 4, mean_on: 1e-9, mean_off: 1e9}",), None
    ),
    Cli(
        "onoff-switching-1e300-times-a-second",
        ("workload.arrival={process: onoff, on_rate: 4, mean_on: 1e-300, mean_off: 1e-300}",),
        "workload.arrival.mean_on",
    ),
    # D10: a trace stretched to arrivals near 1e300 s, or at 1e16 s, is refused: no step can be
    # timed there (the stability fit's own robustness there is tested on arrays below)
    Cli(
        "trace-at-1e300-s",
        (
            "workload.arrival={process: trace, path: ROOT/six.csv, time_scale: 1e300}",
            "horizon.duration=null",
            "warmup=0",
        ),
        "workload.arrival",
    ),
    Cli(
        "trace-at-1e16-s",
        (
            "workload.arrival={process: trace, path: ROOT/at-1e16.csv, absolute_times: true}",
            "horizon.duration=null",
            "warmup=0",
        ),
        "workload.arrival",
    ),
]

SIX = "arrival_time,prompt_tokens,output_tokens\n0,100,20\n1,200,30\n2,300,40\n3,120,10\n4,80,25\n5,500,12\n"
AT_1E16 = "arrival_time,prompt_tokens,output_tokens\n" + "".join(
    f"{10**16 + 2 * i},{100 + 10 * i},{20 + i}\n" for i in range(6)
)


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory) -> dict[str, tuple[int, str, str, Path]]:
    """Every case run concurrently (``des run base.yaml --set ...``), each into its own folder."""
    root = tmp_path_factory.mktemp("laws")
    base = root / "base.yaml"
    base.write_text(BASE_YAML)
    (root / "six.csv").write_text(SIX)
    (root / "at-1e16.csv").write_text(AT_1E16)
    procs = {}
    for case in CLI_CASES:
        out = root / case.id
        cmd = [sys.executable, "-m", "des.cli", "run", str(base), "--out", str(out)]
        cmd += [] if case.prints else ["--quiet"]
        for s in case.sets:
            cmd += ["--set", s.replace("ROOT", str(root))]
        procs[case.id] = (subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), out)
    runs = {}
    for case_id, (proc, out) in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            stderr += "\n<timed out: the run did not finish>"
        runs[case_id] = (proc.returncode, stdout, stderr, out)
    return runs


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.id for c in CLI_CASES])
def test_cli_refuses_or_finishes_quietly(cli_runs, case: Cli):
    returncode, stdout, stderr, out = cli_runs[case.id]
    assert "Traceback" not in stderr, stderr
    assert not WARNING_TEXT.search(stderr), stderr  # no numpy (or any Python) warning reaches the user
    if case.error is None:
        assert returncode == 0, stderr
        assert (out / "requests.parquet").exists()
        if case.prints:
            assert case.prints in stdout, stdout
        # only des's own notes (a truncated mean), which may wrap onto a second line
        assert all(not line.startswith("error") for line in stderr.splitlines()), stderr
        return
    assert returncode == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"error: {case.error}: "), stderr
    assert stdout.strip() == ""
    assert not out.exists()


# -- length laws: parameters a float or an int64 cannot hold are refused, by name ---------------


@pytest.mark.parametrize(
    ("overrides", "path", "words"),
    [
        (["workload.prompt_tokens.mean=1e300"], "workload.prompt_tokens.mean", "1e+300 gives lengths up to"),
        (["workload.prompt_tokens.mean=1e15"], "workload.prompt_tokens.mean", "beyond 2^53"),
        (["workload.output_tokens.mean=1e29"], "workload.output_tokens.mean", "1e+29 gives lengths up to 3.45e+30"),
        (["workload.output_tokens.mean=1e300"], "workload.output_tokens.mean", "beyond 2^53"),
        (["workload.output_tokens.mean=1e15"], "workload.output_tokens.mean", "beyond 2^53"),
        (["workload.prompt_tokens.sigma=1e300"], "workload.prompt_tokens.sigma", "overflows a float"),
        (["workload.prompt_tokens.sigma=30"], "workload.prompt_tokens.sigma", "overflows a float"),
        (["workload.prompt_tokens.sigma=8"], "workload.prompt_tokens.sigma", "8 gives lengths up to"),
        (["workload.prompt_tokens.max=" + "1" + "0" * 30], "workload.prompt_tokens.max", "beyond 2^53"),
        (["workload.output_tokens.min=" + "1" + "0" * 17], "workload.output_tokens.min", "beyond 2^53"),
        (
            ["workload.prompt_tokens={dist: fixed, value: 10000000000000000000}"],
            "workload.prompt_tokens.value",
            "10,000,000,000,000,000,000 is beyond 2^53",
        ),
        (
            ["workload.prompt_tokens={dist: uniform, low: 1, high: 1" + "0" * 30 + "}"],
            "workload.prompt_tokens.high",
            "beyond 2^53",
        ),
        (
            [
                "workload.conversations={turns: {dist: geometric, mean: 1e300}, think_time: {dist: fixed, value: 1}}",
            ],
            "workload.conversations.turns.mean",
            "beyond 2^53",
        ),
    ],
)
def test_lengths_beyond_what_des_counts_are_refused_by_name(overrides, path, words):
    assert words in one_problem_at(overrides, path)


def test_a_truncation_of_numerically_no_probability_is_refused():
    # lognormal 512 / 0.1 beyond 19,600 tokens: 36.5 standard deviations, a probability of ~1e-291
    message = one_problem_at(
        ["workload.prompt_tokens={dist: lognormal, mean: 512, sigma: 0.1, min: 19600}"], "workload.prompt_tokens"
    )
    assert message.startswith("min/max [19600, inf] leave a probability of") and "below 1e-290" in message


def test_the_bound_is_where_lengths_stop_being_exact():
    """Lengths up to 2^53 are accepted; a mean whose 1e-15 quantile passes it is not."""
    assert Geometric(mean=2.6e14).moments()[0] == 2.6e14  # 1e-15 quantile 9.0e15 < 2^53
    with pytest.raises(ValueError, match="beyond 2"):
        Geometric(mean=2.7e14)
    assert LogNormal(mean=100, sigma=2.5)._reach() < MAX_LENGTH  # the heavy tail the samplers test keeps working
    top = Uniform(low=MAX_LENGTH - 1000, high=MAX_LENGTH)
    assert top.sample(np.random.default_rng(0), 1000).max() <= MAX_LENGTH


# -- extreme but valid laws: sampled exactly, moments exact, no numpy warning -------------------


def exact_truncated_pmf(dist: LogNormal, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """The pmf of round(X) on [lo, hi], X lognormal, from scipy's survival function (exact in the upper tail)."""
    law = stats.lognorm(s=dist.sigma, scale=math.exp(dist.mu))
    n = np.arange(lo, hi + 1)
    p = law.sf(n - 0.5) - law.sf(n + 0.5)
    return n, p / p.sum()


def check_against(x: np.ndarray, n: np.ndarray, p: np.ndarray) -> None:
    mean = float(np.dot(n, p))
    var = float(np.dot((n - mean) ** 2, p))
    mu4 = float(np.dot((n - mean) ** 4, p))
    assert abs(x.mean() - mean) <= 4 * math.sqrt(var / len(x)), (x.mean(), mean)
    assert abs(x.var(ddof=1) - var) <= 4 * math.sqrt((mu4 - var**2) / len(x)), (x.var(ddof=1), var)


def test_a_truncation_deep_in_the_upper_tail_is_sampled_exactly():
    """Lognormal 512 / 0.1 on [5000, 6000]: 23 standard deviations out, a probability of ~1e-115.
    The CDF rounds to 1 there (every draw was inf, cast to int64: a numpy warning)."""
    dist = LogNormal(mean=512, sigma=0.1, min=5000, max=6000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = dist.sample(np.random.default_rng(11), N)
        mean, var = dist.moments()
    n, p = exact_truncated_pmf(dist, 5000, 6000)
    assert x.min() >= 5000 and x.max() <= 6000
    check_against(x.astype(float), n, p)
    assert (mean, var) == pytest.approx((float(np.dot(n, p)), float(np.dot((n - np.dot(n, p)) ** 2, p))), rel=1e-9)
    # most of the mass sits on the lowest lengths: the law falls by ~e^-(z/sigma) per token
    assert abs((x == 5000).mean() - p[0]) <= 4 * math.sqrt(p[0] * (1 - p[0]) / N)


def test_an_unreachable_minimum_is_sampled_exactly():
    """min 1e9 on lognormal 512 / 0.6: 24 standard deviations out."""
    dist = LogNormal(mean=512, sigma=0.6, min=1_000_000_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = dist.sample(np.random.default_rng(12), N).astype(float)
        mean, var = dist.moments()
    assert x.min() >= 1e9
    # the continuous law beyond a = 1e9 - 0.5: E[X | X > a] = mean Phi(sigma - z) / Phi(-z), rounding moving it < 0.5
    z = (math.log(1e9 - 0.5) - dist.mu) / dist.sigma
    conditional = 512 * math.exp(special.log_ndtr(dist.sigma - z) - special.log_ndtr(-z))
    assert abs(mean - conditional) <= 0.5
    assert abs(x.mean() - mean) <= 4 * math.sqrt(var / N)


def test_a_geometric_minimum_far_in_the_tail_is_memoryless():
    dist = Geometric(mean=100, min=5000)  # P(N >= 5000) = 0.99^4999, ~1e-22
    x = dist.sample(np.random.default_rng(13), N)
    p = 0.01
    assert dist.moments() == pytest.approx((4999 + 100, (1 - p) / p**2))
    assert abs(x.mean() - 5099) <= 4 * math.sqrt((1 - p) / p**2 / N)
    assert abs((x == 5000).mean() - p) <= 4 * math.sqrt(p * (1 - p) / N)


@pytest.mark.parametrize("mean", [1e29, 1e200])
def test_a_huge_geometric_mean_cut_by_max_is_uniform(mean):
    """With p = 1/mean ~ 0 the truncated law is uniform on [1, 1000] (its moments said 1.0)."""
    dist = Geometric(mean=mean, max=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = dist.sample(np.random.default_rng(14), N).astype(float)
        m, v = dist.moments()
    assert (m, v) == pytest.approx((500.5, (1000**2 - 1) / 12), rel=1e-12)
    assert abs(x.mean() - 500.5) <= 4 * math.sqrt(v / N)
    assert x.min() >= 1 and x.max() <= 1000


@pytest.mark.parametrize(
    "dist",
    [
        {"dist": "geometric", "mean": 2e14},
        {"dist": "geometric", "mean": 1e200, "min": 10, "max": 10**12},
        {"dist": "geometric", "mean": 50, "min": 3000, "max": 3100},
        {"dist": "lognormal", "mean": 512, "sigma": 5},
        {"dist": "lognormal", "mean": 1e14, "sigma": 26, "max": 1000},
        {"dist": "lognormal", "mean": 1e220, "sigma": 11.7, "min": 2_861_944, "max": 319_600_943_739_494},
        {"dist": "lognormal", "mean": 1e-3, "sigma": 1.5},
        {"dist": "uniform", "low": 1, "high": MAX_LENGTH, "min": MAX_LENGTH - 10},
    ],
    ids=repr,
)
def test_extreme_valid_laws_draw_and_state_their_moments_without_warnings(dist):
    sc = des.load_scenario(BASE, [("workload.prompt_tokens", dist)])
    law = sc.workload.prompt_tokens
    assert law is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x = law.sample(np.random.default_rng(15), N).astype(float)
        mean, var = law.moments()
        scenario_warnings(sc)
    lo, hi = law.min or 1, law.max or MAX_LENGTH
    assert lo <= x.min() and x.max() <= hi
    assert lo <= mean <= hi and var >= 0
    assert abs(x.mean() - mean) <= 4 * math.sqrt(var / N) + 1e-9 * mean


# -- think-time laws -----------------------------------------------------------------------------

CHAT = "workload.conversations={{turns: {{dist: fixed, value: 3}}, think_time: {law}}}"


@pytest.mark.parametrize(
    ("law", "path", "words"),
    [
        ("{dist: lognormal, mean: 5, sigma: 1e300}", "sigma", "1e+300 is beyond 26.64"),
        ("{dist: lognormal, mean: 5, sigma: 27}", "sigma", "overflows a float"),
        ("{dist: lognormal, mean: 1e308, sigma: 1}", "mean", "second moment, mean² exp(sigma²), overflows"),
        ("{dist: lognormal, mean: 1e150, sigma: 20}", "mean", "overflows a float"),
    ],
)
def test_think_times_whose_moments_overflow_are_refused_by_name(law, path, words):
    message = one_problem_at([CHAT.format(law=law)], f"workload.conversations.think_time.{path}")
    assert words in message


@pytest.mark.parametrize(
    "law",
    [
        "{dist: lognormal, mean: 5, sigma: 26}",
        "{dist: lognormal, mean: 1e100, sigma: 3}",
        "{dist: exponential, mean: 1e300}",
        "{dist: uniform, low: 0, high: 1e300}",
        "{dist: fixed, value: 1e300}",
    ],
)
def test_extreme_think_times_whose_moments_are_floats_draw_finite_times(law):
    sc = des.load_scenario(BASE, [CHAT.format(law=law)])
    assert sc.workload.conversations is not None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        draw = sc.workload.conversations.think_time.sampler(np.random.default_rng(16))
        x = np.array([draw() for _ in range(10_000)])
    assert np.isfinite(x).all() and (x >= 0).all()


# -- arrival rates: a run must be able to simulate a second of them ------------------------------


@pytest.mark.parametrize(
    ("arrival", "path", "words"),
    [
        ("{process: poisson, rate: 1e300}", "rate", "1e+300 requests per second is beyond 1e+07"),
        ("{process: poisson, rate: 1" + "0" * 29 + "}", "rate", "beyond 1e+07"),
        ("{process: poisson, rate: 10000001}", "rate", "beyond 1e+07"),
        ("{process: gamma, rate: 1e300, cv: 3}", "rate", "beyond 1e+07"),
        ("{process: gamma, rate: 4, cv: 1e300}", "cv", "1e+300 is beyond 1000"),
        ("{process: gamma, rate: 4, cv: 5000}", "cv", "clumps at single instants"),
        ("{process: gamma, rate: 4, cv: 1e-300}", "cv", "shape 1/cv² overflows"),
        ("{process: mmpp, rates: [1e300, 5], mean_sojourn: [1, 1]}", "rates.0", "beyond 1e+07"),
        ("{process: onoff, on_rate: 1e300, mean_on: 1, mean_off: 1}", "on_rate", "beyond 1e+07"),
        ("{process: onoff, on_rate: 1, off_rate: 1e9, mean_on: 1, mean_off: 1}", "off_rate", "beyond 1e+07"),
        ("{process: closed, concurrency: 1" + "0" * 29 + "}", "concurrency", "must be <= 1000000"),
        ("{process: closed, concurrency: 4, retry_delay: 1e-300}", "retry_delay", "retry rejected requests 4e+300"),
        ("{process: closed, concurrency: 100000, retry_delay: 0.001}", "retry_delay", "beyond 1e+07"),
    ],
)
def test_arrival_rates_beyond_any_run_are_refused_by_name(arrival, path, words):
    message = one_problem_at([f"workload.arrival={arrival}"], f"workload.arrival.{path}")
    assert words in message


def test_the_largest_rate_runs_with_a_horizon_of_requests():
    """A horizon can be a count alone: 10^7 req/s for 300 requests is 30 microseconds of arrivals."""
    sc = des.load_scenario(BASE, ["workload.arrival.rate=1e7", "horizon={num_requests: 300}", "warmup=0"])
    requests = des.simulate(sc).requests
    assert len(requests) == 300
    assert requests["arrival_time"].max() < 1e-3


@pytest.mark.parametrize("cv", [1e-150, 1e-9, 1000.0])
def test_the_extreme_gamma_cvs_accepted_draw_gaps_of_the_stated_mean(cv):
    gamma = des.load_scenario(BASE, [f"workload.arrival={{process: gamma, rate: 4, cv: {cv}}}"]).workload.arrival
    assert isinstance(gamma, Gamma)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        draw = gamma.gaps(np.random.default_rng(17))
        x = np.array([draw() for _ in range(N)])
    assert np.isfinite(x).all() and (x >= 0).all()
    if cv < 1:  # evenly spaced
        assert np.allclose(x, 0.25, rtol=1e-6)
    else:  # almost all gaps 0 s; the mean lives in the rare long ones (not checked: 1 in 1,400)
        assert (x == 0).mean() > 0.99


# -- modulated processes: the gap draw stops at the horizon and jumps arrival-free cycles ----------


def old_mmpp_gaps(p: MMPP, rng: np.random.Generator):
    """The MMPP gap draw as it was before the horizon and the bulk cycles: the reference
    whose draws ordinary processes must repeat exactly."""
    rates, sojourn = np.array(p.rates), np.array(p.mean_sojourn)
    cum = np.cumsum(p.jump_matrix, axis=1)
    state = int(rng.choice(len(rates), p=p.state_probabilities()))
    left = rng.exponential(sojourn[state])
    u = Buffered(lambda n: rng.exponential(1.0, n))

    def draw() -> float:
        nonlocal state, left
        gap = 0.0
        while True:
            r = rates[state]
            t = u() / r if r > 0 else math.inf
            if t <= left:
                left -= t
                return gap + t
            gap += left
            state = min(int(np.searchsorted(cum[state], rng.random(), side="right")), len(rates) - 1)
            left = rng.exponential(sojourn[state])

    return draw


def epochs(draw, horizon: float) -> list[float]:
    """Arrival times from 0 until ``horizon``, summed as the open loop sums them."""
    t, out = 0.0, list[float]()
    while True:
        t += draw()
        if t >= horizon:
            return out
        out.append(t)


ORDINARY = {
    "onoff": OnOff(on_rate=16.0, mean_on=5.0, mean_off=15.0),
    "onoff-off-rate": OnOff(on_rate=12.0, off_rate=2.0, mean_on=3.0, mean_off=9.0),
    "onoff-fast-switch": OnOff(on_rate=8.0, mean_on=0.01, mean_off=0.02),
    "mmpp3": MMPP(
        rates=[1.0, 5.0, 20.0], mean_sojourn=[10.0, 3.0, 1.0], transitions=[[0, 0.5, 0.5], [1.0, 0, 0], [0.2, 0.8, 0]]
    ),
    "mmpp-zero": MMPP(rates=[0.0, 9.0], mean_sojourn=[20.0, 5.0]),
    "mmpp-rare-on": MMPP(rates=[0.0, 0.1], mean_sojourn=[1.0, 1.0]),  # ~22 states per arrival
}


@pytest.mark.parametrize("name", list(ORDINARY))
@pytest.mark.parametrize("seed", [0, 1])
def test_ordinary_modulated_processes_draw_exactly_as_before(name, seed):
    p = ORDINARY[name]
    mmpp = p.as_mmpp() if isinstance(p, OnOff) else p
    assert isinstance(mmpp, MMPP)
    before = epochs(old_mmpp_gaps(mmpp, _generators(seed)["arrivals"]), 3000.0)
    assert len(before) > 100
    assert epochs(p.gaps(_generators(seed)["arrivals"], 3000.0), 3000.0) == before  # the run's draw
    assert epochs(p.gaps(_generators(seed)["arrivals"]), 3000.0) == before  # no horizon given


def test_a_draw_that_reaches_the_horizon_ends_there():
    p = ORDINARY["onoff"]
    draw = p.gaps(np.random.default_rng(18), 100.0)
    times = epochs(draw, 100.0)
    assert draw() == math.inf  # and so on: the process has ended
    assert times == epochs(p.gaps(np.random.default_rng(18)), 100.0)


def test_a_process_almost_never_on_draws_its_gaps_in_bounded_work():
    """on 1e-9 s in 1e9: one arrival per ~2.5e8 on/off cycles, each draw used to visit them all.
    A subprocess, so that the old behaviour fails by its timeout instead of hanging the suite."""
    code = (
        "import numpy as np\n"
        "from des.workload.arrivals import OnOff\n"
        "p = OnOff(on_rate=4, mean_on=1e-9, mean_off=1e9)\n"
        "draw = p.gaps(np.random.default_rng(19))\n"
        "x = np.array([draw() for _ in range(400)])\n"
        "print(x.mean() * p.rate, x.std() / x.mean())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not WARNING_TEXT.search(done.stderr), done.stderr
    mean_times_rate, cv = map(float, done.stdout.split())
    # gaps of mean 1/rate (a stationary point process), nearly exponential: cv ~ 1
    assert abs(mean_times_rate - 1) <= 4 * 1.0 / math.sqrt(400)
    assert 0.8 < cv < 1.2


@pytest.mark.parametrize(
    "p",
    [
        OnOff(on_rate=5.0, off_rate=0.5, mean_on=0.5, mean_off=2.0),
        OnOff(on_rate=3.0, mean_on=0.05, mean_off=1.0),
        MMPP(rates=[0.2, 6.0], mean_sojourn=[4.0, 0.1]),
    ],
    ids=repr,
)
def test_cycles_jumped_in_bulk_have_the_law_of_cycles_visited_one_by_one(p, monkeypatch):
    """With MAX_VISITS = 1 every draw jumps whole cycles after its first state: the gaps, and
    the sums of two consecutive gaps (their dependence), must follow the same law (two-sample
    Kolmogorov-Smirnov, independent seeds) and the stated rate."""
    n = 100_000
    one_by_one = p.gaps(np.random.default_rng(20))
    a = np.array([one_by_one() for _ in range(n)])
    monkeypatch.setattr(arrivals, "MAX_VISITS", 1)
    bulk = p.gaps(np.random.default_rng(21))
    b = np.array([bulk() for _ in range(n)])
    assert stats.ks_2samp(a, b).pvalue > 1e-3
    assert stats.ks_2samp(a[:-1] + a[1:], b[:-1] + b[1:]).pvalue > 1e-3
    # a stationary point process has mean gap 1/rate; gaps correlate, so the error uses batch means
    batches = b.reshape(100, -1).mean(axis=1)
    assert abs(b.mean() - 1 / p.rate) <= 4 * batches.std(ddof=1) / math.sqrt(len(batches))


@pytest.mark.parametrize(
    ("arrival", "path", "words"),
    [
        ("{process: mmpp, rates: [0, 0, 1e-5], mean_sojourn: [1, 1, 1]}", "rates", "one arrival every 3e+05 state"),
        ("{process: mmpp, rates: [0, 0, 5], mean_sojourn: [1e-9, 1e-9, 1e-9]}", "mean_sojourn", "1e+09 times a second"),
        ("{process: mmpp, rates: [5, 0], mean_sojourn: [1e-8, 1e-300]}", "mean_sojourn", "beyond 1e+07"),
        ("{process: onoff, on_rate: 4, mean_on: 1e-300, mean_off: 1e-300}", "mean_on", "1e+300 times a second"),
        ("{process: onoff, on_rate: 4, mean_on: 2e-8, mean_off: 1e-8}", "mean_off", "beyond 1e+07"),
    ],
)
def test_modulated_processes_beyond_any_run_are_refused_by_name(arrival, path, words):
    message = one_problem_at([f"workload.arrival={arrival}"], f"workload.arrival.{path}")
    assert words in message


# -- the stability fit: no numpy warning, an unreliable fit said so ---------------------------------


def test_the_trend_of_ordinary_instants_is_np_polyfit_to_the_bit():
    rng = np.random.default_rng(22)
    t = 60.0 + (np.arange(stability.SAMPLES) + 0.5) * 540.0 / stability.SAMPLES
    y = np.cumsum(rng.integers(-3, 5, stability.SAMPLES)).astype(float)
    slope, intercept = np.polyfit(t, y, 1)
    assert stability._trend(t, y) == (float(slope * (t[-1] - t[0])), float(np.std(y - (slope * t + intercept))))


@pytest.mark.parametrize("start", [0.0, 1e300])
def test_the_trend_at_huge_instants_is_the_trend_of_their_positions(start):
    """Instants near 1e300 s overflowed np.polyfit's squares (RuntimeWarning, then RankWarning)."""
    rng = np.random.default_rng(23)
    y = np.cumsum(rng.integers(-3, 5, stability.SAMPLES)).astype(float)
    width = 1e300 if start == 1e300 else 5e3
    t = start + (np.arange(stability.SAMPLES) + 0.5) * width / stability.SAMPLES
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rise, noise = stability._trend(t, y)
    i = np.arange(stability.SAMPLES, dtype=float)
    slope, intercept = np.polyfit(i, y, 1)
    assert rise == pytest.approx(slope * (i[-1] - i[0]), rel=1e-9)
    assert noise == pytest.approx(np.std(y - (slope * i + intercept)), rel=1e-9)
    assert not stability.unresolved(t[0] - width / 100, t[-1] + width / 100)


def test_instants_the_clock_cannot_tell_apart_give_no_warning_and_are_flagged():
    t = np.full(stability.SAMPLES, 1e16)
    y = np.arange(stability.SAMPLES, dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert stability._trend(t, y) == (0.0, float(np.std(y)))
    assert stability.unresolved(1e16, 1e16 + 10)  # 50 slices of 0.2 s, doubles 2 s apart
    assert not stability.unresolved(0.0, 1e16 + 10)
    assert not stability.unresolved(1e16, 1e16)  # an empty window is no fit at all


def test_mser_of_huge_latencies_is_mser_of_the_same_latencies_rescaled():
    rng = np.random.default_rng(24)
    series = np.concatenate([np.linspace(10, 1, 100), rng.exponential(1.0, 900)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert mser5(series * 2.0**700) == mser5(series) > 0


def trace_scenario(path: Path, **extra) -> dict:
    return BASE | {
        "horizon": {"duration": None},
        "warmup": 0,
        "workload": {"arrival": {"process": "trace", "path": str(path), **extra}},
    }


def stability_at(offset: float, gap: float) -> dict:
    """The stability keys of six requests ``gap`` seconds apart from ``offset`` (each served in
    half a gap), judged over their arrivals: what a run reaching such times would summarise
    (validation refuses scenarios that do, but a ``num_requests`` horizon of rare arrivals
    can still get there)."""
    from des.metrics.summary import stability

    arrival = offset + gap * np.arange(6.0)
    finish = arrival + gap / 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return stability(arrival, finish, lambda t: np.zeros(len(t)), np.ones(6), arrival[0], arrival[-1])


def test_a_window_at_1e300_s_summarises_without_warnings():
    summary = stability_at(0.0, 1e300)
    assert summary["backlog_trend_unreliable"] is False  # the window spans 5e300 s: 50 instants apart
    assert math.isfinite(summary["backlog_growth"])


def test_a_window_the_clock_cannot_split_is_flagged_unreliable():
    summary = stability_at(1e16, 2.0)
    assert summary["backlog_trend_unreliable"] is True
    assert isinstance(summary["stable"], bool) and math.isfinite(summary["backlog_growth"])


def test_an_ordinary_run_keeps_its_stability_keys_and_a_reliable_trend():
    summary = des.simulate(des.load_scenario(BASE)).summary
    keys = ["backlog_growth", "stable", "mser_truncation", "drifting", "backlog_growth_of_level"]
    at = list(summary).index(keys[0])
    assert list(summary)[at : at + len(keys) + 1] == [*keys, "backlog_trend_unreliable"]
    assert summary["backlog_trend_unreliable"] is False
