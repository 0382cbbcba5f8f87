"""A request's way to its first token behind a serving front-end (:mod:`des.cost.frontend`).

The way in is a stage, not a delay: each API server process is one event loop that takes
the requests sent to it first come, first served (:class:`des.engine.instance.Lanes`), so
a burst reaches the scheduler in the order it was sent, whatever its prompts' lengths. A
lone request's TTFT is the sum of its stages: the way in (HTTP, chat template, tokenizing
and its micro-batching window, input processing, the engine core's intake), its prefill
formed on an idle engine (CPU and GPU time in series), and its first token's way out.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import des
from des.cost.base import BatchShape, CostContext
from des.cost.frontend import FRONTENDS
from des.cost.roofline import Roofline
from des.engine import instance as instance_module
from des.engine.request import COMPLETED, UNFINISHED

API, ENGINE = FRONTENDS["api_server"], FRONTENDS["engine"]


def trace_scenario(tmp_path, rows, serving=None, horizon=None) -> des.Scenario:
    path = tmp_path / "trace.csv"
    path.write_text("arrival_time,prompt_tokens,output_tokens\n" + "".join(f"{a},{p},{o}\n" for a, p, o in rows))
    data = {
        "name": "first-token",
        "gpu": "h100-80gb",
        "model": "llama-3.1-8b",
        "workload": {"arrival": {"process": "trace", "path": str(path)}},
        "serving": serving or {},
    }
    if horizon is not None:
        data["horizon"] = horizon
    return des.load_scenario(data)


@pytest.fixture
def enqueued(monkeypatch):
    """(request id, time) of every request reaching a scheduler, in the order they do."""
    seen: list[tuple[int, float]] = []
    original = instance_module.Instance._enqueue

    def record(self, req, blocks):
        seen.append((req.id, self.env.now))
        original(self, req, blocks)

    monkeypatch.setattr(instance_module.Instance, "_enqueue", record)
    return seen


def burst(n: int = 1000, seed: int = 4) -> list[int]:
    """Prompt lengths of a burst: varied enough that tokenizing alone would reorder it."""
    return [int(p) for p in np.random.default_rng(seed).integers(16, 4000, n)]


def lane_times(spec, prompts, lanes: int) -> list[float]:
    """When each request of a burst sent at t=0 reaches the scheduler, by hand: request ``i``
    goes to process ``i mod lanes``, starts there when the one before it there is through,
    keeps it ``ingress_busy``, waits the tokenizer's window and takes the engine core's input
    thread when the request before it is through (alone: ``ingress`` after its start)."""
    free = [0.0] * lanes
    intake = 0.0  # the engine core's input thread: first come, first served after the window
    out = []
    for i, p in enumerate(prompts):
        k = i % lanes
        start = max(0.0, free[k])
        free[k] = start + spec.ingress_busy(p)
        if intake <= free[k] + spec.tokenize_wait_s:
            intake = start + spec.ingress(p)
        else:
            intake = intake + spec.intake_s + spec.hash_s_per_token * p
        out.append(intake)
    return out


@pytest.mark.parametrize("lanes", [1, 2])
def test_a_burst_reaches_the_scheduler_in_the_order_it_was_sent(tmp_path, enqueued, lanes):
    prompts = burst()
    # drawn on their own, the ways in would put the shortest prompts first
    assert sorted(range(len(prompts)), key=lambda i: API.ingress(prompts[i])) != list(range(len(prompts)))
    scn = trace_scenario(tmp_path, [(0.0, p, 2) for p in prompts], {"api_server_count": lanes})
    spec = scn.frontend
    assert spec is not None and spec.api_servers == lanes
    res = des.simulate(scn)
    assert (res.requests["status"] == COMPLETED).all()
    ids = [i for i, _ in enqueued]
    times = dict(enqueued)
    assert sorted(ids) == list(range(len(prompts)))
    expected = lane_times(spec, prompts, lanes)
    assert [times[i] for i in range(len(prompts))] == expected  # exactly: the same sums in the same order
    for k in range(lanes):  # each process: first come, first served, one after another
        mine = list(range(k, len(prompts), lanes))
        assert [i for i in ids if i % lanes == k] == mine
        turn = np.cumsum([0.0] + [spec.ingress_busy(prompts[i]) for i in mine[:-1]])  # its turn on the loop
        ways = np.array([spec.ingress(prompts[i]) for i in mine])
        reach = np.array([times[i] for i in mine])
        assert (np.diff(reach) > 0).all() and (reach >= turn + ways - 1e-9).all()
    if lanes == 1:
        assert ids == list(range(len(prompts)))
    else:  # two lanes drain the burst in about half the time
        one = lane_times(spec, prompts, 1)[-1]
        assert max(expected) < 0.6 * one
    # the scheduler serves them in that order: first come, first scheduled
    r = res.requests.set_index("request_id")
    order = sorted(range(len(prompts)), key=lambda i: times[i])
    assert (np.diff(r.loc[order, "scheduled_time"].to_numpy()) >= 0).all()


def hand_ttft(scn: des.Scenario, prompt: int) -> float:
    """A lone request's TTFT from the front-end's own terms and the cost model's prefill."""
    fe = scn.frontend
    assert fe is not None
    pool = scn.layout.pools[0]
    cost = scn.cost_model.build(CostContext(pool.gpu, scn.model, scn.precision, pool.tp, fe))
    assert isinstance(cost, Roofline)
    budget = pool.policy.token_budget  # the pool's, vLLM's default where the scenario gives none
    assert budget is not None
    chunks = []
    for prior in range(0, prompt, budget):  # chunked prefill: one chunk a step
        shape = BatchShape()
        shape.add_chunk(prior, min(budget, prompt - prior), prior + budget >= prompt)
        chunks.append(shape)
    prefill = chunks[0]
    way_in = (
        fe.http_s
        + (fe.template_s if fe.chat else 0.0)
        + fe.process_s
        + fe.tokenize_s_per_token * prompt
        + fe.tokenize_wait_s
        + fe.intake_s
        + fe.hash_s_per_token * prompt
    )
    # formed on an idle engine: the engine core's CPU time, then the GPU's (no step to hide under)
    parts = cost.breakdown(prefill)
    step = max(parts["gpu"] + parts["cpu"], parts["frontend"])
    assert step == pytest.approx(cost.serial().step_time(prefill), rel=1e-12)
    assert step > cost.step_time(prefill)  # more than the overlapped step of a busy engine
    step += sum(cost.step_time(c) for c in chunks[1:])  # formed while the GPU runs the one before
    way_out = 0.0
    if fe.first_events:
        way_out = fe.core_step_s + fe.core_seq_s + fe.stage_step_s + fe.output_seq_s + fe.first_events * fe.stream_seq_s
    return way_in + step + way_out


