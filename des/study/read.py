"""Reading a results folder: a sweep's, or a single run's, which reads as a sweep of one run
(:class:`Sweep`).

A single run's folder (``des run --out``) holds ``requests.parquet``, ``steps.parquet``,
``summary.json`` and ``scenario.yaml``. A sweep's folder (written by ``des sweep``) holds
``study.yaml``, ``runs.parquet`` (a row per run), ``points.parquet`` (a row per variant and
grid point: each metric's mean over replications with ``_lo``/``_hi`` 95 % bounds,
``pooled_*`` percentiles, ``all_stable``) and ``runs/<run_id>/`` folders with
``summary.json``, ``scenario.yaml``, ``latencies.parquet`` and, for studies with
``keep_tables``, ``requests.parquet`` and ``steps.parquet``. A folder that holds neither,
or a run's table a study did not keep, ends the reading with :class:`SystemExit` and the
reason (the analysis scripts' message to their user).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from des.engine.deployment import normalise, serving_kind
from des.study.spec import RATE

#: The grid key of the arrivals' burstiness (a gamma process's coefficient of variation).
CV = "workload.arrival.cv"


class Sweep:
    """Read access to a results folder: a sweep's, or a single run's (``des run --out``).

    A single run reads as a sweep of one run (its folder's name as ``run_id``, its
    scheduler kind as the variant) and one point whose intervals are empty, so every
    script accepts either.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.single = not (self.folder / "points.parquet").is_file()
        self.single_id = self.folder.resolve().name
        if self.single and not (self.folder / "summary.json").is_file():
            raise SystemExit(
                f"{self.folder} holds no results (points.parquet of `des sweep`, or summary.json of `des run`)"
            )

    @property
    def study(self) -> dict[str, Any]:
        if self.single:
            return {"set": {"slo": self.scenario(self.single_id).get("slo")}, "replications": 1}
        return yaml.safe_load((self.folder / "study.yaml").read_text())

    def _single_row(self) -> dict[str, Any]:
        sc = self.scenario(self.single_id)
        arrival = sc["workload"]["arrival"]
        row = {
            "run": 0,
            "run_id": self.single_id,
            "variant": serving_kind(sc),
            "replication": 0,
            "seed": sc["seed"],
        }
        row |= {key: arrival[key.rsplit(".", 1)[1]] for key in (RATE, CV) if key.rsplit(".", 1)[1] in arrival}
        return row | self.summary(self.single_id)

    @property
    def points(self) -> pd.DataFrame:
        if not self.single:
            return pd.read_parquet(self.folder / "points.parquet")
        row = self._single_row()
        point = {k: v for k, v in row.items() if k not in ("run", "run_id", "replication", "seed")}
        for k, v in list(point.items()):
            if isinstance(v, int | float) and not isinstance(v, bool) and k not in (RATE, CV):
                point[f"{k}_lo"] = point[f"{k}_hi"] = float("nan")
        return pd.DataFrame([point | {"n": 1, "all_stable": bool(row["stable"])}])

    @property
    def runs(self) -> pd.DataFrame:
        if self.single:
            return pd.DataFrame([self._single_row()])
        return pd.read_parquet(self.folder / "runs.parquet")

    def run_folder(self, run_id: str) -> Path:
        return self.folder if self.single else self.folder / "runs" / run_id

    def latencies(self, run_ids: Iterable[str]) -> pd.DataFrame:
        """The measured requests of the given runs, pooled, with a ``run_id`` column."""
        frames = []
        for rid in run_ids:
            if self.single:
                from des.metrics.summary import measured_mask

                req = self.table(rid, "requests")
                sc = self.scenario(rid)
                end = sc["horizon"].get("duration") or float("inf")
                f = req[measured_mask(req, float(sc.get("warmup") or 0.0), end)].reset_index(drop=True)
            else:
                f = pd.read_parquet(self.run_folder(rid) / "latencies.parquet")
            f["run_id"] = rid
            frames.append(f)
        return pd.concat(frames, ignore_index=True)

    def table(self, run_id: str, name: str) -> pd.DataFrame:
        """``requests`` or ``steps`` of a run kept whole (``keep_tables: true``, or a single run)."""
        path = self.run_folder(run_id) / f"{name}.parquet"
        if not path.is_file():
            raise SystemExit(f"{path} is missing: the study needs keep_tables: true")
        return pd.read_parquet(path)

    def summary(self, run_id: str) -> dict[str, Any]:
        return json.loads((self.run_folder(run_id) / "summary.json").read_text())

    def scenario(self, run_id: str) -> dict[str, Any]:
        """A run's resolved scenario, its deployment in the one shape of pools (a folder
        written before it had them holds an old shape: :func:`des.engine.deployment.normalise`)."""
        return normalise(yaml.safe_load((self.run_folder(run_id) / "scenario.yaml").read_text()))[0]
