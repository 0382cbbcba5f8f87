"""Exact timelines of the engine on small hand-computed cases (constant 1 s steps)."""

from __future__ import annotations

import numpy as np
import pytest

import des
from des.errors import ScenarioError
from tests.golden import shipped


def trace_scenario(tmp_path, rows, scheduler, cost=None, **extra):
    path = tmp_path / "trace.csv"
    path.write_text("arrival_time,prompt_tokens,output_tokens\n" + "".join(f"{a},{p},{o}\n" for a, p, o in rows))
    data = {
        "name": "t",
        "workload": {"arrival": {"process": "trace", "path": str(path)}},
        "cost_model": cost or {"kind": "constant", "step_time": 1.0},
        "scheduler": scheduler,
        **extra,
    }
    return des.load_scenario(data)


def by_id(result):
    return result.requests.set_index("request_id")


def test_preemption_of_the_newest_request_and_its_recompute(tmp_path):
    # 4 blocks of 4 tokens, no prefix caching. A and B (prompt 4, output 6) each peak at 9
    # tokens = 3 blocks. Steps 1-5 fit (2 blocks each); at t = 5 both need a third block:
    # B, the newest, is preempted, A finishes at 6, then B recomputes its 4 + 5 tokens in
    # one step (with caching, see test_prefix_cache.py).
    sc = trace_scenario(
        tmp_path,
        [(0, 4, 6), (0, 4, 6)],
        {"kind": "continuous", "block_size": 4, "num_gpu_blocks_override": 4, "enable_prefix_caching": False},
    )
    r = des.simulate(sc)
    req, steps = by_id(r), r.steps
    assert req.loc[0, "finish_time"] == 6.0 and req.loc[0, "preemptions"] == 0
    assert req.loc[1, "finish_time"] == 7.0 and req.loc[1, "preemptions"] == 1
    assert req.loc[1, "first_token_time"] == 1.0  # the first token came before the preemption
    assert steps["preempted"].tolist() == [0, 0, 0, 0, 0, 1, 0]
    assert steps["batch_size"].tolist() == [2, 2, 2, 2, 2, 1, 1]
    assert steps["prefill_tokens"].tolist() == [8, 0, 0, 0, 0, 0, 9]
    assert steps["kv_blocks"].tolist() == [2, 4, 4, 4, 4, 3, 3]
    assert r.summary["preemptions"] == 1
    assert (steps["kv_blocks"] <= 4).all()


def test_chunked_prefill_timeline(tmp_path):
    # budget 8: A's 20-token prompt takes chunks 8, 8, 4; B (prompt 2) joins the third
    # step with the 4 tokens left; both emit their first token at t = 3.
    budget = {"kind": "continuous", "max_num_batched_tokens": 8, "max_num_seqs": 8}  # vLLM: budget >= max_num_seqs
    sc = trace_scenario(tmp_path, [(0, 20, 3), (0, 2, 2)], budget)
    r = des.simulate(sc)
    req, steps = by_id(r), r.steps
    assert steps["prefill_tokens"].tolist() == [8, 8, 6, 0, 0]
    assert steps["decode_tokens"].tolist() == [0, 0, 0, 2, 1]
    assert steps["tokens_emitted"].tolist() == [0, 0, 2, 2, 1]
    assert req["scheduled_time"].tolist() == [0.0, 2.0]
    assert req["first_token_time"].tolist() == [3.0, 3.0]
    assert req["finish_time"].tolist() == [5.0, 4.0]
    assert req.loc[0, "tpot"] == 1.0


def test_without_chunked_prefill_a_budget_below_the_context_is_refused_as_vllm_refuses_it(tmp_path):
    settings = {"kind": "continuous", "max_num_batched_tokens": 8, "max_num_seqs": 8, "enable_chunked_prefill": False}
    with pytest.raises(ScenarioError) as err:
        trace_scenario(tmp_path, [(0, 20, 3)], settings)
    (where, message), *_ = err.value.problems
    assert where == "scheduler.max_num_batched_tokens"
    assert message.startswith("8 tokens is smaller than max_model_len (32768) with chunked prefill off")
    # with the context at the budget, a prompt over it is over the context
    sc = trace_scenario(tmp_path, [(0, 20, 3), (0, 2, 2)], settings | {"max_model_len": 8})
    req = by_id(des.simulate(sc))
    assert req.loc[0, "status"] == "rejected" and req.loc[0, "reason"] == "exceeds_max_model_len"
    assert req.loc[1, "status"] == "completed" and req.loc[1, "finish_time"] == 2.0


