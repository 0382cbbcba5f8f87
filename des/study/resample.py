"""Resampled traces: what another recording of the same traffic might have been.

A trace replay is deterministic: its replications, run at different seeds, replay the
same requests at the same instants and come out identical, so an interval over them is
no interval at all. A study's or capacity search's replication ``r >= 1`` of a replay
therefore replays a *circular block bootstrap* of the trace (Politis & Romano, 1992),
in time: the trace's span is a circle, cut into ``k`` consecutive blocks of ``L``
seconds; each block of the resample copies the arrivals of a window of ``L`` seconds
starting at a uniformly drawn instant of the circle, with their prompt and output
lengths, at the block's place. Bursts and lulls shorter than ``L`` keep their shape,
their order and number vary from resample to resample, and so does the load: a resample
drawing the bursty hour twice carries more traffic than the recording. Replication 0
replays the trace as recorded.

``L`` follows the automatic block length of Politis & White (2004, with the correction of
Patton, Politis & White, 2009) for the circular bootstrap, computed on the arrivals
counted in :data:`BINS` (at most) equal bins of the span, and on the tokens (prompt and
output) arriving in them; the longer of the two. It is at most a third of the span.

Content that the prefix cache reuses is kept consistent: a conversation goes whole
with the block holding its first turn (its later turns at their recorded distances from
it, even past the block's end), each copy of it a conversation of its own; block ids
(``hash_ids``) first seen inside the copied window are renamed per copy (a window drawn
twice does not hit its own blocks twice), ids seen before it (a system prompt) stay
shared, and so do ``prefix_group``s.

The resample depends only on the trace and the seed: the replication's seed (the same at
every value a capacity search tries: common random numbers), through a stream of its
own (:data:`STREAM`), so the same scenario and seed give the same resample, byte for byte.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

#: The random stream of resampling, beside the simulation's own.
STREAM = 0x7472616365
#: Most bins the span is cut into to choose the block length.
BINS = 2000
#: The file a resampled replication replays, in its run's folder.
RESAMPLE_FILE = "trace-resample.jsonl"
#: A resample's scenario records how it was made, under this key of its name.
KIND = "block-bootstrap"


def _autocovariance(x: np.ndarray, lags: int) -> np.ndarray:
    x = x - x.mean()
    n = x.size
    f = np.fft.rfft(x, 2 * n)
    return np.fft.irfft(f * np.conj(f), 2 * n)[: lags + 1] / n


def block_length(x: np.ndarray) -> float:
    """Politis & White's (2004; Patton, Politis & White, 2009) optimal block length for the
    circular block bootstrap of the series ``x``, in samples (at least 1)."""
    n = x.size
    if n < 4:
        return 1.0
    kn = max(5, math.ceil(math.sqrt(math.log10(n))))
    mmax = math.ceil(math.sqrt(n)) + kn
    bmax = math.ceil(min(3 * math.sqrt(n), n / 3))
    acv = _autocovariance(x.astype(float), min(mmax, n - 1))
    if acv[0] <= 0:
        return 1.0
    rho = acv[1:] / acv[0]
    insignificant = np.abs(rho) < 2 * math.sqrt(math.log10(n) / n)
    mhat = None
    for m in range(0, max(rho.size - kn + 1, 0)):
        if insignificant[m : m + kn].all():
            mhat = m
            break
    if mhat is None:
        significant = np.nonzero(~insignificant)[0]
        mhat = int(significant[-1]) + 1 if significant.size else 0
    big_m = min(2 * mhat, acv.size - 1)
    if big_m == 0:
        return 1.0
    k = np.arange(-big_m, big_m + 1)
    t = np.abs(k) / big_m
    flat_top = np.where(t < 0.5, 1.0, 2 * (1 - t))
    a = acv[np.abs(k)]
    g = float(np.sum(flat_top * np.abs(k) * a))
    d_cb = 4 / 3 * float(np.sum(flat_top * a)) ** 2
    if d_cb <= 0:
        return float(bmax)
    return float(min(max((2 * g**2 / d_cb) ** (1 / 3) * n ** (1 / 3), 1.0), bmax))


def block_seconds(table: pd.DataFrame, span: float) -> float:
    """The block length (seconds) for resampling the trace ``table`` over a circle of ``span`` s."""
    bins = int(min(BINS, max(10, len(table) // 2)))
    width = span / bins
    where = np.minimum(
        ((table["arrival_time"].to_numpy() - table["arrival_time"].iloc[0]) / width).astype(int), bins - 1
    )
    counts = np.bincount(where, minlength=bins).astype(float)
    tokens = np.bincount(
        where, weights=(table["prompt_tokens"] + table["output_tokens"]).to_numpy(float), minlength=bins
    )
    return max(block_length(counts), block_length(tokens)) * width


def resample(table: pd.DataFrame, seed: int) -> tuple[pd.DataFrame, float]:
    """A circular block bootstrap of the trace ``table`` (arrival times in seconds, sorted),
    and its block length in seconds. A trace of fewer than two requests is its own resample."""
    n = len(table)
    times = table["arrival_time"].to_numpy(float)
    if n < 2 or not times[-1] > times[0]:
        return table.reset_index(drop=True), math.nan
    t0 = times[0]
    span = (times[-1] - t0) * n / (n - 1)  # the recorded span plus one mean gap, closing the circle
    length = min(block_seconds(table, span), span)
    k = math.ceil(span / length - 1e-9)
    rng = np.random.default_rng(np.random.SeedSequence([STREAM, seed]))
    starts = rng.uniform(0.0, span, k)
    anchor = _anchors(table)  # a conversation's turns go where its first turn goes
    by_anchor = np.argsort(anchor, kind="stable")
    since = anchor[by_anchor] - t0
    after = times[by_anchor] - anchor[by_anchor]
    rows, when, copies = [], [], []
    for j, u in enumerate(starts):
        end = u + min(length, span - j * length)
        spans = [(u, min(end, span), 0.0)] + ([(0.0, end - span, span)] if end > span else [])
        for a, b, wrap in spans:  # the window on the circle: one stretch, or two across its seam
            i, k_end = np.searchsorted(since, [a, b], side="left")
            rows.append(by_anchor[i:k_end])
            when.append(t0 + j * length + since[i:k_end] + wrap - u + after[i:k_end])
            copies.append(np.full(k_end - i, j))
    picked = pd.DataFrame(
        {"row": np.concatenate(rows), "arrival_time": np.concatenate(when), "copy": np.concatenate(copies)}
    )
    if picked.empty:  # every window fell in a lull: the recording stands
        return table.reset_index(drop=True), length
    out = table.iloc[picked["row"].to_numpy()].reset_index(drop=True)
    out["arrival_time"] = picked["arrival_time"].to_numpy()
    copy = picked["copy"].to_numpy()
    if "conversation_id" in out:
        out["conversation_id"] = _per_copy(out["conversation_id"].to_numpy(), copy)
    if "hash_ids" in out:
        out["hash_ids"] = _fresh_blocks(table, out["hash_ids"].tolist(), picked, starts, length, span)
    order = np.argsort(out["arrival_time"].to_numpy(), kind="stable")
    return out.iloc[order].reset_index(drop=True), length


def _anchors(table: pd.DataFrame) -> np.ndarray:
    """Each row's anchor: its conversation's first arrival, or its own arrival."""
    times = table["arrival_time"].to_numpy(float)
    if "conversation_id" not in table:
        return times
    ids = table["conversation_id"].to_numpy()
    first = pd.Series(times).groupby(ids).transform("min").to_numpy()
    return np.where(ids >= 0, first, times)


def _per_copy(ids: np.ndarray, copy: np.ndarray) -> np.ndarray:
    """Conversation ids made distinct per block copy (-1, no conversation, stays)."""
    out = np.full(ids.size, -1, dtype=np.int64)
    keep = ids >= 0
    if keep.any():
        pairs = np.stack([copy[keep], ids[keep]], axis=1)
        _, dense = np.unique(pairs, axis=0, return_inverse=True)
        out[keep] = dense.reshape(-1)
    return out


def _fresh_blocks(
    table: pd.DataFrame, hashes: list[Any], picked: pd.DataFrame, starts: np.ndarray, length: float, span: float
) -> list[tuple[int, ...]]:
    """Each copy's block ids, those first seen inside its window renamed for the copy."""
    times = table["arrival_time"].to_numpy(float) - float(table["arrival_time"].iloc[0])
    born: dict[int, float] = {}
    for t, ids in zip(times, table["hash_ids"], strict=True):
        for h in ids:
            born.setdefault(int(h), float(t))
    fresh: dict[tuple[int, int], int] = {}
    top = max(born, default=-1) + 1
    out = []
    for ids, j in zip(hashes, picked["copy"].to_numpy(), strict=True):
        u = starts[j]
        width = min(length, span - j * length)
        renamed = []
        for h in ids:
            h = int(h)
            if (born[h] - u) % span < width:
                h = fresh.setdefault((int(j), h), top + len(fresh))
            renamed.append(h)
        out.append(tuple(renamed))
    return out


