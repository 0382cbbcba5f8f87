"""Helpers shared by the analysis scripts: reading a results folder (the library's
:class:`des.study.read.Sweep`), the columns a study's SLO bounds
(:func:`des.study.grid_capacity.slo_metrics`) and figure style (:mod:`des.figures.style` and
:mod:`des.figures.axes`), all imported here for the scripts; and what only the scripts use:
GPU counts and the look of the prefill/decode studies' configurations, and a figure
script's command line. Analysis scripts only read results; they never simulate.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt

from des.engine.deployment import normalise
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
from des.study.grid_capacity import SLO_STATISTIC, slo_metrics
from des.study.read import CV, Sweep
from des.study.spec import RATE

__all__ = [
    "CONFIG", "CV", "METRIC_NAME", "PALETTE", "RATE", "SLO_STATISTIC", "SPLIT", "STATISTIC_NAME", "PlainLogLocator",
    "Sweep", "config_style", "num_gpus", "plain", "plain_log_axes", "plain_log_axis", "points_figure_main", "save",
    "slo_line", "slo_metrics", "slo_text", "style",
]  # fmt: skip

#: The grid axis of named serving configurations in the prefill/decode studies.
CONFIG = "config"
SPLIT = re.compile(r"^(\d+)P\+(\d+)D$")


def num_gpus(scenario: dict) -> int:
    """GPUs of a resolved scenario (a run folder's scenario.yaml, in either shape): each
    pool's ``instances x dp x pp x tp``, summed (as :attr:`des.engine.layout.Layout.num_gpus`
    counts them, without validating the scenario)."""
    pools = normalise(scenario)[0]["cluster"]["pools"]
    return sum(
        int(p.get("instances", 1)) * int(p.get("dp") or 1) * int(p.get("pp") or 1) * int(p.get("tp") or 1)
        for p in pools
    )


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


def points_figure_main(doc: str, default_out: str, draw: Callable, argv=None) -> Path:
    """The command line of a figure drawn from a sweep's points and its study's SLO:
    ``script RESULTS [--out PNG]``; returns the PNG written."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("results", type=Path, help="a results folder (des sweep --out, or des run --out)")
    ap.add_argument("--out", type=Path, default=Path(default_out))
    args = ap.parse_args(argv)
    sweep = Sweep(args.results)
    return save(draw(sweep.points, sweep.study.get("set", {}).get("slo")), args.out)
