"""TTFT, TPOT and inter-token latency against load per GPU, one colour per serving
configuration: colocated against disaggregated prefill/decode serving.

Reads the sweep of a prefill/decode study (``scenarios/pd-compare.yaml``, ``pd-split.yaml``:
a ``config`` axis of named configurations and a load grid per variant) and draws, for
each variant (workload, a row), the median and p99 of the time to first token, of the
time per output token (a request's mean) and of the inter-token latency (every gap
between tokens; sweeps written before des counted it have none) (columns) against the
offered load per GPU, each line the
mean over replications with its 95 % band. Points where a replication was unstable, or
offered more than the saturation throughput the probe measured, are left out (past
capacity a percentile only measures how long the run lasted). The SLO
limits of :data:`analysis.pd_capacity.SLOS` are drawn: p99 TTFT ≤ 2 s for both, median
TPOT ≤ 100 ms (default) and p99 TPOT ≤ 40 ms (tight).

    python -m analysis.pd_latency results/pd-compare --out reports/pd_latency.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D

from analysis.common import CONFIG, RATE, Sweep, config_style, plain_log_axis, save, style
from analysis.pd_capacity import with_gpus

PANELS = (
    ("ttft", "time to first token (s)"),
    ("tpot", "time per output token (s)"),
    ("itl", "inter-token latency (s)"),
)
PCTS = (("p50", "-", "o"), ("p99", ":", "^"))
#: SLO limits drawn on each panel: (metric, limit, label).
LIMITS = {
    "ttft": [(2.0, "p99 ≤ 2 s (both SLOs)")],
    "tpot": [(0.1, "median ≤ 100 ms (default SLO)"), (0.04, "p99 ≤ 40 ms (tight SLO)")],
    "itl": [],
}


def draw(points: pd.DataFrame, title: str = "", exclude: tuple[str, ...] = ()):
    """``points`` with a ``gpus`` column (:func:`analysis.pd_capacity.with_gpus`); the
    configurations named in ``exclude`` are left out."""
    style()
    points = points[~points[CONFIG].isin(exclude)]
    variants = list(dict.fromkeys(points["variant"]))
    configs = list(dict.fromkeys(points[CONFIG]))
    panels = [(m, label) for m, label in PANELS if f"{m}_p50" in points]  # sweeps before ITL have none
    fig, axes = plt.subplots(
        len(variants), len(panels), figsize=(6.4 * len(panels), 3.9 * len(variants)), squeeze=False
    )
    for i, variant in enumerate(variants):
        sub = points[points["variant"] == variant]
        for j, (metric, label) in enumerate(panels):
            ax = axes[i, j]
            for config in configs:
                g = sub[(sub[CONFIG] == config) & sub["all_stable"].astype(bool)].sort_values(RATE)
                if "load" in g:  # past the probe's saturation a run is overloaded, stable-looking or not
                    g = g[g["load"] <= 1]
                if g.empty:
                    continue
                x = g[RATE] / g["gpus"]
                color = config_style(str(config))[1]
                for pct, ls, marker in PCTS:
                    col = f"{metric}_{pct}"
                    ax.plot(x, g[col], ls=ls, marker=marker, ms=3.5, color=color, lw=1.4)
                    ax.fill_between(x, g[f"{col}_lo"], g[f"{col}_hi"], color=color, alpha=0.09, lw=0)
            for k, (limit, text) in enumerate(LIMITS[metric]):
                ax.axhline(limit, color="black", lw=1, alpha=0.55, ls=("-", "--")[k % 2])
                ax.annotate(text, (0.01, limit), xycoords=("axes fraction", "data"), xytext=(2, 3),
                            textcoords="offset points", fontsize=8)  # fmt: skip
            ax.set_yscale("log")
            ax.set_xscale("log")
            plain_log_axis(ax.xaxis)
            plain_log_axis(ax.yaxis)
            ax.set_title(f"{variant}: {label}", fontsize=10)
            if i == len(variants) - 1:
                ax.set_xlabel("offered load per GPU (requests / s)")
            ax.set_ylabel(label)
    handles = [Line2D([], [], color=config_style(str(c))[1], lw=2, label=config_style(str(c))[0]) for c in configs]
    handles += [Line2D([], [], color="0.3", ls=ls, marker=m, ms=4, label=p) for p, ls, m in PCTS]
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), frameon=False, bbox_to_anchor=(0.5, -0.03))
    gpus = sorted(set(points["gpus"]))
    fig.suptitle(
        title
        or f"TTFT, TPOT and ITL against load on {'/'.join(map(str, gpus))} GPUs, colocated against disaggregated "
        "(mean of replications, 95 % CI; unstable points omitted)",
        fontsize=11,
    )
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="a prefill/decode sweep (des sweep --out)")
    ap.add_argument("--exclude", action="append", default=[], help="a configuration to leave out (repeatable)")
    ap.add_argument("--out", type=Path, default=Path("reports/pd_latency.png"))
    args = ap.parse_args(argv)
    return save(draw(with_gpus(Sweep(args.results)), exclude=tuple(args.exclude)), args.out)


if __name__ == "__main__":
    print(main())
