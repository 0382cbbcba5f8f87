"""The record of KV transfers between pools, kept as growing typed columns (one row per transfer)."""

from __future__ import annotations

from array import array
from typing import Any

from des.engine.request import Request

TRANSFER_COLUMNS = ("request_id", "link", "decode_instance", "enqueued", "start", "end", "bytes")


class TransferLog:
    """One row per KV transfer: the request, the link (its prefill instance's index), the
    decode instance, when it was queued, started and ended (seconds) and its size (bytes)."""

    def __init__(self) -> None:
        self.columns: dict[str, array[Any]] = {
            name: array("d" if name in ("enqueued", "start", "end") else "q") for name in TRANSFER_COLUMNS
        }

    def record(self, req: Request, link: int, decode: int, enqueued: float, start: float, end: float, nbytes: int):
        for name, value in zip(TRANSFER_COLUMNS, (req.id, link, decode, enqueued, start, end, nbytes), strict=True):
            self.columns[name].append(value)

    def __len__(self) -> int:
        return len(self.columns["start"])
