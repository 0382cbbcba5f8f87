"""`des run` end to end: the four output files, their contract, and byte-for-byte repeatability."""

from __future__ import annotations

import hashlib
import json

import pandas as pd
import pytest
import yaml

import des
from tests.helpers import ROOT, SCENARIOS, des_cli

CONTRACT_REQUEST_COLUMNS = [
    "request_id", "arrival_time", "prompt_tokens", "output_tokens", "scheduled_time", "first_token_time",
    "finish_time", "ttft", "tpot", "e2e", "queue_delay", "preemptions", "status", "instance",
]  # fmt: skip
CONTRACT_STEP_COLUMNS = ["instance", "start", "duration", "batch_size", "prefill_tokens", "decode_tokens", "kv_blocks"]
CONTRACT_SUMMARY_KEYS = (
    ["num_requests", "num_completed", "num_rejected", "num_unfinished", "throughput_rps", "output_tokens_per_s"]
    + [f"{m}_{s}" for m in ("ttft", "tpot", "e2e", "queue_delay") for s in ("mean", "p50", "p90", "p95", "p99")]
    + ["gpu_busy_fraction", "mean_batch_size", "preemptions", "kv_capacity_tokens", "stable"]
)
FILES = ("requests.parquet", "steps.parquet", "windows.parquet", "summary.json", "scenario.yaml")


def des_run(*args, cwd=ROOT):
    return des_cli("run", *args, cwd=cwd)


def digests(folder):
    return {f: hashlib.sha256((folder / f).read_bytes()).hexdigest() for f in FILES}


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("default")
    proc = des_run("--out", str(out), "--set", "horizon.duration=120", "--set", "warmup=20")
    assert proc.returncode == 0, proc.stderr
    return out, proc


def test_writes_the_four_files_with_the_contract_columns(default_run):
    out, proc = default_run
    requests = pd.read_parquet(out / "requests.parquet")
    steps = pd.read_parquet(out / "steps.parquet")
    summary = json.loads((out / "summary.json").read_text())
    assert list(requests.columns[: len(CONTRACT_REQUEST_COLUMNS)]) == CONTRACT_REQUEST_COLUMNS
    assert set(CONTRACT_STEP_COLUMNS) <= set(steps.columns)
    assert set(CONTRACT_SUMMARY_KEYS) <= set(summary)
    assert set(requests["status"]) <= {"completed", "rejected", "unfinished"}
    assert summary["num_requests"] == len(requests)
    assert summary["num_steps"] == len(steps)
    assert "ttft" in proc.stdout and "stable" in proc.stdout


def test_scenario_yaml_is_the_resolved_scenario_and_reruns_identically(default_run, tmp_path):
    out, _ = default_run
    resolved = yaml.safe_load((out / "scenario.yaml").read_text())
    assert resolved["horizon"]["duration"] == 120
    assert resolved["gpu"]["name"] == "rtx4090" and resolved["model"]["name"] == "qwen2.5-7b"
    again = tmp_path / "again"
    proc = des_run(str(out / "scenario.yaml"), "--out", str(again))
    assert proc.returncode == 0, proc.stderr
    assert digests(again) == digests(out)


def test_same_scenario_and_seed_give_identical_bytes(tmp_path):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    args = [str(SCENARIOS / "qwen7b-4090-bursty.yaml"), "--set", "horizon.duration=60", "--set", "warmup=10"]
    for out in (a, b):
        assert des_run(*args, "--out", str(out)).returncode == 0
    assert digests(a) == digests(b)
    assert des_run(*args, "--seed", "5", "--out", str(c)).returncode == 0
    assert digests(c)["requests.parquet"] != digests(a)["requests.parquet"]


def test_default_out_folder_is_results_slash_name(tmp_path):
    proc = des_run(str(SCENARIOS / "lesson-static.yaml"), "--quiet", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == ""
    assert sorted(p.name for p in (tmp_path / "results" / "lesson-static").iterdir()) == sorted(FILES)


def test_python_api_matches_the_cli(default_run):
    out, _ = default_run
    r = des.simulate(des.load_scenario(out / "scenario.yaml"))
    assert r.requests.equals(pd.read_parquet(out / "requests.parquet"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary == pytest.approx({k: v for k, v in r.summary.items()}, nan_ok=True)


SHIPPED = sorted(SCENARIOS.glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_every_shipped_scenario_and_study_loads(path):
    from des.study import load_study

    if "base" in yaml.safe_load(path.read_text()):
        study = load_study(path)
        assert study.spec.name == path.stem and study.runs
    else:
        assert des.load_scenario(path).name == path.stem


def test_the_shipped_default_scenario_is_the_packaged_one():
    # des/scenarios/default.yaml (installed with the package) is the one source;
    # scenarios/qwen7b-4090-poisson.yaml links to it, so the two cannot drift apart
    from des.scenario import default_scenario_path

    shipped = SCENARIOS / "qwen7b-4090-poisson.yaml"
    assert shipped.read_bytes() == default_scenario_path().read_bytes()
    assert shipped.resolve() == default_scenario_path().resolve()
