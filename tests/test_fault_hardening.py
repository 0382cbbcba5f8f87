"""Faults around the results folder (issue #16, reliability review 3: D5, D7, D8, D11).

- SIGTERM to the main process of ``des sweep`` or ``des capacity`` ends its workers
  (and every other process it started) before it exits, so no run is written after it
  has gone and its lock outlives no writer; it prints ``terminated`` and exits 143. An
  interrupted sweep resumes to the tables of an uninterrupted one.
- A failed write (a full disk) leaves no staging file behind, and a resume removes the
  staging files an earlier process left (``.NAME.XXXXXXXX.tmp`` of the files des
  writes there), never a user's file.
- A scenario or study ``name`` decides the default folder ``results/<name>/``; a name
  that would put it outside ``results/`` is refused with an ``error: name:`` line,
  while ordinary names (unicode, nested ``a/b``) keep their folder.
- ``des run`` takes the folder's lock: it is refused while a sweep, a capacity search
  or another run writes the folder, and a sweep is refused while a run writes it.

The signal tests start the CLI in a session of its own, signal the main process only,
and watch every process it started (workers are grandchildren, under the forkserver)
through ``/proc``; they poll with generous deadlines instead of sleeping, since the
machine running the suite may be loaded.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from des.output import Staged
from des.study import load_study, sweep
from des.study.runner import SweepLocked, sweep_lock
from tests.helpers import ROOT, SCENARIOS, des_cli

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="watches processes through /proc")

POISSON = SCENARIOS / "qwen7b-4090-poisson.yaml"
#: Twelve runs of about a second each: long enough to signal a sweep in the middle.
SIGNAL_STUDY: dict[str, Any] = {
    "name": "signals",
    "base": str(POISSON),
    "set": {"horizon.duration": 90, "warmup": 5},
    "variants": {"cont": {}, "static": {"scheduler": {"kind": "static", "max_batch_size": 16}}},
    "grid": {"workload.arrival.rate": [2, 4, 8]},
    "replications": 2,
}
RESULT_FILES = {"requests.parquet", "steps.parquet", "windows.parquet", "summary.json", "scenario.yaml"}
DEADLINE = 120.0  # seconds; a healthy machine needs a few


# -- processes -----------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time) of ``pid``, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), fields[0], int(fields[19])


def descendants(pid: int) -> dict[int, int]:
    """Every process below ``pid`` (children, their children, ...): pid -> start time."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None:
            children.setdefault(st[0], []).append(int(entry))
    found: dict[int, int] = {}
    todo = list(children.get(pid, []))
    while todo:
        p = todo.pop()
        if (st := _stat(p)) is not None:
            found[p] = st[2]
            todo += children.get(p, [])
    return found


def living(procs: dict[int, int]) -> list[int]:
    """Those of ``procs`` still running (a zombie has ended; a reused pid is another process)."""
    out = []
    for pid, started in procs.items():
        st = _stat(pid)
        if st is not None and st[1] != "Z" and st[2] == started:
            out.append(pid)
    return out


def wait_until(cond: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting until {what}")
        time.sleep(0.05)


@contextmanager
def des_process(args: list[str], log: Path, cwd: Path = ROOT, **popen: Any) -> Iterator[subprocess.Popen]:
    """``python -m des.cli ARGS`` in a session of its own, stdout and stderr into ``log``.*;
    whatever it leaves running is killed at the end (by pid and by its process group)."""
    # started with SIGINT's default action, as a terminal's shell starts it: a suite run in
    # the background (``make test &``) ignores SIGINT, which a child would inherit
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with open(log.with_suffix(".out"), "w") as out, open(log.with_suffix(".err"), "w") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "des.cli", *args],
                cwd=cwd,
                stdout=out,
                stderr=err,
                start_new_session=True,
                **popen,
            )
    finally:
        signal.signal(signal.SIGINT, saved)
    seen: dict[int, int] = {}
    try:
        yield proc
    finally:
        if proc.poll() is None:
            seen.update(descendants(proc.pid))
            proc.kill()
        proc.wait()
        for pid in living(seen):
            os.kill(pid, signal.SIGKILL)
        with suppress(ProcessLookupError, PermissionError):  # the group outlives its reaped leader while it has members
            os.killpg(proc.pid, signal.SIGKILL)


