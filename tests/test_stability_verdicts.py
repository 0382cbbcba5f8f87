"""Two verdicts that misled (issue #17, item 12): a saturated closed loop read as healthy, and a
split whose decode pool is the one overloaded. ``stable`` keeps its meaning (did the backlog
grow?); the keys of :mod:`des.metrics.verdict` and the printed line say what it leaves out."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import des
from des.render import run as render
from tests.helpers import des_cli

NEW_KEYS = [
    "decode_full_share", "closed_loop", "waiting_share", "saturated", "prefill_overloaded", "decode_overloaded",
]  # fmt: skip


def summary(*overrides: str) -> dict:
    return des.simulate(des.load_scenario(None, list(overrides))).summary


# -- closed loops ----------------------------------------------------------------------

TEN_THOUSAND_USERS = (
    "workload.arrival={process: closed, concurrency: 10000, think_time: 1}",
    "horizon.duration=60",
    "warmup=10",
)


def test_a_saturated_closed_loop_is_stable_by_construction_and_flagged_saturated():
    # the reliability review's run: 10,000 users on one 4090 (batch 128), TTFT p50 ~724 s.
    # A fixed population cannot grow the backlog, so `stable` stays true, but the verdict
    # must say so, and that the users mostly wait.
    s = summary(*TEN_THOUSAND_USERS)
    assert s["stable"] is True and s["closed_loop"] is True
    assert s["ttft_p50"] > 600
    assert s["saturated"] is True and s["waiting_share"] > 0.95
    line = render.stability_line(s)
    assert line.startswith("yes, by construction")
    assert "cannot grow the backlog" in line and "says nothing about latency" in line
    assert "SATURATED" in line and "no SLO to judge it by" in line


def test_a_closed_loop_with_an_slo_is_judged_by_it():
    s = summary(*TEN_THOUSAND_USERS, "slo={ttft: 2, tpot: 0.1}")
    assert s["slo_attainment"] == 0.0
    line = render.stability_line(s, {"ttft": 2.0, "tpot": 0.1})
    assert "judge it by its SLO (ttft <= 2 s, tpot <= 0.1 s): 0.0 % of measured requests met it" in line


def test_the_printed_summary_of_the_review_run_says_what_the_verdict_means(tmp_path):
    proc = des_cli("run", *(x for o in TEN_THOUSAND_USERS for x in ("--set", o)), "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())  # the line wraps
    assert "stable yes, by construction (a closed loop" in text and "SATURATED" in text


def test_a_closed_loop_within_its_batch_is_not_saturated():
    # the shipped 32 users without think time on a batch of 128: nobody waits for a slot
    s = summary("workload.arrival={process: closed, concurrency: 32, think_time: 0}", "horizon.duration=120")
    assert s["stable"] and s["closed_loop"] and s["saturated"] is False
    assert s["waiting_share"] < 0.05
    line = render.stability_line(s)
    assert "says nothing about latency" in line and "SATURATED" not in line


# -- prefill/decode splits -------------------------------------------------------------

# newcomer review 3, Q3: four 4090s as 3 prefill + 1 decode, RAG prompts (~4,000 tokens)
# and answers of ~200: the decode pool's KV holds ~28 of them, which binds first
RAG_3P1D = (
    "workload.prompt_tokens={dist: lognormal, mean: 4000, sigma: 0.3}",
    "workload.output_tokens={dist: geometric, mean: 200}",
    "horizon={duration: 300, drain: false}",
    "warmup=30",
    "scheduler.kind=disaggregated",
    "scheduler.prefill.instances=3",
    "scheduler.decode.instances=1",
)


@pytest.fixture(scope="module")
def saturation() -> float:
    """What the split carries with every batch full: closed-loop users, no think time (~5.6 req/s)."""
    return summary(*RAG_3P1D, "workload.arrival={process: closed, concurrency: 1024, think_time: 0}")["throughput_rps"]


def at(fraction: float, saturation: float, *extra: str) -> dict:
    return summary(*RAG_3P1D, *extra, f"workload.arrival={{process: poisson, rate: {fraction * saturation:.4f}}}")


def test_an_overloaded_decode_pool_is_named(saturation):
    # 1.3 x saturation is far outside capacity: every seed tried (8) piles up >15 % of its
    # arrivals and keeps the links waiting for decode blocks the whole window. The growth
    # shows in the prefill queue (back-pressure), so the verdict must name the decode pool.
    s = at(1.3, saturation)
    assert s["stable"] is False
    assert s["decode_full_share"] > 0.9
    assert s["decode_overloaded"] is True and s["prefill_overloaded"] is False
    assert "the decode pool is overloaded" in render.stability_line(s)


def test_an_overloaded_prefill_pool_is_named(saturation):
    # the same workload on 1 prefill + 3 decode is prefill-bound (saturation ~2.7 req/s):
    # at 3.5 req/s its prompts pile up and the decode pool always has room
    s = summary(*RAG_3P1D, "scheduler.prefill.instances=1", "scheduler.decode.instances=3", "workload.arrival.rate=3.5")
    assert s["stable"] is False
    assert s["decode_full_share"] < 0.1
    assert s["prefill_overloaded"] is True and s["decode_overloaded"] is False
    assert "the prefill pool is overloaded" in render.stability_line(s)


def test_a_decode_pool_short_of_batch_slots_is_named_too():
    # 1 prefill + 1 decode with 32 sequences a batch and answers of ~512 tokens: the
    # decode pool runs out of slots, not blocks, so transferred requests wait in its queue
    # rather than at the link. It carries ~3.2 req/s with every batch full; 4.7 req/s
    # (1.5 x) is far past it, and its prefill instance is mostly idle.
    s = summary(
        "workload.output_tokens={dist: geometric, mean: 512}",
        "horizon={duration: 300, drain: false}",
        "warmup=30",
        "scheduler={kind: disaggregated, max_num_seqs: 32}",
        "workload.arrival.rate=4.7",
    )
    assert s["stable"] is False and s["prefill_busy_fraction"] < 0.5
    assert s["decode_full_share"] > 0.9
    assert s["decode_overloaded"] is True and s["prefill_overloaded"] is False


def test_a_split_well_within_capacity_is_stable_and_quiet(saturation):
    # 0.55 x saturation: transfers wait only for the decode instance's next step (~3 % of the time)
    s = at(0.55, saturation)
    assert s["stable"] is True and not (s["prefill_overloaded"] or s["decode_overloaded"])
    assert s["decode_full_share"] < 0.1
    line = render.stability_line(s)
    assert "overloaded" not in line and "decode pool full" not in line


def test_the_reviews_point_is_stable_and_its_decode_pressure_is_named(saturation):
    # The review saw p99 TPOT of 0.15-0.25 s at 4.7-4.9 req/s and called the decode pool
    # overloaded. It is at ~0.87 of saturation: the backlog does not grow (an hour at 4.9
    # req/s keeps it level), but the decode cache is often full, so transfers wait for its
    # blocks and the wait lands in the first decode gap. The verdict stays stable and says so.
    s = at(0.87, saturation)
    assert s["stable"] is True and not (s["prefill_overloaded"] or s["decode_overloaded"])
    assert 0.1 <= s["decode_full_share"] < 0.5
    assert "decode pool full" in render.stability_line(s) and "TPOT" in render.stability_line(s)


def test_a_healthy_colocated_run_is_unchanged_but_for_the_new_keys():
    s = summary("horizon.duration=300", "warmup=30")
    assert s["stable"] is True
    assert list(s)[-len(NEW_KEYS) :] == NEW_KEYS  # added after every key there was
    assert s["closed_loop"] is False and s["saturated"] is False
    assert s["decode_full_share"] is None and not (s["prefill_overloaded"] or s["decode_overloaded"])
    assert s["waiting_share"] < 0.05
    line = render.stability_line(s)
    assert line.startswith("yes (backlog grew by") and "closed loop" not in line and "pool" not in line


def test_decode_full_share_is_the_time_the_decode_pool_held_requests_back():
    # link 0: a transfer queued at 1 gets its decode blocks at 3 (held back 1-3), the next,
    # queued at 2, at 3.5 (held back 2-3.5, side by side with the first); link 1: held back
    # 4-6; a decode step 7-7.5 leaves a request out of its batch (a prefill step that does,
    # and a decode step that does not, don't count). Waiting for the wire is not the decode
    # pool's doing. Union: [1, 3.5) + [4, 6) + [7, 7.5) = 5 s of [0, 10].
    from des.metrics.pools import decode_full_share

    transfers = pd.DataFrame(
        {
            "request_id": [0, 1, 2],
            "link": [0, 0, 1],
            "decode_instance": [2, 2, 2],
            "enqueued": [1.0, 2.0, 4.0],
            "reserved": [3.0, 3.5, 6.0],
            "start": [3.0, 3.5, 6.0],
            "end": [3.5, 4.0, 6.5],
            "bytes": [1, 1, 1],
        }
    )
    requests = pd.DataFrame(
        {
            "status": ["completed"] * 3,
            "transfer_start": [3.0, 3.5, 6.0],
            "first_token_time": [1.0, 2.0, 4.0],
            "output_tokens": [10, 10, 10],
            "prefill_instance": [0, 0, 1],
        }
    )
    steps = pd.DataFrame(
        {
            "role": ["decode", "decode", "prefill"],
            "start": [7.0, 7.5, 8.0],
            "duration": [0.5, 0.5, 0.5],
            "num_waiting": [1, 0, 3],
        }
    )
    assert decode_full_share(transfers, requests, steps, 0.0, 10.0, 10.0, True) == pytest.approx(0.5)
    # a request still waiting on link 1 when the run stops at 10 (prefilled at 8): blocked 8-10
    waiting = pd.concat(
        [
            requests,
            pd.DataFrame(
                {
                    "status": ["unfinished"],
                    "transfer_start": [np.nan],
                    "first_token_time": [8.0],
                    "output_tokens": [10],
                    "prefill_instance": [1],
                }
            ),
        ],
        ignore_index=True,
    )
    assert decode_full_share(transfers, waiting, steps, 0.0, 10.0, 10.0, True) == pytest.approx(0.7)
    assert decode_full_share(transfers, waiting, steps, 0.0, 10.0, 10.0, False) == pytest.approx(0.5)
    assert decode_full_share(transfers, requests, steps, 5.0, 5.0, 10.0, True) is None
