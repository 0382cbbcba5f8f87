"""A run's result: its records as tables, and the summary of them.

:func:`build_result` reads a stopped cluster: the request ledger, the step log, the
transfer log, and the facts each pool reports of itself (:meth:`Pool.facts
<des.engine.topology.Pool.facts>`: instances, peaks, caps, KV blocks), and computes
every summary key from them. It reads only; the engine owns no statistics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from des.metrics.cache import cache_metrics
from des.metrics.itl import itl_metrics, second_token_metrics
from des.metrics.pools import decode_full_share, pool_metrics, transfer_metrics
from des.metrics.summary import arrival_window_end, measured_mask, summarize
from des.metrics.tables import requests_table, steps_table, transfers_table
from des.metrics.utilisation import utilisation
from des.metrics.verdict import stationarity, verdict_notes
from des.metrics.windows import day_metrics, mean_paying, windows_table

if TYPE_CHECKING:
    from des.cost.uncertainty import ModelDraws
    from des.engine.cluster import Cluster
    from des.engine.itl import ItlLog
    from des.engine.topology import PoolFacts
    from des.scenario import Scenario


@dataclass
class Result:
    """One run: ``requests`` (a row per request), ``steps`` (a row per GPU step), ``summary``,
    and ``transfers`` (a row per KV transfer; empty unless prefill and decode are disaggregated);
    ``draws``: the multipliers of the step-time model's error the run drew (``model_uncertainty``)."""

    scenario: Scenario
    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict[str, Any]
    transfers: pd.DataFrame | None = None
    draws: ModelDraws | None = None
    windows: pd.DataFrame | None = None


def gap_logs(cluster: Cluster) -> list[ItlLog]:
    """Every scheduler's log of the gaps between tokens (a pipelined engine's: each batch's)."""
    return [log for inst in cluster.instances for log in inst.scheduler.gap_logs()]


def build_result(scenario: Scenario, cluster: Cluster, end_time: float) -> Result:
    """The tables and summary of a run of ``scenario`` on ``cluster`` that stopped at ``end_time``
    (or that ends later, at its last completion: the requests table dates tokens at the
    client, the serving front-end's egress after the steps that emitted them).

    ``kv_capacity_tokens`` and ``slot_utilization`` are those of an instance of the pool
    requests finish in (the only pool of colocated serving, the decode pool of
    disaggregated serving); utilisation measures every step against its own instance.
    The last keys qualify the stability verdict (:mod:`des.metrics.verdict`);
    ``factor_provenance`` is the least-fitted provenance of the run's GPUs' step-time
    factors (:func:`des.cost.uncertainty.run_provenance`); ``engine_defaults`` says which
    engine settings the scenario left to vLLM's defaults, their values and why
    (:mod:`des.engine.defaults`).
    """
    from des.cost.uncertainty import run_provenance

    cluster.settle()
    requests = requests_table(cluster.ledger)
    # the run lasts until the client has its last token, the front-end's way out after the
    # step that emitted it (the simulation stops at that step's end once drained): the
    # windows, GPU-hours and time averages run to the last completion, the makespan
    finished = requests.loc[requests["status"] == "completed", "finish_time"]
    if len(finished):
        end_time = max(end_time, float(finished.max()))
    steps = steps_table(cluster.log)
    transfers = transfers_table(cluster.transfers)
    h = scenario.horizon
    end = h.duration if h.duration is not None else end_time
    pools = cluster.topology.facts()
    finish = pools[-1]
    summary = summarize(
        requests,
        steps,
        warmup=scenario.warmup,
        end=end,
        arrivals_end=arrival_window_end(requests, h.duration),
        replicas=replicas(pools, scenario.warmup, end),
        kv_capacity_tokens=finish.kv_capacity_tokens,
        max_batch=finish.max_batch,
        slo=scenario.slo.limits() if scenario.slo is not None else None,
    )
    summary.update(pool_metrics(steps, pools, scenario.warmup, end))
    summary.update(transfer_metrics(transfers, requests, scenario.warmup, end))
    summary.update(utilisation(steps, [p for p in pools for _ in range(p.instances)], scenario.warmup, end))
    summary.update(cache_metrics(steps, scenario.warmup, end))
    summary.update(itl_metrics(gap_logs(cluster), scenario.warmup, end))
    summary.update(second_token_metrics(requests.loc[measured_mask(requests, scenario.warmup, end)]))
    summary["factor_provenance"] = run_provenance(scenario.deployment.factors)
    summary["engine_defaults"] = scenario.deployment.engine_defaults
    prices = scenario.price_book()
    slo = scenario.slo
    windows = windows_table(
        requests, steps, pools, end_time, scenario.metrics.window,
        slo.limits() if slo is not None else None, slo.attainment if slo is not None else None, prices,
    )  # fmt: skip
    completed_tokens = float(requests.loc[requests["status"] == "completed", "output_tokens"].sum())
    summary.update(day_metrics(pools, end_time, completed_tokens, prices))
    summary.update(stationarity(summary, windows, scenario.workload.arrival))
    layout = cluster.deployment.layout
    split = layout.link is not None
    start, arrivals_end = summary["arrival_window_start"], summary["arrival_window_end"]
    summary["decode_full_share"] = (
        decode_full_share(
            transfers, requests, steps, start, arrivals_end, end_time, layout.first_token_from == "prefill"
        )
        if split
        else None
    )
    closed = getattr(scenario.workload.arrival, "process", None) == "closed"
    summary.update(verdict_notes(summary, requests, steps, closed, split))
    return Result(scenario, requests, steps, summary, transfers if split else None, cluster.draws, windows)


def replicas(pools: list[PoolFacts], warmup: float, end: float) -> float:
    """Instances the busy share is measured against: every one of a fixed cluster, the mean
    paid for over ``[warmup, end]`` where an autoscaler sets them."""
    if all(p.timeline is None for p in pools):
        return sum(p.instances for p in pools)  # an int, as before autoscaling: the same float arithmetic
    return sum(mean_paying(p, warmup, end) for p in pools)
