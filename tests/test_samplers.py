"""Every sampler has exactly the mean, variance and rate it states.

Each length law exposes its exact moments (``moments()``, from closed forms or sums
over its pmf); samples must match them within 4 standard errors: ``sqrt(var / n)`` for
the mean and ``sqrt((mu4 - var²) / n)`` for the variance, with ``mu4`` the exact fourth
central moment. Arrival processes must produce their stated long-run rate; for the
modulated ones the standard error comes from counts in 50 disjoint windows.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import des
from des.scenario import scenario_warnings
from des.workload import lengths
from des.workload.arrivals import MMPP, Gamma, OnOff, Poisson
from des.workload.lengths import Empirical, Fixed, Geometric, LogNormal, Uniform

N = 200_000


def exact_mu4(dist) -> float:
    n, p = dist.pmf_table()
    mean = float(np.dot(n, p))
    return float(np.dot((n - mean) ** 4, p))


def check_sample(dist, seed=0):
    x = dist.sample(np.random.default_rng(seed), N).astype(float)
    mean, var = dist.moments()
    se_mean = math.sqrt(var / N)
    se_var = math.sqrt(max(exact_mu4(dist) - var**2, 0.0) / N)
    assert abs(x.mean() - mean) <= 4 * se_mean + 1e-12, (x.mean(), mean, se_mean)
    assert abs(x.var(ddof=1) - var) <= 4 * se_var + 1e-12, (x.var(ddof=1), var, se_var)
    lo, hi = dist.min or 1, dist.max or math.inf
    assert x.min() >= lo and x.max() <= hi
    assert np.all(x == np.round(x))
    return x


LAWS = {
    "fixed": Fixed(value=37),
    "uniform": Uniform(low=3, high=40),
    "geometric": Geometric(mean=128),
    "geometric-truncated": Geometric(mean=128, min=16, max=300),
    "lognormal": LogNormal(mean=512, sigma=0.6),
    "lognormal-heavy": LogNormal(mean=200, sigma=1.2, max=20000),
    "lognormal-small": LogNormal(mean=3, sigma=1.0),
    "uniform-truncated": Uniform(low=1, high=100, min=50),
}


@pytest.mark.parametrize("name", list(LAWS))
def test_length_law_matches_its_exact_moments(name):
    check_sample(LAWS[name])


def test_empirical_lengths_match_the_file(tmp_path):
    values = [5, 7, 7, 9, 100, 3, 3, 3]
    path = tmp_path / "lengths.txt"
    path.write_text("tokens\n" + "\n".join(map(str, values)) + "\n")
    dist = Empirical(path=path)
    assert dist.moments() == pytest.approx((np.mean(values), np.var(values)))
    x = check_sample(dist)
    assert set(np.unique(x)) == set(values)


def test_empirical_column_of_a_csv(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_time,prompt_tokens,output_tokens\n0,10,1\n1,20,2\n2,30,3\n")
    assert Empirical(path=path, column="prompt_tokens").moments() == pytest.approx((20.0, 200 / 3))


def test_closed_forms():
    g = Geometric(mean=128)
    p = 1 / 128
    n, pmf = g.pmf_table()
    assert np.allclose(pmf[:5], [p * (1 - p) ** (k - 1) for k in range(1, 6)])
    assert g.moments() == pytest.approx((128.0, (1 - p) / p**2))
    assert Uniform(low=3, high=40).moments() == pytest.approx((21.5, (38**2 - 1) / 12))
    assert Fixed(value=9).moments() == (9.0, 0.0)
    # lognormal{mean, sigma}: the lengths themselves have mean `mean`; rounding to integers
    # adds 1/12 to the variance of the continuous law
    ln = LogNormal(mean=512, sigma=0.6)
    mean, var = ln.moments()
    assert mean == pytest.approx(512, rel=1e-9)
    assert var == pytest.approx((math.exp(0.6**2) - 1) * 512**2 + 1 / 12, rel=1e-6)


def test_truncation_conditions_instead_of_clipping():
    g = Geometric(mean=10, max=10)
    x = g.sample(np.random.default_rng(1), N)
    # clipping would pile ~35 % of the mass on 10; truncation keeps the geometric shape
    p = 1 / 10
    expected_share = p * (1 - p) ** 9 / (1 - (1 - p) ** 10)
    share = (x == 10).mean()
    assert abs(share - expected_share) <= 4 * math.sqrt(expected_share * (1 - expected_share) / N)


@pytest.mark.parametrize(
    "dist",
    [
        LogNormal(mean=512, sigma=1.0),
        LogNormal(mean=512, sigma=1.0, min=100, max=40_000),
        Geometric(mean=300, min=5),
        Geometric(mean=300, min=5, max=9_000),
    ],
    ids=repr,
)
def test_moments_past_the_table_add_the_tail_in_closed_form(dist, monkeypatch):
    """With the table cut at 2,000 lengths the closed-form tail gives the full table's moments."""
    full = dist.moments()
    monkeypatch.setattr(lengths, "TABLE_POINTS", 2_000)
    assert dist._top() - (dist.min or 1) >= 2_000  # the tail path is taken
    cut = dist.moments()
    # a lognormal tail stands in X for round(X): 0.5 token per length past 2,000 tokens
    assert cut == pytest.approx(full, rel=1e-6 if isinstance(dist, Geometric) else 1e-4)


