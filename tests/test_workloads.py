"""Workloads that share content: a shared system prompt, multi-turn conversations, and
what prefix caching makes of them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

import des

BLOCK = 16


def shared_prefix(caching: bool) -> des.Scenario:
    # one request at a time (a single closed-loop user thinking 1 s): no overlap, exact counts
    return des.load_scenario(
        {
            "name": "system-prompt",
            "seed": 1,
            "horizon": {"num_requests": 200},
            "workload": {
                "arrival": {"process": "closed", "concurrency": 1, "think_time": 1.0, "think_dist": "fixed"},
                "prompt_tokens": {"dist": "fixed", "value": 128},
                "output_tokens": {"dist": "fixed", "value": 16},
                "shared_prefix": {"tokens": 1024, "groups": 1},
            },
            "scheduler": {"kind": "continuous", "enable_prefix_caching": caching},
        }
    )


def test_two_hundred_requests_sharing_a_prefix_compute_it_once():
    on, off = des.simulate(shared_prefix(True)), des.simulate(shared_prefix(False))
    assert (on.requests["prompt_tokens"] == 1024 + 128).all()
    assert on.summary["prompt_tokens_computed"] == 1024 + 200 * 128
    assert off.summary["prompt_tokens_computed"] == 200 * 1152
    assert on.summary["prefix_cache_hit_tokens"] == 199 * 1024
    assert on.requests["cached_tokens"].tolist() == [0] + [1024] * 199
    assert on.summary["ttft_mean"] < off.summary["ttft_mean"]


def test_prefix_groups_follow_their_weights():
    sc = des.load_scenario(
        None,
        [
            "horizon.duration=600",
            "workload.shared_prefix={tokens: 256, groups: 3, weights: [1, 2, 5]}",
        ],
    )
    groups = des.simulate(sc).requests["prefix_group"].to_numpy()
    n = len(groups)
    for g, p in enumerate(np.array([1, 2, 5]) / 8):
        share = (groups == g).mean()
        assert abs(share - p) <= 4 * np.sqrt(p * (1 - p) / n), (g, share, p)


def chat(caching: bool = True, **extra: Any) -> des.Scenario:  # extra: dotted key -> value
    data: dict[str, Any] = {
        "name": "chat",
        "seed": 3,
        "horizon": {"duration": 300},
        "warmup": 30,
        "workload": {
            "arrival": {"process": "poisson", "rate": 0.5},
            "prompt_tokens": {"dist": "lognormal", "mean": 200, "sigma": 0.5},
            "output_tokens": {"dist": "geometric", "mean": 100},
            "conversations": {"turns": {"dist": "geometric", "mean": 4}, "think_time": {"dist": "fixed", "value": 5}},
        },
        "scheduler": {"kind": "continuous", "enable_prefix_caching": caching},
    }
    return des.load_scenario(data, [(k, v) for k, v in extra.items()])


def turns_of(requests: pd.DataFrame) -> pd.DataFrame:
    return requests[requests["status"] == "completed"].sort_values(["conversation_id", "turn"])


def test_a_turn_sends_the_previous_prompt_answer_and_new_tokens_after_the_think_time():
    r = des.simulate(chat())
    t = turns_of(r.requests)
    assert t["conversation_id"].min() == 0 and (t["turn"] >= 1).all()
    checked = 0
    for _, conv in t.groupby("conversation_id"):
        rows = conv.to_dict("records")
        assert [row["turn"] for row in rows] == list(range(1, len(rows) + 1))
        for prev, nxt in zip(rows, rows[1:], strict=False):
            assert nxt["prompt_tokens"] > prev["prompt_tokens"] + prev["output_tokens"]
            assert nxt["arrival_time"] == pytest.approx(prev["finish_time"] + 5.0)
            checked += 1
    assert checked > 50


def test_with_a_large_cache_every_turn_finds_its_whole_history():
    r = des.simulate(chat())
    t = turns_of(r.requests)
    found = 0
    for _, conv in t.groupby("conversation_id"):
        rows = conv.to_dict("records")
        for prev, nxt in zip(rows, rows[1:], strict=False):
            # the previous turn computed its prompt and all but its last token: its full blocks
            history = prev["prompt_tokens"] + prev["output_tokens"] - 1
            assert nxt["cached_tokens"] == BLOCK * (history // BLOCK)
            found += 1
    assert found > 50
    first_turns = t[t["turn"] == 1]
    assert (first_turns["cached_tokens"] == 0).all()  # nothing shared before a conversation's first turn


def test_with_a_tiny_cache_hits_fall_and_what_is_found_is_a_head_of_the_history():
    big = des.simulate(chat(True, **{"workload.arrival.rate": 2.0}))
    tiny = des.simulate(chat(True, **{"workload.arrival.rate": 2.0, "scheduler.num_gpu_blocks_override": 300}))
    assert tiny.summary["prefix_cache_hit_rate"] < 0.8 * big.summary["prefix_cache_hit_rate"]
    t = turns_of(tiny.requests)
    some_lost = False
    for _, conv in t.groupby("conversation_id"):
        rows = conv.to_dict("records")
        for prev, nxt in zip(rows, rows[1:], strict=False):
            if nxt["preemptions"]:
                continue  # a re-admission finds the request's own blocks again: hits add up
            whole = BLOCK * ((prev["prompt_tokens"] + prev["output_tokens"] - 1) // BLOCK)
            got = nxt["cached_tokens"]
            assert got % BLOCK == 0 and 0 <= got <= whole  # eviction takes a history's tail first
            some_lost |= got < whole
    assert some_lost


def test_a_conversation_that_would_pass_max_model_len_ends():
    r = des.simulate(chat(True, **{"scheduler.max_model_len": 1024}))
    t = turns_of(r.requests)
    assert (t["prompt_tokens"] + t["output_tokens"] <= 1024).all()
    assert (r.requests["status"] != "rejected").all()  # it ends instead of sending what cannot fit


def test_conversations_need_an_open_arrival_process():
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(
            None,
            [
                "workload.arrival={process: closed, concurrency: 4}",
                "workload.conversations={turns: {dist: fixed, value: 2}, think_time: {dist: fixed, value: 1}}",
            ],
        )
    (path, message), *_ = err.value.problems
    assert path == "workload.conversations" and "open arrival process" in message


def test_content_sharing_is_reproducible_and_exact_in_the_fast_engine():
    sc = chat(True, **{"workload.arrival.rate": 2.0, "scheduler.num_gpu_blocks_override": 400})
    a, b, ref = des.simulate(sc), des.simulate(sc), des.simulate(sc, fast_forward=False)
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)
    assert a.requests.equals(ref.requests) and a.steps.equals(ref.steps)
