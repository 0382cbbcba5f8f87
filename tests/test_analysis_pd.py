"""The prefill/decode analysis (analysis/pd_*.py): capacity per GPU, the verdict of two
intervals, the break-even table and token times, on hand-made tables whose answers are
worked out here, then every script on small sweeps built here."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

import des
from analysis import pd_breakeven, pd_capacity, pd_interference, pd_latency, pd_report
from analysis.common import Sweep, config_style, num_gpus
from analysis.markdown import render
from des import catalog
from des.study import load_study
from tests.helpers import SCENARIOS, des_cli

RATE = "workload.arrival.rate"
PROMPT = "workload.prompt_tokens.mean"


# --- GPU counts and names --------------------------------------------------------------


@pytest.mark.parametrize("study", ["pd-compare", "pd-split", "pd-breakeven", "pd-interference"])
def test_num_gpus_counts_what_the_plan_builds(study):
    for run in load_study(SCENARIOS / f"{study}.yaml").runs:
        assert num_gpus(run.scenario) == des.load_scenario(run.scenario).layout.num_gpus, run.run_id


def test_configurations_are_named_and_coloured_by_scheduler():
    assert config_style("static-x2")[0] == "static ×2"
    assert config_style("continuous-x4") == ("continuous ×4", "#1f77b4")
    assert config_style("1P+1D") == ("disaggregated 1P+1D", "#2ca02c")
    light, dark = config_style("1P+3D")[1], config_style("3P+1D")[1]
    assert light != dark and config_style("2P+2D")[1] == "#2ca02c"


# --- capacity per GPU ------------------------------------------------------------------


def curve(config: str, gpus: int, saturation: float, ttft: list[float], spread: float = 0.2) -> pd.DataFrame:
    """A load curve at fractions 0.5, 0.9, 1.1 of ``saturation``: TTFT p99 means ``ttft``,
    their interval ``(1 - spread, 1 + spread)`` times the mean; median TPOT far within."""
    loads = [0.5, 0.9, 1.1]
    t = np.array(ttft)
    return pd.DataFrame(
        {
            "variant": "chat",
            "config": config,
            "load": loads,
            RATE: [f * saturation for f in loads],
            "all_stable": [True, True, False],
            "ttft_p99": t,
            "ttft_p99_lo": t * (1 - spread),
            "ttft_p99_hi": t * (1 + spread),
            "tpot_p50": 0.02,
            "tpot_p50_lo": 0.019,
            "tpot_p50_hi": 0.021,
            "tpot_p99": 0.03,
            "tpot_p99_lo": 0.025,
            "tpot_p99_hi": 0.2,
            "throughput_rps": [f * saturation for f in (0.5, 0.9, 1.0)],
            "gpus": gpus,
        }
    )


def test_capacity_table_divides_by_the_gpu_count_and_reads_both_slos():
    points = pd.concat(
        [
            curve("continuous-x2", 2, 20.0, [0.5, 8.0, 20.0]),  # crosses 2 s halfway, in log
            curve("continuous-x4", 4, 40.0, [0.5, 1.0, 9.0]),  # holds up to 0.9 S, then overloaded
        ],
        ignore_index=True,
    )
    table = pd_capacity.capacity_table(points, ["variant", "config"]).set_index(["config", "slo"])
    two = table.loc[("continuous-x2", "default")]
    # between 10 and 18 req/s the mean goes from 0.5 to 8 s: it is 2 s, their geometric
    # mean, halfway, at 14 req/s
    assert two["capacity"] == pytest.approx(14 / 2) and two["gpus"] == 2
    # the upper bounds (x 1.2) cross earlier, the lower ones (x 0.8) later
    lo = 10 + 8 * math.log(2 / 0.6) / math.log(16)
    hi = 10 + 8 * math.log(2 / 0.4) / math.log(16)
    assert (two["ci_low"], two["ci_high"]) == pytest.approx((lo / 2, hi / 2))
    assert two["saturation"] == pytest.approx(10.0)
    four = table.loc[("continuous-x4", "default")]
    # it holds at 0.9 S = 36 req/s; the point past S is not interpolated towards; the
    # interval's upper end is the saturation, 40 req/s: 10 per GPU
    assert (four["capacity"], four["ci_low"], four["ci_high"]) == pytest.approx((9.0, 9.0, 10.0))
    # the tight SLO's p99 TPOT interval reaches past 40 ms everywhere: the estimate holds,
    # the interval's lower end is not measured, its upper end is where the TTFT's fails
    tight = table.loc[("continuous-x2", "tight TPOT")]
    assert tight["capacity"] == pytest.approx(7.0) and math.isnan(tight["ci_low"])
    assert pd_capacity.fmt_capacity(tight) == f"7.00 [—, {hi / 2:.2f}]"
    assert pd_capacity.fmt_capacity(two) == f"7.00 [{lo / 2:.2f}, {hi / 2:.2f}]"


def test_a_curve_that_never_meets_the_slo_reads_none():
    points = curve("static-x2", 2, 2.0, [9.0, 20.0, 50.0])
    row = pd_capacity.capacity_table(points, ["variant", "config"]).iloc[0]
    assert math.isnan(row["capacity"]) and math.isnan(row["ci_low"]) and not row["ci_high_open"]
    assert pd_capacity.fmt_capacity(row) == "none (fails at 0.5, the lowest load tried)"
    assert pd_capacity.bounds(row) == (0.0, 0.0, 0.5)  # surely fails at the lowest load, 1 req/s on 2 GPUs


def row(capacity, low, high, lowest=0.1, open_=False):
    return {"capacity": capacity, "ci_low": low, "ci_high": high, "ci_high_open": open_, "lowest_rate": lowest}


@pytest.mark.parametrize(
    "a, b, expected",
    [
        (row(5, 4.5, 5.5), row(3, 2.5, 3.5), "a"),  # a's interval wholly above b's
        (row(3, 2.5, 3.5), row(5, 4.5, 5.5), "b"),
        (row(5, 3.4, 5.5), row(3, 2.5, 3.5), "tie"),  # they overlap
        (row(5, 4.5, math.nan, open_=True), row(6, 5.0, 7.0), "tie"),  # a's reaches above the grid
        (row(2, 1.5, 2.5), row(math.nan, math.nan, math.nan, lowest=0.4), "a"),  # b surely fails at 0.4
        (row(2, 0.3, 2.5), row(math.nan, math.nan, math.nan, lowest=0.4), "tie"),
        (row(math.nan, math.nan, 0.2), row(math.nan, math.nan, 0.3), "neither"),
    ],
)
def test_the_verdict_of_two_intervals(a, b, expected):
    assert pd_capacity.verdict(a, b, ("a", "b")) == expected


def test_breakeven_table_per_prompt_length():
    rows = []
    for length, (c, s) in {512: ((10, 9.5, 10.5), (6, 5.5, 6.5)), 2048: ((2, 1.0, 3.0), (2.5, 2.0, 3.5))}.items():
        for config, (cap, lo, hi) in (("continuous-x2", c), ("1P+1D", s)):
            rows.append({"slo": "default", PROMPT: length, "config": config, **row(cap, lo, hi)})
    table = pd_breakeven.breakeven_table(pd.DataFrame(rows)).set_index(PROMPT)
    assert table.loc[512, "verdict"] == "colocated" and table.loc[512, "ratio"] == pytest.approx(0.6)
    assert table.loc[2048, "verdict"] == "tie" and table.loc[2048, "ratio"] == pytest.approx(1.25)
    assert (table.loc[2048, "split_lo"], table.loc[2048, "split_hi"]) == (2.0, 3.5)
    with pytest.raises(SystemExit):
        pd_breakeven.breakeven_table(pd.DataFrame(rows).assign(config="continuous-x2"))


# --- token times -----------------------------------------------------------------------


def steps(instance: int, starts: list[float], duration: float = 1.0, prefill: int = 0) -> pd.DataFrame:
    return pd.DataFrame({"instance": instance, "start": starts, "duration": duration, "prefill_tokens": prefill})


def request(**fields) -> pd.Series:
    base = {"request_id": 7, "status": "completed", "preemptions": 0, "decode_instance": -1,
            "transfer_end": math.nan, "instance": 0}  # fmt: skip
    return pd.Series({**base, **fields})


def test_token_times_colocated_are_the_ends_of_its_instance_steps():
    table = pd.concat([steps(0, [0, 1, 2, 3, 4]), steps(1, [0.5, 1.5, 2.5])])
    req = request(first_token_time=1.0, finish_time=4.0, output_tokens=4)
    assert pd_interference.token_times(req, table).tolist() == [1.0, 2.0, 3.0, 4.0]
    # at the client, the way out (0.25 s) after each step: the same steps, dated 0.25 s later
    late = request(first_token_time=1.25, finish_time=4.25, output_tokens=4)
    assert pd_interference.token_times(late, table, egress=0.25).tolist() == [1.25, 2.25, 3.25, 4.25]
    # three steps for two tokens: it sat one out, and which one is not in the tables
    with pytest.raises(ValueError, match="sat some out"):
        pd_interference.token_times(request(first_token_time=1.0, finish_time=4.0, output_tokens=3), table)
    with pytest.raises(ValueError, match="preempted"):
        pd_interference.token_times(request(first_token_time=1.0, finish_time=4.0, output_tokens=4, preemptions=1),
                                    table)  # fmt: skip


def test_token_times_disaggregated_start_at_the_step_after_the_transfer():
    # the first token at the prefill step's end (1.0); the KV arrives at 2.5 while the
    # decode instance runs [2.0, 3.0]: the request joins at 3.0
    table = pd.concat([steps(0, [0.0]), steps(1, [2.0, 3.0, 4.0])])
    req = request(first_token_time=1.0, finish_time=5.0, output_tokens=3, decode_instance=1, transfer_end=2.5,
                  instance=1)  # fmt: skip
    assert pd_interference.token_times(req, table).tolist() == [1.0, 4.0, 5.0]


def test_token_times_on_the_engine_match_the_worked_disaggregated_timeline(tmp_path):
    # tests/test_disaggregated.py's first timeline: tokens at 1.0 (prefill), 3.5 and 4.5
    path = tmp_path / "trace.csv"
    path.write_text("arrival_time,prompt_tokens,output_tokens\n0,4,3\n")
    kv = catalog.model("qwen2.5-7b").kv_bytes_per_token(2)
    sc = des.load_scenario(
        {
            "workload": {"arrival": {"process": "trace", "path": str(path)}},
            "cost_model": {"kind": "constant", "step_time": 1.0},
            "scheduler": {"kind": "disaggregated", "kv_transfer": {"bandwidth": 4 * kv, "latency": 0.5}},
        }
    )
    r = des.simulate(sc)
    req = r.requests.iloc[0]
    assert pd_interference.token_times(req, r.steps).tolist() == [1.0, 3.5, 4.5]


# --- the scripts on small sweeps -------------------------------------------------------

CONFIGS = {
    "continuous-x2": {"cluster.replicas": 2, "cluster.router": "least_outstanding"},
    "1P+1D": {"scheduler.kind": "disaggregated"},
}
SMALL: dict[str, Any] = {
    "name": "pd-small",
    "base": str(SCENARIOS / "qwen7b-4090-poisson.yaml"),
    "set": {"horizon.duration": 40, "warmup": 5, "horizon.drain": False},
    "variants": {
        "chat": {"workload": {"output_tokens": {"dist": "geometric", "mean": 64}}},
        "long": {"workload": {"prompt_tokens": {"dist": "lognormal", "mean": 2048, "sigma": 0.3}}},
    },
    "grid": {"config": CONFIGS},
    "load": {"fractions": [0.3, 0.7, 1.1]},
    "replications": 2,
}
BREAKEVEN = {
    **SMALL,
    "name": "pd-small-breakeven",
    "variants": {},
    "grid": {"config": CONFIGS, PROMPT: [512, 2048]},
}


def sweep(tmp_path_factory, study: dict, name: str):
    d = tmp_path_factory.mktemp(name)
    (d / "study.yaml").write_text(yaml.safe_dump(study))
    proc = des_cli("sweep", str(d / "study.yaml"), "--out", str(d / "out"), "--workers", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    return d / "out"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return sweep(tmp_path_factory, SMALL, "pd")


@pytest.fixture(scope="module")
def breakeven(tmp_path_factory):
    return sweep(tmp_path_factory, BREAKEVEN, "breakeven")


@pytest.fixture(scope="module")
def interference(tmp_path_factory):
    out = tmp_path_factory.mktemp("interference") / "out"
    proc = des_cli("sweep", str(SCENARIOS / "pd-interference.yaml"), "--out", str(out), "--workers", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    return out


def is_png(path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_capacity_and_latency_scripts_on_a_small_sweep(small, tmp_path):
    from analysis import capacity

    sw = Sweep(small)
    points = pd_capacity.with_gpus(sw)
    assert set(points["gpus"]) == {2}
    table = pd_capacity.tables([small])
    assert len(table) == 2 * 2 * len(pd_capacity.SLOS)  # variants x configs x SLOs
    # the table is the capacity readout of each curve, per GPU
    direct = capacity.capacities(sw.points, pd_capacity.SLOS["default"], by=["variant", "config"])
    got = table[table["slo"] == "default"].set_index(["variant", "config"])
    for _, r in direct.iterrows():
        mine = got.loc[(r["variant"], r["config"])]
        assert mine["saturation"] == pytest.approx(r["saturation"] / 2)
        if r["capacity"] is not None and r["capacity"] == r["capacity"]:
            assert mine["capacity"] == pytest.approx(r["capacity"] / 2)
    assert is_png(pd_capacity.main([str(small), "--out", str(tmp_path / "cap.png")]))
    assert is_png(pd_latency.main([str(small), "--out", str(tmp_path / "lat.png")]))


def test_breakeven_script_on_a_small_sweep(breakeven, tmp_path):
    sw = Sweep(breakeven)
    table = pd_breakeven.breakeven_table(
        pd_capacity.capacity_table(pd_capacity.with_gpus(sw), ["variant", "config", PROMPT])
    )
    assert sorted(table[PROMPT].unique()) == [512, 2048] and len(table) == 2 * len(pd_capacity.SLOS)
    assert set(table["verdict"]) <= {"colocated", "split", "tie", "neither"}
    assert is_png(pd_breakeven.main([str(breakeven), "--out", str(tmp_path / "be.png")]))


def test_every_undisturbed_request_of_the_interference_runs_has_its_token_times(interference):
    sw = Sweep(interference)
    for rid in sw.runs["run_id"]:
        req, st = sw.table(rid, "requests"), sw.table(rid, "steps")
        egress = pd_interference.way_out(sw.scenario(rid))
        assert egress > 0  # vllm serve: tokens are dated at the client
        measured = req[(req["status"] == "completed") & (req["preemptions"] == 0) & (req["output_tokens"] > 1)]
        assert len(measured) > 200
        for _, r in measured.iterrows():
            times = pd_interference.token_times(r, st, egress)
            assert len(times) == r["output_tokens"] and (np.diff(times) > 0).all()
            assert times[-1] == pytest.approx(r["finish_time"], abs=1e-9)
            assert (times[-1] - times[0]) / (len(times) - 1) == pytest.approx(r["tpot"], rel=1e-12)


def test_interference_figure_and_what_stalls_the_followed_request(interference, tmp_path):
    sw = Sweep(interference)
    traces, rid = pd_interference.traces_of(sw)
    assert [t.kind for t in traces] == ["continuous", "disaggregated"]
    assert rid == pd_interference.default_request(sw.table(sw.runs["run_id"].iloc[0], "requests"))
    colocated, split = traces
    # colocated, every long gap is a step of its instance computing a prefill chunk (a
    # token reaches the client the way out after its step's end)
    assert colocated.egress > 0 and split.egress == colocated.egress
    ends = colocated.times[1:] - colocated.egress
    for k in np.flatnonzero(colocated.gaps > 0.1):
        assert ((colocated.heavy[:, 1] >= ends[k] - 1e-9) & (colocated.heavy[:, 0] < ends[k])).any()
    # split, the decode instance computes no prompt tokens at all
    run = sw.runs[sw.runs["config"] == "1P+1D"]["run_id"].iloc[0]
    st = sw.table(run, "steps")
    assert (st[st["instance"] == split.instance]["prefill_tokens"] == 0).all() and len(split.heavy) == 0
    assert is_png(pd_interference.main([str(interference), "--out", str(tmp_path / "int.png")]))


# --- the report's section: its facts, on hand-made tables --------------------------------


def cap(variant: str, config: str, slo: str, capacity: float, low: float, high: float, **more: Any) -> dict:
    """A capacity_table row (per GPU); ``more``: saturation, lowest_rate, ci_high_open, holds_everywhere."""
    base = {"saturation": 10.0, "lowest_rate": 0.1, "ci_high_open": False, "holds_everywhere": False}
    row = {"variant": variant, "config": config, "slo": slo, "capacity": capacity, "ci_low": low, "ci_high": high}
    return row | base | more


NONE = (math.nan, math.nan, math.nan)
#: Two GPUs, per (workload, config): saturation, then (capacity, low, high) under the default and the tight SLO.
SIDE = {
    ("chat", "static-x2"): (1.1, NONE, NONE),
    ("chat", "continuous-x2"): (10.0, (9.0, 8.5, 9.5), (6.0, 5.5, 6.5)),
    ("chat", "1P+1D"): (9.5, (8.8, 8.0, 9.2), (7.5, 7.0, 8.0)),  # overlaps the pair; ahead of it, apart
    ("long", "static-x2"): (0.8, NONE, NONE),
    ("long", "continuous-x2"): (2.0, (1.5, 1.4, 1.6), (0.4, 0.3, 0.5)),
    ("long", "1P+1D"): (1.3, (0.6, 0.5, 0.7), (0.45, math.nan, 0.8)),  # behind, apart; overlaps
}


def side_caps() -> pd.DataFrame:
    return pd.DataFrame(
        [
            cap(w, c, slo, *values, saturation=sat)
            for (w, c), (sat, *per_slo) in SIDE.items()
            for slo, values in zip(pd_capacity.SLOS, per_slo, strict=True)
        ]
    )


def test_side_facts_weigh_the_pair_per_workload_and_slo():
    facts = pd_report.side_facts(side_caps())
    assert facts["verdict_chat_default"] == "tie"
    assert facts["vs_chat_default"] == "split 8.80 against colocated 9.00 per GPU; the intervals overlap"
    assert facts["verdict_chat_tight"] == "split"
    assert facts["vs_chat_tight"].startswith("split 7.50 against colocated 6.00 per GPU; the split is ahead, the")
    assert facts["verdict_long_default"] == "colocated"
    assert facts["vs_long_default"].endswith("the colocated pair is ahead, the intervals apart")
    assert facts["verdict_long_tight"] == "tie"
    assert facts["long_ratio"] == pytest.approx(1.5 / 0.6)
    assert (facts["chat_default_says"], facts["long_default_says"]) == ("ties with", "loses clearly")
    assert facts["side_table"].split("\n") == [
        "| static ×2 | 1.10 | none (fails from 0.1) | none (fails from 0.1) | 0.80 | none (fails from 0.1) "
        "| none (fails from 0.1) |",
        "| continuous ×2 | 10.00 | 9.00 [8.50, 9.50] | 6.00 [5.50, 6.50] | 2.00 | 1.50 [1.40, 1.60] "
        "| 0.40 [0.30, 0.50] |",
        "| disaggregated 1P+1D | 9.50 | 8.80 [8.00, 9.20] | 7.50 [7.00, 8.00] | 1.30 | 0.60 [0.50, 0.70] "
        "| 0.45 [—, 0.80] |",
    ]
    # neither meets it: no capacities to set against each other
    caps = side_caps()
    caps.loc[caps["variant"] == "chat", ["capacity", "ci_low", "ci_high"]] = math.nan
    facts = pd_report.side_facts(caps)
    assert facts["verdict_chat_default"] == "neither" and facts["vs_chat_default"] == pd_report.SAYS["neither"]
    assert facts["chat_default_says"] == "is not ahead of"


def latency_points() -> pd.DataFrame:
    """Two GPUs' load curves at 0.5, 0.9 and 1.1 of saturation, listed heaviest load first."""
    loads = [1.1, 0.9, 0.5]
    curves = {
        # (config, workload): ttft_p99, tpot_p50, tpot_p99, all_stable, heaviest load first
        ("continuous-x2", "chat"): ([9.0, 0.5, 0.3], [0.05, 0.03, 0.02], [0.1, 0.05, 0.03], [False, True, True]),
        ("1P+1D", "chat"): ([20.0, 0.8, 0.4], [0.02, 0.02, 0.02], [0.04, 0.04, 0.04], [False, False, True]),
        ("continuous-x2", "long"): ([9.0, 1.5, 0.5], [0.3, 0.09, 0.016], [0.5, 0.2, 0.025], [True, True, True]),
        ("1P+1D", "long"): ([9.0, 1.8, 0.6], [0.02, 0.019, 0.017], [0.05, 0.044, 0.034], [False, True, True]),
    }
    frames = []
    for (config, workload), (ttft, p50, p99, stable) in curves.items():
        frames.append(
            pd.DataFrame(
                {
                    "variant": workload,
                    "config": config,
                    "load": loads,
                    RATE: [4 * f for f in loads],
                    "all_stable": stable,
                    "ttft_p99": ttft,
                    "tpot_p50": p50,
                    "tpot_p90": [2 * x for x in p50],
                    "tpot_p99": p99,
                    "kv_transfer_time_mean": [0.03, 0.025, 0.022],
                    "kv_transfer_time_p99": [0.05, 0.04, 0.038],
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def test_latency_facts_read_the_stable_loads_up_to_saturation():
    facts = pd_report.latency_facts(latency_points())
    # the unloaded decode step: the colocated pair's median TPOT at the lightest chat load
    assert facts["step_ms"] == pytest.approx(20.0) and facts["tight_over_step"] == pytest.approx(2.0)
    assert facts["max_load"] == 1.1
    # only stable points at or below saturation: the split's chat curve is stable at its lightest load only
    assert facts["chat_split_ttft_max"] == 0.4 and facts["chat_colocated_ttft_max"] == 0.5
    assert facts["long_colocated_tpot_p50"] == "16–90 ms" and facts["long_colocated_tpot_p99"] == "25–200 ms"
    assert facts["long_split_tpot_p50"] == "17–19 ms" and facts["long_split_tpot_p99"] == "34–44 ms"
    # the split's long curve at its lightest load
    assert facts["light_tpot_p50_ms"] == pytest.approx(17.0) and facts["light_tpot_p90_ms"] == pytest.approx(34.0)
    assert facts["light_transfer_mean_ms"] == pytest.approx(22) and facts["light_transfer_p99_ms"] == pytest.approx(38)


def be_table(tight: dict[int, tuple[float, float, str]]) -> pd.DataFrame:
    """A break-even table: the default SLO's row per prompt length fixed, the tight SLO's given
    as (colocated, split, verdict) per length; ratio split / colocated (NaN at 0)."""
    default = {
        512: (10.0, 8.0, "colocated"),
        1024: (5.0, 4.0, "colocated"),
        2048: (2.0, 2.1, "tie"),
        4096: (0.5, 0.5, "tie"),
        8192: (0.0, 0.0, "neither"),
    }
    return pd.DataFrame(
        [
            {"slo": slo, PROMPT: length, "colocated": c, "split": s, "ratio": s / c if c else math.nan, "verdict": v}
            for slo, by in (("default", default), ("tight TPOT", tight))
            for length, (c, s, v) in by.items()
        ]
    )


TIGHT = {
    512: (3.0, 3.3, "tie"),
    1024: (1.0, 2.5, "split"),
    2048: (0.5, 0.8, "tie"),
    4096: (0.3, 0.45, "tie"),
    8192: (0.0, 0.0, "neither"),
}


def test_breakeven_facts_say_where_each_configuration_leads():
    facts = pd_report.breakeven_facts(be_table(TIGHT), reps=5)
    assert facts["lengths"] == "512, 1,024, 2,048, 4,096, 8,192"
    assert facts["breakeven_table"].split("\n") == [
        "| SLO | 512 tokens | 1,024 tokens | 2,048 tokens | 4,096 tokens | 8,192 tokens |",
        "|---|---|---|---|---|---|",
        "| default | colocated (0.80) | colocated (0.80) | tie (1.05) | tie (1.00) | neither (—) |",
        "| tight TPOT | tie (1.10) | split (2.50) | tie (1.60) | tie (1.50) | neither (—) |",
    ]
    assert facts["default_colocated_ahead"] == "512 and 1,024" and facts["default_split_ahead"] == "never does."
    # ahead by more than 20 % at three lengths, apart at one of them
    assert facts["tight_split_ahead"] == "1,024, 2,048 and 4,096" and facts["split_prompts"] == "1,024 to 4,096"
    assert (facts["most"], facts["most_at"]) == (2.5, 1024)
    assert facts["separation"] == "The intervals separate at 1,024 tokens; at 2,048 and 4,096 they overlap."
    assert facts["confirm"] == ". Confirm with" and facts["ten_replications_times"] == 2.0
    assert facts["far_capacity"] == 0.45  # the most either carries from 4,096 tokens on


def test_breakeven_facts_of_a_lead_without_a_verdict():
    tight = TIGHT | {1024: (1.0, 2.5, "tie")}  # a lead, the intervals overlapping
    table = be_table(tight)
    table.loc[(table["slo"] == "default") & (table[PROMPT] == 2048), "verdict"] = "split"
    facts = pd_report.breakeven_facts(table, reps=4)
    assert facts["default_split_ahead"] == "does at 2,048 tokens."
    assert facts["tight_split_ahead"] == "1,024, 2,048 and 4,096" and facts["split_prompts"] == "1,024 to 4,096"
    assert facts["separation"] == (
        "But with 4 replications the intervals overlap at every length: a lead, not a verdict."
    )
    assert facts["confirm"] == ", though with 4 replications the intervals overlap. Run the study with"
    level = {length: (1.0, 1.1, "tie") for length in (512, 1024, 2048, 4096, 8192)}
    nothing = pd_report.breakeven_facts(be_table(level), reps=4)
    assert nothing["tight_split_ahead"] == "no prompt length" and nothing["split_prompts"] == "a few thousand"
    assert math.isnan(nothing["most"]) and nothing["most_at"] is None and nothing["far_capacity"] == 1.1


#: Four GPUs, per config: (capacity, low, high) for chat and long under the default SLO.
FOUR = {
    "continuous-x4": ((8.0, 7.5, 8.4), (2.0, 1.8, 2.2)),
    "1P+3D": ((5.0, 4.8, 5.5), (0.4, 0.3, 0.5)),
    "2P+2D": ((8.5, 8.0, 9.0), (1.0, 0.8, 1.2)),
    "3P+1D": ((4.0, 3.5, 4.5), (1.5, 1.3, 1.7)),
}


def test_four_gpu_facts_name_the_best_and_worst_split():
    rows = []
    for config, per_workload in FOUR.items():
        for w, values in zip(("chat", "long"), per_workload, strict=True):
            rows.append(cap(w, config, "default", *values))
            rows.append(cap(w, config, "tight TPOT", *NONE, lowest_rate=0.25))
    facts = pd_report.four_gpu_facts(pd.DataFrame(rows))
    assert facts["four_text"].split("\n") == [
        "- **Chat**: 2P+2D is the best split, 8.50 per GPU, level with continuous ×4 (8.00) within the intervals;"
        " 3P+1D the worst, 50% below it.",
        "- **Long**: 3P+1D is the best split, 1.50 per GPU, behind continuous ×4 (2.00), the intervals apart;"
        " 1P+3D the worst, 80% below it.",
    ]
    table = facts["four_table"].split("\n")
    assert len(table) == 4
    assert table[0] == (
        "| continuous ×4 | 8.00 [7.50, 8.40] | none (fails from 0.25) | 2.00 [1.80, 2.20] | none (fails from 0.25) |"
    )


def test_pooling_facts_set_four_colocated_replicas_against_two_per_gpu():
    # chat: both bracketed by the grid (held at 0.95 of saturation), the brackets overlapping;
    # long: interpolated estimates, intervals overlapping
    bracket = {"interpolated": False, "holds_everywhere": True}
    two = pd.DataFrame(
        [
            cap("chat", "continuous-x2", "default", 9.15, 9.15, 9.63, capacity_high=9.63, **bracket),
            cap("long", "continuous-x2", "default", 1.55, 1.45, 1.75, capacity_high=1.55, interpolated=True),
        ]
    )
    four = pd.DataFrame(
        [
            cap("chat", "continuous-x4", "default", 9.10, 9.10, 9.58, capacity_high=9.58, **bracket),
            cap("long", "continuous-x4", "default", 1.76, 1.56, 1.91, capacity_high=1.76, interpolated=True),
            cap("chat", "2P+2D", "default", 8.6, 8.6, 9.0),
        ]
    )
    points = lambda config, ttft: pd.DataFrame(  # noqa: E731
        {"variant": "chat", "config": config, "load": [0.5, 0.95], "ttft_p99": [0.2, ttft]}
    )
    facts = pd_report.pooling_facts(two, four, points("continuous-x2", 0.42), points("continuous-x4", 0.36))
    assert facts["pooling_text"] == (
        "Under the default SLO, on chat, four colocated replicas carry between 9.10 and 9.58 req/s per GPU,"
        " two between 9.15 and 9.63 (the intervals overlap); on long prompts, four colocated replicas carry"
        " 1.76 req/s per GPU, two 1.55 (the intervals overlap)."
    )
    assert (facts["pooling_top"], facts["pooling_ttft_four"], facts["pooling_ttft_two"]) == (0.95, 0.36, 0.42)
    # four below two, the intervals apart (the short-run grid before issue #17): said, and questioned
    four.loc[0, ["capacity", "ci_low", "ci_high", "capacity_high"]] = [8.12, 8.12, 9.08, 9.08]
    four.loc[0, ["holds_everywhere"]] = False
    facts = pd_report.pooling_facts(two, four, points("continuous-x2", 0.42), points("continuous-x4", 0.36))
    assert (
        "on chat, four colocated replicas carry between 8.12 and 9.08 req/s per GPU, two between 9.15"
        in (facts["pooling_text"])
    )
    assert "(two carry more, the intervals apart)" in facts["pooling_text"]
    assert "On chat two replicas carry more per GPU than four, against the pooling lesson" in facts["pooling_text"]


def test_interference_facts_count_the_stalls_and_what_caused_them():
    long_prompts = pd.DataFrame({"arrival_time": [-1.0, 0.03, 0.25, 0.3, 5.0], "instance": [0, 0, 0, 1, 0]})
    colocated = pd_interference.Trace(
        "colocated",
        "continuous",
        np.array([0.0, 0.02, 0.04, 0.24, 0.26, 0.46, 0.48]),  # two gaps of 0.2 s
        0,
        long_prompts,
        np.array([[0.04, 0.24], [1.0, 1.2]]),  # a prefill-heavy step ends the first stall, none the second
    )
    times = np.array([0.0, 0.05, 0.07, 0.09])
    split = pd_interference.Trace("split", "disaggregated", times, 1, long_prompts, np.empty((0, 2)))
    facts = pd_report.interference_facts(colocated, split)
    # three long prompts arrive while it decodes, two of them on its instance
    assert (facts["tokens"], facts["long_prompts"], facts["long_prompts_on_its_instance"]) == (7, 3, 2)
    assert facts["stalls"] == 2 and facts["stall_each"] == pytest.approx(0.2)
    assert facts["stall_min_ms"] == pytest.approx(200) and facts["stall_max_ms"] == pytest.approx(200)
    assert facts["stalls_in_prefill"] == "1 of them"
    assert facts["colocated_tpot_ms"] == pytest.approx(80) and facts["split_tpot_ms"] == pytest.approx(30)
    assert facts["split_longest_gap_ms"] == pytest.approx(50)


LINK = pd_report.Link(bandwidth=12e9, latency=0.002, kv_token=57_344, fast=48e9, ceilings=[240e9, 360e9])


def test_link_facts():
    facts = pd_report.link_facts(LINK)
    assert (facts["link_gbps"], facts["link_ms"]) == (12, 2)
    # 4,096 tokens of 56 KiB: 235 MB, 19.6 ms at 12 GB/s, plus 2 ms
    assert facts["kv_4k_mb"] == pytest.approx(234.881024)
    assert facts["transfer_4k_ms"] == pytest.approx(4096 * 57_344 / 12e6 + 2)
    assert (facts["nvlink_gbps"], facts["nvlink_times"]) == (48, 4)
    assert (facts["ceiling_low"], facts["ceiling_high"]) == (20, 30)
    # at the connectors' measured 0.5-1.8 GB/s the same KV takes 0.13-0.47 s
    low, high = facts["slow_4k_s"]
    assert low == pytest.approx(4096 * 57_344 / 1.8e9 + 0.002) and high == pytest.approx(4096 * 57_344 / 0.5e9 + 0.002)


def test_study_facts():
    variants = {"chat": {"horizon": {"duration": 150}}, "long": {}}
    study = {"replications": 4, "load": {"fractions": [0.1, 0.5, 0.95]}, "variants": variants}
    facts = pd_report.study_facts(study, pd.DataFrame({"num_requests": [10, 20, 30]}))
    horizons = {"chat": 150, "long": None}
    assert facts == {
        "reps": 4,
        "fractions": "0.1, 0.5, 0.95",
        "top": 0.95,
        "horizons": horizons,
        "runs": 3,
        "requests": 60,
    }


def test_the_section_template_is_filled_from_the_facts():
    variants = {"chat": {"horizon": {"duration": 150}}, "long": {"horizon": {"duration": 450}}}
    study = pd_report.study_facts(
        {"replications": 5, "load": {"fractions": [0.5, 0.9, 1.1]}, "variants": variants},
        pd.DataFrame({"num_requests": [1_000, 2_345]}),
    )
    four = pd.DataFrame(
        [
            cap(w, c, s, *v)
            for c, per in FOUR.items()
            for w, v in zip(("chat", "long"), per, strict=True)
            for s in pd_capacity.SLOS
        ]
    )
    arrival = pd.DataFrame({"arrival_time": [0.1], "instance": [0]})
    trace = pd_interference.Trace("x", "continuous", np.array([0.0, 0.2, 0.4]), 0, arrival, np.array([[0.0, 0.2]]))
    results = pd_report.Results(
        compare=latency_points(),
        caps=side_caps(),
        split=latency_points(),
        split_caps=four,
        breakeven=be_table(TIGHT),
        studies={"compare": study, "split": study, "breakeven": study},
        link=LINK,
        colocated=trace,
        disaggregated=trace,
    )
    text = render("pd", pd_report.facts(results))
    assert text.startswith("## Disaggregated prefill/decode serving, at equal GPU count\n")
    assert "(`scheduler: {kind: disaggregated}`)" in text  # a literal brace of the template
    assert "through host memory at 12 GB/s plus 2 ms per transfer, 22 ms for a\n4,096-token prompt (235 MB)" in text
    assert "5 replications per point of\n150 s (chat) and 450 s (long), common random numbers: 2 runs,\n3,345 " in text
    assert "- **Chat.** Default SLO: split 8.80 against colocated 9.00 per GPU; the intervals overlap.\n" in text
    assert "(up to 2.5 times, at 1,024 tokens)" in text
    assert "  ties with colocated replicas on chat and loses clearly on long prompts" in text
    assert "a KV connector moves the same KV at about 48 GB/s\n  (4 times faster" in text
    assert "{" not in text.replace("{kind: disaggregated}", "") and text.endswith("is flagged too.)\n")
