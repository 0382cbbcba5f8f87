"""Runs that never ended or blew up, and answers that were silently wrong (issue #37,
reliability-review-4's R1, R2, T2, T3, W6-W8, W10, W11, C4): the windows table follows the
traffic, not the clock; settings whose cost has no bound are refused with one line stating
the bound; vLLM's own refusals are des's; counters count like events; errors name the key
as written."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import des
from des.catalog.routing import Zipf, distinct_table, inclusion_probabilities
from des.engine.autoscaler import STARTING, Autoscaler
from des.engine.policy import MAX_BATCH
from des.engine.scaling import MAX_COLD_START, MIN_INTERVAL, AutoscalerConfig
from des.engine.speculative import MAX_SPECULATIVE_TOKENS
from des.metrics.result import build_result
from des.scenario import MIN_WINDOW
from des.simulation import build, run_until, stop_event
from tests.test_input_hardening import BASE, problems


def loads(*overrides: str | tuple[str, object], base: dict | None = None) -> des.Scenario:
    return des.load_scenario(base or BASE, list(overrides))


def trace(tmp_path: Path, times: list[float]) -> str:
    path = tmp_path / f"t{len(list(tmp_path.iterdir()))}.csv"
    path.write_text("arrival_time,prompt_tokens,output_tokens\n" + "".join(f"{t!r},200,20\n" for t in times))
    return str(path)


def replay(path: str, *overrides: str | tuple[str, object]) -> des.Scenario:
    return loads(("workload.arrival", {"process": "trace", "path": path}), "horizon={}", "warmup=0", *overrides)


# -- R1: the windows table grows with the traffic, not the clock ----------------------------


def test_a_stretch_where_nothing_happens_is_one_row_standing_for_its_windows(tmp_path):
    # two bursts a million seconds apart: 100,001 windows of 10 s, all but three idle
    res = des.simulate(replay(trace(tmp_path, [0, 1, 2, 1e6, 1e6 + 1]), "metrics.window=10"))
    w = res.windows
    assert w is not None and res.summary["windows"] == len(w) <= 5
    assert (w["start"].to_numpy()[1:] == w["end"].to_numpy()[:-1]).all() and w["start"].iloc[0] == 0
    assert w["end"].iloc[-1] == pytest.approx(res.summary["makespan"])
    idle = w[w["end"] - w["start"] > 10]
    assert len(idle) == 1 and idle["start"].iloc[0] == 10 and idle["end"].iloc[0] == 1e6
    row = idle.iloc[0]
    assert row[["arrived", "completed", "rejected", "unfinished", "output_tokens_per_s"]].sum() == 0
    assert np.isnan(row["ttft_p99"]) and row["slo_met"] is None
    # its instances are those of each window it stands for, its GPU-hours their sum
    assert row["instances_paying"] == pytest.approx(1.0) and row["instances_serving"] == pytest.approx(1.0)
    assert row["gpu_hours"] == pytest.approx((1e6 - 10) / 3600, rel=1e-12)
    assert row["cost"] == pytest.approx(row["gpu_hours"] * 0.69, rel=1e-12)  # the catalog's 4090
    busy = w.drop(idle.index)
    assert (busy["end"] - busy["start"] <= 10).all() and busy["arrived"].sum() == 5
    assert busy["completed"].sum() == 5 and busy["ttft_p99"].notna().sum() == 2
    assert res.summary["gpu_hours"] == pytest.approx(w["gpu_hours"].sum(), rel=1e-12)


def test_a_trace_of_epoch_timestamps_is_a_couple_of_rows(tmp_path):
    # 20 requests in 10 s at 1.7e9 s: 5.7 million windows of 300 s before the change
    path = trace(tmp_path, [1_700_000_000 + 0.5 * i for i in range(20)])
    sc = loads(("workload.arrival", {"process": "trace", "path": path, "absolute_times": True}), "horizon={}",
               "warmup=0")  # fmt: skip
    res = des.simulate(sc)
    w = res.windows
    assert w is not None and len(w) == 2 and w["arrived"].tolist() == [0, 20]
    assert w["gpu_hours"].sum() == pytest.approx(res.summary["gpu_hours"], rel=1e-12)


def test_an_ordinary_runs_windows_tile_it_one_by_one():
    res = des.simulate(loads("metrics.window=1", "horizon.duration=10", "warmup=0"))
    w = res.windows
    assert w is not None and w["start"].tolist() == list(range(len(w))) and len(w) >= 10


@pytest.mark.parametrize("window", ["1e-6", "1e-9", "0.5ms"])
def test_a_window_shorter_than_a_millisecond_is_refused(window):
    [(path, message)] = problems(f"metrics.window={window}")
    assert path == "metrics.window" and f"shorter than {MIN_WINDOW:g} s" in message
    assert loads("metrics.window=1ms").metrics.window == MIN_WINDOW


# -- R2: autoscaler settings whose cost had no bound ----------------------------------------

SCALED = {
    "metric": "queue_length", "target": 2, "min_instances": 0, "max_instances": 4, "interval": 1, "cooldown": 5,
    "cold_start": 20,
}  # fmt: skip


def scaled(**autoscaler: object) -> dict:
    return {**BASE, "horizon": {"duration": 60}, "warmup": 0,
            "cluster": {"replicas": 0, "autoscaler": {**SCALED, **autoscaler}}}  # fmt: skip


@pytest.mark.parametrize("interval", [0.001, 1e-6, 1e-9, "10ms"])
def test_an_interval_shorter_than_any_autoscaler_evaluates_is_refused(interval):
    [(path, message)] = problems(base=scaled(interval=interval))
    assert path == "cluster.autoscaler.interval" and f"shorter than {MIN_INTERVAL:g} s" in message
    assert loads(base=scaled(interval=MIN_INTERVAL)).deployment is not None


@pytest.mark.parametrize("cold_start", [1e9, 86_401, "25h", {"weights_bandwidth": 1000}, {"engine_start": 1e6}])
def test_a_cold_start_beyond_a_day_is_refused_however_written(cold_start):
    [(path, message)] = problems(base=scaled(cold_start=cold_start))
    assert path == "cluster.autoscaler.cold_start" and f"beyond {MAX_COLD_START:,.0f} s (a day)" in message
    assert loads(base=scaled(cold_start=MAX_COLD_START)).deployment is not None
    assert loads(base=scaled(cold_start="auto")).deployment is not None


def test_the_cold_start_bound_is_asked_of_a_pool_as_the_user_wrote_it():
    base = {
        **BASE,
        "cluster": {
            "pools": [
                {"instances": 1, "autoscaler": {**SCALED, "min_instances": 1, "cold_start": {"engine_start": 1e6}}}
            ]
        },
    }
    [(path, _)] = problems(base=base)
    assert path == "cluster.pools.0.autoscaler.cold_start"


class _Fleet:
    """As much of a Fleet as :meth:`Autoscaler.evaluate` reads: what it decides, kept."""

    def __init__(self) -> None:
        self.active: list[int] = [0]
        self.asked: list[int] = []

    def count(self, state: str) -> int:
        return 0

    def start(self, n: int) -> None:
        self.active += [0] * n
        self.asked.append(len(self.active))

    def stop(self, n: int) -> None:
        del self.active[:n]
        self.asked.append(len(self.active))


def stabilised(recommendations: list[int], cooldown_up: float, cooldown: float, cap: int) -> list[int]:
    """HPA's stabilisation by brute force: every decision from a scan of all the past."""
    current, out = 1, []
    for now, _ in enumerate(recommendations):
        seen = list(enumerate(recommendations[: now + 1]))
        up = min(d for t, d in seen if t >= now - cooldown_up)
        down = max(d for t, d in seen if t >= now - cooldown)
        new = up if up > current else down if down < current else current
        new = min(max(new, 0), cap)
        if new != current:
            out.append(new)
        current = new
    return out


