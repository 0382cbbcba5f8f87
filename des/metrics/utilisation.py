"""How much of the hardware the steps use: roofline share, token budget, batch slots, KV cache.

"GPU busy" says only that something ran; with continuous batching something always
runs. What a planner can use, over the busy time of the measurement window
``[warmup, end]`` (each step weighted by its part inside the window):

- ``compute_utilization`` and ``bandwidth_utilization``: achieved FLOP/s and bytes/s
  (the step's work, :mod:`des.cost.work`, over its duration) against the instance's
  peaks; ``roofline_share``: per step the larger of the two (how close the step came
  to the roof that bounds it), averaged;
- ``token_budget_use``: tokens per step over ``max_num_batched_tokens`` (continuous
  batching; None for static batches, which have no budget);
- ``batch_occupancy``: sequences per step over the batch cap (``max_num_seqs`` or
  ``max_batch_size``);
- ``kv_use_mean``, ``kv_use_p99``, ``kv_use_peak``: the share of the instance's KV
  blocks in use (its time-weighted mean and 99th percentile, and the largest).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from des.metrics._window import finite, overlap

if TYPE_CHECKING:
    from des.engine.topology import PoolFacts

KEYS = (
    "compute_utilization",
    "bandwidth_utilization",
    "roofline_share",
    "token_budget_use",
    "batch_occupancy",
    "kv_use_mean",
    "kv_use_p99",
    "kv_use_peak",
)


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The ``q`` quantile of ``values`` with ``weights`` (the smallest value whose
    cumulative weight reaches ``q`` of the total)."""
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    i = int(np.searchsorted(cum, q * cum[-1], side="left"))
    return float(values[order][min(i, len(values) - 1)])


def utilisation(steps: pd.DataFrame, limits: Sequence[PoolFacts], warmup: float, end: float) -> dict[str, Any]:
    """The keys of :data:`KEYS` from the steps table; ``limits[i]`` holds the peaks and caps
    of instance ``i`` (its pool's facts)."""
    start = steps["start"].to_numpy()
    duration = steps["duration"].to_numpy()
    w = overlap(start, start + duration, warmup, end)
    busy = float(w.sum())
    if busy <= 0:
        return dict.fromkeys(KEYS)
    inst = steps["instance"].to_numpy()

    def per_instance(field: str) -> np.ndarray:
        return np.array([getattr(x, field) for x in limits], dtype=float)[inst]

    def mean(x: np.ndarray) -> float | None:
        return finite(float((x * w).sum()) / busy)

    compute = steps["flops"].to_numpy() / duration / per_instance("peak_flops")
    bandwidth = steps["hbm_bytes"].to_numpy() / duration / per_instance("peak_bandwidth")
    kv = steps["kv_blocks"].to_numpy() / per_instance("kv_blocks")
    budgets = [x.token_budget for x in limits]
    tokens = (steps["prefill_tokens"] + steps["decode_tokens"]).to_numpy()
    out: dict[str, Any] = {
        "compute_utilization": mean(compute),
        "bandwidth_utilization": mean(bandwidth),
        "roofline_share": mean(np.maximum(compute, bandwidth)),
        "token_budget_use": (
            mean(tokens / np.array(budgets, dtype=float)[inst]) if all(b is not None for b in budgets) else None
        ),
        "batch_occupancy": mean(steps["batch_size"].to_numpy() / per_instance("max_batch")),
        "kv_use_mean": mean(kv),
        "kv_use_p99": finite(weighted_quantile(kv[w > 0], w[w > 0], 0.99)),
        "kv_use_peak": finite(float(kv[w > 0].max())),
    }
    return out
