"""Disaggregated prefill/decode serving: exact timelines worked by hand, back-pressure,
rejection, the transfers table and summary, and the scenario contract.

Timelines use a constant 1 s step and a link of ``4 × kv_bytes_per_token`` bytes/s with
0.5 s latency, so a 4-token prompt's KV takes exactly 1.5 s to cross.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import des
from des import catalog
from des.catalog.kv_link import GENERIC, RDMA, default_link
from des.engine.layout import LinkLayout as LinkPlan
from des.engine.schedulers.settings import ContinuousSettings
from des.errors import ScenarioError
from tests.helpers import SCENARIOS, des_cli

KV_BYTES = catalog.model("qwen2.5-7b").kv_bytes_per_token(2)  # bf16 KV, bytes per token
LINK = {"bandwidth": 4 * KV_BYTES, "latency": 0.5}


def scenario(tmp_path, rows, *, prefill=None, decode=None, link=LINK, **sched):
    path = tmp_path / "trace.csv"
    path.write_text("arrival_time,prompt_tokens,output_tokens\n" + "".join(f"{a},{p},{o}\n" for a, p, o in rows))
    return des.load_scenario(
        {
            "name": "pd",
            "workload": {"arrival": {"process": "trace", "path": str(path)}},
            "cost_model": {"kind": "constant", "step_time": 1.0},
            "scheduler": {
                "kind": "disaggregated",
                "prefill": prefill or {},
                "decode": decode or {},
                "kv_transfer": link,
                **sched,
            },
        }
    )


def by_id(result):
    return result.requests.set_index("request_id")


def transfers(result) -> pd.DataFrame:
    assert result.transfers is not None, "a disaggregated run has a transfers table"
    return result.transfers


def policy(pool) -> ContinuousSettings:
    assert isinstance(pool.policy, ContinuousSettings)
    return pool.policy


def steps_of(result, role):
    s = result.steps
    return s[s["role"].astype(str) == role].reset_index(drop=True)


def test_one_request_first_token_at_prefill_end_then_transfer_then_decodes(tmp_path):
    # prefill step [0, 1] emits token 1; the link carries 4 tokens of KV in [1, 2.5]; the
    # idle decode instance starts at once: tokens 2 and 3 at 3.5 and 4.5
    r = des.simulate(scenario(tmp_path, [(0, 4, 3)]))
    req = by_id(r).loc[0]
    assert (req.first_token_time, req.transfer_start, req.transfer_end, req.finish_time) == (1.0, 1.0, 2.5, 4.5)
    assert (req.prefill_instance, req.decode_instance, req.instance) == (0, 1, 1)
    assert req.ttft == 1.0 and req.tpot == (4.5 - 1.0) / 2  # TPOT spans the transfer gap
    assert steps_of(r, "prefill")["start"].tolist() == [0.0]
    assert steps_of(r, "decode")["start"].tolist() == [2.5, 3.5]
    assert transfers(r).to_dict("records") == [
        {"request_id": 0, "link": 0, "decode_instance": 1, "enqueued": 1.0, "reserved": 1.0, "start": 1.0,
         "end": 2.5, "bytes": 4 * KV_BYTES}
    ]  # fmt: skip


def test_first_token_from_decode_adds_the_transfer_and_the_decode_step_to_ttft(tmp_path):
    # vLLM's P/D proxy: the KV arrives at 2.5; the decode instance's first step [2.5, 3.5]
    # recomputes the prompt's last token and emits the first token; tokens 2 and 3 follow
    r = des.simulate(scenario(tmp_path, [(0, 4, 3)], first_token_from="decode"))
    req = by_id(r).loc[0]
    assert req.first_token_time == 3.5 and req.ttft == 3.5 and req.finish_time == 5.5 and req.tpot == 1.0
    assert steps_of(r, "decode")["start"].tolist() == [2.5, 3.5, 4.5]
    assert steps_of(r, "decode")["prefill_tokens"].tolist()[0] == 1


def test_two_transfers_queue_on_one_link_in_the_order_prompts_completed(tmp_path):
    # both prompts finish in the step [0, 1]; the link serves 0 in [1, 2.5], then 1 in
    # [2.5, 4]; 0 decodes its second token in [2.5, 3.5], 1 in [4, 5]
    r = des.simulate(scenario(tmp_path, [(0, 4, 2), (0, 4, 2)]))
    req = by_id(r)
    assert req["transfer_start"].tolist() == [1.0, 2.5]
    assert req["transfer_end"].tolist() == [2.5, 4.0]
    assert req["finish_time"].tolist() == [3.5, 5.0]
    assert (transfers(r)["start"] - transfers(r)["enqueued"]).tolist() == [0.0, 1.5]
    assert r.summary["kv_transfer_wait_mean"] == 0.75 and r.summary["kv_transfer_time_mean"] == 1.5


def test_reservations_wait_side_by_side_and_the_wire_runs_back_to_back(tmp_path):
    # four prompts finish together at 1; the decode instance is idle, so it grants all four
    # reservations at once, and the wire moves them back to back (1.5 s each) although the
    # decode instance is running 1 s steps from 2.5 on: a transfer never waits for a decode
    # step boundary while its blocks are already granted (review disagg-3, D1)
    r = des.simulate(scenario(tmp_path, [(0, 4, 6)] * 4))
    t = transfers(r)
    assert t["enqueued"].tolist() == [1.0] * 4 and t["reserved"].tolist() == [1.0] * 4
    assert t["start"].tolist() == [1.0, 2.5, 4.0, 5.5] and t["end"].tolist() == [2.5, 4.0, 5.5, 7.0]
    assert r.summary["kv_block_wait_mean"] == 0.0
    assert r.summary["kv_link_wait_mean"] == (0 + 1.5 + 3.0 + 4.5) / 4 == r.summary["kv_transfer_wait_mean"]
    assert (t["decode_instance"] == 1).all()


def test_a_reservation_waits_for_blocks_and_is_counted_as_such(tmp_path):
    # one decode block: request 1's reservation waits until request 0 leaves the decode
    # instance (finish at 3.5, blocks freed); its wait is for blocks, not for the link
    r = des.simulate(scenario(tmp_path, [(0, 4, 2), (0, 4, 2)], decode={"num_gpu_blocks_override": 1}))
    t = transfers(r)
    assert t["reserved"].tolist() == [1.0, 3.5] and t["start"].tolist() == [1.0, 3.5]
    assert r.summary["kv_block_wait_mean"] == 1.25 and r.summary["kv_link_wait_mean"] == 0.0


def test_a_transferred_request_joins_the_running_decode_batch_at_the_next_step_boundary(tmp_path):
    # request 0 decodes from 2.5 in steps [2.5, 3.5], [3.5, 4.5], ...; request 1's prompt
    # completes at 2, its transfer waits for the link until 2.5 and ends at 4: it joins
    # the step starting at 4.5, with request 0
    r = des.simulate(scenario(tmp_path, [(0, 4, 5), (1, 4, 3)]))
    req = by_id(r)
    assert req.loc[1, "first_token_time"] == 2.0 and req.loc[1, "transfer_end"] == 4.0
    dec = steps_of(r, "decode")
    assert dec["start"].tolist() == [2.5, 3.5, 4.5, 5.5]
    assert dec["batch_size"].tolist() == [1, 1, 2, 2]
    assert req["finish_time"].tolist() == [6.5, 6.5]


def test_one_output_token_is_done_at_the_prefill_instance(tmp_path):
    r = des.simulate(scenario(tmp_path, [(0, 4, 1)]))
    req = by_id(r).loc[0]
    assert req.status == "completed" and req.finish_time == 1.0 and req.decode_instance == -1
    assert len(transfers(r)) == 0 and math.isnan(req.transfer_start)


def test_back_pressure_a_decode_cache_for_one_request_serves_ten(tmp_path):
    # blocks of 16 tokens: a request (prompt 32, output 17) holds 2 blocks on the prefill
    # side and peaks at 48 tokens = 3 blocks on the decode side, whose cache is 3 blocks;
    # the prefill cache holds 2 prompts. A request peaking at 5 blocks cannot ever fit the
    # decode cache: rejected alone.
    rows = [(0, 32, 17)] * 5 + [(0, 32, 40)] + [(0, 32, 17)] * 5
    sc = scenario(tmp_path, rows, prefill={"num_gpu_blocks_override": 4}, decode={"num_gpu_blocks_override": 3})
    r = des.simulate(sc)
    req = by_id(r)
    assert req.loc[5, "status"] == "rejected" and req.loc[5, "reason"] == "exceeds_kv_capacity"
    done = req.drop(index=5)
    assert (done["status"] == "completed").all() and len(done) == 10
    assert (steps_of(r, "decode")["kv_blocks"] <= 3).all()
    assert (steps_of(r, "prefill")["kv_blocks"] <= 4).all()
    # one request on the decode side at a time: each transfer starts after the previous finished
    order = done.sort_values("transfer_start")
    assert (order["transfer_start"].to_numpy()[1:] >= order["finish_time"].to_numpy()[:-1]).all()
    # prefill blocks are held until the transfer ends: with room for two prompts, the
    # third prompt starts only once the first transfer has freed its blocks
    sched, ends = done["scheduled_time"].to_numpy(), done["transfer_end"].to_numpy()
    assert (sched[2:] >= ends[:-2]).all()
    assert r.summary["num_completed"] == 10 and r.summary["num_rejected"] == 1


def test_decode_preemption_under_growth_makes_progress(tmp_path):
    # 5 decode blocks of 16 tokens; two requests of prompt 32 and output 30 (2 blocks of
    # prompt, 4 at their peak). Request 0 decodes holding 3 blocks when request 1's 2 are
    # reserved; at 49 tokens it needs a fourth and none is free: it is preempted (alone
    # in the running set), request 1, ready with its KV, runs, and request 0 recomputes.
    sc = scenario(tmp_path, [(0, 32, 30), (0, 32, 30)], decode={"num_gpu_blocks_override": 5})
    r = des.simulate(sc)
    req = by_id(r)
    assert (req["status"] == "completed").all()
    assert req["preemptions"].tolist() == [1, 0] and req.loc[1, "finish_time"] < req.loc[0, "finish_time"]
    assert (steps_of(r, "decode")["kv_blocks"] <= 5).all()
    assert r.steps["preempted"].sum() == r.summary["preemptions"]


def test_pools_may_name_their_own_gpu_and_tp_and_get_their_own_kv_plan():
    sc = des.load_scenario(
        None,
        ["scheduler={kind: disaggregated, prefill: {gpu: h100-80gb, instances: 2}, decode: {gpu: a100-80gb, tp: 2}}"],
    )
    plan = sc.layout
    (pre, dec) = plan.pools
    assert (pre.role, pre.gpu.name, pre.instances, pre.tp) == ("prefill", "h100-80gb", 2, 1)
    assert (dec.role, dec.gpu.name, dec.instances, dec.tp) == ("decode", "a100-80gb", 1, 2)
    assert plan.num_gpus == 4
    # an H100 and an A100 sit in different servers: RDMA, one NIC per GPU; one prefill rank
    # sends to two decode ranks: one shard at a time
    assert plan.link == LinkPlan(RDMA.bandwidth, RDMA.latency, "rdma")
    blocks = [m.num_blocks for m in sc.memory_plans()]
    assert blocks[1] > blocks[0]  # two A100s hold more KV than one H100


def test_defaults_are_one_prefill_and_one_decode_of_the_scenario_gpu_over_its_kv_link():
    sc = des.load_scenario(None, ["scheduler.kind=disaggregated"])
    plan = sc.layout
    assert [(p.role, p.instances, p.gpu.name, p.router) for p in plan.pools] == [
        ("prefill", 1, "rtx4090", "least_outstanding"),
        ("decode", 1, "rtx4090", "least_kv"),
    ]
    link = catalog.gpu("rtx4090").kv_link
    assert link is not None and plan.link is not None
    assert (plan.link.bandwidth, plan.link.latency) == (link.bandwidth, link.latency)
    # the continuous settings of the scenario it came from are both pools' defaults
    assert all(policy(p).max_num_batched_tokens == 2048 and policy(p).block_size == 16 for p in plan.pools)


def test_pool_settings_override_the_shared_ones():
    sc = des.load_scenario(
        None, ["scheduler={kind: disaggregated, max_num_seqs: 64, decode: {max_num_seqs: 256, block_size: 32}}"]
    )
    pre, dec = sc.layout.pools
    assert (policy(pre).max_num_seqs, policy(pre).block_size) == (64, 16)
    assert (policy(dec).max_num_seqs, policy(dec).block_size) == (256, 32)


def test_a_pool_takes_every_batching_setting_and_nothing_else():
    """A pool's ``scheduler`` is generated from the policies' settings: the same field names,
    each optional and checked as at the top level, the error naming the pool's path (in the
    old shape, where it was written)."""
    from des.engine.deployment import PoolSettings, PoolSpec
    from des.engine.schedulers import StaticConfig

    settings = set(ContinuousSettings.model_fields) - {"speculative"}
    static = set(StaticConfig.model_fields) - {"kind"}
    assert set(PoolSettings.model_fields) == settings | static
    assert all(f.default is None for f in PoolSettings.model_fields.values())
    assert {"instances", "gpu", "tp", "pp", "dp", "router", "autoscaler", "scheduler"} <= set(PoolSpec.model_fields)
    for key in ("max_num_seqs", "block_size"):
        new = [("cluster.pools", [{"role": "prefill"}, {"role": "decode", "scheduler": {key: 0}}])]
        with pytest.raises(des.ScenarioError) as err:
            des.load_scenario(None, new)
        assert [p for p, _ in err.value.problems] == [f"cluster.pools.1.scheduler.{key}"], key
    bad = {"max_num_seqs": 0, "max_num_batched_tokens": 0, "block_size": 0, "gpu_memory_utilization": 1.5,
           "max_model_len": 0, "num_gpu_blocks_override": 0, "enable_chunked_prefill": "often",
           "enable_prefix_caching": "often",
           "speculative": {"method": "ngram", "num_speculative_tokens": 1, "acceptance_rate": 0.5}}  # fmt: skip
    assert set(bad) == settings | {"speculative"}
    for key, value in bad.items():
        with pytest.raises(des.ScenarioError) as err:
            des.load_scenario(None, [("scheduler", {"kind": "disaggregated", "decode": {key: value}})])
        assert [p for p, _ in err.value.problems] == [f"scheduler.decode.{key}"], key


def test_a_pool_setting_left_out_is_the_top_level_one_and_every_other_its_default():
    sc = des.load_scenario(None, ["scheduler={kind: disaggregated, enable_prefix_caching: false, "
                                  "prefill: {max_num_batched_tokens: 8192, enable_prefix_caching: true}}"])  # fmt: skip
    pre, dec = (policy(p) for p in sc.layout.pools)
    assert (pre.max_num_batched_tokens, pre.enable_prefix_caching) == (8192, True)
    assert (dec.max_num_batched_tokens, dec.enable_prefix_caching) == (2048, False)
    assert pre.max_num_seqs == dec.max_num_seqs == 256  # neither sets it: vllm serve's default on a 4090


def test_a_gpu_without_a_kv_link_needs_kv_transfer():
    gpu = {"base": "rtx4090", "kv_link": None}
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(None, [("gpu", gpu), "scheduler.kind=disaggregated"])
    assert err.value.problems[0][0] == "scheduler.kv_transfer"
    sc = des.load_scenario(None, [("gpu", gpu), "scheduler={kind: disaggregated, kv_transfer: {bandwidth: 1e10}}"])
    assert sc.layout.link is not None


@pytest.mark.parametrize(
    ("key", "value", "instead"),
    [("cluster.replicas", "3", "scheduler.prefill.instances"), ("cluster.router", "least_kv", "scheduler.router")],
)
def test_cluster_settings_a_split_does_not_use_are_errors(key, value, instead):
    """A split's instances and routers are its pools': the cluster's would be silently ignored."""
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(None, [f"{key}={value}", "scheduler.kind=disaggregated"])
    (path, message), *_ = err.value.problems
    assert path == key and message.startswith(f"{value!r} is not used" if key.endswith("router") else value)
    assert instead in message


