"""The detail figures (analysis/cdf.py, timeline.py, slot_grid.py) on sweeps built here.

Two small sweeps are run once per module with ``des sweep``: the lesson's 12 requests on
4 slots (scenarios/lesson-grid.yaml) and a 2-minute version of the detail study (both
schedulers at 1 and 4 req/s, tables kept). Each script's main() must write a real PNG,
and the slot grid must reproduce the lesson's numbers from the simulated tables.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from analysis import cdf, slot_grid, timeline
from tests.helpers import ROOT, des_cli

MIN_PNG_BYTES = 10_000
SMALL_STUDY = {
    "name": "detail-small",
    "base": str(ROOT / "scenarios" / "qwen7b-4090-poisson.yaml"),
    "set": {"horizon.duration": 120, "warmup": 20},
    "variants": {
        "continuous": {},
        "static": {"scheduler": {"kind": "static", "max_batch_size": 32, "max_wait": 0.05}},
    },
    "grid": {"workload.arrival.rate": [1, 4]},
    "keep_tables": True,
}


def sweep(study: Path, out: Path) -> Path:
    proc = des_cli("sweep", str(study), "--out", str(out), "--workers", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.fixture(scope="module")
def lesson(tmp_path_factory) -> Path:
    return sweep(ROOT / "scenarios" / "lesson-grid.yaml", tmp_path_factory.mktemp("lesson") / "sweep")


@pytest.fixture(scope="module")
def detail(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("detail")
    study = d / "study.yaml"
    study.write_text(yaml.safe_dump(SMALL_STUDY))
    return sweep(study, d / "sweep")


def assert_png(path: Path) -> None:
    assert path.is_file()
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > MIN_PNG_BYTES


# --- slot_grid -------------------------------------------------------------------------


def test_slot_grid_figure(lesson, tmp_path):
    out = slot_grid.main([str(lesson), "--out", str(tmp_path / "slot_grid.png")])
    assert_png(out)


def test_slot_grid_reproduces_the_lesson(lesson):
    got = slot_grid.lesson_numbers(lesson)
    assert (got["static"]["makespan"], got["static"]["utilisation"]) == (30, 56 / 120)
    assert (got["continuous"]["makespan"], got["continuous"]["utilisation"]) == (18, 56 / 72)
    assert got["static"]["useful"] == got["continuous"]["useful"] == 56


def test_slot_grid_assignment_is_greedy_and_padded(lesson):
    from analysis.common import Sweep

    s = Sweep(lesson)
    occ = {}
    for variant in ("static", "continuous"):
        rid = f"{variant}/r0"
        occ[variant], _ = slot_grid.build(s.table(rid, "requests"), s.table(rid, "steps"), s.scenario(rid))
    cont = occ["continuous"].set_index("name")
    # the lesson's mechanism: R0 (2 tokens) frees slot 0 after step 2 and R4 takes it at step 3
    assert (cont.loc["R0", "slot"], cont.loc["R4", "slot"], cont.loc["R4", "first"]) == (0, 0, 3)
    assert (cont["last"] == cont["last_useful"]).all()  # continuous: nothing reserved-idle
    stat = occ["static"].set_index("name")
    # static: each batch of 4 holds its slots until its longest member is done (steps 12, 22, 30)
    assert list(stat["slot"]) == [0, 1, 2, 3] * 3
    assert list(stat["last"]) == [12] * 4 + [22] * 4 + [30] * 4
    assert stat.loc["R0", "last_useful"] == 2


def test_slot_grid_on_a_handmade_table():
    steps = pd.DataFrame(
        {"start": np.arange(4.0), "duration": 1.0, "batch_size": [2, 2, 1, 1], "batch_width": [2, 2, 1, 1]}
    )
    # R0 works in step 1, R1 in steps 1-2, R2 (admitted into R0's freed slot) in steps 2-4
    requests = pd.DataFrame(
        {
            "request_id": [0, 1, 2],
            "output_tokens": [1, 2, 3],
            "scheduled_time": [0.0, 0.0, 1.0],
            "finish_time": [1.0, 2.0, 4.0],
        }
    )
    scenario = {"scheduler": {"kind": "continuous", "max_num_seqs": 2}}
    occ, stats = slot_grid.build(requests, steps, scenario)
    assert list(occ["slot"]) == [0, 1, 0]
    assert stats == {"makespan": 4, "slots": 2, "useful": 6, "reserved": 6, "total": 8, "utilisation": 6 / 8}
    with pytest.raises(ValueError, match="batch_size"):
        slot_grid.build(requests, steps.assign(batch_size=[2, 2, 2, 1]), scenario)


# --- cdf -------------------------------------------------------------------------------


def test_cdf_figure(detail, tmp_path):
    out = cdf.main([str(detail), "--rate", "1", "--out", str(tmp_path / "cdf.png")])
    assert_png(out)


def test_cdf_percentiles_match_the_summaries(detail):
    from analysis.common import Sweep

    s = Sweep(detail)
    runs, lat = cdf.load(s, 4)
    assert set(lat["variant"]) == {"continuous", "static"}
    pcts = cdf.percentiles(lat).set_index(["variant", "metric"])
    for run_id, variant in zip(runs["run_id"], runs["variant"], strict=True):
        summ = s.summary(run_id)
        for metric in ("ttft", "tpot", "e2e"):
            assert pcts.loc[(variant, metric), "p50"] == pytest.approx(summ[f"{metric}_p50"])
            assert pcts.loc[(variant, metric), "p99"] == pytest.approx(summ[f"{metric}_p99"])


def test_cdf_rejects_a_missing_rate(detail, tmp_path):
    with pytest.raises(SystemExit, match="no run"):
        cdf.main([str(detail), "--rate", "7", "--out", str(tmp_path / "x.png")])


# --- timeline --------------------------------------------------------------------------


def test_timeline_figure(detail, tmp_path):
    out = timeline.main([str(detail), "--out", str(tmp_path / "timeline.png")])
    assert_png(out)
    two = timeline.main(
        [
            str(detail),
            "--run",
            "continuous/workload.arrival.rate=4/r0",
            "--run",
            "static/workload.arrival.rate=4/r0",
            "--out",
            str(tmp_path / "two.png"),
        ]
    )
    assert_png(two)


def test_timeline_default_run_is_the_busiest_continuous(detail):
    from analysis.common import Sweep

    assert timeline.default_run(Sweep(detail).runs) == "continuous/workload.arrival.rate=4/r0"


def test_timeline_resampling_keeps_the_time_integral(detail):
    steps = pd.read_parquet(detail / "runs" / "continuous" / "workload.arrival.rate=4" / "r0" / "steps.parquet")
    for bin_s in (0.7, 2.0, 5.0):
        tl = timeline.resample(steps, ["batch_size", "kv_blocks"], bin_s)
        busy = tl["busy"] * bin_s
        assert busy.sum() == pytest.approx(steps["duration"].sum())
        for col in ("batch_size", "kv_blocks"):
            area = (tl[col].fillna(0) * busy).sum()
            assert area == pytest.approx((steps[col] * steps["duration"]).sum())
            ok = tl[col].notna()
            assert (tl.loc[ok, col] <= steps[col].max() + 1e-9).all()


def test_timeline_resample_by_hand():
    # value 2 on [0, 1), idle [1, 2), value 4 on [2, 4): 1 s bins -> 2, NaN, 4, 4
    steps = pd.DataFrame({"start": [0.0, 2.0], "duration": [1.0, 2.0], "v": [2.0, 4.0]})
    tl = timeline.resample(steps, ["v"], 1.0)
    assert list(tl["busy"]) == [1.0, 0.0, 1.0, 1.0]
    assert tl["v"].iloc[0] == 2 and np.isnan(tl["v"].iloc[1]) and list(tl["v"].iloc[2:]) == [4, 4]
    # 2 s bins: the first bin's mean is over its busy second only
    tl2 = timeline.resample(steps, ["v"], 2.0)
    assert list(tl2["v"]) == [2.0, 4.0] and list(tl2["busy"]) == [0.5, 1.0]


def test_timeline_kv_fraction_uses_the_block_size(detail):
    from analysis.common import Sweep

    s = Sweep(detail)
    rid = "continuous/workload.arrival.rate=4/r0"
    info = timeline.run_info(s, rid)
    summ = json.loads((s.run_folder(rid) / "summary.json").read_text())
    assert info["kv_blocks"] == summ["kv_capacity_tokens"] / 16
    assert info["warmup"] == 20
