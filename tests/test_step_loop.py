"""Every loop that steps an instance keeps the same bookkeeping (:mod:`des.engine.instance`).

A lone instance, a pipelined engine (``cluster.pp``) and the ranks of a lock-step MoE
group (``cluster.dp`` with expert parallelism) each count every step they record as busy
time (what the autoscaler's utilisation gauge reads: ``busy``, ``busy_at``) and, when a
step releases requests, make that step's row the span the KV link reads (``step_span``);
every request routed to an instance leaves it (``outstanding`` back to 0).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

import des
from des.engine.instance import Instance
from des.engine.pipeline import PipelineInstance
from des.engine.request import Request
from des.metrics.result import build_result
from des.simulation import build, run_until, stop_event


def scenario(**cluster: Any) -> dict[str, Any]:
    """Poisson traffic on RTX 4090s, drained; ``cluster`` settings as given."""
    return {
        "seed": 5,
        "gpu": "rtx4090",
        "model": "qwen2.5-7b",
        "horizon": {"num_requests": 120},
        "warmup": 0,
        "workload": {
            "arrival": {"process": "poisson", "rate": 8.0},
            "prompt_tokens": {"dist": "lognormal", "mean": 400, "sigma": 0.6},
            "output_tokens": {"dist": "geometric", "mean": 40},
        },
        "cluster": cluster,
    }


PLAIN = scenario(replicas=2)
PIPELINED = scenario(pp=2, replicas=2)
LOCKSTEP = {**scenario(dp=2, expert_parallel=True), "model": "qwen3-30b-a3b", "precision": {"weights": "int4-awq"}}


def run_watched(data: dict[str, Any]) -> tuple[list[Instance], pd.DataFrame, list[tuple[Instance, float, Any]]]:
    """Run ``data`` to its end; the instances, the steps table, and for every request that
    left an instance: the instance, the time and its ``step_span`` then."""
    sc = des.load_scenario(data)
    env, cluster, procs = build(sc)
    left: list[tuple[Instance, float, Any]] = []
    for inst in cluster.instances:

        def watch(req: Request, instance: Instance, _leave: Any = inst.leave) -> None:
            left.append((instance, env.now, instance.step_span))
            _leave(req, instance)

        inst.leave = watch
    run_until(env, stop_event(sc, env, cluster, procs))
    steps = build_result(sc, cluster, end_time=env.now).steps
    assert (steps["start"] + steps["duration"] <= env.now).all()
    return cluster.instances, steps, left


@pytest.mark.parametrize(
    ("data", "engine", "one_at_a_time"),
    [(PLAIN, Instance, True), (PIPELINED, PipelineInstance, False), (LOCKSTEP, Instance, True)],
    ids=["plain", "pp2", "moe-dp2"],
)
def test_busy_time_and_step_span_are_the_recorded_steps(data: dict[str, Any], engine: type, one_at_a_time: bool):
    instances, steps, left = run_watched(data)
    assert len(instances) == 2 and all(type(inst) is engine for inst in instances)
    assert len(left) == 120  # every request left its instance once (one stage each)
    for inst in instances:
        own = steps[steps["instance"] == inst.index]
        ends = own["start"] + own["duration"]
        assert len(own) > 50
        # the utilisation gauge: the busy time counted is the recorded steps' time
        assert inst.busy == pytest.approx(float(own["duration"].sum()), abs=1e-9)
        assert inst.busy_until in set(ends)
        assert inst.busy_at(float(ends.max())) == inst.busy
        assert inst.outstanding == 0
        # the link's span: a recorded step of this instance that emitted tokens, over by then
        emitting = own[own["tokens_emitted"] > 0]
        rows = set(zip(emitting["start"], emitting["duration"], strict=True))
        spans = [(now, span) for who, now, span in left if who is inst]
        assert spans
        for now, span in spans:
            assert span in rows and span[0] + span[1] <= now
            if one_at_a_time:  # the requests leave as the step that released them ends
                assert span[0] + span[1] == now


def test_a_lockstep_rank_counts_its_dummy_steps_as_busy() -> None:
    """One request on a two-rank MoE group: the other rank runs a dummy step (no sequences)
    alongside each of its steps, its GPUs as busy as the group's, so both ranks' busy time
    is the group's."""
    sc = des.load_scenario({**LOCKSTEP, "horizon": {"num_requests": 1}})
    env, cluster, procs = build(sc)
    run_until(env, stop_event(sc, env, cluster, procs))
    steps = build_result(sc, cluster, end_time=env.now).steps
    sizes = steps.groupby("instance")["batch_size"].max()
    assert sorted(sizes) == [0, 1]
    idle = steps[steps["instance"] == sizes.idxmin()]
    one, other = cluster.instances
    assert one.busy == other.busy == pytest.approx(float(idle["duration"].sum()), abs=1e-9)
    assert one.busy > 0