def test_results_folder_gains_transfers_and_the_summary_per_role_keys(tmp_path):
    from des.output import write_result

    sc = des.load_scenario(
        None, ["scheduler.kind=disaggregated", "horizon.duration=60", "warmup=10", "workload.arrival.rate=3"]
    )
    r = des.simulate(sc)
    write_result(r, tmp_path)
    assert (tmp_path / "transfers.parquet").is_file()
    s = r.summary
    for key in ("prefill_busy_fraction", "decode_busy_fraction", "prefill_kv_use", "decode_mean_batch_size",
                "kv_transfer_time_p99", "kv_transfer_wait_p50"):  # fmt: skip
        assert s[key] is not None and s[key] >= 0, key
    assert 0 < s["prefill_busy_fraction"] < s["decode_busy_fraction"] <= 1
    # steps: prefill instance 0 first, then decode instance 1
    roles = r.steps.groupby("instance")["role"].first().astype(str).to_dict()
    assert roles == {0: "prefill", 1: "decode"}
    done = r.requests[r.requests["status"] == "completed"]
    multi = done[done["output_tokens"] > 1]
    # the first token leaves the prefill step as its KV transfer starts, and reaches the client
    # the front-end's way out later (its tokens are dated there)
    out = sc.frontend.egress if sc.frontend is not None else 0.0
    col = {c: multi[c].to_numpy() for c in ("arrival_time", "first_token_time", "transfer_start", "transfer_end",
                                            "finish_time")}  # fmt: skip
    ordered = np.stack([col["arrival_time"], col["first_token_time"] - out, col["transfer_start"],
                        col["transfer_end"], col["finish_time"] - out])  # fmt: skip
    assert (np.diff(ordered, axis=0) >= -1e-12).all()