@pytest.mark.parametrize(("cooldown_up", "cooldown"), [(0, 0), (0, 7), (3, 7), (7, 3), (5, 1000)])
def test_stabilisation_keeps_only_what_can_still_be_the_lowest_or_highest(cooldown_up, cooldown):
    rng = np.random.default_rng(37)
    recommendations = rng.integers(0, 9, 400).tolist() + [4] * 2000
    config = AutoscalerConfig.model_validate({**SCALED, "max_instances": 6, "cooldown_up": cooldown_up,
                                              "cooldown": cooldown})  # fmt: skip
    scaler = object.__new__(Autoscaler)
    clock = SimpleNamespace(now=0.0)
    fleet = _Fleet()
    scaler.env = clock  # type: ignore[assignment]
    scaler.fleet = fleet  # type: ignore[assignment]
    scaler.config = config
    scaler.lows, scaler.highs = deque(), deque()
    feed = iter(recommendations)
    scaler.recommend = lambda: next(feed)  # type: ignore[method-assign]
    for t in range(len(recommendations)):
        clock.now = float(t)
        scaler.evaluate()
    assert fleet.asked == stabilised(recommendations, cooldown_up, cooldown, 6)
    # 2,000 evaluations of one recommendation later, one of them is all it remembers
    assert len(scaler.lows) == len(scaler.highs) == 1