def stderr_of(log: Path) -> str:
    return log.with_suffix(".err").read_text()


def finished_runs(folder: Path) -> set[Path]:
    return {p.parent for p in folder.rglob("run.json")}


def staging_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.tmp"))


def files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*")}


def holds_lock(folder: Path, proc: subprocess.Popen) -> bool:
    """Whether ``proc`` has taken ``folder``'s lock, as the lock file says (probing with
    flock, as :func:`lock_is_held` does, could make the process's own attempt fail)."""
    try:
        return (folder / ".sweep.lock").read_text().endswith(f" {proc.pid}\n")
    except OSError:
        return False


def lock_is_held(folder: Path) -> bool:
    """Whether some process holds ``folder``'s lock (probed without creating anything; only
    where no process may be taking it at the same time)."""
    try:
        fd = os.open(folder / ".sweep.lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def terminate_main_and_watch(proc: subprocess.Popen, out: Path) -> tuple[int, int, int]:
    """SIGTERM to the main process only; then require that every process it had started
    ends, and that no run is finished after it exited. Returns (exit status, runs
    finished when it exited, runs finished when its last descendant had gone)."""
    family = descendants(proc.pid)
    assert family, "the main process had started no workers"
    os.kill(proc.pid, signal.SIGTERM)
    status = proc.wait(timeout=DEADLINE)
    at_exit = len(finished_runs(out))
    wait_until(lambda: not living(family), f"every process the main process started has ended: {living(family)}")
    return status, at_exit, len(finished_runs(out))


def drop_wall(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[c for c in frame.columns if c.startswith("wall_time")])


# -- D5: SIGTERM ends the workers --------------------------------------------------------------


def test_sigterm_to_a_sweeps_main_process_ends_its_workers_and_a_resume_matches(tmp_path):
    study_file = tmp_path / "study.yaml"
    study_file.write_text(yaml.safe_dump(SIGNAL_STUDY))
    out = tmp_path / "out"
    args = ["sweep", str(study_file), "--out", str(out), "--workers", "2", "--quiet"]
    with des_process(args, tmp_path / "sweep") as proc:
        wait_until(lambda: len(finished_runs(out)) >= 2 or proc.poll() is not None, "two runs are finished")
        assert proc.poll() is None, f"the sweep ended before the signal: {stderr_of(tmp_path / 'sweep')}"
        status, at_exit, after = terminate_main_and_watch(proc, out)
    assert status == 143, stderr_of(tmp_path / "sweep")
    assert stderr_of(tmp_path / "sweep").splitlines()[-1] == "terminated"
    assert "Traceback" not in stderr_of(tmp_path / "sweep")
    assert after == at_exit < 12, "runs were finished after the main process had gone"
    assert not staging_files(out)
    assert not (out / "runs.parquet").exists()
    assert not lock_is_held(out)
    # the interrupted sweep resumes, reusing what was finished, to the tables of an uninterrupted one
    stamps = {p: (p / "run.json").stat().st_mtime_ns for p in finished_runs(out)}
    done = des_cli("sweep", str(study_file), "--out", str(out), "--workers", "2", "--quiet")
    assert done.returncode == 0, done.stderr
    assert all((p / "run.json").stat().st_mtime_ns == t for p, t in stamps.items())
    fresh_runs, fresh_points = sweep(load_study(SIGNAL_STUDY), tmp_path / "fresh", workers=1)
    runs, points = pd.read_parquet(out / "runs.parquet"), pd.read_parquet(out / "points.parquet")
    assert drop_wall(runs).equals(drop_wall(fresh_runs))
    assert drop_wall(points).equals(drop_wall(fresh_points))


def test_sigterm_to_a_capacity_searchs_main_process_ends_its_workers(tmp_path):
    out = tmp_path / "out"
    args = [
        "capacity",
        str(POISSON),
        "--set",
        "horizon.duration=90",
        "--set",
        "warmup=5",
        "--slo",
        "ttft_p99<=2",
        "--replications",
        "6",
        "--workers",
        "2",
        "--out",
        str(out),
    ]
    with des_process(args, tmp_path / "capacity") as proc:
        wait_until(lambda: len(finished_runs(out)) >= 2 or proc.poll() is not None, "two runs are finished")
        assert proc.poll() is None, f"the search ended before the signal: {stderr_of(tmp_path / 'capacity')}"
        status, at_exit, after = terminate_main_and_watch(proc, out)
    assert status == 143, stderr_of(tmp_path / "capacity")
    assert stderr_of(tmp_path / "capacity").splitlines()[-1] == "terminated"
    assert after == at_exit, "runs were finished after the main process had gone"
    assert not staging_files(out)
    assert not (out / "capacity" / "answer.json").exists()
    assert not lock_is_held(out / "capacity")


def test_sigint_to_a_sweeps_main_process_still_aborts_with_130_and_leaves_nothing_running(tmp_path):
    study_file = tmp_path / "study.yaml"
    study_file.write_text(yaml.safe_dump(SIGNAL_STUDY))
    out = tmp_path / "out"
    args = ["sweep", str(study_file), "--out", str(out), "--workers", "2", "--quiet"]
    with des_process(args, tmp_path / "sweep") as proc:
        wait_until(lambda: len(finished_runs(out)) >= 2 or proc.poll() is not None, "two runs are finished")
        assert proc.poll() is None, f"the sweep ended before the signal: {stderr_of(tmp_path / 'sweep')}"
        family = descendants(proc.pid)
        os.kill(proc.pid, signal.SIGINT)
        status = proc.wait(timeout=DEADLINE)
        at_exit = len(finished_runs(out))
        wait_until(lambda: not living(family), "every process the main process started has ended")
    assert status == 130
    assert stderr_of(tmp_path / "sweep").splitlines()[-1] == "aborted"
    assert len(finished_runs(out)) == at_exit
    assert not staging_files(out)


def test_sigterm_to_des_run_writes_nothing(tmp_path):
    out = tmp_path / "out"
    args = ["run", str(POISSON), "--set", "horizon.duration=20000", "--out", str(out), "--quiet"]
    with des_process(args, tmp_path / "run") as proc:
        wait_until(lambda: holds_lock(out, proc) or proc.poll() is not None, "the run holds its folder")
        assert proc.poll() is None, stderr_of(tmp_path / "run")
        os.kill(proc.pid, signal.SIGTERM)
        status = proc.wait(timeout=DEADLINE)
    assert status == 143, stderr_of(tmp_path / "run")
    assert stderr_of(tmp_path / "run") == "terminated\n"
    assert not out.exists()


def _simulate_losing_a_sigterm(real: Callable[..., Any]) -> Callable[..., Any]:
    """``simulate``, during which SIGTERM's exception is raised and then lost, as when the
    handler runs inside C code that clears errors (a lazy ``import scipy`` did that)."""

    def simulate(*args: Any, **kwargs: Any) -> Any:
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler) and handler is not signal.default_int_handler, "des installed no SIGTERM handler"
        with suppress(SystemExit):
            handler(signal.SIGTERM, None)
        return real(*args, **kwargs)

    return simulate