def test_a_colocated_summary_has_the_disaggregated_keys_empty():
    s = des.simulate(des.load_scenario(None, ["horizon.duration=30", "warmup=5"])).summary
    assert s["kv_transfer_time_mean"] is None and s["prefill_busy_fraction"] is None


def test_disaggregated_scenario_rejects_unknown_keys_and_routers():
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(None, ["scheduler={kind: disaggregated, prefill: {max_batch_size: 4}}"])
    assert err.value.problems[0][0] == "scheduler.prefill.max_batch_size"
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(None, ["scheduler={kind: disaggregated, router: {decode: fastest}}"])
    path, message = err.value.problems[0]
    assert path == "scheduler.router.decode" and "least_kv" in message


def test_distserve_finding_long_prompts_get_a_lower_tpot_tail_from_a_prefill_decode_split():
    # 2048-token prompts on two RTX 4090s (Qwen2.5-7B, roofline step times) at 2 req/s:
    # colocated, each prompt fills a whole step (~0.2 s) that the running decodes wait
    # through; split, decode steps never carry a prefill. Common random numbers per seed.
    base = [
        "horizon.duration=300",
        "warmup=30",
        "workload.arrival.rate=2",
        "workload.prompt_tokens={dist: fixed, value: 2048}",
        "workload.output_tokens={dist: fixed, value: 128}",
    ]
    for seed in (0, 1, 2):
        colocated = des.simulate(
            des.load_scenario(None, [*base, f"seed={seed}", "cluster.replicas=2", "cluster.router=least_outstanding"])
        ).summary
        split = des.simulate(des.load_scenario(None, [*base, f"seed={seed}", "scheduler.kind=disaggregated"])).summary
        assert colocated["stable"] and split["stable"]
        assert split["tpot_p99"] < 0.8 * colocated["tpot_p99"], (seed, split["tpot_p99"], colocated["tpot_p99"])


