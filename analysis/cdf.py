"""Empirical CDFs of TTFT, TPOT and end-to-end latency at one arrival rate, per scheduler.

Reads a sweep over ``workload.arrival.rate`` (for example ``results/detail``), takes the
runs at the chosen rate and pools the measured requests (``latencies.parquet``: the
requests that arrived after the warm-up) of all their replications. Draws three panels
(TTFT, TPOT, end-to-end latency; log x) with one empirical CDF per scheduler variant.
Dotted horizontal lines mark the 0.5 and 0.99 levels and each curve carries markers at
its p50 and p99, whose values are listed in the legend. A variant whose run was unstable
(the backlog grew: past capacity its "latency" only measures how long the run lasted) is
labelled so. Requests with a single output token have no TPOT and are left out of that
panel.

    python -m analysis.cdf results/detail --rate 1 --out reports/cdf.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from analysis.common import PALETTE, RATE, Sweep, save, style

METRICS = (("ttft", "time to first token"), ("tpot", "time per output token"), ("e2e", "end-to-end latency"))
LEVELS = ((0.5, "p50", "o"), (0.99, "p99", "D"))


def fmt_seconds(x: float) -> str:
    """A duration as a short label: 20 ms, 1.5 s, 2.8 ks."""
    if x <= 0 or not np.isfinite(x):
        return "0"
    if x < 1:
        return f"{x * 1e3:.3g} ms"
    if x < 1000:
        return f"{x:.3g} s"
    return f"{x / 1e3:.3g} ks"


def runs_at_rate(runs: pd.DataFrame, rate: float) -> pd.DataFrame:
    """The rows of ``runs`` at arrival rate ``rate`` (all variants and replications)."""
    if RATE not in runs:
        raise SystemExit(f"the sweep has no {RATE} grid; its runs are {list(runs['run_id'])}")
    sel = runs[np.isclose(runs[RATE].astype(float), rate)]
    if sel.empty:
        have = ", ".join(f"{r:g}" for r in sorted(runs[RATE].unique()))
        raise SystemExit(f"no run at {RATE} = {rate:g}; the sweep has {have}")
    return sel


def ecdf(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Sorted finite values and their empirical CDF i/n (a step function's upper corners)."""
    x = np.sort(values[np.isfinite(values)].to_numpy(dtype=float))
    return x, np.arange(1, len(x) + 1) / len(x)


def percentiles(lat: pd.DataFrame) -> pd.DataFrame:
    """p50 and p99 of each metric per variant (linear interpolation, as in summary.json)."""
    rows = []
    for variant, g in lat.groupby("variant", sort=False):
        for metric, _ in METRICS:
            v = g[metric].dropna()
            rows.append(
                {
                    "variant": variant,
                    "metric": metric,
                    "n": len(v),
                    **{name: float(np.quantile(v, q)) for q, name, _ in LEVELS},
                }
            )
    return pd.DataFrame(rows)


def draw(lat: pd.DataFrame, title: str = "", unstable: set[str] | frozenset = frozenset()):
    """Three CDF panels from pooled latencies with columns ``variant``, ``ttft``, ``tpot``, ``e2e``."""
    style()
    pcts = percentiles(lat).set_index(["variant", "metric"])
    fig, axes = plt.subplots(1, len(METRICS), figsize=(15, 5.2), sharey=True)
    for ax, (metric, label) in zip(axes, METRICS, strict=True):
        for variant, g in lat.groupby("variant", sort=False):
            color = PALETTE.get(variant)
            x, y = ecdf(g[metric])
            if len(x) == 0:
                continue
            p = pcts.loc[(variant, metric)]
            name = f"{variant}{' (unstable)' if variant in unstable else ''}"
            ax.step(
                x,
                y,
                where="post",
                color=color,
                lw=1.8,
                label=f"{name}\np50 {fmt_seconds(p['p50'])} · p99 {fmt_seconds(p['p99'])}",
            )
            for q, pname, marker in LEVELS:
                ax.plot([p[pname]], [q], marker=marker, ms=7, color=color, mec="black", mew=0.8, zorder=5)
        for q, pname, _ in LEVELS:
            ax.axhline(q, color="0.3", lw=1, ls=":", zorder=1)
            ax.annotate(
                pname,
                (0.0, q),
                xycoords=("axes fraction", "data"),
                xytext=(3, 2),
                textcoords="offset points",
                fontsize=8,
                color="0.3",
            )
        ax.set_xscale("log")
        lo, hi = ax.get_xlim()
        decades = np.log10(hi / lo) if lo > 0 else 9.0
        ax.xaxis.set_major_locator(
            LogLocator(subs=(1.0, 2.0, 5.0) if decades < 1.5 else (1.0, 3.0) if decades < 2.5 else (1.0,))
        )
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: fmt_seconds(v)))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"{label} (log scale; ticks in ms / s / ks)")
        ax.set_title(label)
        ax.set_ylim(0, 1.02)
        # under the panel, so that it never hides a curve
        ax.legend(
            loc="upper center",
            bbox_to_anchor=(0.5, -0.2),
            ncol=2,
            fontsize=8.5,
            title="variant  (● p50, ◆ p99)",
            title_fontsize=8.5,
        )
    axes[0].set_ylabel("fraction of measured requests ≤ x")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def load(sweep: Sweep, rate: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The runs at ``rate`` and their measured requests pooled, with a ``variant`` column."""
    runs = runs_at_rate(sweep.runs, rate)
    lat = sweep.latencies(runs["run_id"])
    lat["variant"] = lat["run_id"].map(dict(zip(runs["run_id"], runs["variant"], strict=True)))
    return runs, lat


def make_title(runs: pd.DataFrame, lat: pd.DataFrame, rate: float) -> str:
    reps = runs.groupby("variant")["run_id"].nunique()
    n = lat.groupby("variant").size()
    per = ", ".join(f"{v}: {n.get(v, 0)} req" for v in runs["variant"].unique())
    rep_txt = f"{reps.max()} replication{'s' if reps.max() > 1 else ''}" + (" pooled" if reps.max() > 1 else "")
    return (
        f"Latency CDFs at a Poisson arrival rate of {rate:g} req/s "
        f"(realised {runs['offered_rps'].mean():.2f} req/s) — {rep_txt}; {per} measured after warm-up"
    )


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="sweep folder written by `des sweep`")
    ap.add_argument("--rate", type=float, default=None, help="arrival rate in req/s (default: the lowest)")
    ap.add_argument("--out", default="reports/cdf.png")
    a = ap.parse_args(argv)
    sweep = Sweep(a.results)
    rate = a.rate if a.rate is not None else float(sweep.runs[RATE].min())
    runs, lat = load(sweep, rate)
    unstable = set(runs.loc[~runs["stable"].astype(bool), "variant"]) if "stable" in runs else set()
    fig = draw(lat, make_title(runs, lat, rate), unstable)
    return save(fig, a.out)


if __name__ == "__main__":
    print(main())
