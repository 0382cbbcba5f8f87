"""The queueing core against theory, with the constant and linear cost models.

One slot (``max_num_seqs: 1``) turns an instance into a single FCFS server:
M/D/1 and M/G/1 queue delays must match Pollaczek-Khinchine,
``Wq = λ E[S²] / (2 (1 - ρ))``. ``c`` slots with geometric outputs approach M/M/c,
whose mean wait is Erlang C's ``C(c, a) / (c μ - λ)``. Little's law ``L = λ W`` ties the
time-average counts to the latencies.

Tolerances: the standard error of a mean delay comes from batch means (40 batches of
consecutive requests, which absorbs the delays' autocorrelation); a test passes
within 4 standard errors, plus, for M/M/c, the step length ``s`` — the bound on what
iteration-level scheduling adds (an arrival waits for the next step boundary) and on
how far geometric service in steps of ``s`` is from exponential service.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import des

N_BATCHES = 40


def batch_means_se(x: np.ndarray, k: int = N_BATCHES) -> float:
    """Standard error of ``x.mean()`` from ``k`` batch means of consecutive values."""
    m = len(x) // k
    means = x[: m * k].reshape(k, m).mean(axis=1)
    return float(means.std(ddof=1) / math.sqrt(k))


def one_slot(rate, prompt, output, cost, n, warmup_requests=2000, seed=1, kind="continuous", budget=2048):
    sched = (
        {"kind": "continuous", "max_num_seqs": 1, "max_num_batched_tokens": budget}
        if kind == "continuous"
        else {"kind": "static", "max_batch_size": 1}
    )
    return des.load_scenario(
        {
            "name": "theory",
            "seed": seed,
            "horizon": {"num_requests": n},
            "warmup": warmup_requests / rate,
            "workload": {
                "arrival": {"process": "poisson", "rate": rate},
                "prompt_tokens": prompt,
                "output_tokens": output,
            },
            "cost_model": cost,
            "scheduler": sched,
        }
    )


def measured(result: des.Result) -> pd.DataFrame:
    r = result.requests
    keep = (r["arrival_time"] >= result.scenario.warmup) & (r["status"] == "completed")
    return r.loc[keep].sort_values("arrival_time")


def check_mean(x: np.ndarray, expected: float, extra: float = 0.0) -> tuple[float, float]:
    mean, se = float(x.mean()), batch_means_se(x)
    assert abs(mean - expected) <= 4 * se + extra, f"mean {mean:.4f} vs theory {expected:.4f} (SE {se:.4f})"
    return mean, se


@pytest.mark.parametrize("kind", ["continuous", "static"])
def test_md1_pollaczek_khinchine(kind):
    s, rate = 1.0, 0.7  # one step of 1 s per request: deterministic service
    sc = one_slot(
        rate,
        {"dist": "fixed", "value": 1},
        {"dist": "fixed", "value": 1},
        {"kind": "constant", "step_time": s},
        40_000,
        kind=kind,
    )
    res = des.simulate(sc)
    rho = rate * s
    wq = rate * s**2 / (2 * (1 - rho))
    req = measured(res)
    check_mean(req["queue_delay"].to_numpy(), wq)
    # service is exactly one step: e2e = queue delay + s
    assert np.allclose(req["e2e"] - req["queue_delay"], s)
    assert res.summary["stable"]


@pytest.mark.slow
def test_mg1_geometric_outputs_constant_steps():
    s, mean_tokens, rate = 0.05, 8.0, 2.0  # S = N s, N geometric: E[S] = 0.4 s, rho = 0.8
    sc = one_slot(
        rate,
        {"dist": "fixed", "value": 1},
        {"dist": "geometric", "mean": mean_tokens},
        {"kind": "constant", "step_time": s},
        40_000,
    )
    res = des.simulate(sc)
    p = 1 / mean_tokens
    es, es2 = mean_tokens * s, s**2 * (2 - p) / p**2
    rho = rate * es
    check_mean(measured(res)["queue_delay"].to_numpy(), rate * es2 / (2 * (1 - rho)))


def test_mg1_lognormal_prompts_linear_prefill():
    # one prefill step per request, S = base + a * P with P lognormal: a general service law
    base, a, rate = 0.02, 1e-3, 1.5
    # the budget holds any prompt, so a prefill is never chunked
    prompt = {"dist": "lognormal", "mean": 300, "sigma": 0.8, "max": 16384}
    sc = one_slot(
        rate,
        prompt,
        {"dist": "fixed", "value": 1},
        {"kind": "linear", "base": base, "per_prefill_token": a},
        40_000,
        budget=16384,
    )
    res = des.simulate(sc)
    mp, vp = sc.workload.prompt_tokens.moments()
    es = base + a * mp
    es2 = base**2 + 2 * base * a * mp + a**2 * (vp + mp**2)
    rho = rate * es
    assert 0.4 < rho < 0.9
    req = measured(res)
    check_mean(req["queue_delay"].to_numpy(), rate * es2 / (2 * (1 - rho)))
    # and each service time is exactly the linear model of its prompt
    service = req["e2e"] - req["queue_delay"]
    assert np.allclose(service, base + a * req["prompt_tokens"])


def erlang_c(c: int, a: float) -> float:
    """Probability that an arrival waits in M/M/c with offered load ``a = λ / μ``."""
    rho = a / c
    top = a**c / math.factorial(c) / (1 - rho)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


@pytest.mark.slow
def test_mmc_erlang_c_with_c_slots():
    c, s, mean_tokens, rate = 4, 0.01, 100.0, 3.0  # mean service 1 s, rho = 0.75
    sc = des.load_scenario(
        {
            "name": "mmc",
            "seed": 3,
            "horizon": {"num_requests": 30_000},
            "warmup": 1000 / rate,
            "workload": {
                "arrival": {"process": "poisson", "rate": rate},
                "prompt_tokens": {"dist": "fixed", "value": 1},
                "output_tokens": {"dist": "geometric", "mean": mean_tokens},
            },
            "cost_model": {"kind": "constant", "step_time": s},
            "scheduler": {"kind": "continuous", "max_num_seqs": c},
        }
    )
    res = des.simulate(sc)
    mu = 1 / (mean_tokens * s)
    wq = erlang_c(c, rate / mu) / (c * mu - rate)
    check_mean(measured(res)["queue_delay"].to_numpy(), wq, extra=s)
    # Little's law for the busy slots: mean batch size = λ E[S] (a time average, window-exact)
    assert res.summary["mean_batch_size"] * res.summary["gpu_busy_fraction"] == pytest.approx(
        rate * mean_tokens * s, rel=0.03
    )


def test_littles_law_on_the_default_gpu_scenario():
    sc = des.load_scenario(None, ["horizon.duration=1200", "warmup=100"])
    res = des.simulate(sc)
    s = res.summary
    req = measured(res)
    req = req[req["arrival_time"] <= sc.horizon.duration]
    e2e, wait = req["e2e"].to_numpy(), req["queue_delay"].to_numpy()
    lam = s["offered_rps"]
    # L = λ W for the whole system and for the queue; edge effects are O(W / window)
    assert sc.horizon.duration is not None
    window = sc.horizon.duration - sc.warmup
    for level, w in ((s["mean_in_system"], e2e), (s["mean_queue_length"], wait)):
        se = lam * batch_means_se(w)
        edge = lam * w.mean() * (w.max() / window)
        assert abs(level - lam * w.mean()) <= 4 * se + edge
    assert s["stable"]