def test_chat_at_load_waits_for_the_wire_less_than_half_a_decode_step():
    # review disagg-3 D1: chat at 8.7 req/s per GPU on 2 x 4090 (1P1D) waited 38 ms mean for
    # its 4.5 ms transfers when reservations queued one behind another; the wire's own
    # queue must stay under half a decode step, and the wait for blocks about half a step
    # (granted at the decode instance's next boundary)
    sc = des.load_scenario(
        SCENARIOS / "qwen7b-4090-poisson.yaml",
        ["scheduler.kind=disaggregated", "workload.arrival.rate=17.4", "horizon.duration=150",
         "horizon.drain=false", "warmup=25", "workload.output_tokens={dist: geometric, mean: 256}",
         "scheduler.max_num_seqs=128", "scheduler.gpu_memory_utilization=0.92"],  # the engine the review ran
    )  # fmt: skip
    r = des.simulate(sc)
    s = r.summary
    step = steps_of(r, "decode")["duration"].mean()
    assert s["kv_link_wait_mean"] <= step / 2
    assert s["kv_block_wait_mean"] <= step
    assert s["kv_transfer_wait_mean"] == pytest.approx(s["kv_block_wait_mean"] + s["kv_link_wait_mean"])


def test_a_pool_without_chunked_prefill_and_a_budget_below_the_context_is_refused(tmp_path):
    # vLLM refuses max_num_batched_tokens < max_model_len without chunked prefill at start-up
    # (SchedulerConfig's check); des used to reject the long prompts one by one instead
    proc = des_cli(
        "run", "--set", "scheduler.kind=disaggregated", "--set", "scheduler.prefill.enable_chunked_prefill=false",
        # stated: left out, vLLM raises the budget to the context itself when chunked prefill is off
        "--set", "scheduler.max_num_batched_tokens=2048", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert proc.returncode == 2 and not (tmp_path / "out").exists()
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        "error: scheduler.max_num_batched_tokens: 2048 tokens is smaller than max_model_len (32768) with chunked "
        "prefill off on the prefill pool: a prompt longer than one step could never run (vLLM refuses this at "
        "start-up: raise max_num_batched_tokens to 32768, set max_model_len to 2048 or less, or enable chunked "
        "prefill)"
    ]


