"""``des sweep``: run every variant x grid point x replication of a study, then tabulate.

A study with a ``load`` grid first runs its saturation probes (see :mod:`des.study.spec`).

Writes ``DIR/runs.parquet`` (a row per run) and ``DIR/points.parquet`` (a row per
variant and grid point, see :mod:`des.study.aggregate`), next to ``DIR/study.yaml``
(the study as run) and the per-run folders of :mod:`des.study.runner`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

import pandas as pd
import yaml

from des.output import Staged, parquet_writer, remove_stale_staging
from des.study.aggregate import points_table, runs_table
from des.study.runner import RUNS, open_backend, run_specs, sweep_lock
from des.study.spec import Study

#: The files :func:`sweep` writes in its results folder (besides ``runs/``).
SWEEP_FILES = ("study.yaml", "runs.parquet", "points.parquet")


class SweepProgress(Protocol):
    """Told of a sweep's progress: runs done (counting the share done of each run in flight),
    runs in all, runs reused from an earlier sweep, and the ``phase`` ("" for the study's runs)."""

    def __call__(self, done: float, total: int, reused: int, phase: str = "") -> None: ...


def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def sweep(
    study: Study,
    out_dir: Path,
    workers: int | None = None,
    backend: str = "local",
    address: str | None = None,
    progress: SweepProgress | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run ``study`` into ``out_dir``; returns (runs, points). Resumes a partial sweep.
    ``progress`` is told of the saturation probes (with ``phase`` "probing saturation"), then of the runs."""
    out_dir = Path(out_dir)

    def probing(done: float, total: int, reused: int) -> None:
        if progress is not None:
            progress(done, total, reused, "probing saturation")

    root = out_dir / RUNS
    with sweep_lock(out_dir):
        remove_stale_staging(out_dir, SWEEP_FILES)
        with Staged(out_dir) as staged:
            staged.write(
                "study.yaml",
                lambda p: p.write_text(yaml.safe_dump(study.spec.model_dump(mode="json"), sort_keys=False)),
            )
            staged.commit()
        with open_backend(backend, workers or default_workers(), address) as runner:
            if study.probes:
                probed = run_specs(runner, study.probes, root, progress=probing)
                study = study.at_saturation({row["run_id"]: row["throughput_rps"] for row in probed})
            rows = run_specs(runner, study.runs, root, study.spec.keep_tables, progress)
        runs = runs_table(rows, study.grid_keys)
        points = points_table(runs, study.runs, study.grid_keys, root)
        with Staged(out_dir) as staged:
            staged.write("runs.parquet", parquet_writer(runs))
            staged.write("points.parquet", parquet_writer(points))
            staged.commit()
    return runs, points
