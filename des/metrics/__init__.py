"""Metrics: the engine's records as tables (pandas) and a flat summary dict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from des.metrics.summary import summarize
from des.metrics.tables import REQUEST_COLUMNS, requests_table, steps_table

if TYPE_CHECKING:
    from des.engine.cluster import Cluster
    from des.scenario import Scenario


@dataclass
class Result:
    """One run: ``requests`` (a row per request), ``steps`` (a row per GPU step), ``summary``."""

    scenario: Scenario
    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict[str, Any]


def build_result(scenario: Scenario, cluster: Cluster, end_time: float) -> Result:
    cluster.settle()
    requests = requests_table(cluster.requests)
    steps = steps_table(cluster.log)
    h = scenario.horizon
    end = h.duration if h.duration is not None else end_time
    s = scenario.scheduler
    summary = summarize(
        requests,
        steps,
        warmup=scenario.warmup,
        end=end,
        replicas=scenario.cluster.replicas,
        kv_capacity_tokens=cluster.kv_capacity_tokens,
        max_batch=s.max_batch,
        slo=scenario.slo.limits() if scenario.slo is not None else None,
    )
    return Result(scenario, requests, steps, summary)


__all__ = ["Result", "build_result", "summarize", "requests_table", "steps_table", "REQUEST_COLUMNS"]
