"""``des bench`` runs (a smoke case, both engines), and ``des run --steps`` writes what it says.

Speed itself is measured by ``make bench``, never asserted by a test."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq

from tests.helpers import des_cli
from tests.test_cli import des_run


def test_bench_smoke_case_runs_both_engines_and_they_agree_on_the_work(tmp_path):
    out = tmp_path / "bench.json"
    proc = des_cli("bench", "--cases", "smoke", "--repeats", "1", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    assert [(r["case"], r["engine"]) for r in rows] == [("smoke", "fast"), ("smoke", "reference")]
    fast, ref = rows
    assert fast["requests"] == ref["requests"] == 200
    assert fast["steps"] == ref["steps"] > 200
    for r in rows:
        assert r["wall_s"] > 0 and r["peak_mb"] > 10
        assert abs(r["requests_per_s"] * r["wall_s"] - r["requests"]) < 1e-6 * r["requests"]
    assert "speed-up" in proc.stdout and "smoke" in proc.stdout


def test_bench_names_an_unknown_case():
    proc = des_cli("bench", "--cases", "huge")
    assert proc.returncode == 2 and proc.stderr.startswith("error: --cases: unknown huge")


def test_steps_all_sampled_none(tmp_path):
    args = ["--set", "horizon.duration=60", "--set", "warmup=10"]
    out = tmp_path / "run"
    assert des_run(*args, "--out", str(out)).returncode == 0
    total = pq.read_metadata(out / "steps.parquet").num_rows
    assert total > 100
    assert des_run(*args, "--out", str(out), "--steps", "sampled").returncode == 0
    assert pq.read_metadata(out / "steps.parquet").num_rows == total  # under the cap: every step
    meta = pq.read_schema(out / "steps.parquet").metadata
    assert meta[b"des.steps"] == f"all {total} steps".encode()
    proc = des_run(*args, "--out", str(out), "--steps", "none")
    assert proc.returncode == 0
    assert not (out / "steps.parquet").exists()  # the earlier run's file would not describe this one
    assert json.loads((out / "summary.json").read_text())["num_steps"] == total
    assert "steps.parquet" not in proc.stdout


def test_sampled_steps_keep_every_kth_row_under_the_cap():
    import pandas as pd

    from des.output import SAMPLED_STEPS, sampled

    frame = pd.DataFrame({"start": range(2 * SAMPLED_STEPS + 5)})
    rows, note = sampled(frame)
    assert len(rows) <= SAMPLED_STEPS and rows["start"].iloc[1] - rows["start"].iloc[0] == 3
    assert note == {"des.steps": f"1 in 3 of {len(frame)} steps"}


LEAN_START = """
import sys
from des.cli import main
from des.scenario import load_scenario, scenario_warnings
from des.simulation import build, run_until, stop_event
sc = load_scenario(overrides=["horizon.duration=20", "warmup=0"])
scenario_warnings(sc)
print("checked:", sorted(m for m in ("pandas", "pyarrow", "scipy", "matplotlib", "seaborn") if m in sys.modules))
env, cluster, procs = build(sc)
run_until(env, stop_event(sc, env, cluster, procs))
print("simulated:", sorted(m for m in ("pandas", "pyarrow", "matplotlib", "seaborn") if m in sys.modules))
"""


def test_a_run_reaches_and_runs_the_simulation_without_the_heavy_libraries():
    """Issue #12's lean start: pandas, pyarrow, scipy and plotting load only where used
    (tables, writing, sampling a lognormal), and the engine uses none of the table libraries."""
    out = subprocess.run([sys.executable, "-c", LEAN_START], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["checked: []", "simulated: []"]


TOOLS_ALONE = """
import sys
import des.tools.bench, des.tools.calibrate, des.tools.compare, des.tools.costmodel
print(sorted(m for m in ("click", "rich", "matplotlib", "seaborn", "des.cli", "des.render", "des.figures")
             if m in sys.modules))
"""


def test_the_tools_compute_and_leave_flags_printing_and_drawing_to_the_command():
    """Issue #15: des.tools (des costmodel's numbers among them) return data; des.cli (flags, files),
    des.render (tables) and des.figures (matplotlib) show it. The tools load none of them."""
    out = subprocess.run([sys.executable, "-c", TOOLS_ALONE], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["[]"]
