"""Grid axes of named levels (several keys changing together, e.g. a prefill/decode split),
saturation probes per engine point, and one error line per problem."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from des.errors import ScenarioError
from des.study import load_study, sweep
from tests.helpers import SCENARIOS, des_cli

BASE: dict[str, Any] = {
    "name": "levels",
    "base": str(SCENARIOS / "qwen7b-4090-poisson.yaml"),
    "set": {
        "horizon.duration": 40,
        "warmup": 5,
        "horizon.drain": False,
        # the engine these tests count probes and settings by (the default scenario leaves it to vLLM's defaults)
        "scheduler.max_num_seqs": 128,
        "scheduler.max_num_batched_tokens": 2048,
        "scheduler.gpu_memory_utilization": 0.92,
    },
}
SPLITS = {
    "continuous-x4": {"cluster.replicas": 4, "cluster.router": "least_outstanding"},
    "1P+3D": {"scheduler.kind": "disaggregated", "scheduler.prefill.instances": 1, "scheduler.decode.instances": 3},
    "3P+1D": {"scheduler.kind": "disaggregated", "scheduler.prefill.instances": 3, "scheduler.decode.instances": 1},
}


def problems(study: dict) -> list[tuple[str, str]]:
    with pytest.raises(ScenarioError) as info:
        load_study(study)
    return info.value.problems


def test_a_level_sets_all_its_keys_together_and_keeps_the_rest():
    study = load_study({**BASE, "grid": {"config": SPLITS, "workload.arrival.rate": [2, 4]}})
    assert study.grid_keys == ["config", "workload.arrival.rate"]
    assert [r.run_id for r in study.runs] == [
        f"base/config={c}/workload.arrival.rate={r}/r0" for c in ("continuous-x4", "1P+3D", "3P+1D") for r in (2, 4)
    ]
    by_id = {r.run_id: r for r in study.runs}
    colo = by_id["base/config=continuous-x4/workload.arrival.rate=2/r0"]
    assert colo.point == (("config", "continuous-x4"), ("workload.arrival.rate", 2))
    assert colo.scenario["cluster"]["pools"][0]["instances"] == 4 and colo.scenario["scheduler"]["kind"] == "continuous"
    split = by_id["base/config=1P+3D/workload.arrival.rate=4/r0"].scenario
    sched, pools = split["scheduler"], split["cluster"]["pools"]
    assert sched["kind"] == "continuous" and [p["role"] for p in pools] == ["prefill", "decode"]
    assert (pools[0]["instances"], pools[1]["instances"]) == (1, 3)
    # the base's engine settings survive the change of kind: both pools run them
    assert (sched["max_num_seqs"], sched["max_num_batched_tokens"], sched["gpu_memory_utilization"]) == (
        128,
        2048,
        0.92,
    )
    assert split["workload"]["arrival"]["rate"] == 4 and split["horizon"]["duration"] == 40
    assert by_id["base/config=3P+1D/workload.arrival.rate=2/r0"].scenario["cluster"]["pools"][0]["instances"] == 3


def test_a_load_study_probes_each_engine_point_with_users_for_every_pool():
    study = load_study({**BASE, "grid": {"config": SPLITS}, "load": {"fractions": [0.5, 1.1]}})
    assert [p.run_id for p in study.probes] == [f"base/config={c}/saturation" for c in SPLITS]
    users = {p.run_id.split("/")[1]: p.scenario["workload"]["arrival"]["concurrency"] for p in study.probes}
    # 2 x 128 sequences per instance of every pool: four instances in each configuration
    assert users == {"config=continuous-x4": 1024, "config=1P+3D": 1024, "config=3P+1D": 1024}
    probe = next(p for p in study.probes if "1P+3D" in p.run_id).scenario
    assert probe["cluster"]["pools"][1]["instances"] == 3 and probe["workload"]["arrival"]["process"] == "closed"
    # each point runs at its own probe's throughput
    real = study.at_saturation({p.run_id: 10.0 * (i + 1) for i, p in enumerate(study.probes)})
    points = [dict(r.point) for r in real.runs]
    rates = {(p["config"], p["load"]): p["workload.arrival.rate"] for p in points}
    assert rates == {
        ("continuous-x4", 0.5): 5.0,
        ("continuous-x4", 1.1): 11.0,
        ("1P+3D", 0.5): 10.0,
        ("1P+3D", 1.1): 22.0,
        ("3P+1D", 0.5): 15.0,
        ("3P+1D", 1.1): 33.0,
    }
    with pytest.raises(ScenarioError) as info:
        study.at_saturation({"base/config=continuous-x4/saturation": 1.0})
    assert [p for p, _ in info.value.problems] == ["base/config=1P+3D/saturation", "base/config=3P+1D/saturation"]


def test_arrival_keys_do_not_multiply_the_probes():
    # the probe replaces the arrivals: a burstiness axis shares one probe per variant, as before
    study = load_study(
        {
            **BASE,
            "set": {**BASE["set"], "workload.arrival": {"process": "gamma", "rate": 1.0, "cv": 1.0}},
            "variants": {"continuous": {}, "static": {"scheduler": {"kind": "static", "max_batch_size": 16}}},
            "grid": {"workload.arrival.cv": [1.0, 3.0]},
            "load": {"fractions": [0.5]},
        }
    )
    assert [p.run_id for p in study.probes] == ["continuous/saturation", "static/saturation"]
    assert [p.scenario["workload"]["arrival"]["concurrency"] for p in study.probes] == [256, 32]


def test_a_levels_sweep_tables_carry_the_level_names(tmp_path):
    study = load_study(
        {
            **BASE,
            "set": {**BASE["set"], "horizon.duration": 20, "warmup": 2},
            "grid": {
                "config": {"continuous-x2": {"cluster.replicas": 2}, "1P+1D": {"scheduler.kind": "disaggregated"}}
            },
            "load": {"fractions": [0.3]},
        }
    )
    runs, points = sweep(study, tmp_path / "out", workers=1)
    assert list(points["config"]) == ["continuous-x2", "1P+1D"]
    assert (tmp_path / "out" / "runs" / "base" / "config=1P+1D" / "saturation" / "summary.json").is_file()
    assert (tmp_path / "out" / "runs" / "base" / "load=0.3" / "config=1P+1D" / "r0" / "summary.json").is_file()
    split = runs[runs["config"] == "1P+1D"].iloc[0]
    assert split["decode_busy_fraction"] > 0 and split["kv_transfer_time_mean"] > 0


@pytest.mark.parametrize(
    "grid, where, words",
    [
        ({"scheduler.split": {"a": {"cluster.replicas": 2}}}, "grid", "plain name"),
        ({"config": {"a b": {"cluster.replicas": 2}}}, "grid", "name a level"),
        ({"config": {1: {"cluster.replicas": 2}}}, "grid", "name a level"),
        ({"config": {"a": {}}}, "grid", "at least one dotted key"),
        ({"config": {"a": 3}}, "grid", "mapping of dotted keys"),
        ({"workload.arrival.rate": 3}, "grid", "a list of values"),
        ({"config": {"a": {"cluster.replicaz": 2}, "b": {"cluster.replicas": 2}}}, "base/config=a: cluster.replicaz",
         "unknown key"),
    ],
)  # fmt: skip
def test_a_bad_axis_is_one_problem(grid, where, words):
    found = problems({**BASE, "variants": {"x": {}, "y": {}}, "grid": grid, "load": {"fractions": [0.2, 0.5, 1.1]}})
    assert len(found) == 1, found
    path, message = found[0]
    assert path.endswith(where.removeprefix("base/")) and words in message, found


def test_a_level_may_not_set_the_rate_of_a_load_study():
    for level in ({"workload.arrival.rate": 3}, {"workload.arrival": {"process": "poisson", "rate": 3}}):
        found = problems({**BASE, "grid": {"config": {"a": level}}, "load": {"fractions": [0.5]}})
        assert len(found) == 1 and found[0][0] == "grid" and "cannot vary" in found[0][1]


def test_one_bad_value_is_one_problem_however_many_points_share_it():
    bad = {**BASE, "variants": {"x": {}, "y": {}}, "grid": {"workload.arrival.rate": [1, -2]}, "replications": 3}
    assert problems(bad) == [("x/workload.arrival.rate=-2: workload.arrival.rate", "must be > 0 (got -2)")]


def test_des_sweep_prints_one_error_line_for_a_bad_level(tmp_path):
    study = tmp_path / "bad.yaml"
    bad_split = {"scheduler.kind": "disaggregated", "scheduler.prefill.instancez": 1}
    study.write_text(
        yaml.safe_dump({**BASE, "grid": {"config": {"1P+3D": bad_split}}, "load": {"fractions": [0.2, 0.5]}})
    )
    proc = des_cli("sweep", str(study), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [
        "error: base/config=1P+3D: scheduler.prefill.instancez: unknown key (did you mean 'instances'?)"
    ], proc.stderr
    assert not (tmp_path / "out" / "runs").exists()
