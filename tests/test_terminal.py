"""The CLI as a person runs it: in a terminal, where progress bars and colours are on.

Pipes (CI, ``capture_output``) never reach the code that runs only when stderr is a
terminal, so these tests give each command a pseudo-terminal (Python's ``pty``) and
require that it ends, exits 0 and writes exactly what the same command writes into a
pipe. A command that does not end within ``TIMEOUT`` seconds is killed and fails the
test instead of hanging the suite.
"""

from __future__ import annotations

import hashlib
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

import des
from tests.helpers import ROOT, SCENARIOS

TIMEOUT = 90.0
FILES = ("requests.parquet", "steps.parquet", "summary.json", "scenario.yaml")


def in_pty(args: list[str], cwd: Path = ROOT, timeout: float = TIMEOUT) -> tuple[int, str]:
    """Run ``python -m des.cli ARGS`` with stdin, stdout and stderr on a pseudo-terminal;
    returns (exit status, everything it printed). Fails the test if it does not end."""
    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "120", "LINES": "40", "TERM": "xterm-256color"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "des.cli", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=cwd,
        env=env,
        close_fds=True,
    )
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                proc.wait()
                pytest.fail(
                    f"`des {' '.join(args)}` did not end within {timeout:.0f} s in a terminal; "
                    f"last output: {bytes(out[-300:])!r}"
                )
            ready, _, _ = select.select([master], [], [], min(left, 0.5))
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
    finally:
        os.close(master)
    return proc.wait(), out.decode("utf-8", "replace")


def piped(args: list[str], cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "des.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=TIMEOUT
    )


def digests(folder: Path) -> dict[str, str]:
    return {f: hashlib.sha256((folder / f).read_bytes()).hexdigest() for f in FILES}


SHORT = ["--set", "horizon.duration=60", "--set", "warmup=10"]
RUNS = {
    "drained": ["scenarios/qwen7b-4090-poisson.yaml", *SHORT],
    "undrained": [
        "scenarios/qwen7b-4090-poisson.yaml",
        *SHORT,
        "--set",
        "horizon.drain=false",
        "--set",
        "workload.arrival.rate=30",
    ],
    "closed": ["scenarios/qwen7b-4090-closed.yaml", *SHORT, "--set", "workload.arrival.think_time=1"],
    "trace": ["scenarios/lesson-continuous.yaml"],
    "static": ["scenarios/qwen7b-4090-static.yaml", *SHORT, "--set", "scheduler.max_wait=0.5"],
    "default": ["--set", "horizon.duration=60", "--set", "warmup=10"],
}


@pytest.mark.parametrize("name", list(RUNS))
def test_des_run_ends_in_a_terminal_and_writes_what_a_pipe_gets(name, tmp_path):
    args = RUNS[name]
    status, text = in_pty(["run", *args, "--out", str(tmp_path / "tty")])
    assert status == 0, text
    assert "latency (seconds)" in text and "wrote" in text
    proc = piped(["run", *args, "--out", str(tmp_path / "pipe")])
    assert proc.returncode == 0, proc.stderr
    assert digests(tmp_path / "tty") == digests(tmp_path / "pipe")


def test_des_sweep_and_capacity_end_in_a_terminal(tmp_path):
    study = tmp_path / "study.yaml"
    study.write_text(
        f"name: tiny\nbase: {SCENARIOS / 'qwen7b-4090-poisson.yaml'}\n"
        "set: {horizon.duration: 40, warmup: 5}\n"
        "grid: {workload.arrival.rate: [1, 2]}\nreplications: 2\n"
    )
    status, text = in_pty(["sweep", str(study), "--out", str(tmp_path / "sweep"), "--workers", "1"])
    assert status == 0, text
    assert (tmp_path / "sweep" / "points.parquet").is_file()
    status, text = in_pty(
        [
            "capacity",
            "scenarios/lesson-continuous.yaml",
            "--param",
            "cost_model.step_time",
            "--slo",
            "e2e_p99<=40",
            "--replications",
            "1",
            "--workers",
            "1",
        ]
    )
    assert status in (0, 1), text  # 1: "no answer" is a legitimate outcome, a hang is not
    assert "cost_model.step_time" in text


PROGRESS_CASES = {
    "drained": (SCENARIOS / "qwen7b-4090-poisson.yaml", ["horizon.duration=60", "warmup=10"]),
    "undrained": (
        SCENARIOS / "qwen7b-4090-poisson.yaml",
        ["horizon.duration=60", "warmup=10", "horizon.drain=false", "workload.arrival.rate=30"],
    ),
    "closed": (SCENARIOS / "qwen7b-4090-closed.yaml", ["horizon.duration=60", "warmup=10"]),
    "trace": (SCENARIOS / "card-continuous.yaml", []),
    "static": (SCENARIOS / "qwen7b-4090-static.yaml", ["horizon.duration=60", "warmup=10", "scheduler.max_wait=0.5"]),
    "by-count": (SCENARIOS / "qwen7b-4090-poisson.yaml", ["horizon.duration=null", "horizon.num_requests=200"]),
}


@pytest.mark.parametrize("name", list(PROGRESS_CASES))
def test_simulate_with_a_progress_callback_returns_the_same_result(name):
    path, overrides = PROGRESS_CASES[name]
    sc = des.load_scenario(path, overrides)
    seen: list[des.simulation.RunProgress] = []
    with_progress = des.simulate(sc, progress=seen.append)
    without = des.simulate(sc)
    assert with_progress.requests.equals(without.requests)
    assert with_progress.steps.equals(without.steps)
    assert with_progress.summary == without.summary
    last = seen[-1]
    assert last.arrived == without.summary["num_requests"]
    assert [p.now for p in seen] == sorted(p.now for p in seen)
    if sc.horizon.drain:
        assert last.draining and last.in_system == 0
