"""What prefix caching saved: prompt tokens requested, computed and found in the cache.

Over the steps that start inside the measurement window ``[warmup, end]``:
``prompt_tokens_computed`` is the prefill work the steps did (prompt chunks and the
recomputation of preempted requests), ``prefix_cache_hit_tokens`` the tokens their
admissions found cached instead, ``prompt_tokens_requested`` their sum, and
``prefix_cache_hit_rate`` the hits' share of it (None without any prefill).
"""

from __future__ import annotations

from typing import Any

import pandas as pd


def cache_metrics(steps: pd.DataFrame, warmup: float, end: float) -> dict[str, Any]:
    start = steps["start"]
    sel = (start >= warmup) & (start <= end)
    computed = int(steps["prefill_tokens"][sel].sum())
    hits = int(steps["cached_tokens"][sel].sum())
    requested = computed + hits
    return {
        "prompt_tokens_requested": requested,
        "prompt_tokens_computed": computed,
        "prefix_cache_hit_tokens": hits,
        "prefix_cache_hit_rate": hits / requested if requested else None,
    }
