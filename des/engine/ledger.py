"""The ledger of every request that arrived: one row each, kept as typed columns.

A row is appended when a request arrives and written when it leaves the system
(completed or rejected); requests still in flight when the run stops are written at the
end (:meth:`RequestLog.settle`). The Request object of a request that has left is no
longer held by the cluster, so a run's memory grows by a row of typed values per
request (about 150 bytes), not by an object (several hundred), which is what lets a day
of traffic fit. ``status`` and ``reason`` are codes into :data:`STATUSES` and
:data:`REASONS`.
"""

from __future__ import annotations

import math
from array import array
from itertools import repeat
from typing import Any

import numpy as np

from des.engine.request import COMPLETED, REJECTED, UNFINISHED, Request

STATUSES = (UNFINISHED, COMPLETED, REJECTED)
REASONS = ("", "exceeds_max_model_len", "exceeds_kv_capacity")
_STATUS_CODE = {s: i for i, s in enumerate(STATUSES)}
_REASON_CODE = {r: i for i, r in enumerate(REASONS)}

#: Column name -> array typecode: the request's fields the tables are built from.
LEDGER_COLUMNS = {
    "arrival_time": "d",
    "prompt_tokens": "q",
    "output_tokens": "q",
    "scheduled_time": "d",
    "first_token_time": "d",
    "second_token_time": "d",
    "finish_time": "d",
    "preemptions": "q",
    "status": "b",
    "reason": "b",
    "instance": "q",
    "prefill_instance": "q",
    "decode_instance": "q",
    "transfer_start": "d",
    "transfer_end": "d",
    "cached_tokens": "q",
    "conversation_id": "q",
    "turn": "q",
    "prefix_group": "q",
    "generated": "q",
    "queued_time": "d",
}
DTYPES = {"d": np.float64, "q": np.int64, "b": np.int8}
_PLAIN = tuple(name for name in LEDGER_COLUMNS if name not in ("status", "reason"))


#: Rows added at a time (blank until written).
CHUNK = 4096


#: The columns that date a token: the client has it the front-end's egress after the step.
TOKEN_TIMES = ("first_token_time", "second_token_time", "finish_time")


class RequestLog:
    """Rows of requests by id (ids are row numbers, in order of arrival). ``egress``: seconds
    from the end of the step that emits a token to its client (the serving front-end's way
    out, :attr:`~des.cost.frontend.FrontendSpec.egress`), added to every token time written."""

    def __init__(self, egress: float = 0.0) -> None:
        self.egress = egress
        self.columns: dict[str, array[Any]] = {name: array(code) for name, code in LEDGER_COLUMNS.items()}
        self.live: dict[int, Request] = {}  # arrived and not yet written
        self.rows = 0
        self._blank = tuple(math.nan if code == "d" else 0 for code in LEDGER_COLUMNS.values())
        self._plain = tuple((self.columns[name], name) for name in _PLAIN)

    def __len__(self) -> int:
        return self.rows

    def add(self, req: Request) -> None:
        """A request arrives (its id must be the next row); its row is written when it leaves."""
        if self.rows == len(self.columns["arrival_time"]):
            for col, blank in zip(self.columns.values(), self._blank, strict=True):
                col.extend(repeat(blank, CHUNK))
        self.rows += 1
        self.live[req.id] = req

    def arrays(self) -> dict[str, np.ndarray]:
        """The columns as numpy arrays of the rows added (views, no copy)."""
        return {name: np.frombuffer(col, dtype=DTYPES[col.typecode])[: self.rows] for name, col in self.columns.items()}

    def write(self, req: Request) -> None:
        """Write the row of a request that has left the system (or is still in flight at the end)."""
        i = req.id
        self.live.pop(i, None)
        for col, name in self._plain:
            col[i] = getattr(req, name)
        c = self.columns
        if self.egress:
            for name in TOKEN_TIMES:
                c[name][i] += self.egress  # NaN (no such token yet) stays NaN
        c["status"][i] = _STATUS_CODE[req.status]
        c["reason"][i] = _REASON_CODE[req.reason]

    def settle(self) -> None:
        """Write every request still in flight (the run has stopped)."""
        for req in list(self.live.values()):
            self.write(req)