def test_a_request_that_can_never_fit_is_rejected_and_the_others_run_on(tmp_path):
    sc = trace_scenario(
        tmp_path, [(0, 100, 10), (0.5, 500, 10), (1, 100, 10)], {"kind": "continuous", "num_gpu_blocks_override": 10}
    )
    r = des.simulate(sc)
    req = by_id(r)
    assert req["status"].tolist() == ["completed", "rejected", "completed"]
    assert req.loc[1, "reason"] == "exceeds_kv_capacity"
    assert np.isnan(req.loc[1, "ttft"])
    s = r.summary
    assert (s["num_completed"], s["num_rejected"], s["num_unfinished"]) == (2, 1, 0)


def test_context_limit_rejection(tmp_path):
    sc = trace_scenario(tmp_path, [(0, 30000, 3000), (0, 10, 2)], {"kind": "static"})
    req = by_id(des.simulate(sc))
    assert req.loc[0, "reason"] == "exceeds_max_model_len"
    assert req.loc[1, "status"] == "completed"


@pytest.mark.parametrize("max_batch, formed", [(4, 0.5), (2, 0.3)])
def test_static_max_wait(tmp_path, max_batch, formed):
    # A at 0 and B at 0.3 wait for the batch to fill until 0.5 (or go at 0.3 when two
    # fill it); C arrives at 2.0, during that batch, and goes at 2.5: when the batch has
    # ended and C has waited its 0.5 s for company.
    sc = trace_scenario(
        tmp_path,
        [(0, 5, 2), (0.3, 5, 2), (2.0, 5, 2)],
        {"kind": "static", "max_batch_size": max_batch, "max_wait": 0.5},
    )
    req = by_id(des.simulate(sc))
    assert req["scheduled_time"].tolist() == [formed, formed, 2.5]
    assert req["finish_time"].tolist() == [formed + 2, formed + 2, 4.5]


def test_static_padding_cost(tmp_path):
    # linear cost: 1 s + 0.01 s per prefill token + 0.1 s per decode token. Prompts 10 and
    # 50 are padded to 50: prefill costs 1 + 0.01 * 100; outputs 1 and 3: two decode steps
    # of width 2 even though one row is done.
    cost = {"kind": "linear", "base": 1.0, "per_prefill_token": 0.01, "per_decode_token": 0.1}
    sc = trace_scenario(tmp_path, [(0, 10, 1), (0, 50, 3)], {"kind": "static", "max_batch_size": 2}, cost)
    r = des.simulate(sc)
    assert r.steps["duration"].tolist() == pytest.approx([2.0, 1.2, 1.2])
    assert r.steps["batch_width"].tolist() == [2, 2, 2]
    assert r.steps["batch_size"].tolist() == [2, 1, 1]
    assert r.requests["finish_time"].tolist() == pytest.approx([4.4, 4.4])  # batch_end release


def test_trace_replay_times_and_scale(tmp_path):
    rows = [(0.0, 5, 1), (1.5, 6, 2), (1.5, 7, 3), (4.0, 8, 1)]
    sc = trace_scenario(tmp_path, rows, {"kind": "continuous"})
    sc = des.load_scenario(sc, ["workload.arrival.time_scale=2.0", "cost_model.step_time=0.1"])
    r = des.simulate(sc)
    assert r.requests["arrival_time"].tolist() == [0.0, 3.0, 3.0, 8.0]
    assert r.requests["prompt_tokens"].tolist() == [5, 6, 7, 8]
    assert r.requests["output_tokens"].tolist() == [1, 2, 3, 1]
    # simultaneous arrivals join the same batch
    assert r.requests["scheduled_time"].tolist()[1:3] == [3.0, 3.0]


def test_drain_false_leaves_requests_unfinished_at_the_horizon():
    sc = des.load_scenario(None, ["horizon.duration=30", "warmup=5", "horizon.drain=false", "workload.arrival.rate=40"])
    r = des.simulate(sc)
    s = r.summary
    assert s["num_unfinished"] > 0
    assert s["num_completed"] + s["num_rejected"] + s["num_unfinished"] == s["num_requests"]
    assert (r.steps["start"] + r.steps["duration"]).max() <= 30.0
    assert not s["stable"]
    unfinished = r.requests[r.requests["status"] == "unfinished"]
    assert unfinished["finish_time"].isna().all()


