"""Per-pool and per-transfer metrics of disaggregated serving.

For each pool role (``prefill``, ``decode``) over the measurement window
``[warmup, end]``: ``{role}_busy_fraction`` (the share of the window its instances
spend in steps, averaged over them), ``{role}_mean_batch_size`` (sequences per step,
weighted by the part of each step inside the window) and ``{role}_kv_use`` (the share
of an instance's KV blocks in use, weighted the same way). For the KV link, over the
transfers of the requests that arrived in the window: ``kv_transfer_time_*`` (start to
end: bytes / bandwidth + latency) and ``kv_transfer_wait_*`` (queued to start: waiting
for the link and for the decode instance's blocks), mean, p50 and p99, in seconds.
Keys of roles or transfers a run does not have are None, so every run has the same keys.
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
    role's instance count and blocks per instance."""
    instances = {p.role: p.instances for p in pools}
    kv_blocks = {p.role: p.kv_blocks for p in pools}
    out: dict[str, Any] = {}
    window = end - warmup
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
    """Time on the link and time waiting for it, over transfers of requests arrived in the window."""
    arrival = requests["arrival_time"].to_numpy()[transfers["request_id"].to_numpy()]
    sel = (arrival >= warmup) & (arrival <= end)
    start, stop = transfers["start"].to_numpy()[sel], transfers["end"].to_numpy()[sel]
    queued = transfers["enqueued"].to_numpy()[sel]
    out: dict[str, Any] = {}
    for name, values in (("kv_transfer_time", stop - start), ("kv_transfer_wait", start - queued)):
        if values.size == 0:
            out.update({f"{name}_{s}": None for s in TRANSFER_STATS})
            continue
        out[f"{name}_mean"] = finite(float(values.mean()))
        p50, p99 = np.percentile(values, (50, 99))
        out[f"{name}_p50"], out[f"{name}_p99"] = finite(float(p50)), finite(float(p99))
    return out
