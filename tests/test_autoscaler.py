"""Autoscaling (des.engine.autoscaler): instances that start after a cold start, serve, drain
and stop; the GPU-hours they are paid for; and the run reported per window."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

import des
from des.engine.autoscaler import OFF, SERVING, Autoscaler, Fleet
from des.metrics import Result
from des.simulation import build, run_until, stop_event
from tests.helpers import des_cli

#: One step of the constant cost model: 5/16 s, exact in binary, so the timeline below is exact.
STEP = 0.3125


def fleet_of(cluster) -> Fleet:
    fleet = cluster.topology.pools[0].fleet
    assert fleet is not None
    return fleet


def record_usage(scaler: Autoscaler, env) -> list[tuple[float, float]]:
    """Every reading of ``scaler``'s metric, as (time, usage), as the run makes them."""
    seen: list[tuple[float, float]] = []
    usage = scaler.usage

    def spy() -> tuple[float, int]:
        value = usage()
        seen.append((env.now, value[0]))
        return value

    scaler.usage = spy  # type: ignore[method-assign]
    return seen


def finish(sc: des.Scenario, env, cluster, procs) -> Result:
    """Run a scenario built with :func:`des.simulation.build` to its end, and its result."""
    from des.metrics.result import build_result

    run_until(env, stop_event(sc, env, cluster, procs))
    return build_result(sc, cluster, end_time=env.now)


def constant_scenario(
    seed: int, duration: float, step: float, arrival: dict[str, Any], prompt: int, output: dict[str, Any],
    cluster: dict[str, Any], **extra: Any,
) -> des.Scenario:  # fmt: skip
    """A run whose every step takes ``step`` seconds: ``arrival``s of ``prompt`` tokens and
    ``output`` lengths for ``duration`` seconds on ``cluster`` (``extra``: other sections)."""
    return des.load_scenario(
        {
            "seed": seed,
            "horizon": {"duration": duration},
            "cost_model": {"kind": "constant", "step_time": step},
            "workload": {
                "arrival": arrival,
                "prompt_tokens": {"dist": "fixed", "value": prompt},
                "output_tokens": output,
            },
            "cluster": cluster,
            **extra,
        }
    )


def write_step_trace(path) -> None:
    """Arrivals every 0.5 s up to t = 100, then every 0.25 s up to t = 200: one instance
    serving one request per 0.3125 s step keeps up with the first (ρ = 0.625), not the second."""
    times = [0.5 * k for k in range(1, 201)] + [100 + 0.25 * k for k in range(1, 401)]
    rows = "".join(f"{t!r},10,1\n" for t in times)
    path.write_text("arrival_time,prompt_tokens,output_tokens\n" + rows)


def step_scenario(trace, cold_start: float, **autoscaler) -> des.Scenario:
    scaling = {"metric": "queue_length", "target": 1, "min_instances": 1, "max_instances": 2, "interval": 10}
    scaling |= {"cold_start": cold_start, **autoscaler}
    return des.load_scenario(
        {
            "seed": 0,
            "horizon": {"drain": True},
            "workload": {"arrival": {"process": "trace", "path": str(trace), "absolute_times": True}},
            "cost_model": {"kind": "constant", "step_time": STEP},
            "scheduler": {"kind": "continuous", "max_num_seqs": 1},
            "cluster": {"replicas": 1, "router": "least_outstanding", "autoscaler": scaling},
            "slo": {"ttft": 2},
        }
    )


