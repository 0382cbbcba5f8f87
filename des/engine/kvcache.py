"""Paged KV-cache blocks of one instance: the memory knobs, and the block accounting.

:class:`CacheConfig` holds the knobs that size an instance's KV cache (block size,
memory share, block-count override, context limit); every batching policy's
configuration inherits them, so they are written once.

:class:`BlockManager` counts an instance's blocks of ``block_size`` tokens. Blocks
are interchangeable, so it keeps counts, not block ids. A scheduler takes the blocks its
running requests grow into in bulk (``take``, O(1), as the decoding aggregates need);
the manager keeps the ledger of the blocks each request holds *outside* a running
batch (``hold``: a transferred prompt waiting to run, or a request that left and whose
next stage has not freed it yet), so that ``release(request_id)`` needs no count.
Admission goes through it as through vLLM's ``KVCacheManager.allocate_slots``:
:meth:`~BlockManager.lookup` says what of a request's tokens is cached (nothing,
without prefix caching), and :meth:`~BlockManager.allocate` takes the blocks for its
first tokens, or refuses when they do not fit. ``take``/``give`` refuse to go below
zero free blocks or above the capacity.
:meth:`~BlockManager.reserve` is the waitable form of ``allocate``, as SimPy's
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
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import numpy as np
import simpy
from pydantic import Field

from des.config import Strict

if TYPE_CHECKING:
    from des.engine.request import Request


class CacheConfig(Strict):
    """KV-cache sizing of an instance, as vLLM's engine arguments (sizes in tokens).

    ``gpu_memory_utilization``: share of each GPU's memory the engine may use (vLLM's
    ``CacheConfig`` default, 0.9);
    ``num_gpu_blocks_override``: fix the block count (once the model fits);
    ``max_model_len``: context limit (default: the model's).
    """

    block_size: int = Field(16, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    max_model_len: int | None = Field(None, ge=1)
    num_gpu_blocks_override: int | None = Field(None, ge=1)


IntOrArray = TypeVar("IntOrArray", int, "np.ndarray")


def ceil_div(a: IntOrArray, b: int) -> IntOrArray:
    """``ceil(a / b)`` for integers, or elementwise for numpy integer arrays."""
    return -(-a // b)


class Found(NamedTuple):
    """What :meth:`BlockManager.lookup` found cached of a request's first tokens: ``hit``
    tokens in ``blocks``, ``evictable`` of which are free (an allocation takes them out of
    the free queue)."""

    hit: int
    blocks: Sequence[int]
    evictable: int


#: Nothing cached.
NOTHING = Found(0, (), 0)


class BlockManager:
    """``num_blocks`` blocks of ``block_size`` tokens; ``env`` serves :meth:`reserve` waiters.

    ``lookup``, ``touch``, ``commit`` and ``preempt`` tell a prefix-caching manager
    (:class:`des.engine.prefix_cache.PrefixCache`) what requests' blocks hold; here,
    without caching, nothing is ever found and blocks are only counted.
    """

    __slots__ = ("env", "num_blocks", "block_size", "free", "waiters", "pending", "held", "window")

    #: Whether blocks keep their content for reuse (prefix caching).
    caching = False

    def __init__(self, num_blocks: int, block_size: int, env: simpy.Environment | None = None, window: int = 0):
        self.env = env
        #: Tokens the model's windowed layers attend over (0: none), for the schedulers' step
        #: shapes; the memory plan already set their KV aside (:func:`des.catalog.memory.plan_memory`).
        self.window = window
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.free = num_blocks
        self.waiters: deque[tuple[Request, int, simpy.Event]] = deque()  # reservations not yet served
        self.pending = 0  # blocks the reservations not yet served ask for
        self.held: dict[int, int] = {}  # request id -> blocks, of requests outside a running batch

    @property
    def used(self) -> int:
        return self.num_blocks - self.free

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold ``tokens`` tokens."""
        return ceil_div(tokens, self.block_size)

    def growth(self, computed: int, tokens: int) -> int:
        """Blocks a sequence holding ``computed`` tokens needs for ``tokens`` more."""
        bs = self.block_size
        return ceil_div(computed + tokens, bs) - ceil_div(computed, bs)

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

    def untake(self, n: int) -> None:
        """Return ``n`` blocks taken with :meth:`take` that were not filled (a speculative
        step's slots for rejected tokens): empty, they hold nothing to reuse."""
        self.give(n)

    # -- per request ----------------------------------------------------------------
    def hold(self, req_id: int, n: int) -> None:
        """Request ``req_id``, outside a running batch, holds ``n`` blocks (already taken)."""
        self.held[req_id] = n

    def release(self, req_id: int) -> None:
        """Request ``req_id`` gives back the blocks it holds (see :meth:`hold`)."""
        self._free(req_id, self.held.pop(req_id))

    def preempt(self, req: Request, computed: int) -> None:
        """``req``, running with ``computed`` tokens of KV, is preempted: its blocks are freed."""
        self._free(req.id, self.blocks_for(computed))

    def _free(self, req_id: int, n: int) -> None:
        """Request ``req_id`` gives back its ``n`` blocks."""
        self.give(n)

    def restart(self) -> None:
        """The engine stops and starts again later (an autoscaled instance): its cache comes
        back empty. Every block must have been given back."""
        if self.used or self.waiters:
            raise RuntimeError("an instance stopped while holding KV blocks")

    def lookup(self, req: Request, tokens: int) -> Found:
        """What of the first ``tokens`` tokens of ``req`` is cached here: nothing without caching."""
        return NOTHING

    def allocate(self, req_id: int, tokens: int, found: Found = NOTHING) -> bool:
        """The blocks of the first ``tokens`` tokens of request ``req_id``, running from now
        on: those it holds here, the cached ones ``found`` (by :meth:`lookup`), and new ones
        for the rest. False, and nothing done, when they do not fit."""
        has = self.held.get(req_id, 0)
        new = self.blocks_for(tokens) - has - len(found.blocks)
        if new + found.evictable > self.free:
            return False
        if has:
            del self.held[req_id]
        else:
            self.touch(req_id, found.blocks)
        self.take(new)
        return True

    def touch(self, req_id: int, blocks: Sequence[int]) -> None:
        """Request ``req_id`` starts using the cached ``blocks`` found by :meth:`lookup`."""

    def commit(self, req: Request, computed: int) -> None:
        """``req`` has ``computed`` tokens of KV: its full blocks may be reused (caching only)."""

    def reserve(self, req: Request, tokens: int) -> simpy.Event:
        """An event that fires once the blocks of ``req``'s first ``tokens`` tokens are
        held for it here, when the owner next calls :meth:`serve` with room for them
        (first come, first served). Its value is ``(blocks held, tokens found cached)``:
        with caching, the blocks of a cached prefix are reused, not taken anew.

        Raises ValueError if the tokens could never fit.
        """
        if self.blocks_for(tokens) > self.num_blocks:
            raise ValueError(f"{tokens} tokens can never be reserved in {self.num_blocks} blocks")
        if self.env is None:
            raise RuntimeError("this block manager has no environment to wait in")
        event = self.env.event()
        self.waiters.append((req, tokens, event))
        self.pending += self.blocks_for(tokens)
        return event

    @property
    def num_reserving(self) -> int:
        """Reservations not yet served."""
        return len(self.waiters)

    def serve(self) -> None:
        """Hold blocks for the waiting reservations, in order, while they fit."""
        waiters = self.waiters
        while waiters:
            req, tokens, event = waiters[0]
            found = self.lookup(req, tokens)
            if not self.allocate(req.id, tokens, found):
                return
            waiters.popleft()
            self.pending -= self.blocks_for(tokens)
            event.succeed((self.blocks_for(tokens), found.hit))
