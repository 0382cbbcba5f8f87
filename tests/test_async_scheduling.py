"""Admission under vLLM V1's async scheduling, on exact timelines from the step log.

With ``cost_model.async_scheduling`` (the roofline's default) the batch of a step that
follows another back to back was formed when that one started: a request that reaches
the scheduler while a step runs is not in the next step but in the one after; an idle
engine schedules it at once; a batch formed empty is formed again at once. Without
async scheduling it joins the next step. Times below are read off the step log of a
run without the late request (nothing before its admission depends on it), so they
are exact, not tolerances.
"""

from __future__ import annotations

import pytest

import des

LATE = 1  # the id of the request that reaches the scheduler mid-step


def trace(tmp_path, rows, async_scheduling=True, scheduler=None):
    path = tmp_path / "trace.csv"
    path.write_text("arrival_time,prompt_tokens,output_tokens\n" + "".join(f"{a},{p},{o}\n" for a, p, o in rows))
    return des.load_scenario(
        {
            "name": "async",
            "workload": {"arrival": {"process": "trace", "path": str(path)}},
            "cost_model": {"kind": "roofline", "async_scheduling": async_scheduling},
            "serving": {"frontend": "engine"},
            "scheduler": scheduler or {"kind": "continuous"},
        }
    )


def steps_of(scn, instance=0):
    """(start, end) of each step of ``instance``, in order."""
    s = des.simulate(scn).steps
    s = s[s["instance"] == instance]
    return s["start"].to_numpy(), (s["start"] + s["duration"]).to_numpy()


def late_arrival(scn, t):
    """The arrival time at which the late request (prompt 64) reaches the scheduler at ``t``."""
    return t - scn.frontend.ingress(64)


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_a_request_reaching_the_scheduler_mid_step_waits_one_step_more_under_async_scheduling(
    tmp_path, async_scheduling
):
    lone = trace(tmp_path, [(0.0, 300, 30)], async_scheduling)
    start, end = steps_of(lone)
    k = 5  # the late request reaches the scheduler in the middle of step k
    arrival = late_arrival(lone, (start[k] + end[k]) / 2)
    r = des.simulate(trace(tmp_path, [(0.0, 300, 30), (arrival, 64, 4)], async_scheduling)).requests
    late = r.set_index("request_id").loc[LATE]
    if async_scheduling:
        # step k+1 was formed as step k started: the request joins step k+2
        assert late["scheduled_time"] == end[k + 1]
    else:
        assert late["scheduled_time"] == end[k]
    assert late["queue_delay"] > 0


def test_async_scheduling_costs_the_late_request_one_step_of_ttft(tmp_path):
    """Everything else equal (the same step times: the async run's), the late request's
    first token comes one step later than it would if it joined the next step."""
    lone = trace(tmp_path, [(0.0, 300, 30)])
    start, end = steps_of(lone)
    k = 5
    arrival = late_arrival(lone, (start[k] + end[k]) / 2)
    res = des.simulate(trace(tmp_path, [(0.0, 300, 30), (arrival, 64, 4)]))
    r, s = res.requests.set_index("request_id"), res.steps
    # its prefill is the step starting at end[k+1], its first token at that step's end
    first = s[s["start"] == end[k + 1]]
    assert len(first) == 1
    assert r.loc[LATE, "first_token_time"] == end[k + 1] + first["duration"].iloc[0]


def test_an_idle_engine_schedules_a_request_at_once(tmp_path):
    scn = trace(tmp_path, [(0.0, 300, 3), (5.0, 64, 3)])
    r = des.simulate(scn).requests.set_index("request_id")
    start, end = steps_of(scn)
    assert end[2] < 5.0, "the first request is done long before the second arrives"
    for i, arrival, prompt in ((0, 0.0, 300), (1, 5.0, 64)):
        assert r.loc[i, "scheduled_time"] == arrival + scn.frontend.ingress(prompt)


def test_a_batch_formed_empty_is_formed_again_at_once(tmp_path):
    """The late request reaches the scheduler during the first request's last step: the
    batch formed as that step started is empty (a request whose last token comes out of
    a step is not scheduled after it, vLLM's max_tokens check), so the engine forms the
    next at once and the late request starts when the last step ends."""
    lone = trace(tmp_path, [(0.0, 300, 6)])
    start, end = steps_of(lone)
    last = len(start) - 1
    arrival = late_arrival(lone, (start[last] + end[last]) / 2)
    r = des.simulate(trace(tmp_path, [(0.0, 300, 6), (arrival, 64, 4)])).requests.set_index("request_id")
    assert r.loc[LATE, "scheduled_time"] == end[last]


def test_the_prefill_pool_of_a_split_admits_as_the_engine_does(tmp_path):
    """A 3000-token prompt takes two chunks of a 2048-token budget on the prefill
    instance; a request reaching it during the first chunk shares the second chunk's
    step without async scheduling, and with it waits for the step after."""
    # the budget stated: the LLM class's default on a 4090 is 8192 (the prompt would take one step)
    sched = {"kind": "disaggregated", "kv_transfer": {"bandwidth": 1e10}, "max_num_batched_tokens": 2048}
    for async_scheduling in (True, False):
        lone = trace(tmp_path, [(0.0, 3000, 4)], async_scheduling, sched)
        start, end = steps_of(lone, instance=0)
        arrival = late_arrival(lone, (start[0] + end[0]) / 2)
        rows = [(0.0, 3000, 4), (arrival, 64, 4)]
        r = des.simulate(trace(tmp_path, rows, async_scheduling, sched)).requests.set_index("request_id")
        assert r.loc[LATE, "prefill_instance"] == 0
        assert r.loc[LATE, "scheduled_time"] == (end[1] if async_scheduling else end[0])


def test_constant_and_linear_step_times_model_no_engine():
    for cost in ({"kind": "constant", "step_time": 0.01}, {"kind": "linear", "base": 0.01}):
        assert not des.load_scenario(None, [("cost_model", cost)]).cost_model.async_scheduling
    assert des.load_scenario(None).cost_model.async_scheduling  # vLLM V1's default
