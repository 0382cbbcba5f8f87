"""Running simulations for studies and capacity searches: one folder per run,
resumable, on a local process pool or on dask.

Each run writes into its folder under a root (``DIR/runs/<run_id>/`` for a sweep,
``DIR/capacity/<value>/r<k>/`` for a capacity search): ``scenario.yaml``,
``summary.json``, ``windows.parquet`` (the run over time), ``latencies.parquet`` (the
measured requests' latencies, for pooled percentiles and intervals),
``trace-resample.jsonl`` for a run replaying a resample of a trace (the scenario then
replays it), and, with ``keep_tables``, ``requests.parquet``
and ``steps.parquet``; then
``run.json`` (its seed, wall time and scenario digest) last, as the mark of a finished
run. While it runs, a worker keeps the share of the run simulated in ``.progress`` (see
:data:`PROGRESS_FILE`), so that a sweep of a few long runs shows them moving.
:func:`run_specs` skips every run whose ``run.json`` matches its scenario, so an
interrupted sweep or search resumes where it stopped. The folder's lock keeps a second
sweep (or a ``des run``) out of a folder in use; sweeps in different folders share nothing.

A backend (:class:`LocalBackend`, :class:`DaskBackend`) keeps its workers for a whole
``with`` block, so that a capacity search's many small batches of runs share one pool.
Leaving the block by an exception (an error, Ctrl-C, SIGTERM turned into an exception
by the CLI) ends the local workers at once rather than waiting for their runs: each
removes the staging files of its run in progress and exits, and the block is left only
when none is left running, so no run is written after a sweep has stopped and the
folder's lock, held around the block, outlives every writer.
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import yaml

from des.errors import ScenarioError
from des.interrupt import check
from des.output import FolderLocked, discard_pending, folder_lock
from des.study.spec import RunSpec

#: The folder of a sweep's runs, and of a capacity search's, under its results folder.
RUNS, CAPACITY = "runs", "capacity"
#: The files :func:`execute` writes in a run's folder.
RUN_FILES = (
    "scenario.yaml",
    "summary.json",
    "latencies.parquet",
    "windows.parquet",
    "requests.parquet",
    "steps.parquet",
    "trace-resample.jsonl",
    "run.json",
)
#: A run's share simulated so far (a number in [0, 1], as text), kept in its folder by the
#: worker while the run goes on and removed when it is written: :func:`run_specs` reads
#: those of the runs in flight to show a sweep's progress inside its runs.
PROGRESS_FILE = ".progress"
#: Wall seconds between two writes of a run's progress, and between two looks at the runs in flight.
PROGRESS_EVERY = 1.0
LATENCY_COLUMNS = ["arrival_time", "prompt_tokens", "output_tokens", "ttft", "tpot", "e2e", "queue_delay"]


#: Raised when another des command (sweep, capacity search, run) is writing to the folder.
SweepLocked = FolderLocked


def sweep_lock(out_dir: Path, holder: str = "sweep") -> AbstractContextManager[None]:
    """Hold the lock of ``out_dir`` for the block, as ``holder``; raise :class:`SweepLocked`
    if another des command holds it (see :func:`des.output.folder_lock`)."""
    return folder_lock(out_dir, holder)


def run_dir(root: Path, spec: RunSpec) -> Path:
    return root / spec.run_id


def finished(root: Path, spec: RunSpec) -> dict[str, Any] | None:
    """The row of a run already done with this scenario, or None."""
    d = run_dir(root, spec)
    try:
        meta = json.loads((d / "run.json").read_text())
        summary = json.loads((d / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    if meta.get("digest") != spec.digest:
        return None
    return row_of(spec, summary, meta["wall_time"])


def row_of(spec: RunSpec, summary: dict[str, Any], wall: float) -> dict[str, Any]:
    row: dict[str, Any] = {"run": spec.index, "run_id": spec.run_id, "variant": spec.variant}
    row.update(dict(spec.point))
    row.update({"replication": spec.replication, "seed": spec.seed, "wall_time": wall})
    row.update(summary)
    return row


def _every(seconds: float, tell: Callable[[float], None]) -> Callable[[float], None]:
    """``tell``, passed on at most every ``seconds`` of wall time (the first call always)."""
    due = 0.0

    def throttled(share: float) -> None:
        nonlocal due
        now = time.monotonic()
        if now >= due:
            due = now + seconds
            tell(share)

    return throttled


def _share_writer(path: Path) -> Callable[[float], None]:
    """Writes a run's share simulated into ``path`` (:data:`PROGRESS_FILE`), replacing the
    file whole (a reader never sees half of it)."""

    def write(share: float) -> None:
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_text(f"{share:.4f}")
            os.replace(tmp, path)
        except OSError:  # progress is a courtesy: a full disk fails the run's own writes, not this
            pass

    return write


def run_share(p: Any) -> float:
    """The share of a run done, from its :class:`des.simulation.RunProgress`: the share of its
    arrival horizon simulated (a draining run's stays just short of 1 until it is written)."""
    return 0.99 if p.draining else min(p.fraction or 0.0, 0.99)


def execute(
    spec: RunSpec, root: str, keep_tables: bool, report: Callable[[float], None] | None = None
) -> dict[str, Any]:
    """Simulate one run and write its folder under ``root``; returns its row. Runs in worker
    processes. ``report`` is called with the share of the run done as it goes (None: it is
    written to the run's :data:`PROGRESS_FILE`)."""
    from des.metrics.summary import measured_mask
    from des.output import Staged, json_text, parquet_writer
    from des.scenario import load_scenario
    from des.simulation import simulate

    folder = run_dir(Path(root), spec)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").unlink(missing_ok=True)
    t0 = time.perf_counter()
    scenario = spec.scenario
    if spec.resample:  # a resample of the trace, written beside the run (des.study.resample)
        from des.study.resample import resampled_scenario

        scenario = resampled_scenario(scenario, folder, spec.seed)
    share = _every(PROGRESS_EVERY, report or _share_writer(folder / PROGRESS_FILE))
    result = simulate(load_scenario(scenario), lambda p: share(run_share(p)))
    wall = time.perf_counter() - t0
    req = result.requests
    duration = result.scenario.horizon.duration
    measured = req[measured_mask(req, result.scenario.warmup, math.inf if duration is None else duration)]
    with Staged(folder) as staged:  # a failed write (a full disk) leaves no staging file behind
        staged.write("scenario.yaml", lambda p: p.write_text(yaml.safe_dump(scenario, sort_keys=False)))
        staged.write("summary.json", lambda p: p.write_text(json_text(result.summary)))
        staged.write("latencies.parquet", parquet_writer(measured[LATENCY_COLUMNS].reset_index(drop=True)))
        if result.windows is not None:
            staged.write("windows.parquet", parquet_writer(result.windows))
        if keep_tables:
            staged.write("requests.parquet", parquet_writer(req))
            staged.write("steps.parquet", parquet_writer(result.steps))
        staged.commit()
    meta = {"run_id": spec.run_id, "seed": spec.seed, "wall_time": wall, "digest": spec.digest}
    with Staged(folder) as staged:
        staged.write("run.json", lambda p: p.write_text(json.dumps(meta, indent=2) + "\n"))
        staged.commit()
    (folder / PROGRESS_FILE).unlink(missing_ok=True)
    return row_of(spec, json.loads(json_text(result.summary)), wall)


Done = Callable[[dict[str, Any]], None]
#: Called about every :data:`PROGRESS_EVERY` seconds with the runs in flight and, for a run
#: simulated in this process, the share of it done (None: read its :data:`PROGRESS_FILE`).
Flying = Callable[[Sequence[RunSpec], float | None], None]


class LocalBackend:
    """Runs on a pool of ``workers`` processes kept for the ``with`` block (in this process when 1)."""

    def __init__(self, workers: int):
        self.workers = workers
        self._pool: Any = None

    def __enter__(self) -> LocalBackend:
        if self.workers > 1:
            import multiprocessing as mp
            from concurrent.futures import ProcessPoolExecutor

            ctx = mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx, initializer=_worker_started)
        return self

    def check(self) -> None:
        """Nothing to check before the output folder is taken (see :meth:`DaskBackend.check`)."""

    def __exit__(self, exc_type: object, *exc: object) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if exc_type is None:
            pool.shutdown(cancel_futures=True)
        else:
            with _interrupts_ignored():
                _end_workers(pool)

    def run(
        self, specs: Sequence[RunSpec], root: Path, keep_tables: bool, done: Done, flying: Flying | None = None
    ) -> None:
        if self._pool is None or len(specs) <= 1:
            for spec in specs:
                report = None if flying is None else (lambda share, s=spec: flying([s], share))
                done(execute(spec, str(root), keep_tables, report))
            return
        from concurrent.futures import FIRST_COMPLETED, wait

        futures = {self._pool.submit(execute, spec, str(root), keep_tables): spec for spec in specs}
        pending = set(futures)
        while pending:  # on an exception, leaving the block cancels the rest
            ended, pending = wait(pending, timeout=PROGRESS_EVERY, return_when=FIRST_COMPLETED)
            for fut in ended:
                done(fut.result())
            if flying is not None and pending:
                flying([futures[f] for f in pending if f.running()], None)