def test_overload_ends_and_is_marked_unstable():
    # ~5x the capacity of one 4090: arrivals stop at the horizon and the backlog drains
    sc = des.load_scenario(None, ["horizon.duration=60", "warmup=10", "workload.arrival.rate=60"])
    r = des.simulate(sc)
    s = r.summary
    assert s["num_completed"] == s["num_requests"]
    assert not s["stable"] and s["backlog_growth"] > 0.5
    assert s["throughput_rps"] < 0.4 * s["offered_rps"]


def test_underload_is_stable():
    s = des.simulate(des.load_scenario(None, ["horizon.duration=300"])).summary
    assert s["stable"] and abs(s["backlog_growth"]) < 0.02


def test_closed_loop_keeps_at_most_n_users_in_flight_and_obeys_littles_law():
    n, think = 8, 1.0
    sc = des.load_scenario(
        {
            "seed": 4,
            "horizon": {"duration": 3000},
            "warmup": 100,
            "workload": {
                "arrival": {"process": "closed", "concurrency": n, "think_time": think},
                "prompt_tokens": {"dist": "fixed", "value": 10},
                "output_tokens": {"dist": "geometric", "mean": 20},
            },
            "cost_model": {"kind": "constant", "step_time": 0.02},
            "scheduler": {"kind": "continuous", "max_num_seqs": 4},
        }
    )
    r = des.simulate(sc)
    req = r.requests
    events = np.concatenate(
        [np.c_[req["arrival_time"], np.ones(len(req))], np.c_[req["finish_time"], -np.ones(len(req))]]
    )
    events = events[np.lexsort((events[:, 1], events[:, 0]))]  # departures first at ties
    assert np.cumsum(events[:, 1]).max() <= n
    s = r.summary
    # users are either waiting for an answer or thinking: N = X (R + Z)
    x, resp = s["throughput_rps"], s["mean_in_system"] / s["throughput_rps"]
    assert s["mean_in_system"] == pytest.approx(x * s["e2e_mean"], rel=0.02)
    assert n == pytest.approx(x * (resp + think), rel=0.03)
    assert s["stable"]


def test_closed_loop_with_every_request_rejected_still_ends(tmp_path):
    sc = des.load_scenario(
        {
            "horizon": {"duration": 20},
            "workload": {
                "arrival": {"process": "closed", "concurrency": 3},
                "prompt_tokens": {"dist": "fixed", "value": 500},
                "output_tokens": {"dist": "fixed", "value": 10},
            },
            "scheduler": {"kind": "continuous", "num_gpu_blocks_override": 2},
        }
    )
    s = des.simulate(sc).summary
    assert s["num_rejected"] == s["num_requests"] == 3 * 20  # one try per user per retry_delay (1 s)


@pytest.mark.parametrize(
    "process",
    [
        {"process": "gamma", "rate": 4.0, "cv": 3.0},
        {"process": "onoff", "on_rate": 16.0, "mean_on": 5.0, "mean_off": 15.0},
        {"process": "mmpp", "rates": [1.0, 8.0], "mean_sojourn": [20.0, 5.0]},
    ],
)
def test_bursty_processes_run_on_the_default_gpu(process):
    sc = des.load_scenario(None, ["horizon.duration=300"])
    sc = des.load_scenario({**sc.resolved(), "workload": {**sc.resolved()["workload"], "arrival": process}})
    s = des.simulate(sc).summary
    assert s["num_requests"] > 500 and s["num_completed"] == s["num_requests"]


@pytest.mark.parametrize(
    "scheduler, rate",
    [
        ({"kind": "continuous"}, 4.0),
        ({"kind": "continuous"}, 9.0),
        ({"kind": "continuous", "max_num_seqs": 16, "num_gpu_blocks_override": 300}, 6.0),
        ({"kind": "static", "max_batch_size": 8}, 1.5),
    ],
)
def test_fast_forward_matches_the_per_step_reference(scheduler, rate):
    base = des.load_scenario(None).resolved()
    sc = des.load_scenario(
        {**base, "horizon": {"duration": 200}, "scheduler": scheduler}, [f"workload.arrival.rate={rate}"]
    )
    a, b = des.simulate(sc), des.simulate(sc, fast_forward=False)
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps) and a.summary == b.summary
    assert a.summary["num_completed"] > 100


