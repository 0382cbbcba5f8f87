"""Confidence intervals over replications stay in the metric's support and cover.

Latency percentiles and rates are positive and right-skewed across replications; a
Student-t interval over three of them reaches below zero (``ttft_p99 2.5 [-0.566,
5.57]``). :func:`des.study.intervals.interval` uses the modified Cox interval for a
lognormal mean on positive values.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from des.study.intervals import interval, metric_interval

TRIALS = 4000
SE = math.sqrt(0.95 * 0.05 / TRIALS)  # standard error of a coverage estimate at 95 %


def coverage(draw, truth: float, n: int, seed: int = 0) -> tuple[float, float]:
    """(share of intervals covering ``truth``, share whose low end is < 0)."""
    rng = np.random.default_rng(seed)
    covered = negative = 0
    for _ in range(TRIALS):
        _, lo, hi = interval(draw(rng, n))
        covered += lo <= truth <= hi
        negative += lo < 0
    return covered / TRIALS, negative / TRIALS


def test_the_issues_example_gets_a_positive_interval():
    # three replications' ttft_p99 whose Student-t interval was [-0.566, 5.57]
    values = np.array([0.9, 1.3, 5.3])
    t_half = stats.t.ppf(0.975, 2) * values.std(ddof=1) / math.sqrt(3)
    assert values.mean() - t_half < 0
    mean, lo, hi = interval(values)
    assert mean == pytest.approx(values.mean())
    assert 0 < lo < mean < hi


@pytest.mark.parametrize("sigma", [0.1, 0.5])
def test_cox_interval_covers_a_lognormal_mean_at_the_stated_rate(sigma):
    # exact in the large-sample limit; with 10 replications within 3 standard errors of 95 %
    cov, neg = coverage(lambda rng, n: rng.lognormal(0.0, sigma, n), math.exp(sigma**2 / 2), 10)
    assert abs(cov - 0.95) < 3 * SE
    assert neg == 0


def test_skewed_positive_replications_never_get_a_negative_bound_and_cover_at_least_as_often():
    # exponential values (a heavy skew) with 3 replications: Student-t covers 87 % and goes
    # negative most of the time; the interval must stay positive and not cover less
    cov, neg = coverage(lambda rng, n: rng.exponential(1.0, n), 1.0, 3)
    assert neg == 0
    assert cov >= 0.95 - 3 * SE


def test_zeros_clip_at_zero_and_shares_at_one():
    _, lo, hi = interval(np.array([0.0, 0.0, 3.0]))
    assert lo == 0.0 and hi > 1.0
    mean, lo, hi = interval(np.array([0.97, 0.99, 1.0]), upper=1.0)
    assert hi == 1.0 and lo < mean
    assert interval(np.array([-1.0, 1.0]))[1] < -1  # a signed metric keeps Student-t
    assert interval(np.array([0.001, 0.01, 0.5]), log=False)[1] == 0.0  # a rate: Student-t clipped at 0
    assert interval(np.array([2.0, 2.0, 2.0])) == (2.0, 2.0, 2.0)
    assert math.isnan(interval(np.array([2.0]))[1])


def test_latencies_get_the_log_interval_and_rates_the_clipped_one():
    spread = np.array([0.001, 0.01, 0.5])
    assert metric_interval("ttft_p99", spread)[1] > 0
    assert metric_interval("goodput_rps", spread)[1] == 0.0
    assert metric_interval("slo_attainment", np.array([0.9, 0.99, 1.0]))[2] == 1.0