def test_empirical_moments_past_the_table(tmp_path, monkeypatch):
    path = tmp_path / "lengths.txt"
    values = np.random.default_rng(3).integers(1, 50_000, size=500)
    path.write_text("\n".join(map(str, values)))
    dist = Empirical(path=path, max=40_000)
    monkeypatch.setattr(lengths, "TABLE_POINTS", 2_000)
    kept = values[values <= 40_000]
    assert dist.moments() == pytest.approx((kept.mean(), kept.var()), rel=1e-12)


def test_a_heavy_tail_costs_no_memory():
    """sigma 2.5 puts the 1e-15 quantile near 2e9 tokens: a table that far would need ~50 GB."""
    dist = LogNormal(mean=100, sigma=2.5)
    assert dist._top() > 1e9
    mean, var = dist.moments()
    # the continuous law conditioned on rounding to >= 1 (19 % of it rounds to 0)
    p0, p1, p2 = (dist._partial(k, 0.5, math.inf) for k in (0, 1, 2))
    assert abs(mean - p1 / p0) <= 0.5  # tokens of rounding
    assert var == pytest.approx(p2 / p0 - (p1 / p0) ** 2, rel=1e-3)


def scenario_with(**lengths):
    workload = {
        "arrival": {"process": "poisson", "rate": 1},
        "prompt_tokens": {"dist": "fixed", "value": 512},
        "output_tokens": {"dist": "fixed", "value": 128},
    }
    return des.load_scenario({"name": "t", "horizon": {"duration": 10}, "workload": {**workload, **lengths}})


def test_a_truncation_that_moves_the_mean_is_warned_about():
    sc = scenario_with(prompt_tokens={"dist": "lognormal", "mean": 512, "sigma": 1, "max": 600})
    (note,) = scenario_warnings(sc)
    mean, _ = sc.workload.prompt_tokens.moments()
    assert note.startswith(f"workload.prompt_tokens: the lengths sampled have mean {mean:.2f}, not 512")
    assert mean < 0.9 * 512


@pytest.mark.parametrize("mean", [2, 100, 1000])
@pytest.mark.parametrize("sigma", [0.1, 1.0, 2.5])
@pytest.mark.parametrize("bounds", [{}, {"min": 50, "max": 3000}])
def test_the_cheap_mean_bounds_hold_the_exact_mean(mean, sigma, bounds):
    """What lets ``scenario_warnings`` skip the exact moments when the bounds are within 1 %."""
    dist = LogNormal(mean=mean, sigma=sigma, **bounds)
    low, high = dist.mean_bounds()
    exact, _ = dist.moments()
    assert low <= exact <= high == pytest.approx(low + 1)
    warned = scenario_warnings(
        scenario_with(prompt_tokens={"dist": "lognormal", "mean": mean, "sigma": sigma, **bounds})
    )
    assert bool(warned) == (abs(exact - mean) > 0.01 * mean)