@pytest.mark.parametrize("prompt", [100, 1000, 3000])
@pytest.mark.parametrize(
    "serving",
    [{}, {"endpoint": "completions"}, {"frontend": "engine"}],
    ids=["chat", "completions", "engine"],
)
def test_a_lone_requests_ttft_is_the_sum_of_its_stages(tmp_path, serving, prompt):
    scn = trace_scenario(tmp_path, [(1.0, prompt, 8)], serving)
    r = des.simulate(scn).requests.iloc[0]
    assert r["ttft"] == pytest.approx(hand_ttft(scn, prompt), rel=1e-9)
    fe = scn.frontend
    assert fe is not None
    assert r["queue_delay"] == pytest.approx(fe.ingress(prompt), rel=1e-12)  # scheduled on arrival at the scheduler


def test_the_stages_differ_by_front_end_and_endpoint(tmp_path):
    """A chat request renders a template and streams a role chunk before its first token;
    a completion does neither; the LLM class has no HTTP, no tokenizer window, no SSE."""
    ttft = {}
    for name, serving in (
        ("chat", {}),
        ("completions", {"endpoint": "completions"}),
        ("engine", {"frontend": "engine"}),
    ):
        ttft[name] = des.simulate(trace_scenario(tmp_path, [(1.0, 500, 4)], serving)).requests["ttft"].iloc[0]
    assert ttft["chat"] - ttft["completions"] == pytest.approx(API.template_s + API.stream_seq_s, rel=1e-6)
    chat = des.load_scenario(None).frontend
    assert chat is not None and chat.chat and chat.first_events == 2
    assert ENGINE.egress == 0 and ENGINE.http_s == 0 and ENGINE.tokenize_wait_s == 0 and ENGINE.caller_steps
    assert ttft["engine"] < ttft["completions"] - API.tokenize_wait_s
    with pytest.raises(des.ScenarioError, match="serving.endpoint: only an api_server"):
        des.load_scenario(None, ["serving={frontend: engine, endpoint: chat}"])


