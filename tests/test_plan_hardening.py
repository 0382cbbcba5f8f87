"""``des plan`` and ``des capacity`` on the inputs reliability-review-4 and newcomer-review-4
found wanting: scheduled arrivals (whose runs have no ``stable`` verdict), flags refused in one
line before anything is written or simulated, the plan's files replaced together, ties broken
toward the simpler configuration, and a split's launch commands kept apart on one node."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

import des
from des.metrics.stability import judged_unstable
from des.study.capacity import CapacityQuestion, Evaluation, judge, parse_slo
from des.study.runner import open_backend
from tests.helpers import des_cli

#: One GPU serving one request at a time in 0.1 s (M/D/1 at each instant), arrivals on a schedule.
SCHEDULED: dict[str, Any] = {
    "name": "sched",
    "seed": 3,
    "horizon": {"duration": 200, "drain": False},
    "warmup": 20,
    "workload": {
        "arrival": {"process": "nhpp", "schedule": {"kind": "piecewise", "times": [0, 100], "rates": [2, 4]}},
        "prompt_tokens": {"dist": "fixed", "value": 1},
        "output_tokens": {"dist": "fixed", "value": 1},
    },
    "cost_model": {"kind": "constant", "step_time": 0.1},
    "scheduler": {"kind": "continuous", "max_num_seqs": 1},
    "cluster": {"replicas": 1},
}
MODULATED = {"process": "poisson", "rate": 3, "modulate": {"kind": "piecewise", "times": [0, 100], "rates": [1, 2]}}


def write(tmp_path: Path, doc: dict[str, Any], name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_stable_verdict_that_does_not_apply_is_no_instability():
    assert [judged_unstable({"stable": v}) for v in (True, False, None, float("nan"))] == [False, True, False, False]
    assert not judged_unstable({})
    rows = [{"stable": None, "ttft_p99": 0.5}] * 2
    ev = judge(1.0, [parse_slo("ttft_p99<=2", ["ttft_p99"])], rows)
    assert isinstance(ev, Evaluation) and ev.unstable == 0 and ev.holds and not ev.surely_fails


@pytest.mark.parametrize("arrival", [None, MODULATED], ids=["nhpp", "modulate"])
def test_capacity_of_a_scheduled_workload_has_an_answer(tmp_path, arrival):
    """A schedule's runs report ``stable: null``; the search judges them by their SLOs and
    finds the scale (nhpp) or the rate (modulate) where the queue delay reaches its limit."""
    doc = json.loads(json.dumps(SCHEDULED))
    if arrival is not None:
        doc["workload"]["arrival"] = arrival
    question = CapacityQuestion.ask(des.load_scenario(doc), ["queue_delay_mean<=0.1"], replications=3, tolerance=0.1)
    with open_backend("local", 1) as runner:
        answer = question.answer(runner, tmp_path)
    assert answer.value is not None, answer.note
    assert all(e.unstable == 0 for e in answer.evaluations)
    # the peak is 4 req/s (nhpp) or 4 req/s (modulate: 3 x 2 / 1.5) at 1, against 10 req/s served
    assert 1.0 < answer.value * (1.0 if arrival is None else 1 / 3) < 2.5


def test_capacity_on_a_schedule_that_never_holds_says_why(tmp_path):
    proc = des_cli(
        "capacity", str(write(tmp_path, SCHEDULED)), "--slo", "queue_delay_mean<=0.0001", "--replications", "2",
        "--workers", "1", "--out", str(tmp_path / "c"),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("no answer: the SLOs fail at the lowest value tried, workload.arrival.rate_scale = 0.125")
    assert "the schedule's rate peaks at 0.5 req/s" in last and "--low" in last


def test_plan_passes_a_scheduled_workload_at_its_rate_scale(tmp_path):
    out = tmp_path / "p"
    proc = des_cli(
        "plan", str(write(tmp_path, SCHEDULED)), "--rate-scale", "1", "--slo", "queue_delay_mean<=0.1",
        "--gpus", "rtx4090", "--max-gpus", "1", "--no-splits", "--replications", "3", "--workers", "1",
        "--out", str(out), "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    body = json.loads(proc.stdout)
    assert body["winner"]["name"] == "rtx4090/tp1/x1" and body["winner"]["verdict"] == "pass"