@pytest.mark.parametrize(
    "prefill, decode, path, expected",
    [
        ("rtx4090", "rtx4090", None, "rtx4090"),  # one server: the GPU's own link (host-staged)
        ("h100-80gb", "h100-80gb", None, "h100-80gb"),  # NVLink, at a connector's 49 GB/s
        ("h100-80gb", "a100-80gb", None, "rdma"),  # unlike GPUs: different servers
        ("h100-80gb", "mi300x", None, "rdma"),
        ("h100-80gb", "h100-80gb", "rdma", "rdma"),  # across nodes, said outright
        ("rtx4090", "l40s", "host", "host"),  # one PCIe box, staged through host memory
        ("l40s", "l4", "pcie", "pcie"),
    ],
)
def test_the_default_link_follows_where_the_gpus_sit(prefill, decode, path, expected):
    link = default_link(catalog.gpu(prefill), catalog.gpu(decode), path)
    want = RDMA if expected == "rdma" else GENERIC.get(expected) or catalog.gpu(expected).kv_link
    assert link == want
    assert link.path == (path or want.path)


@pytest.mark.parametrize(
    "prefill, decode, path, message",
    [
        ("h100-80gb", "a100-80gb", "nvlink", "nvlink joins GPUs of one type on one board, not h100-80gb and a100-80gb"),
        ("rtx4090", "rtx4090", "nvlink", "rtx4090 has no nvlink (its KV link: host)"),
        ("rtx4090", "l40s", "pcie", "rtx4090 cannot send peer-to-peer over PCIe (GeForce drivers disable it)"),
    ],
)
def test_a_path_the_gpus_cannot_have_is_one_line_naming_the_field(tmp_path, prefill, decode, path, message):
    proc = des_cli(
        "run", "--set", f"scheduler={{kind: disaggregated, prefill: {{gpu: {prefill}}}, decode: {{gpu: {decode}}}, "
        f"kv_transfer: {{path: {path}}}}}", "--out", str(tmp_path / "out"),
    )  # fmt: skip
    assert proc.returncode == 2 and not (tmp_path / "out").exists()
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: scheduler.kv_transfer.path: {message}")