def test_the_cold_start_moves_the_recovery_by_exactly_its_change(tmp_path):
    """Hand-worked timeline. Up to t = 100 every request is served at once (TTFT one step).
    From then on the j-th arrival (at 100 + 0.25 j) queues behind the others: its step ends
    at 100 + 0.3125 (j + 1), so TTFT_j = 0.3125 + 0.0625 j, over 2 s from j = 28 (t = 107).
    At the tick of t = 110, 8 requests wait (40 arrived, 32 steps begun): desired = 8 / 1,
    capped at 2, so a second instance starts and serves from 110 + C. The router sends every
    arrival from then on to it (it holds the fewest), so the last breaching request is the
    last arrival before 110 + C: the first breach stays at 107 s and the recovery (the first
    arrival after the last breach) moves by exactly the change of the cold start."""
    trace = tmp_path / "step.csv"
    write_step_trace(trace)
    results = {}
    for cold in (10.125, 20.125):
        res = des.simulate(step_scenario(trace, cold))
        req = res.requests
        after = req[req["arrival_time"] > 100].reset_index(drop=True)
        j = np.arange(1, 29)
        assert after["ttft"].to_numpy()[:28] == pytest.approx(STEP + 0.0625 * j, abs=1e-12)
        bad = req.loc[req["ttft"] > 2, "arrival_time"]
        recovery = float(req.loc[req["arrival_time"] > bad.max(), "arrival_time"].min())
        results[cold] = (float(bad.min()), recovery)
        assert recovery == math.ceil((110 + cold) / 0.25) * 0.25  # the first arrival after it serves
        assert res.summary["scale_ups"] == 1 and res.summary["num_completed"] == 600
        # GPU-hours: one instance from 0 to 110 s, two from then to the end, paid from the decision
        end = res.summary["makespan"]
        assert res.summary["gpu_hours"] == (110 * 1 + (end - 110) * 2) / 3600
    (first_a, rec_a), (first_b, rec_b) = results[10.125], results[20.125]
    assert first_a == first_b == 107.0
    assert rec_b - rec_a == 20.125 - 10.125


def test_an_autoscaler_that_never_acts_is_the_fixed_cluster_exactly():
    base = des.load_scenario(
        None, ["horizon.duration=120", "workload.arrival.rate=18", "cluster.replicas=2", "slo.ttft=2"]
    ).resolved()
    fixed = des.simulate(des.load_scenario(base))
    base["cluster"]["autoscaler"] = {"metric": "running", "target": 5, "min_instances": 2, "max_instances": 2}
    base["cluster"]["autoscaler"]["interval"] = 7
    scaled = des.simulate(des.load_scenario(base))
    pd.testing.assert_frame_equal(fixed.requests, scaled.requests)
    pd.testing.assert_frame_equal(fixed.steps, scaled.steps)
    pd.testing.assert_frame_equal(fixed.windows, scaled.windows)
    assert fixed.summary == scaled.summary


def test_a_split_with_autoscaled_pools_that_never_act_is_the_fixed_split_exactly():
    split = {"kind": "disaggregated", "prefill": {"instances": 1}, "decode": {"instances": 2}}
    base = des.load_scenario(
        None, ["horizon.duration=120", "warmup=10", "workload.arrival.rate=6", ("scheduler", split)]
    )
    fixed = des.simulate(base)
    still = {"metric": "kv_use", "target": 0.5, "min_instances": 2, "max_instances": 2, "interval": 5}
    pinned = {**split, "decode": {"instances": 2, "autoscaler": still}}
    pinned["prefill"] = {"instances": 1, "autoscaler": {**still, "min_instances": 1, "max_instances": 1}}
    scaled = des.simulate(
        des.load_scenario(None, ["horizon.duration=120", "warmup=10", "workload.arrival.rate=6", ("scheduler", pinned)])
    )
    pd.testing.assert_frame_equal(fixed.requests, scaled.requests)
    pd.testing.assert_frame_equal(fixed.steps, scaled.steps)
    assert fixed.summary == scaled.summary


