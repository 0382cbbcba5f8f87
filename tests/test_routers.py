"""Routers: each picks as documented, and whole clusters behave as queueing theory says.

With a constant step cost, a single-slot instance (``max_num_seqs: 1``) is an FCFS
server whose service time is ``output_tokens`` steps. ``c`` such replicas fed Poisson
arrivals through ``random`` routing are ``c`` independent M/G/1 queues (Poisson
splitting), whose mean wait is Pollaczek-Khinchine's ``λ_i E[S²] / (2 (1 - ρ))``.
``least_outstanding`` (join the shortest queue) must do better than random routing
and no better than one central queue for all ``c`` servers (M/G/c, here close to
M/M/c since geometric service in small steps is nearly exponential), the best any
routing can do. Tolerances: 4 batch-means standard errors, plus one step for the
slotting against M/M/c (see test_queueing_theory.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import des
from des.engine.router import ROUTERS
from tests.test_queueing_theory import batch_means_se, check_mean, erlang_c, measured


class Inst:
    def __init__(self, outstanding: int = 0, free_blocks: int = 0):
        self.outstanding = outstanding
        self.free_blocks = free_blocks


def pick(name: str, pool: list[Inst], seed: int = 0) -> int:
    return ROUTERS.get(name)(np.random.default_rng(seed)).pick(pool)


def test_round_robin_takes_instances_in_turn():
    router = ROUTERS.get("round_robin")(np.random.default_rng(0))
    pool = [Inst(), Inst(), Inst()]
    assert [router.pick(pool) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_least_outstanding_takes_the_fewest_outstanding_lowest_index_on_ties():
    assert pick("least_outstanding", [Inst(3), Inst(1), Inst(2)]) == 1
    assert pick("least_outstanding", [Inst(2), Inst(1), Inst(1)]) == 1


def test_least_kv_takes_the_most_free_blocks_lowest_index_on_ties():
    assert pick("least_kv", [Inst(free_blocks=5), Inst(free_blocks=9), Inst(free_blocks=1)]) == 1
    assert pick("least_kv", [Inst(free_blocks=4), Inst(free_blocks=7), Inst(free_blocks=7)]) == 1


def test_random_is_uniform():
    router = ROUTERS.get("random")(np.random.default_rng(7))
    pool = [Inst() for _ in range(4)]
    counts = np.bincount([router.pick(pool) for _ in range(8000)], minlength=4)
    assert stats.chisquare(counts).pvalue > 1e-3


C, STEP, MEAN_TOKENS, RHO = 3, 0.01, 20.0, 0.7
ES = MEAN_TOKENS * STEP  # mean service, seconds
RATE = C * RHO / ES  # total arrival rate, req/s


def replicas(router: str, n: int = 40_000):
    return des.load_scenario(
        {
            "name": "routers",
            "seed": 11,
            "horizon": {"num_requests": n},
            "warmup": 3000 / RATE,
            "workload": {
                "arrival": {"process": "poisson", "rate": RATE},
                "prompt_tokens": {"dist": "fixed", "value": 1},
                "output_tokens": {"dist": "geometric", "mean": MEAN_TOKENS},
            },
            "cost_model": {"kind": "constant", "step_time": STEP},
            "scheduler": {"kind": "continuous", "max_num_seqs": 1},
            "cluster": {"replicas": C, "router": router},
        }
    )


@pytest.mark.slow
def test_random_routing_is_c_independent_mg1_queues_and_least_outstanding_lies_between_them_and_mgc():
    p = 1 / MEAN_TOKENS
    es2 = STEP**2 * ((1 - p) / p**2 + MEAN_TOKENS**2)  # E[S²] of S = STEP × geometric
    wq_split = (RATE / C) * es2 / (2 * (1 - RHO))
    mu = 1 / ES
    wq_central = erlang_c(C, RATE / mu) / (C * mu - RATE)
    rnd = measured(des.simulate(replicas("random")))
    # each instance gets a third of the requests (binomial), and its queue is M/G/1
    share = np.bincount(rnd["instance"], minlength=C) / len(rnd)
    assert np.all(np.abs(share - 1 / C) <= 4 * math.sqrt((1 / C) * (1 - 1 / C) / len(rnd)))
    check_mean(rnd["queue_delay"].to_numpy(), wq_split)
    jsq = measured(des.simulate(replicas("least_outstanding")))
    w_jsq, se_jsq = float(jsq["queue_delay"].mean()), batch_means_se(jsq["queue_delay"].to_numpy())
    assert w_jsq < wq_split - 4 * se_jsq, f"JSQ {w_jsq:.4f} not below random's M/G/1 {wq_split:.4f}"
    assert w_jsq >= wq_central - 4 * se_jsq - STEP, f"JSQ {w_jsq:.4f} beats a central queue {wq_central:.4f}"
