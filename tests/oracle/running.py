"""The running set of a continuous-batching instance, as parallel numpy arrays.

Requests are kept in admission order, each with its prompt and output lengths, the
tokens generated and computed so far and the KV blocks it holds (tokens and blocks
are integers). The arrays let a step be decided and applied with a fixed number of
array operations whatever the batch size; the :class:`Request` objects are brought
up to date (:meth:`RunningSet.sync`) only when they leave the set or the run ends.
"""

from __future__ import annotations

import numpy as np

from des.engine.request import Request


class RunningSet:
    """At most ``capacity`` running requests; the first ``n`` rows of each array are live."""

    __slots__ = ("reqs", "prompt_len", "output_len", "generated", "computed", "blocks", "shared", "n")

    def __init__(self, capacity: int):
        self.reqs: list[Request] = []
        self.prompt_len = np.zeros(capacity, np.int64)
        self.output_len = np.zeros(capacity, np.int64)
        self.generated = np.zeros(capacity, np.int64)
        self.computed = np.zeros(capacity, np.int64)
        self.blocks = np.zeros(capacity, np.int64)
        self.shared = np.zeros(capacity, bool)  # states its content, which others may share
        self.n = 0

    def push(self, req: Request, blocks: int) -> None:
        """Append ``req``, which holds ``blocks`` KV blocks, at the end (the newest)."""
        i = self.n
        self.reqs.append(req)
        self.prompt_len[i] = req.prompt_tokens
        self.output_len[i] = req.output_tokens
        self.generated[i] = req.generated
        self.computed[i] = req.computed
        self.blocks[i] = blocks
        self.shared[i] = req.segments is not None
        self.n = i + 1

    def sync_row(self, i: int) -> Request:
        """Row ``i``'s request with its progress copied from the arrays."""
        req = self.reqs[i]
        req.generated = int(self.generated[i])
        req.computed = int(self.computed[i])
        return req

    def sync(self) -> None:
        """Copy every running request's progress onto its Request object."""
        for i in range(self.n):
            self.sync_row(i)

    def pop_last(self) -> tuple[Request, int]:
        """Remove the newest request; returns it (synced) and the blocks it held."""
        i = self.n - 1
        req = self.sync_row(i)
        blocks = int(self.blocks[i])
        self.reqs.pop()
        self.n = i
        return req, blocks

    def remove(self, idx: np.ndarray) -> list[tuple[Request, int]]:
        """Remove the rows ``idx`` (ascending), keeping the others' order; returns each
        removed request (synced) with the blocks it held."""
        gone = []
        for i in idx.tolist():
            gone.append((self.sync_row(i), int(self.blocks[i])))
        keep = np.ones(self.n, bool)
        keep[idx] = False
        n = int(keep.sum())
        for a in (self.prompt_len, self.output_len, self.generated, self.computed, self.blocks, self.shared):
            a[:n] = a[: self.n][keep]
        self.reqs = [r for r, kp in zip(self.reqs, keep.tolist(), strict=True) if kp]
        self.n = n
        return gone