# -- W10: scale-ups and scale-downs count like events ---------------------------------------


def test_scale_ups_and_downs_add_up_to_the_change_in_instances_asked_for():
    # the review's scale-from-zero run: drains undone by a burst are scale-ups too
    sc = loads(base=scaled())
    env, cluster, procs = build(sc)
    run_until(env, stop_event(sc, env, cluster, procs))
    fleet = cluster.topology.pools[0].fleet
    assert fleet is not None
    res = build_result(sc, cluster, end_time=env.now)
    ups, downs = res.summary["scale_ups"], res.summary["scale_downs"]
    assert ups - downs == len(fleet.active) + fleet.count(STARTING) - 0  # none at t = 0
    serving = np.diff(np.frombuffer(fleet.timeline.serving, dtype=np.int64))
    assert ups >= serving[serving > 0].sum() > 0 and downs >= -serving[serving < 0].sum() > 0


# -- T2, T3, W8: engine settings beyond what vLLM (or a run) takes --------------------------


SPEC = {"method": "ngram", "acceptance_rate": 0.5}


@pytest.mark.parametrize(
    ("key", "value", "bound", "echo"),
    [
        ("scheduler.max_num_seqs", 10**23, MAX_BATCH, 10**23),
        ("scheduler.max_num_seqs", MAX_BATCH + 1, MAX_BATCH, MAX_BATCH + 1),
        ("scheduler", {"kind": "static", "max_batch_size": 10**23}, MAX_BATCH, 10**23),
        ("speculative", {**SPEC, "num_speculative_tokens": 10**20}, MAX_SPECULATIVE_TOKENS, 10**20),
        ("scheduler.speculative", {**SPEC, "num_speculative_tokens": 129}, MAX_SPECULATIVE_TOKENS, 129),
    ],
)
def test_batch_and_draft_sizes_beyond_their_bounds_are_one_line(key, value, bound, echo):
    [(path, message)] = problems((key, value))
    assert path.startswith(key) and path.endswith(("max_num_seqs", "max_batch_size", "num_speculative_tokens"))
    assert message == f"must be <= {bound} (got {echo})"


def test_the_largest_batch_and_draft_still_load():
    most = [f"scheduler.max_num_seqs={MAX_BATCH}", f"scheduler.max_num_batched_tokens={MAX_BATCH}"]
    assert loads(*most, "gpu=h100-80gb").scheduler.max_batch == MAX_BATCH
    spec = {"method": "ngram", "num_speculative_tokens": MAX_SPECULATIVE_TOKENS, "acceptance_rate": 0.5}
    assert loads(("speculative", spec)).speculative is not None


@pytest.mark.parametrize(
    ("overrides", "where", "budget", "seqs"),
    [
        (["scheduler.max_num_batched_tokens=1"], "scheduler.max_num_batched_tokens", 1, 128),
        (["scheduler.max_num_batched_tokens=127", "scheduler.enable_chunked_prefill=false"],
         "scheduler.max_num_batched_tokens", 127, 128),
        (["scheduler.max_num_seqs=256", "scheduler.max_num_batched_tokens=128"], "scheduler.max_num_batched_tokens",
         128, 256),
        # a split's decode pool, in the old shape: named as written
        (["scheduler.kind=disaggregated", "scheduler.decode.max_num_seqs=256",
          "scheduler.decode.max_num_batched_tokens=200"], "scheduler.decode.max_num_batched_tokens", 200, 256),
        # a pool's own max_num_seqs against the policy's budget: the budget is named where written
        (["cluster={pools: [{instances: 1, scheduler: {max_num_seqs: 3000}}]}"], "scheduler.max_num_batched_tokens",
         2048, 3000),
    ],
)  # fmt: skip
def test_a_token_budget_below_max_num_seqs_is_refused_in_vllms_words(overrides, where, budget, seqs):
    [(path, message)] = problems(*overrides)
    assert path == where
    assert f"'max_num_batched_tokens ({budget}) must be greater than or equal to max_num_seqs ({seqs}).'" in message
    # the budget raised to max_num_seqs, vLLM starts (chunked prefill off, it must hold the context too),
    # with a context its KV cache holds once (3,000 sequences' sampler leaves 5,904 tokens on a 4090)
    if not any("chunked" in o for o in overrides):
        assert loads(*overrides, f"{where}={seqs}", "scheduler.max_model_len=4096").deployment is not None