def test_gpu_hours_are_the_integral_of_paying_instances_over_time(tmp_path):
    """Per window and over the run, GPU-hours are the paying timeline's integral times the
    GPUs of an instance (tp = 2 doubles them), and the windows add up to the run."""
    trace = tmp_path / "step.csv"
    write_step_trace(trace)
    sc = step_scenario(trace, 5.0, cooldown=20)
    env, cluster, procs = build(sc)
    res = finish(sc, env, cluster, procs)
    assert res.windows is not None
    line = fleet_of(cluster).timeline
    times = [*line.times, env.now]
    integral = sum(p * (b - a) for p, a, b in zip(line.paying, times[:-1], times[1:], strict=True))
    assert res.summary["gpu_hours"] == pytest.approx(integral / 3600, rel=1e-15)
    assert res.summary["scale_downs"] >= 1  # it scaled in once the backlog was gone: the timeline is not flat
    assert sum(line.paying[i] != line.paying[i - 1] for i in range(1, len(line.paying))) >= 2
    assert res.windows["gpu_hours"].sum() == pytest.approx(res.summary["gpu_hours"], rel=1e-12)
    assert res.windows["arrived"].sum() == res.summary["num_requests"]
    assert res.windows["completed"].sum() == res.summary["num_completed"]
    tp2 = des.simulate(des.load_scenario(sc.resolved(), ["cluster.tp=2"]))
    assert tp2.summary["gpu_hours"] == pytest.approx(2 * res.summary["gpu_hours"], rel=1e-12)


def test_scale_from_zero_puts_the_cold_start_in_the_first_ttft():
    scaling = {"metric": "running", "target": 4, "min_instances": 0, "max_instances": 2, "cold_start": 30}
    sc = constant_scenario(
        1, 900, 0.02, {"process": "poisson", "rate": 0.01}, 100, {"dist": "fixed", "value": 10},
        {"replicas": 0, "autoscaler": {**scaling, "cooldown": 60}},
    )  # fmt: skip
    res = des.simulate(sc)
    req = res.requests.sort_values("arrival_time")
    assert res.summary["num_completed"] == res.summary["num_requests"] > 5
    first = req.iloc[0]
    assert first["ttft"] == pytest.approx(30 + 0.02, abs=1e-9)  # the cold start, then its prefill step
    assert first["e2e"] == pytest.approx(30 + 10 * 0.02, abs=1e-9)
    # idle in between, the instance stops: it is paid for a fraction of the run
    assert res.summary["scale_ups"] >= 2 and res.summary["scale_downs"] >= 2
    assert 0 < res.summary["instances_paying_mean"] < 1


def test_a_draining_instance_takes_nothing_new_and_finishes_what_it_holds(tmp_path):
    trace = tmp_path / "step.csv"
    write_step_trace(trace)
    sc = step_scenario(trace, 5.0, cooldown=20)
    env, cluster, procs = build(sc)
    fleet = fleet_of(cluster)
    drains: list[tuple[float, int]] = []
    stop = fleet.stop

    def spy(n: int) -> None:
        before = [inst.index for inst in fleet.active]
        stop(n)
        after = {inst.index for inst in fleet.active}
        drains.extend((env.now, i) for i in before if i not in after)

    fleet.stop = spy  # type: ignore[method-assign]
    req = finish(sc, env, cluster, procs).requests
    assert drains, "the backlog clears and an instance drains"
    assert (req["status"] == "completed").all()
    for when, inst in drains:
        later = req[(req["arrival_time"] > when) & (req["instance"] == inst)]
        revived = [t for t, s in zip(fleet.timeline.times, fleet.timeline.serving, strict=True) if t > when and s == 2]
        assert later.empty or (revived and later["arrival_time"].min() >= revived[0])
    assert fleet.state.count(OFF) + fleet.state.count(SERVING) == len(fleet.state)


def test_utilization_is_the_exact_busy_share_of_the_last_interval():
    never = {"scale_up_threshold": 1, "scale_down_threshold": 0, "min_instances": 2, "max_instances": 2}
    sc = constant_scenario(
        2, 100, 0.05, {"process": "poisson", "rate": 3}, 10, {"dist": "geometric", "mean": 5},
        {"replicas": 2, "autoscaler": {"metric": "utilization", "target": 0.5, "interval": 10, **never}},
        scheduler={"kind": "continuous", "max_num_seqs": 1},
    )  # fmt: skip
    env, cluster, procs = build(sc)
    scaler = fleet_of(cluster).autoscaler
    assert scaler is not None
    seen = record_usage(scaler, env)
    steps = finish(sc, env, cluster, procs).steps
    start, end = steps["start"].to_numpy(), (steps["start"] + steps["duration"]).to_numpy()
    for now, share in seen:
        busy = np.clip(np.minimum(end, now) - np.maximum(start, now - 10), 0, None).sum()
        assert share == pytest.approx(busy / 10, abs=1e-9)
    assert len(seen) >= 9 and max(u for _, u in seen) > 0.3


