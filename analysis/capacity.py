"""Capacity read off a load sweep: the highest offered load at which the SLOs hold.

From ``points.parquet`` of a sweep over ``workload.arrival.rate``: for each variant
(and burstiness), walk up the grid; the SLOs *hold* at a point when every metric's
mean over replications is within its limit and every replication was stable. Between
the last point that holds and the first that fails, the crossing is interpolated
linearly in log(metric); the 95 % interval repeats this with the upper ends of the
metrics' intervals (the load at which the SLOs surely hold) and with their lower ends
(the load at which they surely fail). When the first failure is an unstable point
with no latency to interpolate, the estimate stays at the last point that holds. An
interval's end that the grid does not reach is left open (None): the upper end is
never pinned at the top of the grid. A study with a ``load`` grid runs every variant
past its own saturation, where the SLOs surely fail.

    python -m analysis.capacity results/headline --slo ttft_p99<=2 --slo tpot_p50<=0.1
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from analysis.common import CV, RATE, Sweep

DEFAULT_SLO = {"ttft_p99": 2.0, "tpot_p50": 0.1}


def _crossing(g: pd.DataFrame, slo: dict[str, float], suffix: str) -> float | None:
    """Interpolated load where the first SLO metric (column + suffix) crosses its limit;
    None if it fails at the lowest load, infinity if it never fails within the grid."""
    rates = g[RATE].to_numpy(float)
    ok_prev = None
    for i, r in enumerate(rates):
        row = g.iloc[i]
        vals = {m: row[m + suffix] for m in slo}
        fine = bool(row["all_stable"]) and all(
            v == v and v <= lim for (m, lim), v in zip(slo.items(), vals.values(), strict=True)
        )
        if fine:
            ok_prev = i
            continue
        if ok_prev is None:
            return None
        lo_row, r0 = g.iloc[ok_prev], rates[ok_prev]
        cross = r
        for m, lim in slo.items():
            a, b = lo_row[m + suffix], row[m + suffix]
            if b == b and b > lim and a > 0 and b > 0:
                t = (math.log(lim) - math.log(a)) / (math.log(b) - math.log(a))
                cross = min(cross, r0 + (r - r0) * t)
            elif not (b == b and b <= lim) and not row["all_stable"]:
                cross = min(cross, r0)
        return float(cross)
    return math.inf  # holds everywhere: somewhere above the grid


def capacities(points: pd.DataFrame, slo: dict[str, float] = DEFAULT_SLO) -> pd.DataFrame:
    """One row per variant (and cv): capacity estimate, CI, and throughput ceiling."""
    if RATE not in points:
        raise SystemExit(f"capacity is read off a sweep over {RATE} (a rate grid, or a load grid)")
    keys = ["variant"] + ([CV] if CV in points else [])
    rows = []
    for key, g in points.groupby(keys, sort=False):
        key = key if isinstance(key, tuple) else (key,)
        g = g.sort_values(RATE)
        row = dict(zip(keys, key, strict=True))
        top = float(g[RATE].max())
        capacity, low, high = (_crossing(g, slo, suffix) for suffix in ("", "_hi", "_lo"))
        row["holds_everywhere"] = capacity == math.inf
        row["capacity"] = top if capacity == math.inf else capacity
        row["ci_low"] = top if low == math.inf else low
        row["ci_high"] = None if high == math.inf else high  # open: the grid ends before they surely fail
        row["lowest_rate"] = float(g[RATE].min())
        first = g.iloc[0]
        row.update({f"at_lowest_{m}": float(first[m]) for m in slo})
        row["max_throughput"] = float(g["throughput_rps"].max())
        rows.append(row)
    return pd.DataFrame(rows)


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
    more = " (the SLO holds across the whole grid: at least this)" if row["holds_everywhere"] else ""
    return f"{who}: {row['capacity']:.2f} req/s, {ci}{more}; highest throughput {row['max_throughput']:.2f} req/s"


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
