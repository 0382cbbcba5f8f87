"""``des sweep``: run every variant x grid point x replication of a study, then tabulate.

Writes ``DIR/runs.parquet`` (a row per run) and ``DIR/points.parquet`` (a row per
variant and grid point, see :mod:`des.study.aggregate`), next to ``DIR/study.yaml``
(the study as run) and the per-run folders of :mod:`des.study.runner`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import yaml

from des.output import Staged, parquet_writer
from des.study.aggregate import points_table, runs_table
from des.study.runner import pending, run_dask, run_local, sweep_lock
from des.study.spec import Study

#: Progress callback: (runs finished, runs in the study, runs reused from an earlier sweep).
Progress = Callable[[int, int, int], None]


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def sweep(
    study: Study,
    out_dir: Path,
    workers: int | None = None,
    backend: str = "local",
    address: str | None = None,
    progress: Progress | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run ``study`` into ``out_dir``; returns (runs, points). Resumes a partial sweep."""
    workers = workers or default_workers()
    out_dir = Path(out_dir)
    with sweep_lock(out_dir):
        staged = Staged(out_dir)
        staged.write(
            "study.yaml", lambda p: p.write_text(yaml.safe_dump(study.spec.model_dump(mode="json"), sort_keys=False))
        )
        staged.commit()
        todo, rows = pending(study.runs, out_dir)
        total, reused = len(study.runs), len(rows)
        if progress:
            progress(len(rows), total, reused)

        def done(row: dict) -> None:
            rows.append(row)
            if progress:
                progress(len(rows), total, reused)

        keep = study.spec.keep_tables
        if backend == "dask":
            run_dask(todo, out_dir, keep, workers, address, done)
        else:
            run_local(todo, out_dir, keep, workers, done)
        runs = runs_table(rows, study.grid_keys)
        points = points_table(runs, study.runs, study.grid_keys, out_dir)
        staged = Staged(out_dir)
        staged.write("runs.parquet", parquet_writer(runs))
        staged.write("points.parquet", parquet_writer(points))
        staged.commit()
    return runs, points