def test_a_restarted_instance_comes_back_with_an_empty_prefix_cache():
    from des.engine.prefix_cache import PrefixCache

    cache = PrefixCache(64, 16)
    cache.restart()
    assert cache.free == 64 and not cache.cached
    cache.take(3)
    with pytest.raises(RuntimeError, match="holding KV"):
        cache.restart()


@pytest.mark.parametrize(
    ("override", "field", "words"),
    [
        ("cluster.autoscaler={metric: running, target: 2, min_instances: 3, max_instances: 2}",
         "cluster.autoscaler", "min_instances: 3 is more than max_instances"),
        ("cluster.autoscaler={metric: running, target: 2, max_instances: 2, cold_start: -5}",
         "cluster.autoscaler.cold_start", "must be >= 0 seconds"),
        ("cluster.autoscaler={metric: kv_use, target: 2, max_instances: 2}", "cluster.autoscaler",
         "target: 2 is beyond 1"),
        ("cluster.autoscaler={metric: running, target: 2, min_instances: 2, max_instances: 4}", "cluster",
         "replicas: 1 instances at the start lie outside"),
        ("cluster.autoscaler={metric: speed, target: 2, max_instances: 4}", "cluster.autoscaler.metric", "speed"),
        ("cluster.autoscaler={target: 2, max_instances: 4}", "cluster.autoscaler.metric", "required"),
        ("cluster.replicas=0", "cluster", "0 instances serve nothing"),
    ],
)  # fmt: skip
def test_bad_autoscaler_input_is_one_clear_line(tmp_path, override, field, words):
    proc = des_cli("run", "--set", override, "--out", str(tmp_path / "out"))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith(f"error: {field}") and words in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_each_long_segment_queues_as_erlang_c_for_its_instance_count():
    """Piecewise-constant load (nhpp), instant cold starts, random routing: each instance of
    ``c`` slots is an M/M/c queue fed by its Poisson share (Poisson splitting is exact), so the
    queueing of a long segment is Erlang C for the instance count the autoscaler settles on:
    one instance at 1.5 req/s, then two at 5 req/s (one alone would be overloaded, ρ = 1.25).
    The thresholds keep it from scaling back: up when more than 22 wait per instance, never
    down. The first 300 s of each segment (the switch's backlog) are left out."""
    from tests.test_queueing_theory import check_mean, erlang_c

    c, s, mean_tokens = 4, 0.01, 100.0  # service geometric x 10 ms: mean 1 s, close to exponential
    switch, end = 6000.0, 9000.0
    steps = {"process": "nhpp", "schedule": {"kind": "piecewise", "times": [0, switch], "rates": [1.5, 5]}}
    sc = constant_scenario(
        5, end, s, steps, 1, {"dist": "geometric", "mean": mean_tokens},
        {"replicas": 1, "router": "random", "autoscaler": {
            "metric": "queue_length", "target": 20, "scale_up_threshold": 22, "scale_down_threshold": 0,
            "min_instances": 1, "max_instances": 2, "interval": 5, "cold_start": 0}},
        scheduler={"kind": "continuous", "max_num_seqs": c},
    )  # fmt: skip
    res = des.simulate(sc)
    assert res.summary["scale_ups"] == 1 and res.summary["scale_downs"] == 0
    mu = 1 / (mean_tokens * s)
    req = res.requests[res.requests["status"] == "completed"]
    for lo, hi, rate, n in ((300.0, switch, 1.5, 1), (switch + 300, end, 5.0, 2)):
        seg = req[(req["arrival_time"] >= lo) & (req["arrival_time"] < hi)]
        per = rate / n
        wq = erlang_c(c, per / mu) / (c * mu - per)
        check_mean(seg["queue_delay"].to_numpy(), wq, extra=s)
        if n == 2:
            share = (seg["instance"] == 0).mean()
            assert abs(share - 0.5) <= 4 * math.sqrt(0.25 / len(seg))


