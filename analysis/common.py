"""Helpers shared by the analysis scripts: reading a sweep's folder, and figure style (the
library's: :mod:`des.figures.style` and :mod:`des.figures.axes`, imported here for the scripts).

A results folder is a sweep's or a single run's (``des run --out``: ``requests.parquet``,
``steps.parquet``, ``summary.json``, ``scenario.yaml``), which reads as a sweep of one run.
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
import re
from collections.abc import Callable, Mapping
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd
import yaml

from des.figures.axes import (
    METRIC_NAME,
    STATISTIC_NAME,
    PlainLogLocator,
    plain,
    plain_log_axes,
    plain_log_axis,
    save,
    slo_line,
    slo_text,
)
from des.figures.style import PALETTE, style

__all__ = [
    "CONFIG", "CV", "METRIC_NAME", "PALETTE", "RATE", "SLO_STATISTIC", "SPLIT", "STATISTIC_NAME", "PlainLogLocator",
    "Sweep", "config_style", "num_gpus", "plain", "plain_log_axes", "plain_log_axis", "points_figure_main", "save",
    "slo_line", "slo_metrics", "slo_text", "style",
]  # fmt: skip

RATE = "workload.arrival.rate"
CV = "workload.arrival.cv"
#: The grid axis of named serving configurations in the prefill/decode studies.
CONFIG = "config"
SPLIT = re.compile(r"^(\d+)P\+(\d+)D$")


class Sweep:
    """Read access to a results folder: a sweep's, or a single run's (``des run --out``).

    A single run reads as a sweep of one run (its folder's name as ``run_id``, its
    scheduler kind as the variant) and one point whose intervals are empty, so every
    script accepts either.
    """

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.single = not (self.folder / "points.parquet").is_file()
        self.single_id = self.folder.resolve().name
        if self.single and not (self.folder / "summary.json").is_file():
            raise SystemExit(
                f"{self.folder} holds no results (points.parquet of `des sweep`, or summary.json of `des run`)"
            )

    @property
    def study(self) -> dict:
        if self.single:
            return {"set": {"slo": self.scenario(self.single_id).get("slo")}, "replications": 1}
        return yaml.safe_load((self.folder / "study.yaml").read_text())

    def _single_row(self) -> dict:
        sc = self.scenario(self.single_id)
        arrival = sc["workload"]["arrival"]
        row = {
            "run": 0,
            "run_id": self.single_id,
            "variant": sc["scheduler"]["kind"],
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

    def latencies(self, run_ids) -> pd.DataFrame:
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

    def summary(self, run_id: str) -> dict:
        return json.loads((self.run_folder(run_id) / "summary.json").read_text())

    def scenario(self, run_id: str) -> dict:
        return yaml.safe_load((self.run_folder(run_id) / "scenario.yaml").read_text())


def num_gpus(scenario: dict) -> int:
    """GPUs of a resolved scenario (a run folder's scenario.yaml): ``replicas x dp x pp x tp``
    when colocated, the instances of both pools times their ``tp`` when disaggregated (as
    :attr:`des.engine.plan.Plan.num_gpus` counts them, without validating the scenario)."""
    sched, tp = scenario["scheduler"], int(scenario["cluster"].get("tp") or 1)
    if sched.get("kind") == "disaggregated":
        return sum(int(sched[r].get("instances") or 1) * int(sched[r].get("tp") or tp) for r in ("prefill", "decode"))
    c = scenario["cluster"]
    return int(c.get("replicas") or 1) * int(c.get("dp") or 1) * int(c.get("pp") or 1) * tp


def config_style(label: str) -> tuple[str, str]:
    """How a figure shows a serving configuration named in a study's ``config`` axis:
    ``static-x2`` and ``continuous-x4`` (colocated replicas) in their scheduler's colour,
    ``1P+3D`` (prefill + decode instances) in greens, darker as the prefill pool grows."""
    m = SPLIT.match(label)
    if m:
        p, d = int(m.group(1)), int(m.group(2))
        if p == d:
            return f"disaggregated {label}", PALETTE["disaggregated"]
        shade = plt.get_cmap("Greens")(0.3 + 0.7 * p / (p + d))
        return f"disaggregated {label}", matplotlib.colors.to_hex(shade)
    kind, _, times = label.partition("-x")
    if kind in PALETTE and times.isdigit():
        return f"{kind} ×{times}", PALETTE[kind]
    return label, "0.4"


#: The statistic of each latency that the report's SLOs bound (as :data:`analysis.capacity.DEFAULT_SLO`
#: reads a study's per-request limits ``slo: {ttft, tpot}``): the p99 of the time to first
#: token, the median of the time per output token.
SLO_STATISTIC = {"ttft": "p99", "tpot": "p50", "e2e": "p99"}


def slo_metrics(slo: Mapping[str, float] | None) -> dict[str, float]:
    """A study's SLO limits (``{ttft: 2, tpot: 0.1}``, seconds) as the columns they bound:
    ``{"ttft_p99": 2, "tpot_p50": 0.1}`` (:data:`SLO_STATISTIC`)."""
    return {f"{m}_{SLO_STATISTIC[m]}": float(v) for m, v in (slo or {}).items() if m in SLO_STATISTIC and v}


def points_figure_main(doc: str, default_out: str, draw: Callable, argv=None) -> Path:
    """The command line of a figure drawn from a sweep's points and its study's SLO:
    ``script RESULTS [--out PNG]``; returns the PNG written."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("results", type=Path, help="a results folder (des sweep --out, or des run --out)")
    ap.add_argument("--out", type=Path, default=Path(default_out))
    args = ap.parse_args(argv)
    sweep = Sweep(args.results)
    return save(draw(sweep.points, sweep.study.get("set", {}).get("slo")), args.out)
