"""Properties of disaggregated serving on hypothesis-generated scenarios.

Conservation across pools and links: every request ends completed, rejected (with the
reason the pools on its path give) or unfinished; KV never exceeds any instance's
cache and is all returned on every instance of a drained run; timestamps are ordered
(arrival ≤ scheduled ≤ first token ≤ transfer start ≤ transfer end ≤ finish); each
transfer moves its prompt's KV; tokens emitted match tokens generated; and the
fast-forward engine matches the per-step reference exactly.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import event, given, note
from hypothesis import strategies as st

import des
from des import catalog
from des.engine.request import COMPLETED, REJECTED, UNFINISHED
from des.engine.schedulers.settings import ContinuousSettings
from des.simulation import build, run_until, stop_event
from tests.helpers import ledger
from tests.test_properties import COSTS, FEW, PROPS, arrivals, length_dists, typical, watch

KV_BYTES = catalog.model("qwen2.5-7b").kv_bytes_per_token(2)


@st.composite
def pool(draw, typical_tokens: float, pressure: bool) -> dict[str, Any]:
    p: dict[str, Any] = {"instances": draw(st.integers(1, 3))}
    if draw(st.booleans()):
        p["max_num_seqs"] = draw(st.sampled_from([1, 2, 8, 64]))
    if draw(st.booleans()):  # vLLM: a step's token budget is at least its sequences (128 unset)
        seqs = p.get("max_num_seqs", 128)
        p["max_num_batched_tokens"] = draw(st.sampled_from([t for t in (32, 256, 2048) if t >= seqs]))
    if pressure:
        blocks = max(1, int(draw(st.sampled_from([0.7, 1.2, 2.0, 4.0])) * typical_tokens) // 16)
        p["num_gpu_blocks_override"] = blocks
    return p


@st.composite
def disaggregated_scenarios(draw, drain: bool | None = None) -> des.Scenario:
    pressure = draw(st.integers(0, 3)) > 0
    arrival, rate = draw(arrivals(busy=pressure and draw(st.booleans())))
    horizon: dict[str, Any] = {"drain": draw(st.booleans()) if drain is None else drain}
    if rate is None or draw(st.booleans()):
        horizon["num_requests"] = draw(st.integers(1, 40))
    else:
        horizon["duration"] = min(draw(st.sampled_from([1.0, 5.0])), 30.0 / rate)
    prompt = draw(length_dists(200))
    output = draw(length_dists(60))
    per_request = typical(prompt) + typical(output)
    sched: dict[str, Any] = {
        "kind": "disaggregated",
        "enable_chunked_prefill": draw(st.booleans()),
        "prefill": draw(pool(typical(prompt), pressure)),
        "decode": draw(pool(per_request, pressure)),
        "first_token_from": draw(st.sampled_from(["prefill", "decode"])),
        "router": {
            "prefill": draw(st.sampled_from(["round_robin", "least_outstanding", "random", "least_kv"])),
            "decode": draw(st.sampled_from(["round_robin", "least_outstanding", "random", "least_kv"])),
        },
        "kv_transfer": {
            "bandwidth": draw(st.sampled_from([KV_BYTES * 100.0, KV_BYTES * 1e4, 1.2e10])),
            "latency": draw(st.sampled_from([0.0, 0.002, 0.1])),
            **draw(st.sampled_from([{"mode": "pull"}, {"mode": "push"}, {"mode": "push", "overlap": "layerwise"}])),
        },
    }
    if not sched["enable_chunked_prefill"]:  # vLLM: each pool's budget >= the context
        budgets = (sched[role].get("max_num_batched_tokens", 2048) for role in ("prefill", "decode"))
        sched["max_model_len"] = min(budgets)
    data = {
        "name": "pd-prop",
        "seed": draw(st.integers(0, 2**20)),
        "horizon": horizon,
        "workload": {"arrival": arrival, "prompt_tokens": prompt, "output_tokens": output},
        "cost_model": draw(COSTS),
        "scheduler": sched,
    }
    return des.load_scenario(data)


def expected_reason(scn: des.Scenario, prompt: int, output: int) -> str:
    assert scn.cluster.split
    pre, dec = (p.policy for p in scn.layout.pools)
    assert isinstance(pre, ContinuousSettings) and isinstance(dec, ContinuousSettings)
    blocks = [m.num_blocks for m in scn.memory_plans()]
    if prompt + output > scn.layout.context_limit(scn.model):
        return "exceeds_max_model_len"
    if math.ceil(prompt / pre.block_size) > blocks[0]:
        return "exceeds_kv_capacity"
    if math.ceil((prompt + output - 1) / dec.block_size) > blocks[1]:
        return "exceeds_kv_capacity"
    return ""


def check(scn: des.Scenario, res: des.Result) -> None:
    req, steps, tr, s = res.requests, res.steps, res.transfers, res.summary
    assert tr is not None
    status = req["status"].astype(str)
    note(f"{s['num_requests']} requests, {s['num_completed']} completed, {s['preemptions']} preemptions")
    for happened, what in (
        (s["preemptions"] > 0, "preemption"),
        (s["num_rejected"] > 0, "rejection"),
        ((tr["start"] > tr["enqueued"]).any(), "a transfer waited"),
        (s["num_unfinished"] > 0, "unfinished"),
    ):
        if happened:
            event(what)
    # accounting and reasons
    assert set(status) <= {COMPLETED, REJECTED, UNFINISHED}
    assert s["num_completed"] + s["num_rejected"] + s["num_unfinished"] == len(req)
    if scn.horizon.drain:
        assert (status != UNFINISHED).all()
    for p, o, r in zip(req["prompt_tokens"], req["output_tokens"], req["reason"].astype(str), strict=True):
        assert r == expected_reason(scn, int(p), int(o))
    # instances: prefill ones first, then decode ones
    pre, dec = scn.layout.pools
    n_pre = pre.instances
    roles = steps.groupby("instance")["role"].first().astype(str)
    assert all((role == "prefill") == (i < n_pre) for i, role in roles.items())
    blocks = [m.num_blocks for m in scn.memory_plans()]
    cap = steps["instance"].map(lambda i: blocks[0] if i < n_pre else blocks[1])
    assert (steps["kv_blocks"] <= cap).all(), "KV over-allocated"
    # ordering of a completed request's times, through its transfer when it had one
    done = req[status == COMPLETED]
    cols = ["arrival_time", "scheduled_time", "first_token_time", "finish_time"]
    t = np.stack([done[c].to_numpy() for c in cols])
    assert not np.isnan(t).any() and (np.diff(t, axis=0) >= 0).all()
    moved = done[done["output_tokens"] > 1]
    ts, te = moved["transfer_start"].to_numpy(), moved["transfer_end"].to_numpy()
    assert (ts <= te).all() and (te <= moved["finish_time"].to_numpy()).all()
    assert scn.cluster.split
    # tokens are dated at the client, the front-end's way out after the step that emits them
    out = scn.frontend.egress if scn.frontend is not None else 0.0
    if scn.layout.first_token_from == "decode":
        assert (moved["first_token_time"].to_numpy() > te).all()  # the decode instance's first step
    else:
        first = moved["first_token_time"].to_numpy() - out
        link = scn.layout.link
        assert link is not None
        # a layer-wise transfer starts during the step that emits the first token, ends after it
        assert (first <= ts).all() if link.overlap == "none" else (first < te).all()
    assert moved["prefill_instance"].between(0, n_pre - 1).all()
    assert moved["decode_instance"].between(n_pre, n_pre + dec.instances - 1).all()
    single = done[done["output_tokens"] == 1]
    assert (single["decode_instance"] == -1).all() and single["transfer_start"].isna().all()
    # transfers: one per request that crossed, its prompt's KV, in order on its link
    by_id = req.set_index("request_id")
    assert (tr["bytes"].to_numpy() == by_id.loc[tr["request_id"], "prompt_tokens"].to_numpy() * KV_BYTES).all()
    link = scn.layout.link
    assert link is not None
    if link.mode == "pull":  # blocks asked for when the prompt is done
        assert (tr["enqueued"] <= tr["reserved"]).all()
    if link.overlap == "none":  # the wire starts once both are there
        assert (np.maximum(tr["enqueued"], tr["reserved"]) <= tr["start"]).all()
    assert (tr["start"] < tr["end"]).all()
    for _, g in tr.groupby("link"):
        assert (g["start"].to_numpy()[1:] >= g["end"].to_numpy()[:-1]).all(), "two transfers at once on a link"
    if scn.horizon.drain:
        assert set(tr["request_id"]) == set(moved["request_id"])
        # with the first token from the decode instance, the prefill instance's token is dropped
        dropped = len(moved) if scn.layout.first_token_from == "decode" else 0
        assert int(steps["tokens_emitted"].sum()) == int(done["output_tokens"].sum()) + dropped


def run_watched(scn: des.Scenario) -> None:
    """Run with every scheduler's KV checked after each change; afterwards every block of a
    drained run is back, no reservation or holding is left, and tokens match."""
    env, cluster, procs = build(scn)
    for inst in cluster.instances:
        watch(inst.scheduler)
    run_until(env, stop_event(scn, env, cluster, procs))
    cluster.settle()
    reqs = ledger(cluster)
    assert (reqs["generated"] >= 0).all() and (reqs["generated"] <= reqs["output_tokens"]).all()
    done = reqs["status"].astype(str) == COMPLETED
    assert (reqs["generated"][done] == reqs["output_tokens"][done]).all()
    if scn.horizon.drain:
        for inst in cluster.instances:
            assert inst.kv.free == inst.kv.num_blocks, f"instance {inst.index} kept {inst.kv.used} blocks"
            assert inst.kv.num_reserving == 0 and not inst.kv.held
            assert inst.outstanding == 0


@PROPS
@given(disaggregated_scenarios())
def test_disaggregated_conservation(scn):
    check(scn, des.simulate(scn))
    run_watched(scn)


@FEW
@given(disaggregated_scenarios())
def test_disaggregated_fast_forward_matches_the_per_step_reference(scn):
    fast, ref = des.simulate(scn), des.simulate(scn, fast_forward=False)
    assert fast.requests.equals(ref.requests)
    assert fast.steps.equals(ref.steps)
    assert fast.transfers is not None and fast.transfers.equals(ref.transfers)