def test_every_token_reaches_the_client_the_egress_after_its_step(tmp_path):
    """The way out moves a request's first and last token alike: TTFT and e2e, not TPOT."""
    scn = trace_scenario(tmp_path, [(1.0, 300, 16)])
    res = des.simulate(scn)
    r, steps = res.requests.iloc[0], res.steps
    ends = (steps["start"] + steps["duration"]).to_numpy()
    fe = scn.frontend
    assert fe is not None and fe.egress > 0
    assert r["first_token_time"] == pytest.approx(ends[0] + fe.egress, abs=1e-12)
    assert r["finish_time"] == pytest.approx(ends[-1] + fe.egress, abs=1e-12)
    assert r["tpot"] == pytest.approx((ends[-1] - ends[0]) / 15, rel=1e-9)


def test_a_run_stopped_mid_ingress_counts_the_requests_still_on_their_way_in(tmp_path, enqueued):
    prompts = burst(400)
    busy = sum(API.ingress_busy(p) for p in prompts)
    stop = busy / 2  # half the burst is still waiting for the event loop
    scn = trace_scenario(tmp_path, [(0.0, p, 2) for p in prompts], horizon={"duration": stop, "drain": False})
    r = des.simulate(scn).requests
    assert len(r) == len(prompts)
    reached = {i for i, _ in enqueued}
    stuck = r[~r["request_id"].isin(reached)]
    assert 0 < len(stuck) < len(prompts)
    assert (stuck["status"] == UNFINISHED).all() and stuck["scheduled_time"].isna().all()
    assert set(stuck["request_id"]) == set(range(len(prompts) - len(stuck), len(prompts)))  # the last sent
    assert all(math.isfinite(t) and t <= stop for _, t in enqueued)


def test_same_scenario_same_seed_same_ways_in(tmp_path):
    rows = [(0.001 * (i // 10), p, 3) for i, p in enumerate(burst(300, seed=9))]
    scn = trace_scenario(tmp_path, rows, {"api_server_count": 3})
    a, b = des.simulate(scn), des.simulate(scn)
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)


def test_the_llm_class_adds_a_calls_requests_before_it_steps(tmp_path, enqueued):
    """Requests sent together to the ``LLM`` class are one ``generate()`` call: added one
    after another in the caller's thread, they reach the scheduler together, in order,
    and share one prefill step."""
    prompts = [300, 40, 900, 120]
    scn = trace_scenario(tmp_path, [(0.0, p, 4) for p in prompts], {"frontend": "engine"})
    res = des.simulate(scn)
    fe = scn.frontend
    assert fe is not None
    last = sum(fe.ingress_busy(p) for p in prompts[:-1]) + fe.ingress(prompts[-1])
    assert [i for i, _ in enqueued] == [0, 1, 2, 3]
    assert [t for _, t in enqueued] == pytest.approx([last] * 4, rel=1e-12)
    first = res.steps.iloc[0]
    assert first["prefill_tokens"] == sum(prompts)


def test_the_docstring_table_names_where_each_stage_is_in_vllm():
    import des.cost.frontend as frontend

    doc = frontend.__doc__ or ""
    for where in (
        "api_server.py",
        "serving_chat.py",
        "chat_utils.py",
        "async_utils.py",
        "AsyncMicrobatchTokenizer",
        "async_llm.py",
        "input_processor.py",
        "core_client.py",
        "process_input_sockets",
        "_process_input_queue",
        "run_busy_loop",
        "step_with_batch_queue",
        "output_processor.py",
        "process_outputs",
        "chat_completion_stream_generator",
    ):
        assert where in doc, where
