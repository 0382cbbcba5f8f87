"""What ``des sweep`` and ``des capacity`` print: a sweep's points with their intervals
and warnings, a capacity search's probes and its answer; and a capacity read off a
sweep's grid (:mod:`des.study.grid_capacity`) as what it is, a number, a bracket or a
lower bound (:func:`estimate`, :func:`said`, :func:`cell`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from des.render.console import out, warning
from des.study.grid_capacity import is_bracket

if TYPE_CHECKING:
    import pandas as pd

    from des.study.capacity import CapacityAnswer, Evaluation


# -- des sweep ---------------------------------------------------------------------------


def short_headers(keys: Sequence[str]) -> list[str]:
    """The shortest dotted suffix of each key that no other key ends with: rate, cv."""
    out = []
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            tail = ".".join(parts[-n:])
            if not any(other != key and (other == tail or other.endswith("." + tail)) for other in keys):
                break
        out.append(tail)
    return out


def _end(v: float) -> str:
    """An interval's end: '-' where the data leave it open (NaN or infinite)."""
    return f"{v:.3g}" if v == v and abs(v) != math.inf else "-"


def _with_ci(p: pd.Series, m: str) -> str:
    if p[m] != p[m]:
        return "-"
    if p[f"{m}_lo"] == p[f"{m}_lo"]:
        return f"{p[m]:.3g} [{_end(p[f'{m}_lo'])}, {_end(p[f'{m}_hi'])}]"
    return f"{p[m]:.3g}"


POINT_METRICS = (
    ("throughput_rps", "req/s"),
    ("ttft_p99", "ttft p99"),
    ("tpot_p50", "tpot p50"),
    ("e2e_p99", "e2e p99"),
)


def points_table(points: pd.DataFrame, grid_keys: Sequence[str]) -> None:
    title = "mean over replications [95 % interval]; latencies in seconds"
    methods = points["interval_method"].unique() if "interval_method" in points else []
    if len(methods) == 1:
        title += f"; intervals: {methods[0]}"
    table = Table(title=title, title_justify="left")
    table.add_column("variant", no_wrap=True)
    for head in short_headers(grid_keys):
        table.add_column(head, justify="right", no_wrap=True)
    for _, head in POINT_METRICS:
        table.add_column(head, justify="right", no_wrap=True)
    table.add_column("stable", no_wrap=True)
    many = len(_short(points)) > SHORT_LINES
    for _, p in points.iterrows():
        table.add_row(
            str(p["variant"]),
            *(f"{p[k]:g}" if isinstance(p[k], float) else str(p[k]) for k in grid_keys),
            *(_with_ci(p, m) for m, _ in POINT_METRICS),
            stable_cell(p) + (SHORT_MARK if p.get("runs_short", 0) > 0 and many else ""),
        )
    out().print(table)
    short_points(points, grid_keys)


def stable_cell(p: pd.Series) -> str:
    """A point's stability: yes, NO, or unsure where every unstable replication may only be
    filling up (its runs too short to tell, :mod:`des.study.adequacy`); n/a where the
    stability check does not apply (runs whose arrivals follow a schedule: their summaries'
    ``stable`` is null)."""
    if not p.get("stability_applies", True):
        return "n/a"
    if p["all_stable"]:
        return "yes"
    transient = int(p.get("unstable_transient") or 0)
    return "unsure" if transient and transient == int(p.get("unstable_runs") or 0) else "NO"


#: Up to this many points whose runs are short get a warning each, saying why; more get
#: one warning together, and a mark in the table's stable column (:data:`SHORT_MARK`).
SHORT_LINES = 2
#: Marks a point, in the table's stable column, whose runs are too short to judge.
SHORT_MARK = "*"


def _short(points: pd.DataFrame) -> pd.DataFrame:
    return points[points["runs_short"] > 0] if "runs_short" in points else points.iloc[:0]


