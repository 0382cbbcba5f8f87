"""Helpers shared by the analysis scripts: reading a sweep's folder, and figure style.

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
import math
import re
from collections.abc import Callable, Mapping
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
import yaml
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

#: Colours per scheduler, the same in every figure.
PALETTE = {"continuous": "#1f77b4", "static": "#d62728", "disaggregated": "#2ca02c", "base": "#1f77b4"}
RATE = "workload.arrival.rate"
CV = "workload.arrival.cv"
#: The grid axis of named serving configurations in the prefill/decode studies.
CONFIG = "config"
SPLIT = re.compile(r"^(\d+)P\+(\d+)D$")


def style() -> None:
    sns.set_theme(style="whitegrid", context="notebook")


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
    :attr:`des.engine.layout.Layout.num_gpus` counts them, without validating the scenario)."""
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


class PlainLogLocator(LogLocator):
    """Major ticks of a log axis at 1, 2 and 5 times each power of ten, or, when the axis
    has no room for them all (:meth:`~matplotlib.axis.Axis.get_tick_space`), at 1 and 3
    times, else at the powers alone; at 1 to 9 times when a short axis holds fewer than
    two of the 1, 2 and 5 ticks."""

    CHOICES: tuple[tuple[float, ...], ...] = ((1.0, 2.0, 5.0), (1.0, 3.0), (1.0,))

    def __init__(self) -> None:
        super().__init__(base=10.0, subs=self.CHOICES[0])

    @staticmethod
    def count(subs: tuple[float, ...], lo: float, hi: float) -> int:
        """How many ticks ``s x 10^e`` (``s`` in ``subs``) lie in ``[lo, hi]``."""
        low, high = math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1
        ticks = [s * 10.0**e for e in range(low, high + 1) for s in subs]
        return sum(lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9) for t in ticks)

    def tick_values(self, vmin, vmax):
        lo, hi = sorted((float(vmin), float(vmax)))
        if lo > 0 and math.isfinite(hi):
            room = max(int(self.axis.get_tick_space()), 2) if self.axis is not None else 9
            subs: tuple[float, ...] = next((s for s in self.CHOICES if self.count(s, lo, hi) <= room), self.CHOICES[-1])
            if self.count(self.CHOICES[0], lo, hi) < 2:
                subs = tuple(float(k) for k in range(1, 10))
            self.set_params(subs=subs)
        return super().tick_values(vmin, vmax)


def plain(v: float, _pos=None) -> str:
    """A tick label as a plain number: 0.02, 5, 100 (never 2×10⁻², nor 10⁰)."""
    return f"{v:g}"


def plain_log_axis(axis) -> None:
    """Label a log axis as plain numbers (0.02, 5, 100) at 1, 2 and 5 times each power of
    ten, fewer where the axis has no room (:class:`PlainLogLocator`), minor ticks unlabelled."""
    axis.set_major_locator(PlainLogLocator())
    axis.set_major_formatter(FuncFormatter(plain))
    axis.set_minor_formatter(NullFormatter())


def plain_log_axes(fig) -> None:
    """:func:`plain_log_axis` on every logarithmic axis of a figure."""
    for ax in fig.axes:
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                plain_log_axis(axis)


#: The statistic of each latency that the report's SLOs bound (as :data:`analysis.capacity.DEFAULT_SLO`
#: reads a study's per-request limits ``slo: {ttft, tpot}``): the p99 of the time to first
#: token, the median of the time per output token.
SLO_STATISTIC = {"ttft": "p99", "tpot": "p50", "e2e": "p99"}
STATISTIC_NAME = {"p50": "median", "p90": "p90", "p95": "p95", "p99": "p99"}
METRIC_NAME = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "end-to-end latency"}


def slo_metrics(slo: Mapping[str, float] | None) -> dict[str, float]:
    """A study's SLO limits (``{ttft: 2, tpot: 0.1}``, seconds) as the columns they bound:
    ``{"ttft_p99": 2, "tpot_p50": 0.1}`` (:data:`SLO_STATISTIC`)."""
    return {f"{m}_{SLO_STATISTIC[m]}": float(v) for m, v in (slo or {}).items() if m in SLO_STATISTIC and v}


def slo_text(column: str, limit: float) -> str:
    """``SLO: median TPOT ≤ 0.1 s`` for the column ``tpot_p50``: what the line of an SLO is about."""
    metric, _, stat = column.rpartition("_")
    return f"SLO: {STATISTIC_NAME.get(stat, stat)} {METRIC_NAME.get(metric, metric)} ≤ {limit:g} s"


def slo_line(ax, limit: float | None, label: str | None = None, at: float = 0.01, boxed: bool = False) -> None:
    """A labelled horizontal line at an SLO ``limit`` (seconds); nothing without one. Name
    the statistic it bounds in ``label`` (:func:`slo_text`) when the panel shows others;
    the label starts ``at`` that fraction of the panel's width, on a white ground if
    ``boxed`` (when curves cross it)."""
    if limit is None:
        return
    ax.axhline(limit, color="black", lw=1, alpha=0.6, gid="slo")
    ax.annotate(
        label or f"SLO {limit:g} s",
        (at, limit),
        xycoords=("axes fraction", "data"),
        xytext=(2, 3),
        textcoords="offset points",
        fontsize=8,
        gid="slo",
        zorder=5,
        bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8} if boxed else None,
    )


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
    ap.add_argument("results", type=Path, help="a results folder (des sweep --out, or des run --out)")
    ap.add_argument("--out", type=Path, default=Path(default_out))
    args = ap.parse_args(argv)
    sweep = Sweep(args.results)
    return save(draw(sweep.points, sweep.study.get("set", {}).get("slo")), args.out)