def test_a_small_untruncated_mean_moved_by_rounding_is_still_checked():
    sc = scenario_with(output_tokens={"dist": "lognormal", "mean": 2, "sigma": 1.5})
    (note,) = scenario_warnings(sc)
    assert note.startswith("workload.output_tokens: the lengths sampled have mean")


def gaps(process, n=N, seed=0):
    g = process.gaps(np.random.default_rng(seed))
    return np.array([g() for _ in range(n)])


@pytest.mark.parametrize("cv", [0.5, 1.0, 3.0])
def test_gamma_gaps_have_the_stated_rate_and_cv(cv):
    rate = 2.5
    x = gaps(Gamma(rate=rate, cv=cv))
    k, theta = 1 / cv**2, cv**2 / rate
    mean, var, mu4 = k * theta, k * theta**2, 3 * k * (k + 2) * theta**4
    assert abs(x.mean() - mean) <= 4 * math.sqrt(var / N)
    assert abs(x.var(ddof=1) - var) <= 4 * math.sqrt((mu4 - var**2) / N)


def test_poisson_gaps_are_exponential():
    rate = 4.0
    x = gaps(Poisson(rate=rate))
    assert abs(x.mean() - 1 / rate) <= 4 * math.sqrt(1 / rate**2 / N)
    assert abs(x.var(ddof=1) - 1 / rate**2) <= 4 * math.sqrt(8 / rate**4 / N)


def window_rate_check(process, stated_rate, horizon, seed=0, windows=50):
    g = process.gaps(np.random.default_rng(seed))
    t, times = 0.0, []
    while True:
        t += g()
        if t >= horizon:
            break
        times.append(t)
    counts = np.histogram(times, bins=windows, range=(0, horizon))[0] / (horizon / windows)
    se = counts.std(ddof=1) / math.sqrt(windows)
    assert abs(counts.mean() - stated_rate) <= 4 * se, (counts.mean(), stated_rate, se)


def test_onoff_rate():
    p = OnOff(on_rate=10.0, off_rate=1.0, mean_on=2.0, mean_off=8.0)
    assert p.rate == pytest.approx((10 * 2 + 1 * 8) / 10)
    window_rate_check(p, p.rate, horizon=50_000)


def test_mmpp_rate_with_transition_matrix():
    p = MMPP(
        rates=[1.0, 5.0, 20.0], mean_sojourn=[10.0, 3.0, 1.0], transitions=[[0, 0.5, 0.5], [1.0, 0, 0], [0.2, 0.8, 0]]
    )
    # stationary law of the jump chain, weighted by the mean sojourns
    P = np.array(p.transitions)
    w, v = np.linalg.eig(P.T)
    pi = np.real(v[:, np.argmin(abs(w - 1))])
    pi = pi / pi.sum() * np.array(p.mean_sojourn)
    assert p.rate == pytest.approx(float(pi @ p.rates / pi.sum()))
    window_rate_check(p, p.rate, horizon=40_000)


def test_streams_are_independent_per_component():
    base = {
        "seed": 7,
        "horizon": {"num_requests": 300},
        "workload": {
            "arrival": {"process": "poisson", "rate": 5},
            "prompt_tokens": {"dist": "fixed", "value": 100},
            "output_tokens": {"dist": "geometric", "mean": 20},
        },
        "cost_model": {"kind": "constant", "step_time": 0.01},
    }
    a = des.simulate(des.load_scenario(base))
    b = des.simulate(des.load_scenario(base, ["workload.output_tokens.mean=50", "workload.prompt_tokens.value=10"]))
    c = des.simulate(des.load_scenario(base, ["seed=8"]))
    assert a.requests["arrival_time"].equals(b.requests["arrival_time"])
    assert not a.requests["output_tokens"].equals(b.requests["output_tokens"])
    assert not a.requests["arrival_time"].equals(c.requests["arrival_time"])
