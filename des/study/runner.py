"""Running a study's simulations: one folder per run, resumable, local or on dask.

Each run writes into ``DIR/runs/<run_id>/``: ``scenario.yaml``, ``summary.json``,
``latencies.parquet`` (the measured requests' latencies, for pooled percentiles) and,
with ``keep_tables``, ``requests.parquet`` and ``steps.parquet``; then ``run.json`` (its
seed, wall time and scenario digest) last, as the mark of a finished run. A sweep
started again skips every run whose ``run.json`` matches its scenario, so an
interrupted sweep resumes where it stopped. A lock file keeps a second sweep out of a
folder in use; sweeps in different folders share nothing.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import time
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from des.study.spec import RunSpec

LATENCY_COLUMNS = ["arrival_time", "prompt_tokens", "output_tokens", "ttft", "tpot", "e2e", "queue_delay"]


class SweepLocked(RuntimeError):
    pass


@contextmanager
def sweep_lock(out_dir: Path):
    """Hold ``out_dir/.sweep.lock`` for the duration; raise if another sweep holds it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(out_dir / ".sweep.lock", os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise SweepLocked(f"another sweep is writing to {str(out_dir)!r}") from None
        yield
    finally:
        os.close(fd)


def run_dir(out_dir: Path, spec: RunSpec) -> Path:
    return out_dir / "runs" / spec.run_id


def finished(out_dir: Path, spec: RunSpec) -> dict[str, Any] | None:
    """The row of a run already done with this scenario, or None."""
    d = run_dir(out_dir, spec)
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


def execute(spec: RunSpec, out_dir: str, keep_tables: bool) -> dict[str, Any]:
    """Simulate one run and write its folder; returns its row. Runs in worker processes."""
    from des.metrics.summary import measured_mask
    from des.output import Staged, json_text, parquet_writer
    from des.scenario import load_scenario
    from des.simulation import simulate

    folder = run_dir(Path(out_dir), spec)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "run.json").unlink(missing_ok=True)
    t0 = time.perf_counter()
    result = simulate(load_scenario(spec.scenario))
    wall = time.perf_counter() - t0
    req = result.requests
    duration = result.scenario.horizon.duration
    measured = req[measured_mask(req, result.scenario.warmup, math.inf if duration is None else duration)]
    staged = Staged(folder)
    staged.write("scenario.yaml", lambda p: p.write_text(yaml.safe_dump(spec.scenario, sort_keys=False)))
    staged.write("summary.json", lambda p: p.write_text(json_text(result.summary)))
    staged.write("latencies.parquet", parquet_writer(measured[LATENCY_COLUMNS].reset_index(drop=True)))
    if keep_tables:
        staged.write("requests.parquet", parquet_writer(req))
        staged.write("steps.parquet", parquet_writer(result.steps))
    staged.commit()
    meta = {"run_id": spec.run_id, "seed": spec.seed, "wall_time": wall, "digest": spec.digest}
    staged = Staged(folder)
    staged.write("run.json", lambda p: p.write_text(json.dumps(meta, indent=2) + "\n"))
    staged.commit()
    return row_of(spec, json.loads(json_text(result.summary)), wall)


def run_local(
    specs: list[RunSpec], out_dir: Path, keep_tables: bool, workers: int, done: Callable[[dict], None]
) -> None:
    """Run ``specs`` on a pool of ``workers`` processes (in this process when 1)."""
    if workers <= 1 or len(specs) <= 1:
        for spec in specs:
            done(execute(spec, str(out_dir), keep_tables))
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ctx = mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = [pool.submit(execute, spec, str(out_dir), keep_tables) for spec in specs]
        try:
            for fut in as_completed(futures):
                done(fut.result())
        except BaseException:
            for f in futures:
                f.cancel()
            raise


def run_dask(
    specs: list[RunSpec],
    out_dir: Path,
    keep_tables: bool,
    workers: int,
    address: str | None,
    done: Callable[[dict], None],
) -> None:
    """Run ``specs`` on a dask.distributed cluster (a LocalCluster when ``address`` is None)."""
    try:
        from dask.distributed import Client, LocalCluster, as_completed
    except ImportError:  # pragma: no cover - depends on the optional extra
        raise RuntimeError("the dask backend needs dask.distributed: pip install 'des[cluster]'") from None
    cluster = None
    if address is None:
        cluster = LocalCluster(
            n_workers=max(workers, 1), threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
        )
        client = Client(cluster)
    else:
        client = Client(address)
    try:
        futures = client.map(execute, specs, out_dir=str(out_dir), keep_tables=keep_tables, pure=False)
        for fut in as_completed(futures):
            done(fut.result())
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def pending(specs: Iterable[RunSpec], out_dir: Path) -> tuple[list[RunSpec], list[dict]]:
    """Split ``specs`` into those still to run and the rows of those already done."""
    todo, rows = [], []
    for spec in specs:
        row = finished(out_dir, spec)
        if row is None:
            todo.append(spec)
        else:
            rows.append(row)
    return todo, rows