@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_sigterm_whose_exception_is_lost_still_stops_des_before_it_commits(tmp_path, monkeypatch, command):
    from click.testing import CliRunner

    import des.simulation
    from des.cli import main

    monkeypatch.setattr(des.simulation, "simulate", _simulate_losing_a_sigterm(des.simulation.simulate))
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump(SIGNAL_STUDY))
    out = tmp_path / "out"
    if command == "run":
        args = ["run", str(POISSON), "--set", "horizon.duration=20", "--set", "warmup=2", "--out", str(out)]
    else:
        args = ["sweep", str(study), "--out", str(out), "--workers", "1", "--quiet"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 143, result.output
    assert result.output.splitlines()[-1] == "terminated"
    if command == "run":
        assert not out.exists()
    else:
        assert not finished_runs(out) and not staging_files(out) and not (out / "runs.parquet").exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, "des left its SIGTERM handler installed"


# -- D7: a full disk leaves no staging files, and a resume removes old ones --------------------


SMALL: dict[str, Any] = {
    "name": "small",
    "base": str(POISSON),
    "set": {"horizon.duration": 30, "warmup": 5},
    "grid": {"workload.arrival.rate": [2]},
    "replications": 2,
}
#: The files a sweep of SMALL writes, in order: study.yaml, 5 per run, runs and points tables.
SMALL_WRITES = 1 + 5 * 2 + 2


@contextmanager
def disk_full_at(monkeypatch: pytest.MonkeyPatch, n: int) -> Iterator[list[str]]:
    """The ``n``-th file written through :class:`des.output.Staged` gets a few bytes and
    then ENOSPC, as on a full disk. Yields the names written so far."""
    written: list[str] = []
    real = Staged.write

    def write(self: Staged, name: str, writer: Callable[[Path], object]) -> None:
        written.append(name)
        if len(written) != n:
            return real(self, name, writer)

        def full(path: Path) -> None:
            path.write_bytes(b"partial")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

        return real(self, name, full)

    with monkeypatch.context() as m:
        m.setattr(Staged, "write", write)
        yield written


@pytest.mark.parametrize("n", range(1, SMALL_WRITES + 1))
def test_a_full_disk_during_a_sweep_leaves_no_staging_files(tmp_path, monkeypatch, n):
    out = tmp_path / "out"
    with disk_full_at(monkeypatch, n) as written, pytest.raises(OSError, match="No space left on device"):
        sweep(load_study(SMALL), out, workers=1)
    assert len(written) == n
    assert not staging_files(out), f"a failed write of {written[-1]} left staging files"
    assert not (out / "runs.parquet").exists() or n > SMALL_WRITES - 2
    runs, _ = sweep(load_study(SMALL), out, workers=1)  # resumes on a roomy disk
    assert len(runs) == 2 and not staging_files(out)


def test_a_file_size_limit_in_a_sweeps_workers_is_a_clean_error_and_leaves_nothing_behind(tmp_path):
    """A whole ``des sweep --workers 2`` on a "disk" that takes no file above 7.4 kB
    (RLIMIT_FSIZE, no root needed): scenario.yaml (6.8 kB) and summary.json fit,
    latencies.parquet (7.9 kB) cannot be written."""
    study_file = tmp_path / "study.yaml"
    study_file.write_text(yaml.safe_dump({**SMALL, "grid": {"workload.arrival.rate": [2, 4]}}))
    out = tmp_path / "out"

    def small_disk() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (7400, 7400))

    args = ["sweep", str(study_file), "--out", str(out), "--workers", "2", "--quiet"]
    with des_process(args, tmp_path / "sweep", preexec_fn=small_disk) as proc:
        status = proc.wait(timeout=DEADLINE)
    err = stderr_of(tmp_path / "sweep")
    assert status == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("error: --out: cannot write "), err
    assert "File too large" in err and "Traceback" not in err
    assert not staging_files(out)
    assert not finished_runs(out)
    done = des_cli("sweep", str(study_file), "--out", str(out), "--workers", "2", "--quiet")
    assert done.returncode == 0, done.stderr
    assert len(finished_runs(out)) == 4 and not staging_files(out)