def test_both_pools_of_a_split_scale_with_the_load():
    """A burst of 30 req/s between 120 s and 360 s: the prefill pool scales on its queue, the
    decode pool on its KV use, and both come back down once the burst is over; every request
    is served, the decode instances started serve their share."""
    scaling = {"min_instances": 1, "max_instances": 3, "cold_start": 20, "cooldown": 60}
    split = {
        "kind": "disaggregated",
        "prefill": {"instances": 1, "autoscaler": {"metric": "queue_length", "target": 4, **scaling}},
        "decode": {"instances": 1, "autoscaler": {"metric": "kv_use", "target": 0.5, **scaling}},
    }
    burst = {"process": "nhpp", "schedule": {"kind": "piecewise", "times": [0, 120, 360], "rates": [2, 30, 2]}}
    sets: list[str | tuple[str, Any]] = [("scheduler", split), ("workload.arrival", burst)]
    sets += ["horizon.duration=600", "warmup=0", "metrics.window=60"]
    res = des.simulate(des.load_scenario(None, sets))
    w = res.windows
    assert w is not None
    assert res.summary["num_completed"] == res.summary["num_requests"]
    before, during, after = w[w["end"] <= 120], w[(w["start"] >= 180) & (w["end"] <= 360)], w[w["start"] >= 480]
    for role in ("prefill", "decode"):
        assert (before[f"{role}_paying"] == 1).all() and (after[f"{role}_paying"] == 1).all()
        assert during[f"{role}_paying"].max() > 1.5
    decoded = res.requests.groupby("decode_instance").size()
    assert len(decoded.drop(-1, errors="ignore")) >= 2  # a started decode instance served
    assert res.summary["scale_ups"] >= 2 and res.summary["scale_downs"] >= 2


def test_arrival_rate_scales_to_the_load_over_what_one_instance_carries():
    """``arrival_rate`` counts the requests routed in the last interval: with a target of what
    one instance carries (3 req/s), 10 req/s settle on ceil(10 / 3) = 4 instances."""
    sc = constant_scenario(
        4, 1200, 0.02, {"process": "poisson", "rate": 10}, 10, {"dist": "fixed", "value": 5},
        {"replicas": 1, "autoscaler": {
            "metric": "arrival_rate", "target": 3, "min_instances": 1, "max_instances": 8, "interval": 30,
            "cold_start": 10}},
        metrics={"window": 60},
    )  # fmt: skip
    env, cluster, procs = build(sc)
    scaler = fleet_of(cluster).autoscaler
    assert scaler is not None
    seen = record_usage(scaler, env)
    res = finish(sc, env, cluster, procs)
    arrivals = res.requests["arrival_time"].to_numpy()
    for now, rate in seen:
        assert rate == ((arrivals > now - 30) & (arrivals <= now)).sum() / 30
    w = res.windows
    assert w is not None
    settled = w[(w["start"] >= 120) & (w["end"] <= 1200)]
    assert (settled["instances_serving"].round() == 4).mean() >= 0.8


def test_a_request_finding_every_instance_draining_brings_one_back():
    """With min_instances 0 the fleet may drain to nothing serving while an instance still
    finishes its requests: the next request brings that draining instance back at once,
    without a cold start."""
    sc = constant_scenario(
        0, 10, 1.0, {"process": "poisson", "rate": 1}, 10, {"dist": "fixed", "value": 5},
        {"replicas": 1, "autoscaler": {
            "metric": "running", "target": 4, "min_instances": 0, "max_instances": 1, "cold_start": 30}},
    )  # fmt: skip
    _, cluster, _ = build(sc)
    fleet = fleet_of(cluster)
    inst = fleet.instances[0]
    inst.outstanding = 1  # a request still held: draining, not stopped
    fleet.stop(1)
    assert fleet.state == ["draining"] and not fleet.active
    entrance = fleet.entrance()
    assert entrance == (inst, 0.0) and fleet.state == ["serving"]
    assert (fleet.scale_ups, fleet.scale_downs) == (1, 1)  # brought back: a scale-up, as its drain was a scale-down
