"""Per-pool and per-transfer metrics of disaggregated serving.

For each pool role (``prefill``, ``decode``) over the measurement window
``[warmup, end]``: ``{role}_busy_fraction`` (the share of the window its instances
spend in steps, averaged over them), ``{role}_mean_batch_size`` (sequences per step,
weighted by the part of each step inside the window) and ``{role}_kv_use`` (the share
of an instance's KV blocks in use, weighted the same way). For the KV link, over the
transfers of the requests that arrived in the window: ``kv_transfer_time_*`` (start to
end: bytes / bandwidth + latency, or longer when sent layer by layer during the prefill)
and ``kv_transfer_wait_*`` (from the prompt's end, ``enqueued``, to the start), split into
``kv_block_wait_*`` (until the decode instance granted the prompt's blocks: at least until
its next step boundary when they are asked for at the prompt's end; 0 when granted
before, as pushing transfers ask when the prefill starts) and ``kv_link_wait_*`` (from
then until the wire was free; 0 for a layer-wise transfer that started during the
prefill), mean, p50 and p99, in seconds.
Keys of roles or transfers a run does not have are None, so every run has the same keys.

``decode_full_share`` (:func:`decode_full_share`) is the share of the arrival window
during which the decode pool held requests back: some link sat idle with a transfer at
its head waiting for a decode instance's blocks, or some decode instance ran a step
with requests left out of its batch (transferred and waiting for a slot, or preempted).
At light load it is a few per cent (a reservation waits for the decode instance's next
step boundary); it goes to 1 when the decode pool is overloaded, its full
cache stalling the links and, through the prefill blocks they hold, prefill admission
(see :mod:`des.engine.schedulers.disaggregated`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from des.metrics._window import finite, overlap

if TYPE_CHECKING:
    from des.engine.topology import PoolFacts

POOL_ROLES = ("prefill", "decode")
TRANSFER_STATS = ("mean", "p50", "p99")


def pool_metrics(steps: pd.DataFrame, pools: Sequence[PoolFacts], warmup: float, end: float) -> dict[str, Any]:
    """Busy fraction, mean batch size and KV use of each pool role; ``pools`` give each
    role's instance count (an autoscaled pool's: the mean paid for) and blocks per instance."""
    from des.metrics.windows import mean_paying

    window = end - warmup
    instances = {p.role: mean_paying(p, warmup, end) for p in pools}
    kv_blocks = {p.role: p.kv_blocks for p in pools}
    out: dict[str, Any] = {}
    role = steps["role"].astype(str).to_numpy()
    start = steps["start"].to_numpy()
    stop = start + steps["duration"].to_numpy()
    inside = overlap(start, stop, warmup, end)
    for name in POOL_ROLES:
        keys = (f"{name}_busy_fraction", f"{name}_mean_batch_size", f"{name}_kv_use")
        if name not in instances or window <= 0:
            out.update(dict.fromkeys(keys))
            continue
        sel = role == name
        w = inside[sel]
        busy = float(w.sum())
        out[keys[0]] = finite(busy / (window * instances[name]))
        if busy > 0:
            out[keys[1]] = finite(float((steps["batch_size"].to_numpy()[sel] * w).sum()) / busy)
            out[keys[2]] = finite(float((steps["kv_blocks"].to_numpy()[sel] * w).sum()) / busy / kv_blocks[name])
        else:
            out[keys[1]] = out[keys[2]] = None
    return out


def transfer_metrics(transfers: pd.DataFrame, requests: pd.DataFrame, warmup: float, end: float) -> dict[str, Any]:
    """Time on the link and time waiting before it (for decode blocks, then for the wire),
    over transfers of requests arrived in the window."""
    arrival = requests["arrival_time"].to_numpy()[transfers["request_id"].to_numpy()]
    sel = (arrival >= warmup) & (arrival <= end)
    start, stop = transfers["start"].to_numpy()[sel], transfers["end"].to_numpy()[sel]
    queued, reserved = transfers["enqueued"].to_numpy()[sel], transfers["reserved"].to_numpy()[sel]
    out: dict[str, Any] = {}
    blocks = np.maximum(reserved - queued, 0.0)  # push: granted before the prompt was done
    wire = np.maximum(start - np.maximum(queued, reserved), 0.0)  # layer-wise: started before it was
    for name, values in (
        ("kv_transfer_time", stop - start),
        ("kv_transfer_wait", blocks + wire),
        ("kv_block_wait", blocks),
        ("kv_link_wait", wire),
    ):
        if values.size == 0:
            out.update({f"{name}_{s}": None for s in TRANSFER_STATS})
            continue
        out[f"{name}_mean"] = finite(float(values.mean()))
        p50, p99 = np.percentile(values, (50, 99))
        out[f"{name}_p50"], out[f"{name}_p99"] = finite(float(p50)), finite(float(p99))
    return out


def _union_length(lo: np.ndarray, hi: np.ndarray, start: float, end: float) -> float:
    """Length of the union of the intervals ``[lo, hi)`` inside ``[start, end]`` (seconds)."""
    lo, hi = np.clip(lo, start, end), np.clip(hi, start, end)
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    if lo.size == 0:
        return 0.0
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    reach = np.maximum.accumulate(hi)  # the furthest end of the intervals begun so far
    first = np.flatnonzero(lo > np.concatenate([[-np.inf], reach[:-1]]))  # each merged block's first interval
    last = np.concatenate([first[1:] - 1, [lo.size - 1]])
    return float((reach[last] - lo[first]).sum())


def _link_waits(transfers: pd.DataFrame, requests: pd.DataFrame, stop: float, first_token_at_prefill: bool):
    """The intervals (starts, ends) during which a transfer waited for a decode instance's
    blocks (see :func:`decode_full_share`)."""
    link = transfers["link"].to_numpy()
    lo_parts, hi_parts = [transfers["enqueued"].to_numpy()], [transfers["reserved"].to_numpy()]
    last_end: dict[int, float] = {}
    for i in np.unique(link):
        last_end[int(i)] = float(transfers.loc[link == i, "end"].max())
    if first_token_at_prefill:
        waiting = (
            (requests["status"] == "unfinished").to_numpy()
            & np.isnan(requests["transfer_start"].to_numpy())
            & np.isfinite(requests["first_token_time"].to_numpy())
            & (requests["output_tokens"].to_numpy() > 1)
            & (requests["prefill_instance"].to_numpy() >= 0)
        )
        if waiting.any():
            since = requests["first_token_time"].to_numpy()[waiting]
            tail = pd.Series(since).groupby(requests["prefill_instance"].to_numpy()[waiting]).min()
            for i, first in tail.items():
                lo_parts.append(np.array([max(float(first), last_end.get(int(i), -np.inf))]))
                hi_parts.append(np.array([float(stop)]))
    return np.concatenate(lo_parts), np.concatenate(hi_parts)


def decode_full_share(
    transfers: pd.DataFrame,
    requests: pd.DataFrame,
    steps: pd.DataFrame,
    start: float,
    end: float,
    stop: float,
    first_token_at_prefill: bool,
) -> float | None:
    """Share of the arrival window ``[start, end]`` during which the decode pool held requests
    back; None for an empty window.

    Two kinds of interval count, merged:

    - a transfer waiting for a decode instance's blocks, from its prompt's end (``enqueued``)
      until they were granted (``reserved``; :class:`~des.engine.link.KVLink`). Transfers
      still waiting when a run stops (no drain) are not in the transfer log: with the first
      token dated at the end of the prefill (``first_token_at_prefill``), a link with such a
      request waits from the earliest of their prefills' ends (or its last transfer's end)
      to ``stop``; with the first token dated at the decode instance, their prefills' ends
      are unknown and that tail is left out;
    - a step of a decode instance that left requests waiting (``num_waiting`` > 0: its
      batch was full, in slots, tokens or blocks).
    """
    if not end > start:
        return None
    lo, hi = _link_waits(transfers, requests, stop, first_token_at_prefill)
    decode = (steps["role"] == "decode").to_numpy() & (steps["num_waiting"].to_numpy() > 0)
    step_start = steps["start"].to_numpy()[decode]
    lo = np.concatenate([lo, step_start])
    hi = np.concatenate([hi, step_start + steps["duration"].to_numpy()[decode]])
    return finite(_union_length(lo, hi, start, end) / (end - start))
