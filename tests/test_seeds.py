"""The seeds' worked examples, exactly, through the public API.

The lesson (seeds/continuous-batching-lesson.txt §4) runs 12 requests on 4 slots with
unit step cost: static batching takes 30 steps at 56/120 = 46.7 % slot utilisation,
continuous batching 18 steps at 56/72 = 77.8 %. The card
(seeds/continuous-batching-card.txt) admits 8 requests arriving at t = 0..7, 5 tokens
each, on 4 slots. The seeds' own code is reproduced below as the reference.
"""

from __future__ import annotations

from collections import deque

import pytest

import des
from tests.helpers import SCENARIOS

LESSON = [("R0", 2), ("R1", 12), ("R2", 3), ("R3", 2), ("R4", 10), ("R5", 2),
          ("R6", 4), ("R7", 2), ("R8", 8), ("R9", 3), ("R10", 2), ("R11", 6)]  # fmt: skip


def lesson_static(requests, slots):
    """The lesson's static_batching, verbatim in logic."""
    q = deque(requests)
    busy_steps = total_slot_steps = step = 0
    while q:
        batch = [q.popleft() for _ in range(min(slots, len(q)))]
        remaining = {rid: n for rid, n in batch}
        while any(r > 0 for r in remaining.values()):
            step += 1
            for rid in remaining:
                if remaining[rid] > 0:
                    remaining[rid] -= 1
                    busy_steps += 1
            total_slot_steps += slots
    return step, busy_steps, total_slot_steps


def lesson_continuous(requests, slots):
    """The lesson's continuous_batching, plus each request's finish step."""
    waiting = deque(requests)
    running: dict[str, int] = {}
    finish: dict[str, int] = {}
    busy_steps = total_slot_steps = step = 0
    while waiting or running:
        while waiting and len(running) < slots:
            rid, n = waiting.popleft()
            running[rid] = n
        step += 1
        for rid in running:
            running[rid] -= 1
            busy_steps += 1
        for rid, n in running.items():
            if n == 0:
                finish[rid] = step
        running = {rid: n for rid, n in running.items() if n > 0}
        total_slot_steps += slots
    return step, busy_steps, total_slot_steps, finish


def card_reference(max_slots=4, n=8, tokens=5):
    """The card's loop: admission time and 'done' time of each request."""
    waiting = [{"id": i, "arrive": i, "max_new": tokens, "gen": 0, "done": None} for i in range(n)]
    active: dict[int, dict] = {}
    free = list(range(max_slots))
    admitted: dict[int, int] = {}
    reqs = list(waiting)
    t = 0

    def admit():
        while free and waiting and waiting[0]["arrive"] <= t:
            req = waiting.pop(0)
            slot = free.pop()
            req["gen"] = 0
            active[slot] = req
            admitted[req["id"]] = t

    def step():
        nonlocal t
        admit()
        if not active:
            return False
        finished = []
        for slot, req in list(active.items()):
            req["gen"] += 1
            if req["gen"] >= req["max_new"]:
                finished.append(slot)
        for slot in finished:
            active.pop(slot)["done"] = t
            free.append(slot)
        t += 1
        return True

    while step() or waiting:
        if not active and waiting:
            t = waiting[0]["arrive"]
    return admitted, {r["id"]: r["done"] for r in reqs}


def run(name: str) -> des.Result:
    return des.simulate(des.load_scenario(SCENARIOS / f"{name}.yaml"))


def slot_utilisation(result: des.Result, slots: int) -> tuple[int, int]:
    """(useful slot-steps, reserved slot-steps) from the steps table."""
    return int(result.steps["batch_size"].sum()), slots * len(result.steps)


def test_reference_code_gives_the_lessons_printed_numbers():
    assert lesson_static(LESSON, 4) == (30, 56, 120)
    assert lesson_continuous(LESSON, 4)[:3] == (18, 56, 72)


def test_lesson_static_30_steps_46_7_percent():
    r = run("lesson-static")
    assert len(r.steps) == 30
    assert r.summary["makespan"] == 30.0
    assert slot_utilisation(r, 4) == (56, 120)
    assert r.summary["slot_utilization"] == pytest.approx(56 / 120)
    # every step costs the full batch width: the padding waste
    assert (r.steps["batch_width"] == 4).all()
    # results return at the batch ends: steps 12, 22 and 30
    assert sorted(r.requests["finish_time"].unique()) == [12.0, 22.0, 30.0]
    assert r.summary["num_completed"] == 12


def test_lesson_continuous_18_steps_77_8_percent():
    r = run("lesson-continuous")
    assert len(r.steps) == 18
    assert r.summary["makespan"] == 18.0
    assert slot_utilisation(r, 4) == (56, 72)
    assert r.summary["slot_utilization"] == pytest.approx(56 / 72)
    _, _, _, finish = lesson_continuous(LESSON, 4)
    got = dict(zip(r.requests["request_id"], r.requests["finish_time"], strict=True))
    assert {f"R{i}": got[i] for i in range(12)} == {k: float(v) for k, v in finish.items()}


def test_lesson_static_with_release_on_finish_keeps_the_makespan():
    sc = des.load_scenario(SCENARIOS / "lesson-static.yaml", ["scheduler.release_on=finish"])
    r = des.simulate(sc)
    assert len(r.steps) == 30
    # each request now returns at its own last token: R0 (2 tokens) at t = 2
    assert r.requests.loc[0, "finish_time"] == 2.0
    assert r.requests.loc[1, "finish_time"] == 12.0
    assert (r.requests["e2e"] == r.requests["finish_time"]).all()


def test_card_eight_requests_on_four_slots():
    r = run("card-continuous")
    admitted, done = card_reference()
    req = r.requests.set_index("request_id")
    for i in range(8):
        assert req.loc[i, "arrival_time"] == float(i)
        assert req.loc[i, "scheduled_time"] == float(admitted[i])
        # the card stamps 'done' at the start of the last step; des at its end
        assert req.loc[i, "finish_time"] == float(done[i] + 1)
        assert req.loc[i, "first_token_time"] == float(admitted[i] + 1)
    assert [done[i] + 1 for i in range(8)] == [5, 6, 7, 8, 10, 11, 12, 13]
    assert len(r.steps) == 13
    assert r.steps["batch_size"].max() == 4


@pytest.mark.parametrize("name", ["lesson-static", "lesson-continuous", "card-continuous"])
def test_seed_examples_are_stable_and_complete(name):
    r = run(name)
    assert r.summary["num_unfinished"] == 0 and r.summary["num_rejected"] == 0
    assert (r.steps["duration"] == 1.0).all()