def write_jsonl(table: pd.DataFrame, path: Path) -> None:
    """The trace ``table`` as des's own JSONL trace (format ``jsonl``; times in full precision)."""
    lines = []
    for row in table.to_dict("records"):
        out: dict[str, Any] = {
            "arrival_time": float(row["arrival_time"]),
            "prompt_tokens": int(row["prompt_tokens"]),
            "output_tokens": int(row["output_tokens"]),
        }
        if "conversation_id" in row and row["conversation_id"] >= 0:
            out["conversation_id"] = int(row["conversation_id"])
        if "prefix_group" in row and row["prefix_group"] >= 0:
            out["prefix_group"] = int(row["prefix_group"])
            if "prefix_tokens" in row and row["prefix_tokens"] > 0:
                out["prefix_tokens"] = int(row["prefix_tokens"])
        if "hash_ids" in row and len(row["hash_ids"]):
            out["hash_ids"] = [int(h) for h in row["hash_ids"]]
        lines.append(json.dumps(out))
    path.write_text("\n".join(lines) + "\n")


def resampled_scenario(scenario: dict[str, Any], folder: Path, seed: int) -> dict[str, Any]:
    """``scenario`` (resolved, replaying a trace) with its trace replaced by a resample of it
    drawn with ``seed``, written to ``folder/``:data:`RESAMPLE_FILE`."""
    from des.dotted import deep_copy
    from des.scenario import load_scenario

    arrival = scenario["workload"]["arrival"]
    from des.workload.arrivals import Trace

    # the recorded times, before rate_scale and a modulate: both apply again to the resample
    trace = load_scenario(
        scenario, [("workload.arrival.rate_scale", 1.0), ("workload.arrival.modulate", None)]
    ).workload.arrival
    assert isinstance(trace, Trace)
    recorded = trace.table
    drawn, length = resample(recorded, seed)
    path = folder / RESAMPLE_FILE
    write_jsonl(drawn, path)
    out = deep_copy(scenario)
    out["workload"]["arrival"] = {
        "process": "trace",
        "path": str(path.resolve()),
        "format": "jsonl",
        "rate_scale": arrival["rate_scale"],
        "absolute_times": True,
        "hash_block_tokens": arrival["hash_block_tokens"],
    }
    if arrival.get("modulate") is not None:
        out["workload"]["arrival"]["modulate"] = arrival["modulate"]
    out["name"] = f"{scenario['name']} ({KIND} of {Path(arrival['path']).name}, blocks of {length:.4g} s)"
    return load_scenario(out).resolved()