def test_a_resume_removes_stale_staging_files_and_only_those(tmp_path):
    out = tmp_path / "out"
    sweep(load_study(SMALL), out, workers=1)
    run0 = next(iter(sorted(finished_runs(out))))
    (run0 / "run.json").unlink()  # an unfinished run: it is run again
    run1 = sorted(finished_runs(out))[0]
    stale = [
        run0 / ".scenario.yaml.k3j_9x2a.tmp",
        run0 / ".summary.json.abcdefgh.tmp",
        run1 / ".latencies.parquet.0a1b2c3d.tmp",  # in a finished run, too
        out / ".runs.parquet.zz_zz_zz.tmp",
        out / ".study.yaml.q1w2e3r4.tmp",
    ]
    users = [
        run0 / ".notes.abcdefgh.tmp",  # not a file des writes
        run0 / ".scenario.yaml.tmp",  # not the staging pattern
        run0 / ".scenario.yaml.ABCDEFGH.tmp",
        run0 / "scenario.yaml.abcdefgh.tmp",
        out / "mine.tmp",
        out / ".runs.parquet.abcdefghi.tmp",
    ]
    for p in stale + users:
        p.write_text("x")
    sweep(load_study(SMALL), out, workers=1)
    assert [p for p in stale if p.exists()] == []
    assert [p for p in users if not p.exists()] == []


