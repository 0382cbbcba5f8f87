"""The headline figure: latency percentiles against load, one colour per scheduler.

Reads a sweep over ``workload.arrival.rate`` (and optionally ``workload.arrival.cv``),
typically a ``load`` grid giving each scheduler its own rates (both axes are then
logarithmic), and draws p50 / p90 / p99 of TTFT, TPOT and end-to-end latency (rows) for each
arrival burstiness (columns), each line the mean over replications with its 95 %
confidence band. Points where a replication was unstable (the backlog grew) are left
out: past capacity a latency "percentile" only measures how long the run was. The
panels show several percentiles, so each SLO line names the statistic it bounds (the
p99 of TTFT, the median of TPOT). A note on the TPOT panel explains static batching's
p99 of seconds per token: with ``release_on: batch_end`` (des's default) a request's
tokens all come out when its batch ends, after the batch's longest output, so a short
answer's few gaps span the rest of the batch.

    python -m analysis.latency_vs_load results/headline --out reports/latency_vs_load.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

from analysis.common import Sweep, save
from des.figures.load import latency_against_load as draw

__all__ = ["draw", "main", "release_on"]


def release_on(sweep: Sweep) -> str | None:
    """When the sweep's static variant releases its results (``batch_end``, des's default,
    or ``finish``); None without a static variant."""
    runs = sweep.runs
    static = runs[runs["variant"] == "static"]
    if static.empty:
        return None
    return sweep.scenario(static["run_id"].iloc[0])["scheduler"].get("release_on", "batch_end")


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="a results folder (des sweep --out, or des run --out)")
    ap.add_argument("--out", type=Path, default=Path("reports/latency_vs_load.png"))
    args = ap.parse_args(argv)
    sweep = Sweep(args.results)
    slo = sweep.study.get("set", {}).get("slo")
    return save(draw(sweep.points, slo, release_on=release_on(sweep)), args.out)


if __name__ == "__main__":
    print(main())