def test_each_tensor_parallel_rank_sends_its_shard_over_its_own_link(tmp_path):
    # TP-2 prefill to TP-2 decode: two shards at once, bytes / (2 x bandwidth) + latency exactly
    rows = [(0, 4, 3)]
    one = des.simulate(scenario(tmp_path, rows))
    two = des.simulate(scenario(tmp_path, rows, prefill={"tp": 2}, decode={"tp": 2}))
    lopsided = des.load_scenario(scenario(tmp_path, rows, prefill={"tp": 2}, decode={"tp": 1}))
    t1, t2 = transfers(one).iloc[0], transfers(two).iloc[0]
    assert t1["bytes"] == t2["bytes"] == 4 * KV_BYTES
    assert t1["end"] - t1["start"] == 4 * KV_BYTES / LINK["bandwidth"] + LINK["latency"] == 1.5
    assert t2["end"] - t2["start"] == 4 * KV_BYTES / (2 * LINK["bandwidth"]) + LINK["latency"] == 1.0
    link = lopsided.layout.link  # one decode rank takes one shard at a time
    assert link is not None and link.bandwidth == LINK["bandwidth"]


def test_a_layerwise_transfer_ends_one_layer_after_the_prefill(tmp_path):
    # prefill [0, 1] of a 4-token prompt over 28 layers; its KV takes 1.0 s on the wire
    # (+0.5 s latency): each layer's 1/28 leaves as the step computes it, so the wire runs
    # from the first layer's end (1/28) and the last layer leaves right after the step:
    # the transfer ends at max(1/28 + 1.0, 1 + 1/28) + 0.5, and decoding starts there (the
    # decode blocks were pushed for as the prefill started)
    layers = catalog.model("qwen2.5-7b").num_layers
    link = LINK | {"overlap": "layerwise", "mode": "push"}
    r = des.simulate(scenario(tmp_path, [(0, 4, 3)], link=link))
    t = transfers(r).iloc[0]
    assert t["start"] == 1 / layers and t["end"] == 1 + 1 / layers + 0.5
    assert steps_of(r, "decode")["start"].tolist()[0] == t["end"]
    # a wire slower than the prefill ends a whole transfer after the first layer
    slow = des.simulate(scenario(tmp_path, [(0, 4, 3)], link=link | {"bandwidth": LINK["bandwidth"] / 4}))
    s = transfers(slow).iloc[0]
    assert s["start"] == 1 / layers and s["end"] == 1 / layers + 4.0 + 0.5
    assert r.summary["kv_link_wait_mean"] == 0.0 and r.summary["kv_block_wait_mean"] == 0.0


