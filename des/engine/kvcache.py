"""Paged KV-cache blocks of one instance: the memory knobs, and the block accounting.

:class:`CacheConfig` holds the knobs that size an instance's KV cache (block size,
memory share, block-count override, context limit); every batching policy's
configuration inherits them, so they are written once.

:class:`BlockManager` counts an instance's blocks of ``block_size`` tokens. Blocks
are interchangeable, so it keeps counts, not block ids: the schedulers record how
many each request (or static batch) holds, keyed by request id. ``take``/``give``
are O(1) and refuse to go below zero free blocks or above the capacity.
:meth:`~BlockManager.reserve` is the waitable form of ``take``, as SimPy's
``Container.get``: it returns an event that fires once the blocks have been taken
for the caller (a KV link reserves the blocks of a prompt's KV on a decode instance
before its transfer starts). Unlike a container, the manager does not hand blocks to
waiters by itself whenever some are given back: its owner calls :meth:`serve` when
reservations may have what is left, after its own running and waiting requests (as a
vLLM scheduler allocates for requests whose KV is remote only after the running ones
and the queue ahead of them). Waiters are served first come, first served.
"""

from __future__ import annotations

from collections import deque
from typing import TypeVar

import numpy as np
import simpy
from pydantic import Field

from des.config import Strict


class CacheConfig(Strict):
    """KV-cache sizing of an instance, as vLLM's engine arguments (sizes in tokens).

    ``gpu_memory_utilization``: share of each GPU's memory the engine may use;
    ``num_gpu_blocks_override``: fix the block count (once the model fits);
    ``max_model_len``: context limit (default: the model's).
    """

    block_size: int = Field(16, ge=1)
    gpu_memory_utilization: float = Field(0.92, gt=0, le=1)
    max_model_len: int | None = Field(None, ge=1)
    num_gpu_blocks_override: int | None = Field(None, ge=1)


IntOrArray = TypeVar("IntOrArray", int, "np.ndarray")


def ceil_div(a: IntOrArray, b: int) -> IntOrArray:
    """``ceil(a / b)`` for integers, or elementwise for numpy integer arrays."""
    return -(-a // b)


class BlockManager:
    """``num_blocks`` blocks of ``block_size`` tokens; ``env`` serves :meth:`reserve` waiters."""

    __slots__ = ("env", "num_blocks", "block_size", "free", "_waiters")

    def __init__(self, num_blocks: int, block_size: int, env: simpy.Environment | None = None):
        self.env = env
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free = num_blocks
        self._waiters: deque[tuple[int, simpy.Event]] = deque()

    @property
    def used(self) -> int:
        return self.num_blocks - self.free

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold ``tokens`` tokens."""
        return ceil_div(tokens, self.block_size)

    def take(self, n: int) -> None:
        """Hand out ``n`` free blocks; refuses to over-allocate."""
        if n > self.free:
            raise RuntimeError(f"KV over-allocation: {n} blocks asked, {self.free} free")
        self.free -= n

    def give(self, n: int) -> None:
        """Return ``n`` blocks handed out with :meth:`take` or :meth:`reserve`; serve waiters."""
        self.free += n
        if self.free > self.num_blocks:
            raise RuntimeError("KV blocks returned twice")

    def reserve(self, n: int) -> simpy.Event:
        """An event that fires once ``n`` blocks have been taken for the caller, when the
        owner next calls :meth:`serve` with them free (first come, first served).

        Raises ValueError if ``n`` exceeds the capacity (it could never fire).
        """
        if n > self.num_blocks:
            raise ValueError(f"{n} blocks can never be reserved from {self.num_blocks}")
        if self.env is None:
            raise RuntimeError("this block manager has no environment to wait in")
        event = self.env.event()
        self._waiters.append((n, event))
        return event

    @property
    def num_reserving(self) -> int:
        """Reservations not yet served."""
        return len(self._waiters)

    def serve(self) -> None:
        """Take blocks for the waiting reservations, in order, while they fit."""
        waiters = self._waiters
        while waiters and waiters[0][0] <= self.free:
            n, event = waiters.popleft()
            self.free -= n
            event.succeed(n)