@pytest.mark.parametrize("path", shipped(), ids=lambda p: p.stem)
def test_every_shipped_scenario_runs_the_same_on_the_fast_and_the_reference_engine(path):
    sc = des.load_scenario(path)
    a, b = des.simulate(sc), des.simulate(sc, fast_forward=False)
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)
    if a.transfers is None or b.transfers is None:
        assert a.transfers is None and b.transfers is None
    else:
        assert a.transfers.equals(b.transfers)
    assert a.summary == b.summary


def test_scheduler_registry_refuses_duplicates_and_an_unknown_kind_lists_the_registered_ones():
    from des.engine.schedulers import SCHEDULERS, StaticConfig, register

    with pytest.raises(ValueError, match="already registered"):
        register(StaticConfig)
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(None, ["scheduler.kind=bogus"])
    (path, message), *_ = err.value.problems
    assert path == "scheduler.kind" and "bogus" in message
    assert all(name in message for name in SCHEDULERS)


# -- the engine's seams: reservations, holdings by request id, pools and roles ----------


def test_block_reservations_wait_and_are_served_first_come_first_served():
    import simpy

    from des.engine.kvcache import BlockManager
    from des.engine.request import Request

    env = simpy.Environment()
    kv = BlockManager(10, 16, env)
    kv.take(8)
    reqs = [Request(i, 0.0, tokens, 4) for i, tokens in enumerate((48, 16, 32))]  # 3, 1 and 2 blocks
    first, second, third = (kv.reserve(r, r.prompt_tokens) for r in reqs)
    kv.serve()
    assert not first.triggered and not second.triggered  # FIFO: 1 block would fit, but 3 come first
    assert kv.num_reserving == 3
    kv.give(1)
    assert not first.triggered  # blocks go to reservations only when the owner serves them
    kv.serve()  # 3 free: the first is served, the others still wait behind it
    assert first.triggered and first.value == (3, 0) and not second.triggered
    assert kv.free == 0
    kv.give(3)
    kv.serve()
    assert second.triggered and third.triggered and kv.free == 0 and kv.num_reserving == 0
    with pytest.raises(ValueError, match="can never be reserved"):
        kv.reserve(Request(9, 0.0, 161, 1), 161)
    with pytest.raises(RuntimeError, match="returned twice"):
        kv.give(11)


def test_a_completed_request_frees_its_blocks_at_the_exit_and_holds_none_after(tmp_path):
    from des.engine.schedulers import ContinuousScheduler
    from des.simulation import build, run_until, stop_event

    sc = trace_scenario(tmp_path, [(0, 30, 4), (0.5, 10, 3)], {"kind": "continuous", "block_size": 4})
    env, cluster, procs = build(sc)
    (inst,) = cluster.instances
    sched = inst.scheduler
    assert isinstance(sched, ContinuousScheduler)
    seen = []

    def watch(req, instance, _leave=cluster.leave):
        seen.append((req.id, instance.kv.used, dict(instance.kv.held)))
        _leave(req, instance)

    inst.leave = watch
    run_until(env, stop_event(sc, env, cluster, procs))
    # both finish in the step ending at t = 4 and leave still holding their blocks (33 and 12
    # tokens of KV in blocks of 4: 9 and 3), which the exit frees one request at a time
    assert [(rid, held) for rid, _, held in seen] == [(0, {0: 9, 1: 3}), (1, {1: 3})]
    assert [used for _, used, _ in seen] == [12, 3]
    assert inst.kv.free == inst.kv.num_blocks and not inst.kv.held


def test_memory_knobs_are_one_cache_config_shared_by_every_policy():
    from des.engine.kvcache import CacheConfig
    from des.engine.schedulers import SCHEDULERS

    for kind in ("static", "continuous"):
        cfg = SCHEDULERS.get(kind)
        assert issubclass(cfg, CacheConfig)
        assert set(CacheConfig.model_fields) <= set(cfg.model_fields)


def test_colocated_serving_is_one_pool_whose_steps_have_the_colocated_role(tmp_path):
    sc = trace_scenario(tmp_path, [(0, 8, 3), (0, 8, 2)], {"kind": "continuous"}, cluster={"replicas": 2})
    plan = sc.layout
    assert [(p.role, p.instances) for p in plan.pools] == [("colocated", 2)] and plan.link is None
    r = des.simulate(sc)
    assert set(r.steps["role"].astype(str)) == {"colocated"}
    assert (r.requests["prefill_instance"] == -1).all() and r.requests["transfer_start"].isna().all()