# -- W6, W7, C4: Zipf routing at any skew, only where there are experts, one line ----------


@pytest.mark.parametrize("s", [300.0, 309.0, 400.0, 1e6])
def test_a_steep_zipf_skew_tends_to_its_limit_the_k_most_popular_experts(s):
    q = inclusion_probabilities(128, 8, s)
    assert np.isfinite(q).all() and q.sum() == pytest.approx(8) and (q[:8] == pytest.approx(1.0, abs=1e-15))
    assert (q[8:] <= 1e-15).all()
    table = distinct_table(128, 8, Zipf(zipf=s))
    assert table is not None and table[0] == 0.0
    assert table[1:] == pytest.approx([8.0] * (len(table) - 1), rel=1e-10)  # every step reads just those 8
    assert table == pytest.approx(distinct_table(128, 8, Zipf(zipf=300.0)), rel=1e-10)


def test_a_gentle_skew_is_what_it_was():
    q = inclusion_probabilities(128, 8, 1.2)  # water-filling: two capped, the rest i^-1.2 scaled
    w = np.arange(3, 129, dtype=float) ** -1.2
    assert q[:2].tolist() == [1.0, 1.0] and q[2:] == pytest.approx(w * 6 / w.sum(), rel=1e-12)


@pytest.mark.parametrize(
    ("routing", "where", "says"),
    [
        ("skewed", "model.routing", "must be 'uniform' or {zipf: s}"),
        ({"zipf": -1}, "model.routing.zipf", "must be >= 0 (got -1)"),
        ({"zipf": "x"}, "model.routing.zipf", "not the string 'x'"),
        ({"zipf": 1, "zipff": 2}, "model.routing.zipff", "unknown key"),
        ({}, "model.routing.zipf", "required"),
    ],
)
def test_a_bad_routing_is_one_line_naming_the_key_as_written(routing, where, says):
    [(path, message)] = problems(("model", {"base": "qwen3-30b-a3b", "routing": routing}), "gpu=h100-80gb")
    assert path == where and says in message and "Zipf" not in path


def test_routing_on_a_dense_model_is_refused():
    [(path, message)] = problems(("model", {"base": "qwen2.5-7b", "routing": {"zipf": 1}}))
    assert path == "model.routing" and "dense" in message
    assert loads(("model", {"base": "qwen2.5-7b", "routing": "uniform"})).model.routing == "uniform"


# -- W11: a draft that does not fit is the draft's problem, with hints that are possible -----

DRAFT = {"method": "draft", "num_speculative_tokens": 3, "acceptance_rate": 0.6}


def test_a_draft_too_big_is_named_where_written_with_no_impossible_hint():
    # 150 GiB of draft and target on 24 GB cards: no tensor-parallel degree 28 heads allow
    # holds it, and pipeline stages with speculation are refused, so no hint at all
    [(path, message)] = problems(("scheduler.speculative", {**DRAFT, "model": "qwen2.5-72b"}))
    assert path == "scheduler.speculative.model"
    assert message.startswith("qwen2.5-72b (the draft model) does not fit beside qwen2.5-7b on 1 x rtx4090")
    assert "it fits" not in message and "pp" not in message


def test_a_hint_for_a_draft_holds_when_taken():
    spec = ("speculative", {**DRAFT, "model": "qwen2.5-14b"})
    [(path, message)] = problems(spec)
    assert path == "speculative.model" and message.endswith("; it fits with cluster.tp: 4 (4 x rtx4090)")
    assert loads(spec, "cluster.tp=4").speculative is not None


def test_a_target_too_big_is_still_the_models_with_its_hints():
    [(path, message)] = problems("model=qwen2.5-72b")
    assert path == "model" and "it fits with cluster.tp: 8 (8 x rtx4090) or with cluster.pp: 8" in message
