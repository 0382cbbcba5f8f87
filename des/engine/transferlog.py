"""The record of KV transfers between pools, kept as growing typed columns (one row per transfer)."""

from __future__ import annotations

from array import array
from typing import Any

from des.engine.request import Request

TRANSFER_COLUMNS = ("request_id", "link", "decode_instance", "enqueued", "reserved", "start", "end", "bytes")
TIMES = ("enqueued", "reserved", "start", "end")


class TransferLog:
    """One row per KV transfer: the request, the link (its prefill instance's index), the
    decode instance, when it was queued, when the decode instance granted its blocks, when
    it started and ended on the wire (seconds) and its size (bytes)."""

    def __init__(self) -> None:
        self.columns: dict[str, array[Any]] = {name: array("d" if name in TIMES else "q") for name in TRANSFER_COLUMNS}

    def record(
        self,
        req: Request,
        link: int,
        decode: int,
        enqueued: float,
        reserved: float,
        start: float,
        end: float,
        nbytes: int,
    ) -> None:
        values = (req.id, link, decode, enqueued, reserved, start, end, nbytes)
        for name, value in zip(TRANSFER_COLUMNS, values, strict=True):
            self.columns[name].append(value)

    def __len__(self) -> int:
        return len(self.columns["start"])
