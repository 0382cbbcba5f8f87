"""Tidy tables from the engine's records: one row per request, one row per step."""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np
import pandas as pd

from des.engine.ledger import DTYPES, REASONS, STATUSES, RequestLog
from des.engine.policy import ROLES
from des.engine.steplog import STEP_COLUMNS, StepLog
from des.engine.transferlog import TRANSFER_COLUMNS, TransferLog

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
    "second_token_time",
    "queued_time",
)


def requests_table(ledger: RequestLog) -> pd.DataFrame:
    """One row per arrived request; latencies in seconds, NaN where they did not happen.

    ``ttft = first_token - arrival``, ``e2e = finish - arrival``,
    ``queue_delay = scheduled - arrival``, ``tpot = (finish - first_token) / (output - 1)``
    (NaN for one-token outputs); ``queued_time``: when it last reached a scheduler (behind
    a serving front-end, once through its way in: vLLM's ``queued_ts``). The columns view
    the ledger's arrays (no copy).
    """
    c = ledger.arrays()
    arrival, scheduled, first, finish = c["arrival_time"], c["scheduled_time"], c["first_token_time"], c["finish_time"]
    output = c["output_tokens"]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(output > 1, (finish - first) / (output - 1), np.nan)
    columns = {
        "request_id": np.arange(len(arrival), dtype=np.int64),
        "arrival_time": arrival,
        "prompt_tokens": c["prompt_tokens"],
        "output_tokens": output,
        "scheduled_time": scheduled,
        "first_token_time": first,
        "finish_time": finish,
        "ttft": first - arrival,
        "tpot": tpot,
        "e2e": finish - arrival,
        "queue_delay": scheduled - arrival,
        "preemptions": c["preemptions"],
        "status": pd.Categorical.from_codes(c["status"], categories=list(STATUSES)),
        "instance": c["instance"],
        "reason": pd.Categorical.from_codes(c["reason"], categories=list(REASONS)),
        **{name: c[name] for name in REQUEST_COLUMNS[15:]},
    }
    return pd.DataFrame(columns, columns=list(REQUEST_COLUMNS), copy=False)


def _view(col: array[Any]) -> np.ndarray:
    """A numpy view of a typed array (no copy)."""
    return np.frombuffer(col, dtype=DTYPES[col.typecode]) if len(col) else np.zeros(0, DTYPES[col.typecode])


def transfers_table(log: TransferLog) -> pd.DataFrame:
    """One row per KV transfer of disaggregated serving: request, link (its prefill
    instance), decode instance, when queued, started and ended (seconds), bytes."""
    return pd.DataFrame(
        {name: _view(log.columns[name]) for name in TRANSFER_COLUMNS}, columns=list(TRANSFER_COLUMNS), copy=False
    )


def steps_table(log: StepLog) -> pd.DataFrame:
    """One row per GPU step: start and duration in seconds, sizes in sequences/tokens/blocks;
    ``role`` is the instance's part in serving (colocated, prefill, decode)."""
    columns: dict[str, Any] = {name: _view(log.columns[name]) for name in STEP_COLUMNS}
    columns["role"] = pd.Categorical.from_codes(columns["role"], categories=list(ROLES))
    return pd.DataFrame(columns, columns=list(STEP_COLUMNS), copy=False)
