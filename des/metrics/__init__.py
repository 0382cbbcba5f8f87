"""Metrics: the engine's records as tables (pandas) and a flat summary dict. Reads, never runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from des.metrics.pools import pool_metrics, transfer_metrics
from des.metrics.summary import summarize
from des.metrics.tables import REQUEST_COLUMNS, requests_table, steps_table, transfers_table

if TYPE_CHECKING:
    from des.scenario import Scenario


@dataclass
class Result:
    """One run: ``requests`` (a row per request), ``steps`` (a row per GPU step), ``summary``,
    and ``transfers`` (a row per KV transfer; empty unless prefill and decode are disaggregated)."""

    scenario: Scenario
    requests: pd.DataFrame
    steps: pd.DataFrame
    summary: dict[str, Any]
    transfers: pd.DataFrame | None = None


__all__ = [
    "Result",
    "summarize",
    "pool_metrics",
    "transfer_metrics",
    "requests_table",
    "steps_table",
    "transfers_table",
    "REQUEST_COLUMNS",
]
