"""Tidy tables from the engine's records: one row per request, one row per step."""

from __future__ import annotations

import numpy as np
import pandas as pd

from des.engine.link import TRANSFER_COLUMNS, TransferLog
from des.engine.request import Request
from des.engine.schedulers.base import ROLES
from des.engine.steplog import STEP_COLUMNS, StepLog

REQUEST_COLUMNS = (
    "request_id",
    "arrival_time",
    "prompt_tokens",
    "output_tokens",
    "scheduled_time",
    "first_token_time",
    "finish_time",
    "ttft",
    "tpot",
    "e2e",
    "queue_delay",
    "preemptions",
    "status",
    "instance",
    "reason",
    "prefill_instance",
    "decode_instance",
    "transfer_start",
    "transfer_end",
    "cached_tokens",
    "conversation_id",
    "turn",
    "prefix_group",
)


def requests_table(requests: list[Request]) -> pd.DataFrame:
    """One row per arrived request; latencies in seconds, NaN where they did not happen.

    ``ttft = first_token - arrival``, ``e2e = finish - arrival``,
    ``queue_delay = scheduled - arrival``, ``tpot = (finish - first_token) / (output - 1)``
    (NaN for one-token outputs).
    """
    n = len(requests)
    arrival = np.fromiter((r.arrival_time for r in requests), float, n)
    scheduled = np.fromiter((r.scheduled_time for r in requests), float, n)
    first = np.fromiter((r.first_token_time for r in requests), float, n)
    finish = np.fromiter((r.finish_time for r in requests), float, n)
    output = np.fromiter((r.output_tokens for r in requests), np.int64, n)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(output > 1, (finish - first) / (output - 1), np.nan)
    return pd.DataFrame(
        {
            "request_id": np.fromiter((r.id for r in requests), np.int64, n),
            "arrival_time": arrival,
            "prompt_tokens": np.fromiter((r.prompt_tokens for r in requests), np.int64, n),
            "output_tokens": output,
            "scheduled_time": scheduled,
            "first_token_time": first,
            "finish_time": finish,
            "ttft": first - arrival,
            "tpot": tpot,
            "e2e": finish - arrival,
            "queue_delay": scheduled - arrival,
            "preemptions": np.fromiter((r.preemptions for r in requests), np.int64, n),
            "status": pd.array([r.status for r in requests], dtype="string"),
            "instance": np.fromiter((r.instance for r in requests), np.int64, n),
            "reason": pd.array([r.reason for r in requests], dtype="string"),
            "prefill_instance": np.fromiter((r.prefill_instance for r in requests), np.int64, n),
            "decode_instance": np.fromiter((r.decode_instance for r in requests), np.int64, n),
            "transfer_start": np.fromiter((r.transfer_start for r in requests), float, n),
            "transfer_end": np.fromiter((r.transfer_end for r in requests), float, n),
            "cached_tokens": np.fromiter((r.cached_tokens for r in requests), np.int64, n),
            "conversation_id": np.fromiter((r.conversation_id for r in requests), np.int64, n),
            "turn": np.fromiter((r.turn for r in requests), np.int64, n),
            "prefix_group": np.fromiter((r.prefix_group for r in requests), np.int64, n),
        },
        columns=list(REQUEST_COLUMNS),
    )


def transfers_table(log: TransferLog) -> pd.DataFrame:
    """One row per KV transfer of disaggregated serving: request, link (its prefill
    instance), decode instance, when queued, started and ended (seconds), bytes."""
    return pd.DataFrame(
        {name: np.asarray(log.columns[name]) for name in TRANSFER_COLUMNS}, columns=list(TRANSFER_COLUMNS)
    )


def steps_table(log: StepLog) -> pd.DataFrame:
    """One row per GPU step: start and duration in seconds, sizes in sequences/tokens/blocks;
    ``role`` is the instance's part in serving (colocated, prefill, decode)."""
    columns = {name: np.asarray(log.columns[name]) for name in STEP_COLUMNS}
    columns["role"] = pd.Categorical.from_codes(columns["role"], categories=list(ROLES))
    return pd.DataFrame(columns, columns=list(STEP_COLUMNS))