def short_points(points: pd.DataFrame, grid_keys: Sequence[str]) -> None:
    """What is short in the points whose runs are too short to judge (:mod:`des.study.adequacy`):
    a warning each, saying why, for up to :data:`SHORT_LINES` of them; else one warning for
    all, the points being marked in the table, with the worst of the reasons and where each
    point's own is kept (points.parquet's ``adequacy``)."""
    short = _short(points)
    heads = short_headers(grid_keys)
    methods = short.get("interval_method", [])
    replay = len(short) > 0 and all(str(m).startswith("replay") for m in methods)
    fix = "a replay cannot be lengthened" if replay else "lengthen horizon.duration and warmup"
    if len(short) <= SHORT_LINES:
        for _, p in short.iterrows():
            where = " ".join([str(p["variant"]), *(f"{h}={p[k]}" for h, k in zip(heads, grid_keys, strict=True))])
            warning(f"{where}: {p['adequacy']}; {fix}")
        return
    by = short.groupby("variant", sort=False).size()
    of = points.groupby("variant", sort=False).size()
    where = ", ".join(f"{v} {n} of {of[v]}" for v, n in by.items())
    warning(
        f"{SHORT_MARK} warm-up or horizon short at {len(short)} of {len(points)} points ({where}): their runs "
        "still carry their start-up, so their percentiles are less sure than their intervals say; "
        f"{fix} (why, point by point: points.parquet, columns runs_short and adequacy)"
    )


def sweep_done(runs: int, points: int, replications: int, seconds: float, out_dir: Path) -> None:
    out().print(
        f"{runs} runs ({points} points x {replications} replications) in {seconds:.1f} s; "
        f"wrote {out_dir}/runs.parquet and points.parquet",
        highlight=False,
    )


# -- des capacity --------------------------------------------------------------------------


def probe_line(param: str, ev: Evaluation) -> str:
    """One line per value a capacity search tried: its metrics and verdict, and why."""
    ms = ", ".join(f"{k} {v[0]:.3g} [{_end(v[1])}, {_end(v[2])}]" for k, v in ev.metrics.items())
    why = f" ({'; '.join(ev.why)})" if ev.why else ""
    notes = "".join(f"\n    note: {n}" for n in ev.notes)
    return f"{param} = {ev.value:g}: {ms}; {ev.verdict}{why}{notes}"


def capacity_answer(answer: CapacityAnswer) -> str:
    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.4g}"

    what = (
        f"fewest replicas carrying {answer.target_rate:g} req/s"
        if answer.target_rate is not None
        else f"capacity ({answer.param})"
    )
    methods = sorted({m for e in answer.evaluations for m in e.methods.values()})
    how = f"; SLO metrics' intervals: {', '.join(methods)}" if methods else ""
    return (
        f"{what} under {' and '.join(answer.slos)}: {f(answer.value)}  95 % CI [{f(answer.ci_low)}, "
        f"{f(answer.ci_high)}]  ({answer.replications} replications per value, {len(answer.evaluations)} values tried"
        f"{how})"
    )


# -- capacity off a sweep's grid (the reports, the what-if page) ------------------------


def estimate(row: Mapping[str, Any], unit: str = "", digits: int = 2) -> str | None:
    """A :func:`~des.study.grid_capacity.capacities` row's capacity as a label: ``"7.00"`` where it was interpolated,
    ``"9.10–9.58"`` (a load that held, one that failed or ``S``) where the grid brackets
    it, ``"≥ 9.10"`` where it is open above; None without one."""
    cap = row.get("capacity")
    if cap is None or cap != cap:
        return None
    u = f" {unit}" if unit else ""
    if not is_bracket(row):
        return f"{cap:.{digits}f}{u}"
    high = row.get("capacity_high")
    if high is None or high != high:
        return f"≥ {cap:.{digits}f}{u}"
    if f"{high:.{digits}f}" == f"{cap:.{digits}f}":
        return f"{cap:.{digits}f}{u}"
    return f"{cap:.{digits}f}–{high:.{digits}f}{u}"


def said(row: Mapping[str, Any], unit: str = "", digits: int = 2) -> str | None:
    """:func:`estimate` in words, for a sentence: ``"7.00"``, ``"between 9.10 and 9.58"``,
    ``"at least 9.10"``; None without a capacity."""
    label = estimate(row, "", digits)
    if label is None:
        return None
    u = f" {unit}" if unit else ""
    if label.startswith("≥ "):
        return f"at least {label[2:]}{u}"
    low, dash, high = label.partition("–")
    return f"between {low} and {high}{u}" if dash else f"{label}{u}"


def cell(row: Mapping[str, Any], low: str, high: str, digits: int = 2) -> str:
    """A capacity and its 95 % interval (its ends already written) for a table's cell:
    ``7.00 [6.50, 7.40]``, or ``≥ 9.10 [9.10, 9.58]`` where the grid only brackets it (the
    SLOs held at 9.10 and nothing was tried between it and the interval's upper end,
    where they failed, or ``S``)."""
    at_least = "≥ " if is_bracket(row) else ""
    return f"{at_least}{row['capacity']:.{digits}f} [{low}, {high}]"
