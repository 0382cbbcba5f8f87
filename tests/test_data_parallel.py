"""Data and expert parallelism (``cluster.dp``, ``cluster.expert_parallel``).

- A dense model's data-parallel ranks step on their own: ``dp: 2`` serves exactly as two
  replicas behind the same router (vLLM's balancing, ``vllm_dp``), request for request and
  step for step; expert parallelism on one rank is no expert parallelism, exactly.
- vLLM's balancing picks the lowest ``4 × waiting + running``, ties to the first engine.
- A mixture of experts' ranks step in lockstep: a hand-worked timeline with one rank idle
  (it runs dummy steps as long as the busy rank's, which the group's duration covers).
- The MoE layers' exchange: bytes by hand for both backends, and their time in the roofline.
- Memory: each rank holds 1/dp of the routed experts, the rest whole.
- Bad splits: one line, exit status 2, naming the field.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

import des
from des import catalog
from des.catalog.interconnect import moe_exchange_bytes
from des.catalog.memory import expert_bytes
from des.catalog.precision import Precision
from des.cost.base import BatchShape
from des.cost.roofline import ACT_BYTES, RooflineConfig, build_roofline
from des.engine.router import ROUTERS
from tests.helpers import des_cli

MOE = "qwen3-30b-a3b"
AWQ = {"weights": "int4-awq"}


def scenario(**cluster: Any) -> dict[str, Any]:
    """Poisson traffic on RTX 4090s; ``cluster`` settings as given."""
    return {
        "seed": 3,
        "gpu": "rtx4090",
        "model": "qwen2.5-7b",
        "horizon": {"duration": 60},
        "warmup": 10,
        "workload": {
            "arrival": {"process": "poisson", "rate": 6.0},
            "prompt_tokens": {"dist": "lognormal", "mean": 400, "sigma": 0.6},
            "output_tokens": {"dist": "geometric", "mean": 80},
        },
        "cluster": cluster,
    }


def moe_scenario(**cluster: Any) -> dict[str, Any]:
    s = scenario(**cluster)
    s["model"], s["precision"] = MOE, AWQ
    return s


def run(data: dict[str, Any]) -> des.Result:
    return des.simulate(des.load_scenario(data))


def test_dense_dp2_is_two_replicas_behind_vllm_balancing() -> None:
    dp = run(scenario(dp=2))
    replicas = run(scenario(replicas=2, router="vllm_dp"))
    pd.testing.assert_frame_equal(dp.requests, replicas.requests)
    pd.testing.assert_frame_equal(dp.steps, replicas.steps)
    assert dp.summary == replicas.summary
    assert set(dp.requests["instance"]) == {0, 1}  # both ranks served


def test_expert_parallel_on_one_rank_is_no_expert_parallel() -> None:
    ep = run(moe_scenario(expert_parallel=True))
    plain = run(moe_scenario())
    pd.testing.assert_frame_equal(ep.requests, plain.requests)
    pd.testing.assert_frame_equal(ep.steps, plain.steps)


class Engine:
    def __init__(self, outstanding: int, running: int):
        self.outstanding, self.running, self.free_blocks = outstanding, running, 0


@pytest.mark.parametrize(
    ("counts", "want"),
    [
        ([(0, 0), (0, 0)], 0),  # tie: the first engine
        ([(1, 1), (0, 0)], 1),
        ([(5, 5), (1, 0)], 1),  # 5 running (5) against 1 waiting (4)
        ([(2, 2), (1, 0)], 0),  # 2 running (2) against 1 waiting (4)
        ([(5, 1), (2, 2), (2, 0)], 1),  # 4·4+1 = 17, 2, 8
    ],
)
def test_vllm_balancing_scores_waiting_four_times_running(counts: list[tuple[int, int]], want: int) -> None:
    router = ROUTERS.get("vllm_dp")(None)  # type: ignore[arg-type]
    assert router.pick([Engine(o, r) for o, r in counts]) == want


def test_lockstep_timeline_with_an_idle_rank() -> None:
    """One request on a two-rank MoE server: rank 0 prefills then decodes, rank 1 runs a dummy
    step alongside each; every step lasts the slower rank's time at the group's tokens."""
    prompt, output = 100, 3
    data = moe_scenario(dp=2, expert_parallel=True)
    data["horizon"] = {"num_requests": 1}
    data["warmup"] = 0
    data["workload"] = {
        "arrival": {"process": "poisson", "rate": 1.0},
        "prompt_tokens": {"dist": "fixed", "value": prompt},
        "output_tokens": {"dist": "fixed", "value": output},
    }
    data["cost_model"] = {"kind": "roofline", "async_scheduling": False}
    data["serving"] = {"frontend": "engine"}
    sc = des.load_scenario(data)
    res = des.simulate(sc)
    steps = res.steps.sort_values(["start", "instance"]).reset_index(drop=True)
    req = res.requests.iloc[0]
    assert req["status"] == "completed" and req["instance"] == 0
    cost = sc.cost_model
    assert isinstance(cost, RooflineConfig)
    r = build_roofline(sc.gpu, sc.model, sc.precision, engine=cost.engine, frontend=sc.frontend, moe_group=2)
    prefill = BatchShape()
    prefill.add_chunk(0, prompt, True)
    shapes = [prefill, BatchShape.decodes(1, prompt), BatchShape.decodes(1, prompt + 1)]
    t = float(steps.iloc[0]["start"])  # the request's arrival, plus the front-end's ingress
    assert t >= req["arrival_time"]
    assert len(steps) == 2 * output
    for i, shape in enumerate(shapes):
        busy, idle = steps.iloc[2 * i], steps.iloc[2 * i + 1]
        want = max(r.group_step_time(shape, shape.new_tokens), r.group_step_time(BatchShape(), shape.new_tokens))
        assert (busy["instance"], idle["instance"]) == (0, 1)
        assert busy["start"] == idle["start"] == pytest.approx(t, rel=1e-12)
        assert busy["duration"] == idle["duration"] == pytest.approx(want, rel=1e-12)
        assert busy["batch_size"] == 1 and idle["batch_size"] == 0 and idle["tokens_emitted"] == 0
        t += want
    assert req["first_token_time"] == pytest.approx(steps.iloc[0]["start"] + steps.iloc[0]["duration"], rel=1e-12)
    assert req["finish_time"] == pytest.approx(t, rel=1e-12)
    # the idle rank's dummy step costs: padded to the busy rank's tokens, it reads weights too
    assert r.group_step_time(BatchShape(), prompt) > 0.5 * r.group_step_time(prefill, prompt)


def test_exchange_bytes_by_hand() -> None:
    # all-gather + reduce-scatter: every other rank's tokens, whatever top-k
    assert moe_exchange_bytes("allgather_reducescatter", 10, 2, 2048, 8) == 10 * 2048 * 2 * 1
    assert moe_exchange_bytes("allgather_reducescatter", 10, 4, 2048, 8) == 10 * 2048 * 2 * 3
    # all-to-all: tokens × hidden × top-k × bytes × (ep - 1) / ep
    assert moe_exchange_bytes("all_to_all", 10, 2, 2048, 8) == 10 * 2048 * 8 * 2 * 1 / 2
    assert moe_exchange_bytes("all_to_all", 10, 4, 2048, 8) == 10 * 2048 * 8 * 2 * 3 / 4
    assert moe_exchange_bytes("all_to_all", 10, 1, 2048, 8) == 0.0


@pytest.mark.parametrize("backend", ["allgather_reducescatter", "all_to_all"])
def test_exchange_time_in_the_roofline(backend: str) -> None:
    gpu, model = catalog.gpu("rtx4090"), catalog.model(MOE)
    r = build_roofline(gpu, model, Precision(weights="int4-awq"), moe_group=2, all2all=backend)
    cost = gpu.link.nccl_cost(2)
    per_token = moe_exchange_bytes(backend, 1, 2, model.hidden_size, model.num_experts_per_tok or 0, ACT_BYTES)
    L = model.num_moe_layers
    assert r.moe_exchange_s_per_token == pytest.approx(2 * L * per_token / cost.bus_bandwidth, rel=1e-12)
    assert r.moe_exchange_fixed_s == pytest.approx(2 * L * cost.latency, rel=1e-12)
    shape = BatchShape.decodes(16, 16 * 500)
    assert r.breakdown(shape, 16)["moe_exchange"] == pytest.approx(
        r.moe_exchange_fixed_s + 16 * r.moe_exchange_s_per_token, rel=1e-12
    )


def test_dense_model_has_no_group_terms() -> None:
    gpu, model = catalog.gpu("rtx4090"), catalog.model("qwen2.5-7b")
    assert build_roofline(gpu, model, moe_group=2) == build_roofline(gpu, model)


def test_each_rank_holds_its_share_of_the_experts() -> None:
    one = des.load_scenario(moe_scenario()).memory_plan()
    two = des.load_scenario(moe_scenario(dp=2, expert_parallel=True)).memory_plan()
    no_ep = des.load_scenario(moe_scenario(dp=2)).memory_plan()
    experts = expert_bytes(catalog.model(MOE), Precision(weights="int4-awq"))
    assert experts > 0.85 * one.weights  # Qwen3-30B-A3B is mostly experts
    assert one.weights - two.weights == experts - -(-experts // 2)
    assert no_ep.weights == two.weights  # vLLM shards the experts over dp × tp GPUs either way
    assert two.num_blocks > one.num_blocks


def test_moe_ranks_step_together_and_account_for_every_request() -> None:
    res = run(moe_scenario(dp=2, expert_parallel=True))
    s = res.summary
    assert s["num_requests"] == s["num_completed"] + s["num_rejected"] + s["num_unfinished"]
    assert s["num_completed"] > 0
    by_rank = [g[["start", "duration"]].reset_index(drop=True) for _, g in res.steps.groupby("instance")]
    assert len(by_rank) == 2
    pd.testing.assert_frame_equal(by_rank[0], by_rank[1])  # every step of the group, on both ranks
    assert set(res.requests["instance"]) == {0, 1}


@pytest.mark.parametrize(
    ("sets", "field", "words"),
    [
        (["cluster.expert_parallel=true"], "cluster.expert_parallel", "dense model"),
        ([f"model={MOE}", "precision.weights=int4-awq", "cluster.dp=3", "cluster.expert_parallel=true"],
         "cluster.expert_parallel", "does not divide the 128 experts"),
        (["scheduler.kind=disaggregated", "cluster.dp=2"], "cluster.dp", "disaggregated"),
        (["cluster.dp=0"], "cluster.dp", ""),
        (["cluster.all2all_backend=deepep"], "cluster.all2all_backend", ""),
    ],
)  # fmt: skip
def test_bad_splits_are_one_line_exit_2(sets: list[str], field: str, words: str) -> None:
    args = ["run", "--out", "/nonexistent/never"]
    for item in sets:
        args += ["--set", item]
    out = des_cli(*args)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr
    assert lines[0].startswith(f"error: {field}: ") and words in lines[0]


def test_lockstep_timeline_by_hand(tmp_path: Any) -> None:
    """Two ranks, step time ``1 + 0.01 s`` per prefill token (a dummy step: 1 s). A (prompt 100,
    3 tokens) arrives at 0 and goes to rank 0; B (prompt 200, 1 token) arrives at 0.5 and goes
    to rank 1 (rank 0 runs A: score 1 against 0). Steps: [0, 2] A's prefill beside a dummy;
    [2, 5] A's decode beside B's prefill (3 s, the slower); [5, 6] A's last decode beside a
    dummy."""
    path = tmp_path / "trace.csv"
    path.write_text("arrival_time,prompt_tokens,output_tokens\n0,100,3\n0.5,200,1\n")
    data = moe_scenario(dp=2, expert_parallel=True)
    data["horizon"] = {}
    data["warmup"] = 0
    data["workload"] = {"arrival": {"process": "trace", "path": str(path)}}
    data["cost_model"] = {"kind": "linear", "base": 1.0, "per_prefill_token": 0.01}
    res = des.simulate(des.load_scenario(data))
    steps = res.steps.sort_values(["instance", "start"])
    rows = [tuple(r) for r in steps[["instance", "start", "duration", "batch_size"]].itertuples(index=False)]
    assert rows == [
        (0, 0.0, 2.0, 1),
        (0, 2.0, 3.0, 1),
        (0, 5.0, 1.0, 1),
        (1, 0.0, 2.0, 0),
        (1, 2.0, 3.0, 1),
        (1, 5.0, 1.0, 0),
    ]
    req = res.requests.set_index("request_id")
    assert list(req["instance"]) == [0, 1]
    assert list(req["first_token_time"]) == [2.0, 5.0]
    assert list(req["finish_time"]) == [6.0, 5.0]


def test_a_step_too_large_for_a_graph_is_not_padded() -> None:
    """vLLM pads the ranks to the group's largest batch only when every rank's step runs as a
    CUDA graph (the ranks' graph modes all-reduced, their minimum taken): a 2048-token prefill
    beside a dummy step runs eager on both, each rank its own tokens, and the MoE layers the
    group's 2048 + 1 tokens (the dummy runs one), each rank half of the routed rows and of the
    exchange. Below the captured sizes the dummy is padded to the prefill's tokens as before."""
    r = build_roofline(catalog.gpu("rtx-pro-6000"), catalog.model(MOE), moe_group=2)
    alone = build_roofline(catalog.gpu("rtx-pro-6000"), catalog.model(MOE))
    assert r.moe_split and r.graph_max == 512
    big = BatchShape()
    big.add_chunk(0, 2048, True)
    dummy = BatchShape()
    total = 2048 + 1
    for shape in (big, dummy):
        got, own = r.breakdown(shape, 2048, total), alone.breakdown(shape)
        for part in ("gemm", "elementwise", "attention_prefill", "lm_head", "sampler"):
            assert got[part] == pytest.approx(own[part], rel=1e-12), part
        w = r.moe_expert_weight_s * r.distinct_experts(total)
        c = r.moe_s_per_token * total / 2
        assert got["moe"] == pytest.approx(r.moe_fixed_s + max(w, c) + r.moe_knee * min(w, c), rel=1e-12)
        assert got["moe_exchange"] == pytest.approx(r.moe_exchange_fixed_s + r.moe_exchange_s_per_token * total / 2)
    # the dummy rank still runs half the group's routed rows, but its dense work is one token's
    assert r.group_step_time(dummy, 2048, total) < r.group_step_time(dummy, 2048)
    # within the captured sizes: the dummy's dense work is that of the largest batch, padded
    small = BatchShape()
    small.add_chunk(0, 100, True)
    padded = BatchShape()
    padded.add_chunk(0, 104, True)  # graph_size(100)
    assert r.breakdown(dummy, 100, 101)["gemm"] == pytest.approx(alone.breakdown(padded)["gemm"], rel=1e-12)
    assert r.group_step_time(dummy, 100, 101) > 0.5 * r.group_step_time(small, 100, 101)


def test_lockstep_passes_the_groups_token_sum() -> None:
    """A 1000-token prompt (beyond the 512 captured sizes) on one rank of two: its prefill step
    lasts the slower of the two ranks' unpadded times at the group's 1000 + 1 tokens."""
    prompt = 1000
    data = moe_scenario(dp=2, expert_parallel=True)
    data["horizon"] = {"num_requests": 1}
    data["warmup"] = 0
    data["workload"] = {
        "arrival": {"process": "poisson", "rate": 1.0},
        "prompt_tokens": {"dist": "fixed", "value": prompt},
        "output_tokens": {"dist": "fixed", "value": 2},
    }
    data["cost_model"] = {"kind": "roofline", "async_scheduling": False}
    data["serving"] = {"frontend": "engine"}
    sc = des.load_scenario(data)
    res = des.simulate(sc)
    first = res.steps.sort_values(["start", "instance"]).iloc[0]
    cost = sc.cost_model
    assert isinstance(cost, RooflineConfig)
    r = build_roofline(sc.gpu, sc.model, sc.precision, engine=cost.engine, frontend=sc.frontend, moe_group=2)
    shape = BatchShape()
    shape.add_chunk(0, prompt, True)
    want = max(r.group_step_time(shape, prompt, prompt + 1), r.group_step_time(BatchShape(), prompt, prompt + 1))
    assert first["duration"] == pytest.approx(want, rel=1e-12)
    assert want < max(r.group_step_time(shape, prompt), r.group_step_time(BatchShape(), prompt))


def test_the_wave_runs_dummy_steps_until_vllms_check(tmp_path: Any) -> None:
    """vLLM checks whether any rank has work only every 32 steps of a wave: after the last
    request the ranks run dummy steps (1 s each under this cost model) up to the 32nd step,
    then sleep. A (prompt 100, 3 tokens) at 0 runs [0, 2], [2, 3], [3, 4]; the tail follows;
    B (prompt 200, 1 token) at 20.5 joins at the next step boundary, 21, and runs [21, 24]
    (the wave's 21st step); the tail goes on to the 32nd, ending at 35; C at 100 finds the
    group asleep and starts at once."""
    path = tmp_path / "trace.csv"
    path.write_text("arrival_time,prompt_tokens,output_tokens\n0,100,3\n20.5,200,1\n100,100,1\n")
    data = moe_scenario(dp=2, expert_parallel=True)
    data["horizon"] = {}
    data["warmup"] = 0
    data["workload"] = {"arrival": {"process": "trace", "path": str(path)}}
    data["cost_model"] = {"kind": "linear", "base": 1.0, "per_prefill_token": 0.01}
    res = des.simulate(des.load_scenario(data))
    req = res.requests.set_index("request_id")
    assert list(req["first_token_time"]) == [2.0, 24.0, 102.0]
    for _, steps in res.steps.groupby("instance"):
        before = steps[steps["start"] < 100].sort_values("start")
        assert len(before) == 32
        assert list(before["start"]) == [0.0, 2.0, *[float(x) for x in range(3, 21)], 21.0, *map(float, range(24, 35))]
        assert before["start"].iloc[-1] + before["duration"].iloc[-1] == 35.0
        assert steps[steps["start"] >= 100]["start"].min() == 100.0


def test_exchange_runs_at_the_all_gather_cost_where_the_link_has_one() -> None:
    """The expert-parallel exchange is an all-gather (dispatch) and a reduce-scatter (combine):
    a link with an ``all_gather`` cost prices both at it, not at the all-reduce's; the numbers
    here are a fit to the RTX PRO 6000's two-GPU all-gather profile (nccl_2gpu.csv: 11.27 us,
    31.80 GB/s of received bytes), which differ from its all-reduce's on purpose."""
    from des.catalog.interconnect import AllReduceCost

    pro = catalog.gpu("rtx-pro-6000")  # its catalog link has a measured all-gather: take it away
    base = pro.model_copy(update={"interconnect": pro.link.model_copy(update={"all_gather": {}})})
    gather = AllReduceCost(latency=11.27e-6, bus_bandwidth=31.80e9)
    link = base.link.model_copy(update={"all_gather": {2: gather}})
    gpu = base.model_copy(update={"interconnect": link})
    assert gpu.link.gather_cost(2) == gather and gpu.link.gather_cost(4) == gather
    assert base.link.gather_cost(2) == base.link.nccl_cost(2)  # none given: the all-reduce's
    model = catalog.model(MOE)
    r, r0 = build_roofline(gpu, model, moe_group=2), build_roofline(base, model, moe_group=2)
    per_token = moe_exchange_bytes("allgather_reducescatter", 1, 2, model.hidden_size, 8, ACT_BYTES)
    L = model.num_moe_layers
    assert r.moe_exchange_s_per_token == pytest.approx(2 * L * per_token / gather.bus_bandwidth, rel=1e-12)
    assert r.moe_exchange_fixed_s == pytest.approx(2 * L * gather.latency, rel=1e-12)
    assert r0.moe_exchange_fixed_s == pytest.approx(2 * L * base.link.nccl_cost(2).latency, rel=1e-12)
    # the tensor-parallel all-reduces keep the all-reduce's cost
    t2, t20 = build_roofline(gpu, model, tp=2), build_roofline(base, model, tp=2)
    assert t2.allreduce_fixed_s == t20.allreduce_fixed_s and t2.allreduce_s_per_token == t20.allreduce_s_per_token


def test_synchronous_scheduling_pays_the_per_step_batch_size_all_reduce() -> None:
    """vLLM's coordinate_batch_across_dp all-reduces a 4 × ranks int32 tensor before every
    step: on the GPUs over NCCL under synchronous scheduling (NCCL's latency on the link plus
    its 32 bytes), over Gloo on the CPUs under async scheduling (the default, hidden behind the
    GPUs' work: nothing)."""
    from des.cost.roofline import Engine

    gpu, model = catalog.gpu("rtx-pro-6000"), catalog.model(MOE)
    sync = build_roofline(gpu, model, engine=Engine(async_scheduling=False), moe_group=2)
    overlap = build_roofline(gpu, model, moe_group=2)
    cost = gpu.link.nccl_cost(2)
    want = cost.latency + 1.0 * 16 * 2 / cost.bus_bandwidth
    assert sync.dp_sync_s == pytest.approx(want, rel=1e-12) and overlap.dp_sync_s == 0.0
    shape = BatchShape.decodes(8, 8 * 300)
    b = sync.breakdown(shape, 8, 16)
    assert b["dp_sync"] == sync.dp_sync_s
    assert b["gpu"] - overlap.breakdown(shape, 8, 16)["gpu"] == pytest.approx(want, rel=1e-9)
    assert "dp_sync" not in build_roofline(gpu, model, engine=Engine(async_scheduling=False)).breakdown(shape)


def test_unpadded_group_steps_run_the_routed_rows_of_the_groups_share_without_moe_factors() -> None:
    """On a GPU whose experts run inside the GEMMs' roofline (no MoE factors: the RTX 4090), an
    unpadded group step's GEMM compute counts the rank's own dense rows and its share of the
    group's routed rows: a dummy rank beside a 2048-token prefill computes half of 2049 tokens'
    routed FLOPs, the prefill rank half as well, and a padded step counts its own rows only."""
    gpu, model, p = catalog.gpu("rtx4090"), catalog.model(MOE), Precision(weights="int4-awq")
    r = build_roofline(gpu, model, p, moe_group=2)
    assert not r.moe_split and r.moe_inline_s_per_token > 0
    big = BatchShape()
    big.add_chunk(0, 2048, True)
    per_token = r.gemm_s_per_prefill_token
    for shape, own in ((big, 2048), (BatchShape(), 0)):
        b = r.breakdown(shape, 2048, 2049)
        c = per_token * own + r.moe_inline_s_per_token * (2049 / 2 - own)
        w = r.gemm_weight_s + r.moe_expert_weight_s * r.distinct_experts(2049)
        assert b["gemm"] == pytest.approx(max(w, c) + r.knee * min(w, c), rel=1e-12)
    small = BatchShape.decodes(8, 8 * 300)
    alone = build_roofline(gpu, model, p)
    c8 = alone.gemm_s_per_decode_token * 8
    w8 = alone.gemm_weight_s + r.moe_expert_weight_s * r.distinct_experts(16)
    assert r.breakdown(small, 8, 16)["gemm"] == pytest.approx(max(w8, c8) + r.knee * min(w8, c8), rel=1e-12)
