"""Batch size, queue length and KV-cache use over simulated time, from one run's steps.

Reads ``steps.parquet`` of a run kept whole (a study with ``keep_tables: true``, for
example ``results/detail``) and draws three panels sharing the time axis:

- batch size: sequences doing useful work per step (and, dashed, the sequences the GPU
  computes when that is larger: static batching's padding);
- queue length: requests still waiting once the step's batch is formed (``num_waiting``;
  it misses the requests that arrive during a step and are admitted at the next, which
  the summary's ``mean_queue_length`` counts);
- KV blocks in use as a percentage of the run's capacity
  (``kv_capacity_tokens`` / ``scheduler.block_size``).

A run has tens of thousands of 20-200 ms steps, so each series is resampled to fixed
time bins: the line is the time-weighted mean over the steps running in the bin (each
step weighted by how long it overlaps the bin; bins where the GPU never ran are left
empty) and the light band spans the minimum to maximum of the steps starting in the
bin. The warm-up (excluded from the latency metrics) is shaded and the end of arrivals
(``horizon.duration``) marked. Give ``--run`` twice to overlay a second run, such as the
other scheduler.

    python -m analysis.timeline results/detail --run continuous/workload.arrival.rate=10/r0 \\
        --out reports/timeline.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from analysis.common import PALETTE, RATE, Sweep, save, style
from des.engine.deployment import serving_kind

NICE_BINS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
FALLBACK_COLORS = ("#9467bd", "#ff7f0e", "#8c564b", "#17becf")


def auto_bin(span: float, target: int = 300) -> float:
    """A round bin width (s) giving about ``target`` bins over ``span`` seconds."""
    want = max(span, 1e-9) / target
    return min(NICE_BINS, key=lambda b: abs(np.log(b / want)))


def _integral(start: np.ndarray, dur: np.ndarray, v: np.ndarray, t: np.ndarray) -> np.ndarray:
    """∫₀ᵗ of the piecewise-constant signal equal to v[i] on [start[i], start[i] + dur[i]), 0 elsewhere.

    The steps must be sorted by start and must not overlap (true within one instance).
    """
    cum = np.concatenate([[0.0], np.cumsum(v * dur)])
    i = np.searchsorted(start, t, side="right") - 1
    ok = i >= 0
    j = np.where(ok, i, 0)
    part = v[j] * np.clip(t - start[j], 0.0, dur[j])
    return np.where(ok, cum[j] + part, 0.0)


def resample(steps: pd.DataFrame, columns, bin_s: float, t_end: float | None = None) -> pd.DataFrame:
    """Time-weighted means (and min / max) of ``columns`` of one instance's steps over ``bin_s`` bins.

    Returns a frame indexed by bin with ``t`` (bin centre, s), ``busy`` (fraction of the
    bin the GPU was running a step) and, per column, ``<col>`` (mean over the steps in
    progress, weighted by their overlap with the bin; NaN when the GPU was idle all bin),
    ``<col>_min`` and ``<col>_max`` (over the steps starting in the bin).
    """
    s = steps.sort_values("start")
    start = s["start"].to_numpy(float)
    dur = s["duration"].to_numpy(float)
    if t_end is None:
        t_end = float((start + dur).max()) if len(s) else bin_s
    nbins = max(1, int(np.ceil(t_end / bin_s)))
    edges = np.arange(nbins + 1) * bin_s
    busy = np.diff(_integral(start, dur, np.ones_like(start), edges))
    out = pd.DataFrame({"t": edges[:-1] + bin_s / 2, "busy": busy / bin_s})
    which = np.clip((start // bin_s).astype(int), 0, nbins - 1)
    for col in columns:
        v = s[col].to_numpy(float)
        area = np.diff(_integral(start, dur, v, edges))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[col] = np.where(busy > 0, area / np.where(busy > 0, busy, 1.0), np.nan)
        g = pd.Series(v).groupby(which)
        out[f"{col}_min"] = g.min().reindex(range(nbins)).to_numpy()
        out[f"{col}_max"] = g.max().reindex(range(nbins)).to_numpy()
    return out


def timeline(steps: pd.DataFrame, kv_capacity_blocks: float, bin_s: float, t_end: float | None = None) -> pd.DataFrame:
    """The three series of one run (all instances): batch size and width, queue, KV %.

    Several instances (replicas) are resampled separately, then batch sizes and queues
    are summed and the KV percentage averaged over instances.
    """
    steps = steps.assign(kv_pct=100.0 * steps["kv_blocks"] / kv_capacity_blocks)
    cols = ["batch_size", "batch_width", "num_waiting", "kv_pct"]
    if t_end is None:
        t_end = float((steps["start"] + steps["duration"]).max())
    parts = [resample(g, cols, bin_s, t_end) for _, g in steps.groupby("instance")]
    if len(parts) == 1:
        return parts[0]
    cat = pd.concat(parts, keys=range(len(parts)), names=["instance", "bin"])
    agg = {c: "sum" for c in cat.columns if not c.startswith("kv_pct")}
    agg |= {c: "mean" for c in cat.columns if c.startswith("kv_pct")}
    agg |= {"t": "first", "busy": "mean"}
    return cat.groupby(level="bin").agg(agg)


def run_info(sweep: Sweep, run_id: str) -> dict:
    """What the figure needs to know about a run besides its steps."""
    sc = sweep.scenario(run_id)
    summ = sweep.summary(run_id)
    block = (sc.get("scheduler") or {}).get("block_size", 16)
    return {
        "run_id": run_id,
        "variant": str(sweep.runs.set_index("run_id").loc[run_id, "variant"]),
        "kind": serving_kind(sc),
        "rate": ((sc.get("workload") or {}).get("arrival") or {}).get("rate"),
        "warmup": float(sc.get("warmup") or 0.0),
        "arrivals_end": (sc.get("horizon") or {}).get("duration"),
        "kv_blocks": summ["kv_capacity_tokens"] / block,
        "block_size": block,
        "stable": summ.get("stable"),
    }


def draw(series: list[tuple[dict, pd.DataFrame]], bin_s: float, title: str = ""):
    """Three stacked panels, one line per run; ``series`` pairs run_info() with timeline()."""
    style()
    fig, axes = plt.subplots(3, 1, figsize=(13, 9.5), sharex=True)
    ax_b, ax_q, ax_kv = axes
    used = set()
    handles: list[Artist] = []
    for k, (info, tl) in enumerate(series):
        color = PALETTE.get(info["variant"])
        if color is None or color in used:
            color = FALLBACK_COLORS[k % len(FALLBACK_COLORS)]
        used.add(color)
        label = info["run_id"] + ("" if info["stable"] in (None, True) else "  (unstable)")
        for ax, col in ((ax_b, "batch_size"), (ax_q, "num_waiting"), (ax_kv, "kv_pct")):
            ax.fill_between(tl["t"], tl[f"{col}_min"], tl[f"{col}_max"], color=color, alpha=0.15, lw=0, step="mid")
            ax.plot(tl["t"], tl[col], color=color, lw=1.4)
        handles.append(Line2D([], [], color=color, lw=1.6, label=label))
        if (tl["batch_width"] > tl["batch_size"] + 1e-9).any():
            ax_b.plot(tl["t"], tl["batch_width"], color=color, lw=1.1, ls="--")
            handles.append(
                Line2D(
                    [], [], color=color, lw=1.1, ls="--", label=f"{info['variant']}: sequences computed (incl. padding)"
                )
            )
        ax_kv.annotate(
            f"{info['variant']}: capacity {info['kv_blocks']:,.0f} blocks of {info['block_size']} tokens",
            (0.995, 0.97 - 0.09 * k),
            xycoords="axes fraction",
            ha="right",
            va="top",
            fontsize=8,
            color=color,
        )
    handles.append(
        Patch(
            color=PALETTE.get("band", "0.5"), alpha=0.15, label=f"min–max of the steps starting in each {bin_s:g} s bin"
        )
    )
    warm = max(info["warmup"] for info, _ in series)
    ends = {info["arrivals_end"] for info, _ in series if info["arrivals_end"]}
    for ax in axes:
        if warm > 0:
            ax.axvspan(0, warm, color="0.6", alpha=0.25, lw=0)
        for e in ends:
            ax.axvline(e, color="0.25", lw=1, ls=":")
        ax.set_xlim(0, max(tl["t"].max() + bin_s / 2 for _, tl in series))
    if warm > 0:
        handles.append(Patch(color="0.6", alpha=0.25, label=f"warm-up ({warm:g} s, not measured)"))
    if ends:
        handles.append(Line2D([], [], color="0.25", lw=1, ls=":", label="arrivals stop (horizon); then drain"))
    ax_b.set_ylabel("batch size\n(sequences per step)")
    ax_q.set_ylabel("queue length\n(requests left waiting\nafter admission)")
    ax_kv.set_ylabel("KV cache in use\n(% of capacity)")
    ax_b.set_ylim(bottom=0)
    ax_kv.set_ylim(0, 105)
    qmax = max(np.nanmax(tl["num_waiting_max"].to_numpy(float), initial=0) for _, tl in series)
    if qmax > 50:
        ax_q.set_yscale("symlog", linthresh=1)
        ax_q.set_ylim(0, qmax * 1.5)
        ax_q.set_ylabel("queue length, symlog\n(requests left waiting\nafter admission)")
    else:
        ax_q.set_ylim(bottom=0)
    ax_kv.set_xlabel(f"simulated time (s) — lines: time-weighted mean over {bin_s:g} s bins")
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, 0.955),
        ncol=min(3, len(handles)),
        fontsize=8.5,
        frameon=False,
    )
    if title:
        fig.suptitle(title, y=0.985)
    return fig


def default_run(runs: pd.DataFrame) -> str:
    """The continuous (else first) variant's run at the highest arrival rate, replication 0."""
    pick = runs[runs["variant"] == "continuous"]
    if pick.empty:
        pick = runs[runs["variant"] == runs["variant"].iloc[0]]
    if RATE in pick:
        pick = pick[pick[RATE] == pick[RATE].max()]
    return pick.sort_values("replication")["run_id"].iloc[0]


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="sweep folder written by `des sweep` with keep_tables: true")
    ap.add_argument(
        "--run",
        action="append",
        default=None,
        help="run id, e.g. continuous/workload.arrival.rate=10/r0; twice to compare "
        "(default: the highest-rate continuous run)",
    )
    ap.add_argument("--bin", type=float, default=None, help="bin width in s (default: ~300 bins, rounded)")
    ap.add_argument("--out", default="reports/timeline.png")
    a = ap.parse_args(argv)
    sweep = Sweep(a.results)
    run_ids = a.run or [default_run(sweep.runs)]
    loaded = [(run_info(sweep, rid), sweep.table(rid, "steps")) for rid in run_ids]
    t_end = max(float((st["start"] + st["duration"]).max()) for _, st in loaded)
    bin_s = a.bin or auto_bin(t_end)
    series = [(info, timeline(st, info["kv_blocks"], bin_s, t_end)) for info, st in loaded]
    what = " vs ".join(i["variant"] + ("" if i["kind"] == i["variant"] else f" ({i['kind']})") for i, _ in series)
    rates = {i["rate"] for i, _ in series}
    rate_txt = f" at {rates.pop():g} req/s" if len(rates) == 1 and None not in rates else ""
    title = f"Batch, queue and KV cache over time — {what}{rate_txt}"
    return save(draw(series, bin_s, title), a.out)


if __name__ == "__main__":
    print(main())
