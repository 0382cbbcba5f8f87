"""The console a new user meets: quoting hints, sweep tables that fit, capacity searches
that log as they go and say why a value fails, rejections with their reasons, and a
study file given to the wrong command."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import ROOT, SCENARIOS, des_cli, md1
from tests.test_terminal import in_pty


def test_an_slo_mangled_by_the_shell_says_how_to_quote_it():
    # `--slo ttft_p99>=0.9` unquoted: bash redirects into a file named "=0.9" and des gets "ttft_p99"
    proc = des_cli("capacity", "--slo", "ttft_p99", "--replications", "1")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --slo: ") and "Traceback" not in proc.stderr
    assert "--slo 'ttft_p99<=2'" in proc.stderr and "quote" in proc.stderr


def test_a_study_given_to_des_run_says_use_des_sweep(tmp_path):
    proc = des_cli("run", str(SCENARIOS / "headline.yaml"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: scenario: {str(SCENARIOS / 'headline.yaml')!r} is a study, not a scenario: "
        f"run it with `des sweep {SCENARIOS / 'headline.yaml'}`"
    ]
    assert not (tmp_path / "out").exists()
    proc = des_cli("sweep", str(SCENARIOS / "lesson-static.yaml"), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and "is a scenario, not a study: run it with `des run" in proc.stderr


def test_rejections_are_counted_by_reason(tmp_path):
    proc = des_cli(
        "run",
        "--set",
        "horizon.duration=60",
        "--set",
        "warmup=10",
        "--set",
        "scheduler.max_model_len=700",
        "--out",
        str(tmp_path / "out"),
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    n = summary["num_rejected"]
    assert n > 0
    assert f"{n:,} rejected ({n:,} exceeds_max_model_len)" in proc.stdout
    # and the utilisation a planner can use (des.metrics.utilisation) is printed with it
    assert "roofline" in proc.stdout and "batch slots" in proc.stdout and "KV" in proc.stdout


def test_the_sweep_table_has_short_unique_headers_and_rows_that_do_not_wrap(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(
        yaml.safe_dump(
            {
                "name": "two-keys",
                "base": str(SCENARIOS / "qwen7b-4090-poisson.yaml"),
                "set": {
                    "horizon.duration": 40,
                    "warmup": 5,
                    "workload.arrival": {"process": "gamma", "rate": 1.0, "cv": 1.0},
                },
                "variants": {"continuous": {}, "static": {"scheduler": {"kind": "static", "max_batch_size": 8}}},
                "grid": {"workload.arrival.cv": [1.0, 3.0], "workload.arrival.rate": [1, 2]},
            }
        )
    )
    status, text = in_pty(["sweep", str(study), "--out", str(tmp_path / "out"), "--workers", "1"])
    assert status == 0, text
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)  # colours and cursor moves
    lines = text.splitlines()
    head = next(line for line in lines if "variant" in line)
    cells = [c.strip() for c in head.strip("┃│ \r").split("┃")]
    assert cells[:3] == ["variant", "cv", "rate"], head
    assert "workload.arrival" not in text
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 8, "\n".join(rows)  # one line per point: no cell wrapped onto a second line


@pytest.fixture(scope="module")
def md1_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("md1") / "md1.yaml"
    path.write_text(yaml.safe_dump(md1(n=3000)))
    return path


def test_capacity_logs_each_probe_as_a_line_while_it_runs_when_piped(tmp_path, md1_file):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "des.cli",
            "capacity",
            str(md1_file),
            "--slo",
            "queue_delay_mean<=1",
            "--replications",
            "3",
            "--workers",
            "1",
            "--out",
            str(tmp_path / "out"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    seen: list[tuple[float, str]] = []
    for line in proc.stdout:
        seen.append((time.monotonic(), line.rstrip("\n")))
    assert proc.wait() == 0, proc.stderr.read() if proc.stderr else ""
    probes = [(t, line) for t, line in seen if line.startswith("workload.arrival.rate = ")]
    assert len(probes) >= 5, seen
    # lines arrive as the search goes, not all at its end
    assert probes[-1][0] - probes[0][0] > 0.3, seen
    assert seen[-1][1].startswith("capacity (workload.arrival.rate)")
    # every value that fails says why: instability, or which SLO
    fails = [line for _, line in probes if line.split("; ")[-1].startswith(("fails", "surely fails"))]
    assert fails and all("queue_delay_mean" in line or "unstable" in line for line in fails), fails
    # and every run is kept, one folder per value and replication, with the answer
    answer = json.loads((tmp_path / "out" / "capacity" / "answer.json").read_text())
    for ev in answer["evaluations"]:
        for r in range(3):
            assert (tmp_path / "out" / "capacity" / f"{ev['value']!r}" / f"r{r}" / "run.json").is_file()


def test_a_capacity_search_started_again_reuses_its_runs(tmp_path, md1_file):
    args = ["capacity", str(md1_file), "--slo", "queue_delay_mean<=1", "--replications", "2", "--workers", "1"]
    first = des_cli(*args, "--json", "--out", str(tmp_path / "out"))
    assert first.returncode == 0, first.stderr
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "out" / "capacity").glob("*/r*/run.json")}
    again = des_cli(*args, "--json", "--out", str(tmp_path / "out"))
    assert json.loads(again.stdout)["capacity"] == json.loads(first.stdout)["capacity"]
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


def test_capacity_of_a_trace_searches_its_rate_scale(tmp_path):
    trace = tmp_path / "t.csv"
    rows = "\n".join(f"{1_700_000_000 + 0.5 * i},200,50" for i in range(400))
    trace.write_text("arrival_time,prompt_tokens,output_tokens\n" + rows + "\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({"workload": {"arrival": {"process": "trace", "path": "t.csv"}}}))
    proc = des_cli(
        "capacity",
        str(scenario),
        "--slo",
        "ttft_p99<=1",
        "--replications",
        "1",
        "--tolerance",
        "0.1",
        "--json",
        "--out",
        str(tmp_path / "out"),
    )
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["param"] == "workload.arrival.rate_scale"
    # 2 req/s recorded; one 4090 carries several times that
    assert answer["capacity"] > 2


def _points(short: list[int]) -> Any:
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for i in range(6):
        rows.append(
            {
                "variant": "static" if i < 3 else "continuous",
                "workload.arrival.rate": float(i + 1),
                "throughput_rps": 1.0,
                "ttft_p99": 2.0,
                "tpot_p50": 0.02,
                "e2e_p99": 9.0,
                "all_stable": True,
                "runs_short": 2 if i in short else 0,
                "adequacy": f"warm-up or horizon short in 2 of 3 replications: reason {i}" if i in short else "",
                "interval_method": "latencies: batch means",
            }
        )
        for m in ("throughput_rps", "ttft_p99", "tpot_p50", "e2e_p99"):
            value = float(rows[-1][m])
            rows[-1] |= {f"{m}_lo": value * 0.9, f"{m}_hi": value * 1.1}
    return pd.DataFrame(rows)


@pytest.mark.parametrize("short", [[4], [0, 1, 4]])
def test_short_points_are_said_once_when_many_and_each_when_few(capsys, short):
    """A point or two whose runs are too short get a warning each, saying why; more are
    marked in the table's stable column and told in one warning, counted by variant."""
    from des.render.study import points_table

    points_table(_points(short), ["workload.arrival.rate"])
    out, err = capsys.readouterr()
    err = " ".join(err.split())
    rows = [line for line in out.splitlines() if line.startswith("│")]
    marked = [i for i, row in enumerate(rows) if "yes*" in row]
    if len(short) == 1:
        assert marked == [] and err.count("warning:") == 1
        assert "continuous rate=5.0: warm-up or horizon short in 2 of 3 replications: reason 4" in err
    else:
        assert marked == short and err.count("warning:") == 1
        assert "short at 3 of 6 points (static 2 of 3, continuous 1 of 3)" in err
        assert "reason" not in err and "points.parquet" in err