def _worker_started() -> None:
    """In each pool worker: SIGTERM (the main process ending its workers) ends the worker
    at once, after removing the staging files of the run in progress."""
    signal.signal(signal.SIGTERM, _worker_terminated)


def _worker_terminated(signum: int, frame: object) -> None:
    discard_pending()
    os._exit(128 + signum)


#: Seconds a worker gets to remove its staging files and exit before it is killed.
WORKER_GRACE = 10.0


def _end_workers(pool: Any) -> None:
    """End the processes of a ``ProcessPoolExecutor`` now, instead of letting them finish
    the runs they have started and those queued to them: SIGTERM, then SIGKILL for any
    still there after :data:`WORKER_GRACE` seconds; then shut the pool down."""
    workers = list((getattr(pool, "_processes", None) or {}).values())
    # The pool's own thread cancels the runs not started (cancelling them from here races
    # with its clean-up of a pool whose workers died: InvalidStateError in Python 3.11).
    pool.shutdown(wait=False, cancel_futures=True)
    for p in workers:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + WORKER_GRACE
    for p in workers:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in workers:
        if p.is_alive():
            p.kill()
            p.join()
    pool.shutdown(wait=True, cancel_futures=True)


@contextmanager
def _interrupts_ignored() -> Iterator[None]:
    """SIGINT and SIGTERM ignored for the block (in the main thread, where handlers run),
    so that a second Ctrl-C while workers are being ended cannot leave some running."""
    signals = (signal.SIGINT, signal.SIGTERM)
    main = threading.current_thread() is threading.main_thread()
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in signals} if main else {}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