def test_push_reserves_decode_blocks_when_the_prefill_starts(tmp_path):
    # one decode block: request 0 holds it from its prefill's start (push) until it leaves
    # the decode instance at 3.5; request 1's prefill starts at 0 too, but its blocks are
    # granted only then, so its transfer waits for blocks 2.5 s after its prompt is done
    pull = des.simulate(scenario(tmp_path, [(0, 4, 2), (0, 4, 2)], decode={"num_gpu_blocks_override": 1}))
    push = des.simulate(
        scenario(tmp_path, [(0, 4, 2), (0, 4, 2)], decode={"num_gpu_blocks_override": 1}, link=LINK | {"mode": "push"})
    )
    t = transfers(push)
    assert t["reserved"].tolist() == [0.0, 3.5] and t["enqueued"].tolist() == [1.0, 1.0]
    assert t["start"].tolist() == [1.0, 3.5]
    assert push.summary["kv_block_wait_mean"] == (0.0 + 2.5) / 2
    assert transfers(pull)["reserved"].tolist() == [1.0, 3.5]
    # a one-token answer is done on the prefill instance and reserves nothing
    one = des.simulate(scenario(tmp_path, [(0, 4, 1), (0, 4, 2)], decode={"num_gpu_blocks_override": 1},
                                link=LINK | {"mode": "push"}))  # fmt: skip
    assert transfers(one)["reserved"].tolist() == [0.0] and (by_id(one)["status"] == "completed").all()


def test_layerwise_overlap_needs_push():
    with pytest.raises(ScenarioError) as err:
        des.load_scenario(None, ["scheduler={kind: disaggregated, kv_transfer: {overlap: layerwise}}"])
    (where, message), *_ = err.value.problems
    assert where == "scheduler.kv_transfer.overlap" and "needs mode: push" in message
