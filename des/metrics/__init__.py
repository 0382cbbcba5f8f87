"""Metrics: the engine's records as tables (pandas) and a flat summary dict. Reads, never runs."""

from __future__ import annotations

from des.metrics.pools import pool_metrics, transfer_metrics
from des.metrics.result import Result, build_result
from des.metrics.summary import summarize
from des.metrics.tables import REQUEST_COLUMNS, requests_table, steps_table, transfers_table

__all__ = [
    "Result",
    "build_result",
    "summarize",
    "pool_metrics",
    "transfer_metrics",
    "requests_table",
    "steps_table",
    "transfers_table",
    "REQUEST_COLUMNS",
]