class DaskBackend:
    """Runs on a dask.distributed cluster (a LocalCluster of ``workers`` when ``address`` is
    None); ``option``: the command-line option that gave the address, named when it cannot
    be reached."""

    def __init__(self, workers: int, address: str | None = None, option: str = "--address"):
        self.workers, self.address, self.option = workers, address, option
        self._client: Any = None
        self._cluster: Any = None

    def _connect(self) -> Any:
        """A client of the scheduler at :attr:`address`; ScenarioError naming :attr:`option`
        when the address is malformed or nothing answers there."""
        from dask.distributed import Client

        try:
            return Client(self.address)
        except (OSError, ValueError, TypeError) as exc:
            why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ScenarioError((self.option, f"cannot reach a dask scheduler at {self.address!r}: {why}")) from None

    def check(self) -> None:
        """Connect to the scheduler at :attr:`address` and leave (nothing to check for a
        LocalCluster): a command calls it before it takes its output folder, so that an
        address that cannot be reached is one line naming its option, with nothing written."""
        if self.address is not None:
            self._connect().close()

    def __enter__(self) -> DaskBackend:
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError:  # pragma: no cover - depends on the optional extra
            raise RuntimeError("the dask backend needs dask.distributed: pip install 'des[cluster]'") from None
        if self.address is None:
            self._cluster = LocalCluster(
                n_workers=max(self.workers, 1),
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=40,
            )
            self._client = Client(self._cluster)
        else:
            self._client = self._connect()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._client is not None:
            self._client.close()
        if self._cluster is not None:
            self._cluster.close()
        self._client = self._cluster = None

    def run(
        self, specs: Sequence[RunSpec], root: Path, keep_tables: bool, done: Done, flying: Flying | None = None
    ) -> None:
        """Runs ``specs`` on the cluster (``flying`` is not called: the progress of a run in
        flight is shown by a local pool only)."""
        from dask.distributed import as_completed

        futures = self._client.map(execute, list(specs), root=str(root), keep_tables=keep_tables, pure=False)
        for fut in as_completed(futures):
            done(fut.result())


Backend = LocalBackend | DaskBackend


def open_backend(
    kind: str = "local", workers: int = 1, address: str | None = None, option: str = "--address"
) -> Backend:
    """The backend named ``kind`` (``local`` or ``dask``); use it as a context manager.
    ``option``: the command-line option that gave ``address`` (named when it cannot be reached)."""
    return DaskBackend(workers, address, option) if kind == "dask" else LocalBackend(workers)


#: Progress callback: (runs done, counting the share done of each run in flight; runs asked
#: for; runs reused from an earlier sweep).
Progress = Callable[[float, int, int], None]


def _share_of(folder: Path) -> float:
    """The share done of the run writing ``folder`` (0 before it has written any)."""
    try:
        return min(max(float((folder / PROGRESS_FILE).read_text()), 0.0), 0.99)
    except (OSError, ValueError):
        return 0.0


def run_specs(
    runner: Backend, specs: Sequence[RunSpec], root: Path, keep_tables: bool = False, progress: Progress | None = None
) -> list[dict[str, Any]]:
    """The rows of ``specs`` in their order: reused where finished before, run on ``runner`` otherwise.

    Staging files an interrupted sweep left in the runs' folders are removed first (the
    caller holds the lock of ``root``, so no other process is writing there)."""
    from des.output import remove_stale_staging

    todo, rows = [], []
    for spec in specs:
        remove_stale_staging(run_dir(root, spec), RUN_FILES)
        row = finished(root, spec)
        if row is None:
            (run_dir(root, spec) / PROGRESS_FILE).unlink(missing_ok=True)  # an interrupted run's
            todo.append(spec)
        else:
            rows.append(row)
    total, reused = len(specs), len(rows)
    if progress:
        progress(len(rows), total, reused)

    def done(row: dict[str, Any]) -> None:
        check()  # a SIGTERM whose exception was lost on the way stops the sweep here (des.interrupt)
        rows.append(row)
        if progress:
            progress(len(rows), total, reused)

    def flying(runs: Sequence[RunSpec], share: float | None) -> None:
        if progress:
            shares = [share] if share is not None else [_share_of(run_dir(root, spec)) for spec in runs]
            progress(len(rows) + sum(shares), total, reused)

    runner.run(todo, root, keep_tables, done, flying)
    order = {spec.run_id: i for i, spec in enumerate(specs)}
    return sorted(rows, key=lambda r: order[r["run_id"]])
