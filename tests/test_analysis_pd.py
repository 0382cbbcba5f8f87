"""The prefill/decode analysis (analysis/pd_*.py): capacity per GPU, the verdict of two
intervals, the break-even table and token times, on hand-made tables whose answers are
worked out here, then every script on small sweeps built here."""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

import des
from des import catalog
from des.study import load_study
from tests.helpers import ROOT, SCENARIOS, des_cli

sys.path.insert(0, str(ROOT))

from analysis import pd_breakeven, pd_capacity, pd_interference, pd_latency  # noqa: E402
from analysis.common import Sweep, config_style, num_gpus  # noqa: E402

RATE = "workload.arrival.rate"
PROMPT = "workload.prompt_tokens.mean"


# --- GPU counts and names --------------------------------------------------------------


@pytest.mark.parametrize("study", ["pd-compare", "pd-split", "pd-breakeven", "pd-interference"])
def test_num_gpus_counts_what_the_plan_builds(study):
    for run in load_study(SCENARIOS / f"{study}.yaml").runs:
        assert num_gpus(run.scenario) == des.load_scenario(run.scenario).plan().num_gpus, run.run_id


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
        measured = req[(req["status"] == "completed") & (req["preemptions"] == 0) & (req["output_tokens"] > 1)]
        assert len(measured) > 200
        for _, r in measured.iterrows():
            times = pd_interference.token_times(r, st)
            assert len(times) == r["output_tokens"] and (np.diff(times) > 0).all()
            assert (times[-1] - times[0]) / (len(times) - 1) == pytest.approx(r["tpot"], rel=1e-12)


def test_interference_figure_and_what_stalls_the_followed_request(interference, tmp_path):
    sw = Sweep(interference)
    traces, rid = pd_interference.traces_of(sw)
    assert [t.kind for t in traces] == ["continuous", "disaggregated"]
    assert rid == pd_interference.default_request(sw.table(sw.runs["run_id"].iloc[0], "requests"))
    colocated, split = traces
    # colocated, every long gap is a step of its instance computing a prefill chunk
    ends = colocated.times[1:]
    for k in np.flatnonzero(colocated.gaps > 0.1):
        assert ((colocated.heavy[:, 1] >= ends[k] - 1e-9) & (colocated.heavy[:, 0] < ends[k])).any()
    # split, the decode instance computes no prompt tokens at all
    run = sw.runs[sw.runs["config"] == "1P+1D"]["run_id"].iloc[0]
    st = sw.table(run, "steps")
    assert (st[st["instance"] == split.instance]["prefill_tokens"] == 0).all() and len(split.heavy) == 0
    assert is_png(pd_interference.main([str(interference), "--out", str(tmp_path / "int.png")]))