# -- D8: the default folder stays inside results/ ------------------------------------------------


#: Names whose results/<name>/ is no folder inside results/ ("ABS" stands for the test's scratch folder).
ESCAPING_NAMES = ["../../escaped", "a/../../escaped", "ABS/escaped", "", ".", "a/../..", "nul\0byte"]


def _scenario_named(work: Path, name: str) -> Path:
    path = work / "s.yaml"
    scenario = {**yaml.safe_load(POISSON.read_text()), "name": name, "horizon": {"duration": 20}, "warmup": 2}
    path.write_text(yaml.safe_dump(scenario, allow_unicode=True))
    return path


@pytest.mark.parametrize("name", ESCAPING_NAMES)
def test_a_name_that_would_leave_results_is_refused_for_the_default_folder(tmp_path, name):
    name = name.replace("ABS", str(tmp_path), 1)
    work = tmp_path / "a" / "work"
    work.mkdir(parents=True)
    scenario = _scenario_named(work, name)
    study = work / "study.yaml"
    study.write_text(yaml.safe_dump({"name": name, "base": str(scenario), "grid": {"workload.arrival.rate": [1]}}))
    before = files_under(tmp_path)
    for args in (
        ["run", str(scenario)],
        ["sweep", str(study), "--workers", "1"],
        ["capacity", str(scenario), "--slo", "ttft_p99<=2", "--replications", "1", "--workers", "1"],
    ):
        done = des_cli(*args, cwd=work)
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("error: name: "), done.stderr
        assert "results/" in done.stderr and "--out" in done.stderr
        assert files_under(tmp_path) == before, f"des {args[0]} wrote files"


