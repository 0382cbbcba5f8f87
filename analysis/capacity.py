"""Capacity read off a load sweep: the highest offered load at which the SLOs hold, per
variant (and burstiness), with its 95 % interval, printed a line each (:func:`describe`).

The reading is the library's (:func:`des.study.grid_capacity.capacities`, whose docstring
says how: the SLOs hold where every mean is within its limit and every run stable, the
crossing interpolated in log(metric), or only bracketed by the grid past an unstable or
overloaded point), its words too (:func:`des.render.study.estimate`: a number where it
was interpolated, "between a and b" where the grid brackets it, "at least a" where the
SLOs held across a grid of plain rates); both are imported here for the scripts.

    python -m analysis.capacity results/headline --slo ttft_p99<=2 --slo tpot_p50<=0.1
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from des.render.study import cell, estimate, said
from des.study.grid_capacity import DEFAULT_SLO, ROUNDING, capacities, is_bracket, middle, saturation_of
from des.study.read import CV, Sweep

__all__ = [
    "DEFAULT_SLO", "ROUNDING", "capacities", "cell", "describe", "estimate", "is_bracket", "main", "middle", "parse",
    "said", "saturation_of",
]  # fmt: skip


def describe(row: pd.Series, slo: dict[str, float] = DEFAULT_SLO) -> str:
    who = row["variant"] + (f" (cv {row[CV]:g})" if CV in row else "")
    if row["capacity"] is None or row["capacity"] != row["capacity"]:
        worst = ", ".join(f"{m} {row[f'at_lowest_{m}']:.3g}" for m in slo)
        return (
            f"{who}: no load in the grid meets the SLO (already at {row['lowest_rate']:g} req/s: {worst}); "
            f"highest throughput {row['max_throughput']:.2f} req/s"
        )
    high = _f(row["ci_high"]) if row["ci_high"] == row["ci_high"] and row["ci_high"] is not None else "above the grid"
    ci = f"95 % CI [{_f(row['ci_low'])}, {high}]"
    cap, top = row["capacity"], row.get("capacity_high")
    if not is_bracket(row):
        said = f"{cap:.2f} req/s"
    elif top is None or top != top:
        said = f"{cap:.2f} req/s (the SLO holds across the whole grid: at least this)"
    elif row["holds_everywhere"]:
        said = (
            f"between {cap:.2f} and {top:.2f} req/s (the SLO held at every load tried, up to {cap:.2f}; "
            f"{top:.2f} is the saturation throughput)"
        )
    else:
        said = (
            f"between {cap:.2f} and {top:.2f} req/s (the SLO held at {cap:.2f} and failed at {top:.2f}, "
            "the next load tried)"
        )
    return f"{who}: {said}, {ci}; highest throughput {row['max_throughput']:.2f} req/s"


def _f(x) -> str:
    return "—" if x is None or x != x else f"{x:.2f}"


def parse(texts: list[str]) -> dict[str, float]:
    out = {}
    for t in texts:
        m, _, v = t.partition("<=")
        out[m.strip()] = float(v)
    return out


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--slo", action="append", default=None, help="METRIC<=VALUE (repeatable)")
    args = ap.parse_args(argv)
    slo = parse(args.slo) if args.slo else DEFAULT_SLO
    table = capacities(Sweep(args.results).points, slo)
    for _, row in table.iterrows():
        print(describe(row, slo))
    return table


if __name__ == "__main__":
    main()
