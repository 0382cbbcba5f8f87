"""Paged KV-cache block accounting for one instance.

Blocks of ``block_size`` tokens are interchangeable, so the manager keeps counts, not
block ids: the manager counts the free ones, the schedulers how many each request (or
static batch) holds. Every operation is O(1); the manager refuses to go below zero
free blocks or above its capacity.
"""

from __future__ import annotations

from des.engine.request import Request


class BlockManager:
    """``num_blocks`` blocks of ``block_size`` tokens."""

    __slots__ = ("num_blocks", "block_size", "free")

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free = num_blocks

    @property
    def used(self) -> int:
        return self.num_blocks - self.free

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold ``tokens`` tokens."""
        return -(-tokens // self.block_size)

    def release(self, req: Request) -> None:
        """Return all of ``req``'s blocks."""
        self.free += req.blocks
        req.blocks = 0

    def take(self, n: int) -> None:
        """Hand out ``n`` free blocks; refuses to over-allocate."""
        if n > self.free:
            raise RuntimeError(f"KV over-allocation: {n} blocks asked, {self.free} free")
        self.free -= n

    def give(self, n: int) -> None:
        """Return ``n`` blocks handed out with :meth:`take`."""
        self.free += n
        if self.free > self.num_blocks:
            raise RuntimeError("KV blocks returned twice")
