"""The incremental continuous scheduler against the array scheduler it replaced.

``tests/oracle/array_continuous.py`` is the continuous scheduler as it was before it
kept its decoding requests as running aggregates: every request's progress in numpy
arrays, updated at every step. It decides each step by walking the whole running
set, so it is slow but plain. Both must give the same requests and steps, to the bit,
on hypothesis-generated scenarios: colocated under KV pressure (preemption, prefix
caching on and off, chunked prefill on and off, budget-bound steps) and disaggregated.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

import des
from des.engine.kvcache import BlockManager
from des.engine.policy import Role
from des.engine.schedulers.settings import ContinuousSettings
from tests.oracle.array_continuous import ContinuousScheduler as ArrayScheduler
from tests.test_disaggregated_properties import disaggregated_scenarios
from tests.test_properties import PROPS, scenario_dicts, scenarios


def _array_build(
    self: ContinuousSettings, kv: BlockManager, max_model_len: int, role: Role = "colocated", rng: Any = None
) -> Any:
    return ArrayScheduler(self, kv, self.max_model_len or max_model_len, role)  # type: ignore[arg-type]


def oracle(scn: des.Scenario) -> des.Result:
    """``scn`` run step by step with every continuous-batching instance on the array scheduler."""
    with mock.patch.object(ContinuousSettings, "build", _array_build):
        return des.simulate(scn, fast_forward=False)


def same(a: des.Result, b: des.Result) -> None:
    assert a.requests.equals(b.requests), "requests differ from the array scheduler's"
    assert a.steps.equals(b.steps), "steps differ from the array scheduler's"
    if a.transfers is not None:
        assert b.transfers is not None and a.transfers.equals(b.transfers)


@PROPS
@given(scenarios(kv_pressure=True, kind="continuous"))
def test_incremental_scheduler_matches_the_array_scheduler_under_kv_pressure(scn):
    same(des.simulate(scn), oracle(scn))


@PROPS
@given(scenarios(kind="continuous"))
def test_incremental_scheduler_matches_the_array_scheduler(scn):
    same(des.simulate(scn), oracle(scn))


@PROPS
@given(disaggregated_scenarios())
def test_incremental_scheduler_matches_the_array_scheduler_disaggregated(scn):
    same(des.simulate(scn), oracle(scn))


@st.composite
def sharing_scenarios(draw: st.DrawFn) -> des.Scenario:
    """Continuous batching under KV pressure on workloads that share content: a shared
    prefix (1-3 groups) and/or conversations."""
    data = draw(scenario_dicts(kv_pressure=True, kind="continuous"))
    w = data["workload"]
    if w["arrival"]["process"] == "closed" or draw(st.booleans()):
        w["shared_prefix"] = {"tokens": draw(st.sampled_from([8, 40, 100])), "groups": draw(st.integers(1, 3))}
    if w["arrival"]["process"] != "closed" and draw(st.booleans()):
        w["conversations"] = {
            "turns": {"dist": "uniform", "low": 1, "high": draw(st.integers(1, 4))},
            "think_time": {"dist": "exponential", "mean": draw(st.sampled_from([0.05, 0.5]))},
        }
    data["scheduler"]["enable_prefix_caching"] = True
    return des.load_scenario(data)


@PROPS
@given(sharing_scenarios())
def test_incremental_scheduler_matches_the_array_scheduler_on_shared_content(scn):
    same(des.simulate(scn), oracle(scn))
    ref = des.simulate(scn, fast_forward=False)
    fast = des.simulate(scn)
    assert fast.requests.equals(ref.requests) and fast.steps.equals(ref.steps)
