"""``des plan`` (des.plan): candidates, bounds that cannot be wrong, verdicts from the study's
intervals, and the cheapest passing configuration against queueing theory."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

import des
from des.catalog.prices import PriceBook
from des.errors import ScenarioError
from des.plan.planner import plan
from des.plan.space import Candidate, build, candidates, prune, refusals
from des.study.capacity import Search, metric_names, parse_slo
from des.study.runner import open_backend
from des.study.spec import RATE
from tests.helpers import des_cli

STEP = 0.1  # seconds: one request per step (one output token, one slot)


def md1_scenario() -> des.Scenario:
    """Deterministic service of 0.1 s per request on each GPU, Poisson arrivals, random routing:
    each of ``c`` replicas is an M/D/1 queue fed λ/c (Poisson splitting is exact)."""
    return des.load_scenario(
        {
            "name": "md1",
            "seed": 11,
            "horizon": {"duration": 2000, "drain": False},
            "warmup": 100,
            "workload": {
                "arrival": {"process": "poisson", "rate": 1.0},
                "prompt_tokens": {"dist": "fixed", "value": 1},
                "output_tokens": {"dist": "fixed", "value": 1},
            },
            "cost_model": {"kind": "constant", "step_time": STEP},
            "scheduler": {"kind": "continuous", "max_num_seqs": 1},
            "cluster": {"replicas": 1, "router": "random"},
        }
    )


def pk_wait(rate: float) -> float:
    """Pollaczek–Khinchine: mean queue delay of M/D/1 with service ``STEP`` at ``rate``."""
    rho = rate * STEP
    return rho * STEP / (2 * (1 - rho)) if rho < 1 else math.inf


@pytest.mark.slow
def test_the_cheapest_passing_count_is_the_queueing_answer(tmp_path):
    """At 25 req/s under a mean-queue-delay limit of 24 ms, P-K per replica gives
    W(c) = 0.1·(2.5/c) / (2·(1 − 2.5/c)): c = 3 waits 0.25 s, 4 waits 83 ms, 5 waits 50 ms,
    6 waits 36 ms, 7 waits 28 ms, 8 waits 22 ms: eight GPUs, and no fewer (each mean known
    to about ±1 ms from 3 replications of 2,000 s)."""
    rate, limit = 25.0, 0.024
    need = next(c for c in range(1, 20) if pk_wait(rate / c) <= limit)
    assert need == 8 and pk_wait(rate / 7) > 0.027
    slo = parse_slo(f"queue_delay_mean<={limit}", metric_names())
    book = PriceBook.from_catalog()
    with open_backend("local", 2) as runner:
        result = plan(
            md1_scenario(), rate, [slo], ["rtx4090"], 10, book, 3, runner, tmp_path / "runs", splits=False, runners_up=1
        )
    win = result.winner
    assert win is not None and win.candidate == Candidate("rtx4090", 1, "continuous", replicas=need)
    # every cheaper candidate was simulated and failed, or was refused (a tp that does not divide the heads)
    assert win.usd_per_hour is not None
    cheaper = [o for o in result.outcomes if (o.usd_per_hour or 0) < win.usd_per_hour]
    assert cheaper and all(o.verdict == "fail" or o.reason.startswith("refused") for o in cheaper)
    # the winner, re-simulated with 10 replications, meets the SLO; one replica fewer fails it
    base = md1_scenario().resolved()
    with open_backend("local", 2) as runner:
        for replicas, holds in ((need, True), (need - 1, False)):
            cand = Candidate("rtx4090", 1, "continuous", replicas=replicas)
            sc = cand.overrides(base) | {"name": f"check-{replicas}"}
            sc["workload"]["arrival"]["rate"] = rate
            scenario = des.load_scenario(sc).resolved()
            ev = Search(scenario, RATE, [slo], 10, runner, tmp_path / f"check{replicas}").evaluate(rate)
            assert ev.surely_holds is holds and (ev.surely_fails or holds)
            w = ev.metrics["queue_delay_mean"][0]
            assert w == pytest.approx(pk_wait(rate / replicas), rel=0.15)


def test_pruning_never_discards_what_simulation_would_pass(tmp_path):
    """On the default scenario (RTX 4090, Qwen2.5-7B, roofline) the bounds prune one 4090 at
    17 req/s (at most 16.9 at its peaks); simulated anyway, it fails."""
    base = des.load_scenario(None, ["horizon.duration=120", "warmup=20"])
    data = base.resolved()
    data["workload"]["arrival"]["rate"] = 17.0  # the bounds prune what this rate cannot be carried on
    slo = parse_slo("ttft_p99<=2", metric_names())
    pruned = []
    for cand in candidates(base, ["rtx4090"], 2, splits=True):
        sc, why = prune(cand, data, 17.0)
        if why and sc is not None:
            pruned.append((cand, sc))
    assert [c.name for c, _ in pruned] == ["rtx4090/tp1/x1"]
    with open_backend("local", 2) as runner:
        for _, sc in pruned:
            ev = Search(sc.resolved(), RATE, [slo], 3, runner, tmp_path / "pruned").evaluate(17.0)
            assert not ev.holds


def test_bounds_hold_the_simulated_throughput():
    """The bound is above what the roofline serves flat out (a closed loop that keeps every
    slot busy) on colocated and split configurations."""
    from des.plan.space import throughput_bound

    for cand in (Candidate("rtx4090", 1, "continuous", replicas=1), Candidate("rtx4090", 1, "disaggregated", 0, 1, 1)):
        data = des.load_scenario(None).resolved()
        sc = des.load_scenario(cand.overrides(data))
        closed = des.load_scenario(
            sc.resolved(),
            [("workload.arrival", {"process": "closed", "concurrency": 256}), "horizon.duration=60", "warmup=10"],
        )
        served = des.simulate(closed).summary["throughput_rps"]
        assert served <= throughput_bound(sc)


def test_the_cli_writes_the_plan_and_says_why_cheaper_ones_failed(tmp_path):
    out = tmp_path / "plan"
    proc = des_cli(
        "plan", "--rate", "20", "--slo", "ttft_p99<=2", "--gpus", "rtx4090,l40s", "--max-gpus", "2",
        "--no-splits", "--set", "horizon.duration=120", "--set", "warmup=20", "--out", str(out), "--json",
        # stated: at vllm serve's 256 sequences one L40S already carries 20 req/s
        "--set", "scheduler.max_num_seqs=128", "--set", "scheduler.gpu_memory_utilization=0.92",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    body = json.loads(proc.stdout)
    win = body["winner"]
    keys = ["gpu", "num_gpus", "tp", "pp", "dp", "scheduler", "prefill_instances", "decode_instances"]
    keys += ["max_num_seqs", "max_num_batched_tokens", "cost_per_hour", "cost_per_million_tokens", "scenario"]
    assert all(key in win for key in keys)
    assert win["name"] == "rtx4090/tp1/x2" and win["cost_per_hour"] == pytest.approx(2 * 0.69)
    assert (out / win["scenario"]).is_file() and (out / "pareto.png").read_bytes()[:4] == b"\x89PNG"
    rows = pd.read_parquet(out / "candidates.parquet")
    assert set(rows["verdict"]) <= {"pass", "fail", "marginal", "pruned"}
    one = rows[rows["name"] == "rtx4090/tp1/x1"].iloc[0]
    assert one["verdict"] == "pruned" and "at most" in one["reason"]
    assert any(c["name"] == "l40s/tp1/x1" and c["verdict"] in ("fail", "marginal") for c in body["cheaper"])
    [launch] = win["launch"]
    assert launch["instances"] == 2 and launch["argv"][:3] == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]
    assert "--max-num-seqs" in launch["argv"] and "--gpu-memory-utilization" in launch["argv"]
    # the winner's scenario file runs as it is
    rerun = des.load_scenario(Path(out / win["scenario"]))
    assert rerun.cluster.pools[0].instances == 2 and rerun.gpu.name == "rtx4090"


def test_an_slo_nothing_meets_names_the_closest(tmp_path):
    proc = des_cli(
        "plan", "--rate", "5", "--slo", "ttft_p99<=0.001", "--gpus", "rtx4090", "--max-gpus", "1",
        "--set", "horizon.duration=60", "--set", "warmup=10", "--out", str(tmp_path / "p"), "--json",
    )  # fmt: skip
    assert proc.returncode == 1
    body = json.loads(proc.stdout)
    assert body["winner"] is None and body["closest"]["name"] == "rtx4090/tp1/x1"
    assert "no configuration meets the SLOs; the closest is rtx4090/tp1/x1 (margin" in body["answer"]


@pytest.mark.parametrize(
    ("args", "start"),
    [
        (["--gpus", "rtx409"], "error: --gpus: unknown GPU 'rtx409' (did you mean 'rtx4090'?)"),
        (["--price", "h100=2"], "error: --price: unknown GPU 'h100'"),
        (["--price", "rtx4090=-1"], "error: --price:"),
    ],
)
def test_bad_plan_input_is_one_line(tmp_path, args, start):
    proc = des_cli("plan", "--rate", "5", "--slo", "ttft_p99<=2", *args, "--out", str(tmp_path / "p"))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), proc.stderr


def test_a_gpus_list_that_names_none_is_one_line_and_writes_nothing(tmp_path):
    proc = des_cli("plan", "--rate", "5", "--slo", "ttft_p99<=2", "--gpus", " , ", "--out", str(tmp_path / "p"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --gpus: no GPU given; known: ") and len(proc.stderr.splitlines()) == 1
    assert not (tmp_path / "p").exists()


def test_the_space_counts_shapes_mixed_splits_and_engine_settings():
    base = des.load_scenario(None)
    plain = candidates(base, ["rtx4090"], 4)
    # tp 1: 4 colocated + splits of 2..4 engines (1 + 2 + 3); tp 2: 2 colocated + 1 split; tp 4: 1
    assert len(plain) == 4 + 6 + 2 + 1 + 1
    mixed = candidates(base, ["rtx4090", "l40s"], 2, mixed=True)
    split = [c for c in mixed if c.decode_gpu is not None]
    assert {(c.gpu, c.decode_gpu) for c in split} == {("rtx4090", "l40s"), ("l40s", "rtx4090")}
    assert split[0].gpu_counts() == {split[0].gpu: 1, split[0].decode_gpu: 1}
    knobs = candidates(base, ["rtx4090"], 1, max_num_seqs=[64, 256], max_num_batched_tokens=[2048, 8192])
    assert {(c.max_num_seqs, c.max_num_batched_tokens) for c in knobs} == {
        (64, 2048),
        (64, 8192),
        (256, 2048),
        (256, 8192),
    }
    policy = des.load_scenario(knobs[-1].overrides(base.resolved())).layout.pools[0].policy
    assert policy.max_batch == 256 and policy.token_budget == 8192
    awq = [c for c in candidates(base, ["rtx4090"], 1, variants=True) if c.variant is not None]
    assert [c.variant for c in awq] == ["Qwen/Qwen2.5-7B-Instruct-AWQ"]
    assert des.load_scenario(awq[0].overrides(base.resolved())).precision.weights == "int4-awq"
    moe = des.load_scenario(None, ["model=qwen3-30b-a3b", "precision.weights=int4-awq"])
    deep = candidates(moe, ["rtx4090"], 4, splits=False, pipeline=(1, 2))
    assert {(c.dp, c.pp) for c in deep} == {(1, 1), (2, 1), (4, 1), (1, 2), (2, 2)}
    ranked = [c for c in deep if c.dp == 2 and c.pp == 1 and c.replicas == 1][0]
    assert ranked.num_gpus == 2 and des.load_scenario(ranked.overrides(moe.resolved())).cluster.pools[0].expert_parallel
    hetero = des.load_scenario(split[0].overrides(base.resolved()))
    assert [p.gpu.name for p in hetero.layout.pools] == [split[0].gpu, split[0].decode_gpu]


@pytest.mark.parametrize(
    "sets",
    [
        # a mixture of experts: data-parallel ranks with EP, pipelined servers of them
        ["model=qwen3-30b-a3b", "precision.weights=int4-awq"],
        # speculation on a pipelined server, and a split that drops it
        ["speculative.method=ngram", "speculative.num_speculative_tokens=3", "speculative.acceptance_rate=0.7"],
    ],
)
def test_the_planner_asks_the_features_refusals_before_building(sets):
    """The candidate space asks every candidate the features' refusals (des.engine.features)
    before its scenario is built: each refusal found early is the first problem building the
    scenario raises, and a candidate with none builds (or is refused for its hardware only)."""
    base = des.load_scenario(None, sets)
    data = base.resolved()
    space = candidates(base, ["rtx4090", "l40s"], 4, mixed=True, pipeline=(1, 2))
    early = 0
    for cand in space:
        found = refusals(cand, base, data["cluster"])
        try:
            build(cand, data)
            built: list[tuple[str, str]] = []
        except ScenarioError as exc:
            built = exc.problems
        if found:
            early += 1
            assert built[:1] == found[:1], cand.name
            _, why = prune(cand, data, 1.0, base)
            assert why == f"refused: {found[0][0]}: {found[0][1]}"
        else:  # what building refuses then is the hardware's (it does not fit, heads do not divide)
            assert all(not path.startswith(("cluster.pools", "speculative")) for path, _ in built), (cand.name, built)
    assert early > 0


def test_a_trace_is_planned_at_its_recorded_rate_scaled(tmp_path):
    out = tmp_path / "trace"
    trace = "{process: trace, path: scenarios/traces/azure-sample.csv, format: azure}"
    proc = des_cli(
        "plan", "--rate-scale", "1", "--slo", "ttft_p99<=2", "--gpus", "rtx4090", "--max-gpus", "1",
        "--set", f"workload.arrival={trace}", "--set", "horizon.duration=null", "--set", "warmup=0",
        "--out", str(out), "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    body = json.loads(proc.stdout)
    assert body["load"] == {"param": "workload.arrival.rate_scale", "value": 1.0}
    stats = des.load_scenario(Path(out / body["winner"]["scenario"])).workload.arrival.stats()  # type: ignore[union-attr]
    assert body["rate"] == pytest.approx(stats.rate)
    wrong = des_cli("plan", "--rate", "3", "--slo", "ttft_p99<=2", "--set", f"workload.arrival={trace}")
    assert wrong.returncode == 2 and wrong.stderr.startswith("error: --rate-scale:")


def test_dask_and_local_processes_give_the_same_plan(tmp_path):
    base = des.load_scenario(None, ["horizon.duration=60", "warmup=10"])
    slo = parse_slo("ttft_p99<=2", metric_names())
    plans = []
    for kind in ("local", "dask"):
        with open_backend(kind, 2) as runner:
            plans.append(
                plan(
                    base,
                    10.0,
                    [slo],
                    ["rtx4090"],
                    2,
                    PriceBook.from_catalog(),
                    2,
                    runner,
                    tmp_path / kind,
                    splits=False,
                    runners_up=0,
                )  # fmt: skip
            )
    local, dask = plans
    assert [(o.candidate, o.verdict, o.reason) for o in local.outcomes] == [
        (o.candidate, o.verdict, o.reason) for o in dask.outcomes
    ]


def test_the_capacity_of_the_winner_is_searched_from_the_target_up(tmp_path):
    base = des.load_scenario(None, ["horizon.duration=120", "warmup=20"])
    slo = parse_slo("ttft_p99<=2", metric_names())
    with open_backend("local", 2) as runner:
        result = plan(base, 20.0, [slo], ["rtx4090"], 2, PriceBook.from_catalog(), 3, runner, tmp_path / "runs",
                      splits=False, runners_up=0, capacities=True)  # fmt: skip
    win = result.winner
    assert win is not None and win.capacity is not None
    value, low, high = win.capacity
    assert value is not None and low is not None and high is not None
    assert 20.0 <= low <= value <= high  # it passes at 20 req/s, so it carries at least that
