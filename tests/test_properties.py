"""Property-based tests: small random scenarios through the whole engine.

Hypothesis draws scenarios over both schedulers, all three cost models, open and
closed arrivals, short horizons with and without draining, 1-3 replicas behind each
router, every length law with truncation, and KV caches shrunk (through
``num_gpu_blocks_override``) to about one to four typical requests, so that requests are
preempted and some can never fit. Every run is checked against the conventions of
DESIGN.md: request accounting and rejection reasons, timestamp order and FCFS, KV
bounds (in the step log, after every scheduler call, and all blocks free at the end
of a drained run), token counts, determinism, step-level batching rules, static
batch timing and the latency definitions.

The runs go through ``des.simulate`` and, in parallel, through
``des.simulation.build`` with the schedulers' block managers checked after every
``schedule``, ``finish_step`` (and fast-forward ``advance``) call. When ``simulate``
has a fast-forward engine, it must match the per-step reference exactly.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, find, given, note, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

import des
from des.engine.request import COMPLETED, REJECTED, UNFINISHED
from des.metrics import requests_table, steps_table
from des.simulation import build, run_until, stop_event
from tests.helpers import ledger

PROPS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FEW = settings(PROPS, max_examples=40)

#: The per-step reference engine, against which the fast-forwarding one is checked.
REFERENCE: dict[str, Any] = {"fast_forward": False}

BASE_GPU = "rtx4090"
MODEL = "qwen2.5-7b"


# -- scenario strategies -----------------------------------------------------------


def typical(d: dict[str, Any]) -> float:
    """A rough mean of a drawn length law (its stated mean, clipped to its bounds)."""
    m = {"fixed": d.get("value"), "uniform": (d.get("low", 0) + d.get("high", 0)) / 2}.get(d["dist"], d.get("mean"))
    return min(max(m, d.get("min", 1)), d.get("max", math.inf))


@st.composite
def length_dists(draw, hi: int) -> dict[str, Any]:
    """A length law over roughly [1, hi] tokens, sometimes truncated to [min, max]."""
    kind = draw(st.sampled_from(["fixed", "uniform", "geometric", "lognormal"]))
    if kind == "fixed":
        d: dict[str, Any] = {"dist": "fixed", "value": draw(st.integers(1, hi))}
        center = d["value"]
    elif kind == "uniform":
        low = draw(st.integers(1, hi))
        high = draw(st.integers(low, hi))
        d = {"dist": "uniform", "low": low, "high": high}
        center = draw(st.integers(low, high))
    elif kind == "geometric":
        mean = draw(st.integers(2, 2 * hi)) / 2
        d = {"dist": "geometric", "mean": mean}
        center = max(1, round(mean))
    else:
        mean = draw(st.integers(2, 2 * hi)) / 2
        d = {"dist": "lognormal", "mean": mean, "sigma": draw(st.sampled_from([0.3, 0.8, 1.5]))}
        center = max(1, round(mean))
    if draw(st.booleans()):
        d["min"] = draw(st.integers(1, center))
    if draw(st.booleans()):
        d["max"] = draw(st.integers(center, center + hi))
    return d


@st.composite
def arrivals(draw, busy: bool = False) -> tuple[dict[str, Any], float | None]:
    """An arrival process and its long-run rate (None for closed loops); ``busy``: heavier load."""
    kind = draw(st.sampled_from(["poisson", "gamma", "onoff", "closed"]))
    rates = st.sampled_from([10.0, 50.0, 200.0] if busy else [0.5, 2.0, 10.0, 50.0])
    if kind == "poisson":
        a = {"process": "poisson", "rate": draw(rates)}
        return a, a["rate"]
    if kind == "gamma":
        a = {"process": "gamma", "rate": draw(rates), "cv": draw(st.sampled_from([0.5, 1.0, 3.0]))}
        return a, a["rate"]
    if kind == "onoff":
        a = {
            "process": "onoff",
            "on_rate": draw(st.sampled_from([2.0, 10.0, 50.0])),
            "off_rate": draw(st.sampled_from([0.0, 0.5])),
            "mean_on": draw(st.sampled_from([0.2, 1.0])),
            "mean_off": draw(st.sampled_from([0.2, 2.0])),
        }
        rate = (a["on_rate"] * a["mean_on"] + a["off_rate"] * a["mean_off"]) / (a["mean_on"] + a["mean_off"])
        return a, rate
    a = {
        "process": "closed",
        "concurrency": draw(st.integers(2, 8) if busy else st.integers(1, 5)),
        "think_time": draw(st.sampled_from([0.0, 0.05, 0.5])),
        "think_dist": draw(st.sampled_from(["fixed", "exponential"])),
        "retry_delay": draw(st.sampled_from([0.1, 1.0])),
    }
    return a, None


@st.composite
def schedulers(draw, kind: str | None = None) -> dict[str, Any]:
    if kind == "static" or (kind is None and draw(st.booleans())):
        s: dict[str, Any] = {
            "kind": "static",
            "max_batch_size": draw(st.integers(1, 6)),
            "max_wait": draw(st.sampled_from([0.0, 0.0, 0.02, 0.3])),
            "release_on": draw(st.sampled_from(["batch_end", "finish"])),
        }
    else:
        seqs = draw(st.sampled_from([2, 4, 32]) | st.integers(1, 8))
        s = {
            "kind": "continuous",
            "max_num_seqs": seqs,  # vLLM: the token budget is at least max_num_seqs
            "max_num_batched_tokens": draw(st.sampled_from([t for t in (16, 64, 256, 2048) if t >= seqs])),
            "enable_chunked_prefill": draw(st.booleans()),
        }
    s["block_size"] = draw(st.sampled_from([1, 4, 16]))
    if draw(st.integers(0, 4)) == 0:
        s["max_model_len"] = draw(st.sampled_from([64, 256]))
    if s["kind"] == "continuous" and not s["enable_chunked_prefill"]:  # vLLM: budget >= context
        s["max_model_len"] = min(s.get("max_model_len", 2048), s["max_num_batched_tokens"])
    return s


COSTS = st.one_of(
    st.builds(lambda t: {"kind": "constant", "step_time": t}, st.sampled_from([0.01, 0.1, 1.0])),
    st.builds(
        lambda b, p, d, c: {
            "kind": "linear",
            "base": b,
            "per_prefill_token": p,
            "per_decode_token": d,
            "per_context_token": c,
        },
        st.sampled_from([0.005, 0.02]),
        st.sampled_from([0.0, 1e-4]),
        st.sampled_from([0.0, 1e-3]),
        st.sampled_from([0.0, 1e-6]),
    ),
    st.just({"kind": "roofline"}),
)


def with_kv_tokens(data: dict[str, Any], kv_tokens: int) -> dict[str, Any]:
    """``data`` with a KV cache of exactly ``max(1, kv_tokens // block_size)`` blocks.

    Through ``num_gpu_blocks_override`` on a GPU whose memory holds a whole context: vLLM
    refuses to start where the memory cannot hold one ``max_model_len`` sequence, but with
    its block count overridden it starts with fewer blocks than that, so requests can still
    be preempted and some never fit (des rejects those).
    """
    blocks = max(1, kv_tokens // data["scheduler"].get("block_size", 16))
    out = dict(data)
    out["scheduler"] = dict(data["scheduler"], num_gpu_blocks_override=blocks)
    return out


@st.composite
def scenario_dicts(
    draw, *, kv_pressure: bool | None = None, kind: str | None = None, drain: bool | None = None
) -> dict[str, Any]:
    """A scenario mapping. ``kv_pressure``: shrink the KV cache to about 0.7-4 typical
    requests (None: three times in four); ``kind``, ``drain``: force those settings."""
    pressure = draw(st.integers(0, 3)) > 0 if kv_pressure is None else kv_pressure
    arrival, rate = draw(arrivals(busy=pressure and draw(st.booleans())))
    horizon: dict[str, Any] = {"drain": draw(st.booleans()) if drain is None else drain}
    mode = "n" if rate is None else draw(st.sampled_from(["n", "d", "both"]))
    if mode in ("n", "both"):
        horizon["num_requests"] = draw(st.sampled_from([2, 12, 30, 60]) | st.integers(1, 60))
    if mode in ("d", "both") or (rate is None and draw(st.booleans())):
        d = draw(st.sampled_from([0.5, 1.0, 2.0, 5.0, 10.0]))
        horizon["duration"] = d if rate is None else min(d, 40.0 / rate)
    sched = draw(schedulers(kind))
    prompt = draw(length_dists(200))
    output = draw(length_dists(80 if pressure else 40))
    data: dict[str, Any] = {
        "name": "prop",
        "seed": draw(st.integers(0, 2**20)),
        "gpu": BASE_GPU,
        "model": MODEL,
        "horizon": horizon,
        "workload": {"arrival": arrival, "prompt_tokens": prompt, "output_tokens": output},
        "cost_model": draw(COSTS),
        "scheduler": sched,
        "cluster": {
            "replicas": draw(st.integers(1, 3)),
            "router": draw(st.sampled_from(["round_robin", "least_outstanding", "random"])),
        },
    }
    if "duration" in horizon and draw(st.integers(0, 3)) == 0:
        data["warmup"] = horizon["duration"] / 4
    if pressure:
        sched["gpu_memory_utilization"] = draw(st.sampled_from([0.9, 0.92, 1.0]))  # the 4090 must hold a context
        per_request = typical(prompt) + typical(output)
        factor = draw(st.sampled_from([0.7, 1.2, 2.0, 4.0]))
        data = with_kv_tokens(data, max(8, int(factor * per_request)))
    else:
        sched["gpu_memory_utilization"] = draw(st.sampled_from([0.92, 1.0]))
    return data


def scenarios(**kw):
    return scenario_dicts(**kw).map(des.load_scenario)


# -- running the engine with watched schedulers --------------------------------------


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def check_scheduler_state(sched) -> None:
    """The block manager never goes below zero free blocks nor above its size."""
    kv = sched.kv
    assert 0 <= kv.free <= kv.num_blocks, f"KV free blocks {kv.free} outside [0, {kv.num_blocks}]"
    assert kv.used == kv.num_blocks - kv.free


#: Scheduler methods that change state (``advance`` is the fast-forward path, if any).
MUTATORS = ("schedule", "finish_step", "advance")


def watch(sched) -> None:
    """Check the KV bounds after every state change of ``sched``."""
    for name in MUTATORS:
        orig = getattr(sched, name, None)
        if orig is None:
            continue

        def wrapped(*args, _orig=orig, **kw):
            out = _orig(*args, **kw)
            check_scheduler_state(sched)
            return out

        setattr(sched, name, wrapped)


def run_engine(scn, **engine):
    """Build and run ``scn`` exactly as ``des.simulate`` does, with watched schedulers."""
    env, cluster, procs = build(scn, **engine)
    for inst in cluster.instances:
        watch(inst.scheduler)
    run_until(env, stop_event(scn, env, cluster, procs))
    cluster.settle()  # as des.simulate does when the run stops: requests still held get their progress
    return env, cluster


# -- the properties ------------------------------------------------------------------


def expected_reason(scn, prompt: int, output: int) -> str:
    s = scn.scheduler
    max_len = s.max_model_len or scn.model.max_model_len
    blocks = scn.memory_plan().num_blocks
    if prompt + output > max_len:
        return "exceeds_max_model_len"
    if blocks_for(prompt + output - 1, s.block_size) > blocks:
        return "exceeds_kv_capacity"
    return ""


def check_accounting(scn, res) -> None:
    req, summ = res.requests, res.summary
    status = req["status"].astype(str)
    assert set(status) <= {COMPLETED, REJECTED, UNFINISHED}
    n_c, n_r, n_u = (int((status == s).sum()) for s in (COMPLETED, REJECTED, UNFINISHED))
    assert summ["num_requests"] == len(req)
    assert (summ["num_completed"], summ["num_rejected"], summ["num_unfinished"]) == (n_c, n_r, n_u)
    assert n_c + n_r + n_u == summ["num_requests"]
    if scn.horizon.drain:
        assert n_u == 0, "drained run left unfinished requests"
    if scn.horizon.num_requests is not None:
        assert len(req) <= scn.horizon.num_requests
    assert list(req["request_id"]) == list(range(len(req)))
    reason = req["reason"].astype(str)
    rejected = (status == REJECTED).to_numpy()
    assert (reason[rejected] != "").all(), "rejected request without a reason"
    assert (reason[~rejected] == "").all(), "admitted request with a reason"
    # the reason is the documented one, and only requests that can never run are rejected
    for p, o, r in zip(req["prompt_tokens"], req["output_tokens"], reason, strict=True):
        assert r == expected_reason(scn, int(p), int(o)), (p, o, r)
    # rejected requests never touched an instance
    rej = req[rejected]
    assert (rej["instance"] == -1).all()
    assert rej[["scheduled_time", "first_token_time", "finish_time"]].isna().all().all()
    assert (rej["preemptions"] == 0).all()
    adm = req[~rejected]
    assert adm["instance"].between(0, scn.layout.pools[0].instances - 1).all()
    if scn.layout.pools[0].router == "round_robin":
        assert list(adm["instance"]) == [i % scn.layout.pools[0].instances for i in range(len(adm))]
    assert summ["preemptions"] == int(req["preemptions"].sum())
    assert summ["num_steps"] == len(res.steps)
    if scn.horizon.drain:
        assert int(res.steps["preempted"].sum()) == summ["preemptions"]


def check_ordering(scn, res) -> None:
    req = res.requests
    done = req[req["status"] == COMPLETED]
    a, s, f, e = (done[c].to_numpy() for c in ("arrival_time", "scheduled_time", "first_token_time", "finish_time"))
    assert not np.isnan(np.stack([a, s, f, e])).any(), "completed request with a missing timestamp"
    assert (a <= s).all() and (s <= f).all() and (f <= e).all()
    # partial progress of unfinished requests is ordered too, and has no gaps
    un = req[req["status"] == UNFINISHED]
    for _, r in un.iterrows():
        assert math.isnan(r.finish_time)
        if not math.isnan(r.first_token_time):
            assert r.arrival_time <= r.scheduled_time <= r.first_token_time
        elif not math.isnan(r.scheduled_time):
            assert r.arrival_time <= r.scheduled_time
    # FCFS on every instance: no request is first scheduled before one that reached the
    # scheduler earlier (at arrival, or behind a serving front-end once through its way in)
    for _, g in req[req["instance"] >= 0].groupby("instance"):
        reach = g["queued_time"]
        order = np.lexsort((g["request_id"].to_numpy(), reach.to_numpy()))
        sched = g["scheduled_time"].to_numpy()[order]
        started = ~np.isnan(sched)
        if started.any():
            k = int(np.argmin(started)) if not started.all() else len(sched)
            assert not started[k:].any(), "a later request was scheduled before an earlier one"
            assert (np.diff(sched[:k]) >= 0).all(), "FCFS violated"


def check_kv(scn, res) -> None:
    cap_tokens = res.summary["kv_capacity_tokens"]
    bs = scn.scheduler.block_size
    assert cap_tokens % bs == 0
    cap_blocks = cap_tokens // bs
    assert cap_blocks == scn.memory_plan().num_blocks
    steps = res.steps
    assert (steps["kv_blocks"] >= 0).all()
    assert (steps["kv_blocks"] <= cap_blocks).all(), "KV over-allocated"
    # a step that runs anything holds KV for it
    assert (steps["kv_blocks"] > 0).all()


def check_engine_state(scn, res, env, cluster) -> None:
    """The build path reproduces simulate; tokens and KV blocks balance at the end."""
    assert requests_table(cluster.ledger).equals(res.requests), "build+run differs from simulate"
    steps = steps_table(cluster.log)
    assert steps.equals(res.steps)
    reqs = ledger(cluster)
    status, generated = reqs["status"].astype(str), reqs["generated"]
    done = status == COMPLETED
    assert (generated[done] == reqs["output_tokens"][done]).all(), "completed request did not get exactly its tokens"
    assert (generated[status == REJECTED] == 0).all()
    for inst in cluster.instances:  # KV is held by request id; a completed request holds none
        for rid in inst.kv.held:
            assert status[rid] != COMPLETED, f"completed request {rid} still holds KV blocks"
    if scn.horizon.drain:
        assert int(steps["tokens_emitted"].sum()) == int(generated.sum())
    if scn.horizon.drain:
        assert cluster.drained.triggered
        for inst in cluster.instances:
            kv = inst.kv
            assert kv.free == kv.num_blocks, f"instance {inst.index}: {kv.used} KV blocks never freed"
            assert inst.scheduler.num_waiting() == 0
            assert inst.outstanding == 0
        assert status.isin([COMPLETED, REJECTED]).all()


def check_tokens(scn, res) -> None:
    req, steps = res.requests, res.steps
    done = req[req["status"] == COMPLETED]
    if scn.horizon.drain:
        assert int(steps["tokens_emitted"].sum()) == int(done["output_tokens"].sum())
    assert (steps["tokens_emitted"] <= steps["batch_size"]).all()
    assert (steps["tokens_emitted"] >= 0).all()
    emitted = steps.groupby("instance")["tokens_emitted"].sum()
    for i, n in done.groupby("instance")["output_tokens"].sum().items():
        assert emitted.get(i, 0) >= n


def check_steps(scn, res) -> None:
    steps, s = res.steps, scn.scheduler
    assert (steps["duration"] > 0).all()
    assert steps["instance"].between(0, scn.layout.pools[0].instances - 1).all()
    assert (steps["batch_size"] >= 1).all()
    assert (steps["batch_size"] <= steps["batch_width"]).all()
    if scn.cost_model.kind == "constant":
        assert (steps["duration"] == scn.cost_model.step_time).all(), "constant cost model step time"
    # an instance runs one step at a time
    for _, g in steps.groupby("instance"):
        start = g["start"].to_numpy()
        end = start + g["duration"].to_numpy()
        assert (start[1:] >= end[:-1]).all(), "overlapping steps on one instance"
    if s.kind == "continuous":
        run = scn.layout.pools[0].policy  # the settings resolved (vLLM's defaults filling those left out)
        assert (steps["batch_size"] <= run.max_batch).all()
        assert ((steps["prefill_tokens"] + steps["decode_tokens"]) <= run.token_budget).all()
        assert (steps["batch_width"] == steps["batch_size"]).all()
        assert (steps["prefill_tokens"] + steps["decode_tokens"] >= steps["batch_size"]).all()
    else:
        assert (steps["preempted"] == 0).all()
        assert (steps["batch_width"] <= s.max_batch_size).all()
        assert (steps["tokens_emitted"] == steps["batch_size"]).all()
        assert (
            steps["decode_tokens"][steps["prefill_tokens"] == 0] == steps["batch_width"][steps["prefill_tokens"] == 0]
        ).all()
        for _, g in steps.groupby("instance"):
            batch = (g["prefill_tokens"] > 0).cumsum()
            assert batch.iloc[0] == 1, "a static batch must start with its prefill"
            for _, b in g.groupby(batch):
                assert b["batch_width"].nunique() == 1, "static batch width changed within a batch"
                assert (np.diff(b["batch_size"].to_numpy()) <= 0).all()
                assert b["batch_size"].iloc[0] == b["batch_width"].iloc[0]
                assert (b["prefill_tokens"].iloc[0] % b["batch_width"].iloc[0]) == 0


def check_step_membership(scn, res) -> None:
    """Drained runs: timestamps land on step boundaries of the request's instance."""
    if not scn.horizon.drain:
        return
    req, steps = res.requests, res.steps
    starts: dict[int, set] = defaultdict(set)
    ends: dict[int, set] = defaultdict(set)
    spans: dict[int, list] = defaultdict(list)
    out = scn.frontend.egress if scn.frontend is not None else 0.0  # a token's way to its client
    for i, st0, d in zip(steps["instance"], steps["start"], steps["duration"], strict=True):
        starts[int(i)].add(st0)
        ends[int(i)].add(st0 + d + out)
        spans[int(i)].append((st0, st0 + d))
    done = req[req["status"] == COMPLETED]
    for r in done.itertuples():
        assert r.scheduled_time in starts[r.instance], "scheduled_time is not a step start"
        assert r.first_token_time in ends[r.instance], "first token not at a step end (+ the way out)"
        assert r.finish_time in ends[r.instance], "finish not at a step end (+ the way out)"
    s = scn.scheduler
    if s.kind == "static":
        check_static_batches(scn, done, steps)
        if s.max_wait > 0:
            return
    # an idle instance starts a step as soon as work reaches its scheduler (no max_wait to
    # honour): at arrival, or behind a serving front-end its ingress time later
    for i, g in done.groupby("instance"):
        reach = g["queued_time"]
        counts = reach.value_counts()
        for r, t in zip(g.itertuples(), reach, strict=True):
            if counts[t] > 1:
                continue
            busy = any(a < t <= b for a, b in spans[int(i)])
            if not busy:
                assert r.scheduled_time == t, f"request {r.request_id} waited at an idle instance"
    # under async scheduling (vLLM V1's engine forms the next batch while a step runs) a
    # request that reached the scheduler during a step [a, b] does not start at b, since
    # that batch was formed at a, unless it came out empty and was formed again at b: then
    # no request ran through the step and on after it without being preempted
    cost = scn.cost_model
    if cost.async_scheduling and s.kind != "static":
        for i, g in done.groupby("instance"):
            reach = g["queued_time"]
            on = req[(req["instance"] == i) & (req["preemptions"] == 0)]
            for r, t in zip(g.itertuples(), reach, strict=True):
                for a, b in spans[int(i)]:
                    if a < t <= b and r.scheduled_time == b:
                        through = (on["scheduled_time"] <= a) & ~(on["finish_time"] <= b + out)
                        assert not through.any(), f"request {r.request_id} joined a batch formed before it came"


def check_static_batches(scn, done, steps) -> None:
    """Each static batch: its members, padding, length and release times."""
    at_end = scn.scheduler.release_on == "batch_end"
    for i, g in steps.groupby("instance"):
        g = g.sort_values("start")
        members_of = done[done["instance"] == i].groupby("scheduled_time")
        batch = (g["prefill_tokens"] > 0).cumsum()
        for _, b in g.groupby(batch):
            t0 = b["start"].iloc[0]
            m = members_of.get_group(t0)
            width = int(b["batch_width"].iloc[0])
            assert len(m) == width
            assert len(b) == m["output_tokens"].max(), "static batch runs until its longest member"
            assert b["prefill_tokens"].iloc[0] == width * m["prompt_tokens"].max()
            ends = (b["start"] + b["duration"]).to_numpy() + (scn.frontend.egress if scn.frontend else 0.0)
            assert (m["first_token_time"] == ends[0]).all()
            active = [(m["output_tokens"] > j).sum() for j in range(len(b))]
            assert list(b["batch_size"]) == active
            for r in m.itertuples():
                want = ends[-1] if at_end else ends[r.output_tokens - 1]
                assert r.finish_time == want


def check_latency_columns(res) -> None:
    req = res.requests
    a, s, f, e = (req[c].to_numpy() for c in ("arrival_time", "scheduled_time", "first_token_time", "finish_time"))
    n = req["output_tokens"].to_numpy()
    np.testing.assert_array_equal(req["ttft"].to_numpy(), f - a)
    np.testing.assert_array_equal(req["e2e"].to_numpy(), e - a)
    np.testing.assert_array_equal(req["queue_delay"].to_numpy(), s - a)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(n > 1, (e - f) / (n - 1), np.nan)
    np.testing.assert_array_equal(req["tpot"].to_numpy(), tpot)
    one = req[(req["output_tokens"] == 1)]
    assert one["tpot"].isna().all()


def check_all(scn, **engine) -> Any:
    """Run every check on ``scn``; ``engine``: extra arguments of simulate/build."""
    res = des.simulate(scn, **engine)
    s = res.summary
    if currently_in_test_context():
        note(
            f"summary: requests={s['num_requests']} completed={s['num_completed']} rejected={s['num_rejected']} "
            f"unfinished={s['num_unfinished']} preemptions={s['preemptions']} kv={s['kv_capacity_tokens']}"
        )
        if s["preemptions"]:
            event("preemption")
        if (res.requests["reason"] == "exceeds_kv_capacity").any():
            event("kv rejection")
    check_accounting(scn, res)
    check_ordering(scn, res)
    check_kv(scn, res)
    check_tokens(scn, res)
    check_steps(scn, res)
    check_step_membership(scn, res)
    check_latency_columns(res)
    env, cluster = run_engine(scn, **engine)
    check_engine_state(scn, res, env, cluster)
    return res


@PROPS
@given(scenarios())
def test_random_scenarios(scn):
    check_all(scn)


def check_partial_progress(cluster) -> None:
    """Every emitted token is on a request, also for those still running at the horizon."""
    steps = steps_table(cluster.log)
    reqs = ledger(cluster)
    # a static batch returning results at its end holds finished rows until then
    held = getattr(cluster.instances[0].scheduler, "release_at_end", False)
    for r in reqs.itertuples():
        assert 0 <= r.generated <= r.output_tokens
        if r.status == UNFINISHED:
            assert r.generated < r.output_tokens or held
            # a first token was emitted iff the request has generated something
            assert (r.generated > 0) == (not math.isnan(r.first_token_time)), (
                f"request {r.request_id}: generated={r.generated}, first_token_time={r.first_token_time}"
            )
    assert int(steps["tokens_emitted"].sum()) == int(reqs["generated"].sum())


@PROPS
@given(scenarios(drain=False))
def test_tokens_emitted_match_generated_when_stopped_early(scn):
    _, cluster = run_engine(scn)
    check_partial_progress(cluster)


@PROPS
@given(scenarios(kv_pressure=True, kind="continuous"))
def test_continuous_under_kv_pressure(scn):
    # the per-step reference engine when there is a fast-forward one (compared separately)
    check_all(scn, **REFERENCE)


def summaries_equal(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            continue
        if x != y:
            return False
    return True


@FEW
@given(scenarios())
def test_same_seed_same_result(scn):
    r1, r2 = des.simulate(scn), des.simulate(scn)
    assert r1.requests.equals(r2.requests)
    assert r1.steps.equals(r2.steps)
    assert summaries_equal(r1.summary, r2.summary)
    # the resolved scenario (provenance) reproduces the run
    r3 = des.simulate(des.load_scenario(scn.resolved()))
    assert r3.requests.equals(r1.requests)
    assert r3.steps.equals(r1.steps)
    assert summaries_equal(r3.summary, r1.summary)


@FEW
@given(
    scenario_dicts().filter(lambda d: d["workload"]["arrival"]["process"] != "closed"),
    st.integers(1, 1000),
)
def test_other_seed_other_arrivals(data, delta):
    data = dict(data, horizon={"num_requests": 5, "drain": True})
    a = des.simulate(des.load_scenario(data))
    b = des.simulate(des.load_scenario(dict(data, seed=data["seed"] + delta)))
    assert len(a.requests) == len(b.requests) == 5
    assert not np.array_equal(a.requests["arrival_time"].to_numpy(), b.requests["arrival_time"].to_numpy())


@PROPS
@given(scenarios())
def test_fast_forward_matches_per_step_reference(scn):
    fast = des.simulate(scn)
    ref = des.simulate(scn, fast_forward=False)
    assert fast.steps.equals(ref.steps), "fast-forwarded steps differ from the per-step engine"
    assert fast.requests.equals(ref.requests), "fast-forwarded requests differ from the per-step engine"
    assert summaries_equal(fast.summary, ref.summary)


def test_fast_forward_span_ends_exactly_where_the_reference_does():
    # one request: a prefill step of 13.7 ms, then 9 decode steps of 5 ms that the
    # fast-forward engine applies as a span; the step after a span must start exactly at
    # the span's end (start + duration of its last step), as in the per-step engine
    data = {
        "seed": 0,
        "horizon": {"num_requests": 1},
        "workload": {
            "arrival": {"process": "closed", "concurrency": 1},
            "prompt_tokens": {"dist": "fixed", "value": 87},
            "output_tokens": {"dist": "fixed", "value": 10},
        },
        "cost_model": {"kind": "linear", "base": 0.005, "per_prefill_token": 0.0001},
        "scheduler": {"kind": "continuous"},
    }
    scn = des.load_scenario(data)
    fast, ref = des.simulate(scn), des.simulate(scn, fast_forward=False)
    start = fast.steps["start"].to_numpy()
    end = start + fast.steps["duration"].to_numpy()
    assert (start[1:] >= end[:-1]).all(), "a step starts before the previous one ended"
    assert fast.steps.equals(ref.steps)
    assert fast.requests.equals(ref.requests)


# -- the generator reaches the interesting regimes -----------------------------------

REACH = settings(PROPS, max_examples=300, phases=[Phase.generate])


def test_generator_reaches_preemption():
    scn = find(scenarios(), lambda s: des.simulate(s).summary["preemptions"] > 0, settings=REACH)
    assert scn.scheduler.kind == "continuous"


def test_generator_reaches_kv_rejection():
    find(
        scenarios(),
        lambda s: (des.simulate(s).requests["reason"] == "exceeds_kv_capacity").any(),
        settings=REACH,
    )


# -- deterministic KV-pressure cases ---------------------------------------------------

QWEN_WEIGHTS = 15_231_233_024
KV_PER_TOKEN = 57_344


def tiny_kv(scheduler: dict[str, Any], blocks: int, **workload) -> dict[str, Any]:
    data = {
        "seed": 3,
        "gpu": BASE_GPU,
        "model": MODEL,
        "horizon": {"num_requests": 6, "drain": True},
        "workload": {
            "arrival": {"process": "poisson", "rate": 1000.0},
            "prompt_tokens": {"dist": "fixed", "value": 40},
            "output_tokens": {"dist": "fixed", "value": 40},
            **workload,
        },
        "cost_model": {"kind": "constant", "step_time": 0.01},
        "scheduler": {"block_size": 16, "gpu_memory_utilization": 0.92, **scheduler},
    }
    return with_kv_tokens(data, blocks * 16)


def test_memory_override_sizes_the_kv_cache():
    data = tiny_kv({"kind": "continuous", "max_num_seqs": 4}, blocks=8)
    scn = des.load_scenario(data)
    plan = scn.memory_plan()
    assert plan.weights == QWEN_WEIGHTS
    assert plan.kv_bytes_per_token == KV_PER_TOKEN
    assert plan.runtime_reserve == 1 << 30
    assert plan.num_blocks == 8
    assert des.simulate(scn).summary["kv_capacity_tokens"] == 128


def test_tiny_kv_preempts():
    # 6 requests of 40 + 40 tokens (peak 79 tokens = 5 blocks) on 8 blocks: two fit at
    # first (3 blocks each); when both pass 64 tokens they need 10 blocks -> preemption.
    scn = des.load_scenario(tiny_kv({"kind": "continuous", "max_num_seqs": 4}, blocks=8))
    res = check_all(scn)
    assert res.summary["preemptions"] > 0
    assert res.summary["num_completed"] == 6
    assert (res.steps["kv_blocks"] <= 8).all()
    assert res.steps["kv_blocks"].max() == 8


@pytest.mark.parametrize("kind", ["continuous", "static"])
def test_tiny_kv_rejects_what_never_fits(kind):
    sched = (
        {"kind": "continuous", "max_num_seqs": 4} if kind == "continuous" else {"kind": "static", "max_batch_size": 4}
    )
    # 8 blocks hold 128 tokens: prompts of 1..150 with 10 outputs -> peaks 10..159
    data = tiny_kv(
        sched,
        blocks=8,
        prompt_tokens={"dist": "uniform", "low": 1, "high": 150},
        output_tokens={"dist": "fixed", "value": 10},
    )
    data["horizon"] = {"num_requests": 40, "drain": True}
    scn = des.load_scenario(data)
    res = check_all(scn)
    req = res.requests
    big = req["prompt_tokens"] + 10 - 1 > 128
    assert big.any() and (~big).any()
    assert (req.loc[big, "status"] == REJECTED).all()
    assert (req.loc[big, "reason"] == "exceeds_kv_capacity").all()
    assert (req.loc[~big, "status"] == COMPLETED).all()


def test_check_helpers_can_fail():
    """The checks are not vacuous: a tampered result trips them."""
    scn = des.load_scenario(tiny_kv({"kind": "continuous", "max_num_seqs": 4}, blocks=8))
    res = des.simulate(scn)
    bad = res.requests.copy()
    bad.loc[0, "ttft"] += 1e-9
    with pytest.raises(AssertionError):
        check_latency_columns(type(res)(res.scenario, bad, res.steps, res.summary))
    steps = res.steps.copy()
    steps.loc[0, "kv_blocks"] = 9
    with pytest.raises(AssertionError):
        check_kv(scn, type(res)(res.scenario, res.requests, steps, res.summary))
    bad = res.requests.copy()
    bad["status"] = bad["status"].astype(object)
    bad.loc[0, "status"] = "lost"
    with pytest.raises(AssertionError):
        check_accounting(scn, type(res)(res.scenario, bad, res.steps, res.summary))
    steps = res.steps.copy()
    steps.loc[0, "duration"] = 0.02
    with pytest.raises(AssertionError):
        check_steps(scn, type(res)(res.scenario, res.requests, steps, res.summary))
    bad = res.requests.copy()
    bad.loc[0, "first_token_time"] = bad.loc[0, "finish_time"] + 1.0
    with pytest.raises(AssertionError):
        check_ordering(scn, type(res)(res.scenario, bad, res.steps, res.summary))
    steps = res.steps.copy()
    steps.loc[len(steps) - 1, "tokens_emitted"] += 1
    with pytest.raises(AssertionError):
        check_tokens(scn, type(res)(res.scenario, res.requests, steps, res.summary))
    steps = res.steps.copy()
    steps.loc[0, "batch_size"] = 5
    steps.loc[0, "batch_width"] = 5
    with pytest.raises(AssertionError):
        check_steps(scn, type(res)(res.scenario, res.requests, steps, res.summary))
    static = des.load_scenario(tiny_kv({"kind": "static", "max_batch_size": 4}, blocks=40))
    sres = des.simulate(static)
    steps = sres.steps.copy()
    steps.loc[1, "batch_width"] += 1
    with pytest.raises(AssertionError):
        check_steps(static, type(sres)(sres.scenario, sres.requests, steps, sres.summary))
