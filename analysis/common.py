"""Helpers shared by the analysis scripts: reading a sweep's folder, and figure style.

A sweep folder (written by ``des sweep``) holds ``study.yaml``, ``runs.parquet`` (a row
per run), ``points.parquet`` (a row per variant and grid point: each metric's mean over
replications with ``_lo``/``_hi`` 95 % bounds, ``pooled_*`` percentiles, ``all_stable``)
and ``runs/<run_id>/`` folders with ``summary.json``, ``scenario.yaml``,
``latencies.parquet`` and, for studies with ``keep_tables``, ``requests.parquet`` and
``steps.parquet``. Analysis scripts only read these; they never simulate.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
import yaml  # noqa: E402

#: Colours per scheduler, the same in every figure.
PALETTE = {"continuous": "#1f77b4", "static": "#d62728", "disaggregated": "#2ca02c", "base": "#1f77b4"}
RATE = "workload.arrival.rate"
CV = "workload.arrival.cv"


def style() -> None:
    sns.set_theme(style="whitegrid", context="notebook")


class Sweep:
    """Read access to one sweep folder."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        if not (self.folder / "points.parquet").is_file():
            raise SystemExit(f"{self.folder} holds no sweep results (points.parquet); run `des sweep` first")

    @property
    def study(self) -> dict:
        return yaml.safe_load((self.folder / "study.yaml").read_text())

    @property
    def points(self) -> pd.DataFrame:
        return pd.read_parquet(self.folder / "points.parquet")

    @property
    def runs(self) -> pd.DataFrame:
        return pd.read_parquet(self.folder / "runs.parquet")

    def run_folder(self, run_id: str) -> Path:
        return self.folder / "runs" / run_id

    def latencies(self, run_ids) -> pd.DataFrame:
        """The measured requests of the given runs, pooled, with a ``run_id`` column."""
        frames = []
        for rid in run_ids:
            f = pd.read_parquet(self.run_folder(rid) / "latencies.parquet")
            f["run_id"] = rid
            frames.append(f)
        return pd.concat(frames, ignore_index=True)

    def table(self, run_id: str, name: str) -> pd.DataFrame:
        """``requests`` or ``steps`` of a run kept whole (``keep_tables: true``)."""
        path = self.run_folder(run_id) / f"{name}.parquet"
        if not path.is_file():
            raise SystemExit(f"{path} is missing: the study needs keep_tables: true")
        return pd.read_parquet(path)

    def summary(self, run_id: str) -> dict:
        return json.loads((self.run_folder(run_id) / "summary.json").read_text())

    def scenario(self, run_id: str) -> dict:
        return yaml.safe_load((self.run_folder(run_id) / "scenario.yaml").read_text())


def save(fig, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path


def points_figure_main(doc: str, default_out: str, draw: Callable, argv=None) -> Path:
    """The command line of a figure drawn from a sweep's points and its study's SLO:
    ``script RESULTS [--out PNG]``; returns the PNG written."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("results", type=Path, help="a sweep folder (des sweep --out)")
    ap.add_argument("--out", type=Path, default=Path(default_out))
    args = ap.parse_args(argv)
    sweep = Sweep(args.results)
    return save(draw(sweep.points, sweep.study.get("set", {}).get("slo")), args.out)