def test_an_escaping_name_runs_where_out_says(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    done = des_cli("run", str(_scenario_named(work, "../../escaped")), "--out", "here", "--quiet", cwd=work)
    assert done.returncode == 0, done.stderr
    assert {p.name for p in (work / "here").iterdir()} == RESULT_FILES


@pytest.mark.parametrize("name", ["模型 ü-test", "lesson/static", "weird..name", "..hidden", "a b/c=1/r0"])
def test_ordinary_names_keep_their_default_folder(tmp_path, name):
    done = des_cli("run", str(_scenario_named(tmp_path, name)), "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert {p.name for p in (tmp_path / "results" / name).iterdir()} == RESULT_FILES


# -- D11: des run takes the folder's lock -----------------------------------------------------------


SHORT = ["--set", "horizon.duration=30", "--set", "warmup=5"]


def digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def test_des_run_into_a_folder_a_sweep_holds_is_refused_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    with sweep_lock(out):
        before = files_under(out)
        done = des_cli("run", *SHORT, "--out", str(out))
        assert done.returncode == 2, done.stderr
        assert done.stderr == f"error: --out: another des sweep (pid {os.getpid()}) is writing to {str(out)!r}\n"
        assert files_under(out) == before


def test_des_run_into_a_running_capacity_searchs_folder_is_refused(tmp_path):
    out = tmp_path / "out"
    with sweep_lock(out / "capacity", "capacity search"):
        done = des_cli("run", *SHORT, "--out", str(out / "capacity"))
    assert done.returncode == 2
    assert done.stderr.startswith("error: --out: another des capacity search (pid ")


def test_des_run_is_refused_while_a_real_sweep_writes_the_folder(tmp_path):
    study_file = tmp_path / "study.yaml"
    study_file.write_text(yaml.safe_dump({**SMALL, "set": {"horizon.duration": 300, "warmup": 5}}))
    out = tmp_path / "out"
    with des_process(["sweep", str(study_file), "--out", str(out), "--workers", "1"], tmp_path / "sweep") as proc:
        wait_until(lambda: holds_lock(out, proc) or proc.poll() is not None, "the sweep holds its folder")
        assert proc.poll() is None, f"the sweep ended without holding its folder: {stderr_of(tmp_path / 'sweep')}"
        os.kill(proc.pid, signal.SIGSTOP)  # hold it there, whatever the machine's speed
        try:
            assert lock_is_held(out)
            done = des_cli("run", *SHORT, "--out", str(out))
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("error: --out: another des sweep (pid "), done.stderr
        assert proc.wait(timeout=DEADLINE) == 0, stderr_of(tmp_path / "sweep")
    assert not RESULT_FILES & {p.name for p in out.iterdir()}


def test_a_run_holds_its_folder_against_a_sweep_and_a_second_run(tmp_path):
    out, alone = tmp_path / "out", tmp_path / "alone"
    first = ["run", "--set", "horizon.duration=600", "--seed", "1"]  # a few seconds: time to catch it
    with des_process([*first, "--out", str(out), "--quiet"], tmp_path / "run") as proc:
        wait_until(lambda: holds_lock(out, proc) or proc.poll() is not None, "the run holds its folder")
        assert proc.poll() is None, f"the run ended without holding its folder: {stderr_of(tmp_path / 'run')}"
        os.kill(proc.pid, signal.SIGSTOP)  # hold it there, whatever the machine's speed
        try:
            assert lock_is_held(out)
            second = des_cli("run", *SHORT, "--seed", "2", "--out", str(out))
            study_file = tmp_path / "study.yaml"
            study_file.write_text(yaml.safe_dump(SMALL))
            sweeping = des_cli("sweep", str(study_file), "--out", str(out), "--workers", "1")
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(timeout=DEADLINE) == 0, stderr_of(tmp_path / "run")
    for done in (second, sweeping):
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("error: --out: another des run (pid "), done.stderr
        assert len(done.stderr.splitlines()) == 1
    assert des_cli(*first, "--out", str(alone), "--quiet").returncode == 0
    assert digests(out) == digests(alone), "the folder holds one consistent result: the first run's"


def test_the_lock_api_refuses_a_second_holder_in_the_same_process(tmp_path):
    with sweep_lock(tmp_path), pytest.raises(SweepLocked, match=r"another des sweep \(pid \d+\)"):
        sweep(load_study(SMALL), tmp_path, workers=1)


def test_the_lock_file_names_its_holder(tmp_path):
    with sweep_lock(tmp_path, "capacity search"):
        assert (tmp_path / ".sweep.lock").read_text() == f"capacity search {os.getpid()}\n"


def test_des_run_on_a_full_disk_writes_nothing(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from des.cli import main

    out = tmp_path / "out"
    with disk_full_at(monkeypatch, 3):
        args = ["run", str(POISSON), "--set", "horizon.duration=20", "--set", "warmup=2", "--out", str(out)]
        result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "No space left on device" in result.output
    assert not out.exists()
