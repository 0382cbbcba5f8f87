"""Automatic prefix caching of an instance's KV blocks, as vLLM's V1 KV cache manager does it.

(See ``vllm/v1/core/kv_cache_manager.py``, ``block_pool.py`` and ``kv_cache_utils.py``.)

- Blocks have ids and reference counts. A request holds its blocks in sequence order.
- Only *full* blocks are cached: once a block's ``block_size`` tokens are computed,
  it gets the key of its content (:mod:`des.engine.content`), chained from the start
  of the sequence, and enters the cache map ``key -> block``. (Two requests that
  compute the same block at once keep their own; the map keeps the first.)
- A block whose last holder frees it keeps its key and joins the *free queue*, in
  which the least recently freed block is evicted first; a request frees its blocks
  last one first, so a sequence's tail goes before its head. An allocation takes
  blocks from the head of the queue, evicting the cached ones it takes.
- At admission (and at re-admission after preemption) the longest prefix of full
  blocks found in the cache is reused, at most ``tokens - 1`` tokens, so that a fully
  cached prompt still computes its last token; the blocks found are *touched* (their
  count goes up, and those in the free queue leave it).

``free`` counts the blocks in the free queue, cached ones included: an allocation of
``n`` blocks is possible when ``n`` plus the free blocks a cache hit would take out of
the queue does not exceed it. ``used + free = num_blocks``; of the free blocks,
``cached_free`` still hold reusable content.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np
import simpy

from des.engine.kvcache import BlockManager
from des.engine.request import Request


class PrefixCache(BlockManager):
    """``num_blocks`` blocks of ``block_size`` tokens with automatic prefix caching."""

    __slots__ = ("ref", "key", "queue", "cached", "owned", "keyed", "hit_tokens", "query_tokens")

    caching = True

    def __init__(self, num_blocks: int, block_size: int, env: simpy.Environment | None = None):
        super().__init__(num_blocks, block_size, env)
        self.ref = [0] * num_blocks
        self.key: list[int | None] = [None] * num_blocks
        self.queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # free, evicted from the head
        self.cached: dict[int, int] = {}  # content key -> block id
        self.owned: dict[int, list[int]] = {}  # request id -> its blocks, in sequence order
        self.keyed: dict[int, int] = {}  # request id -> how many of its blocks carry their key
        self.hit_tokens = 0  # tokens found cached, over all lookups that admitted a request
        self.query_tokens = 0  # tokens those lookups asked for

    @property
    def cached_free(self) -> int:
        """Free blocks that still hold reusable content."""
        key = self.key
        return sum(1 for b in self.queue if key[b] is not None)

    # -- the per-request interface of BlockManager --------------------------------------
    def take_for(self, req_id: int, n: int) -> None:
        if n > self.free:
            raise RuntimeError(f"KV over-allocation: {n} blocks asked, {self.free} free")
        if n <= 0:
            return
        queue, key, cached, ref = self.queue, self.key, self.cached, self.ref
        mine = self.owned.setdefault(req_id, [])
        for _ in range(n):
            b, _ = queue.popitem(last=False)
            k = key[b]
            if k is not None:  # evict: the block's content is gone
                if cached.get(k) == b:
                    del cached[k]
                key[b] = None
            ref[b] = 1
            mine.append(b)
        self.free -= n

    def grow_rows(self, reqs: Sequence[Request], extra: np.ndarray) -> None:
        for i in np.flatnonzero(extra).tolist():
            self.take_for(reqs[i].id, int(extra[i]))

    def release(self, req_id: int, n: int) -> None:
        blocks = self.owned.pop(req_id, [])
        self.keyed.pop(req_id, None)
        if len(blocks) != n:
            raise RuntimeError(f"request {req_id} gives back {n} blocks but holds {len(blocks)}")
        ref, queue = self.ref, self.queue
        for b in reversed(blocks):  # the tail is evicted first
            ref[b] -= 1
            if ref[b] == 0:
                queue[b] = None
                self.free += 1
            elif ref[b] < 0:
                raise RuntimeError(f"block {b} freed more often than taken")

    def lookup(self, req: Request, tokens: int) -> tuple[int, list[int], int]:
        if tokens <= 1:
            return 0, [], 0
        bs = self.block_size
        keys = req.block_keys(bs).upto((tokens - 1) // bs)
        cached, ref = self.cached, self.ref
        found: list[int] = []
        for k in keys:
            b = cached.get(k)
            if b is None:
                break
            found.append(b)
        evictable = sum(1 for b in found if ref[b] == 0)
        return len(found) * bs, found, evictable

    def touch(self, req_id: int, blocks: list[int]) -> None:
        if not blocks:
            return
        ref, queue = self.ref, self.queue
        for b in blocks:
            if ref[b] == 0:
                del queue[b]
                self.free -= 1
            ref[b] += 1
        mine = self.owned.setdefault(req_id, [])
        if mine:
            raise RuntimeError(f"request {req_id} touches cached blocks while holding others")
        mine.extend(blocks)
        self.keyed[req_id] = len(blocks)

    def commit(self, req: Request, computed: int) -> None:
        full = computed // self.block_size
        done = self.keyed.get(req.id, 0)
        if full <= done:
            return
        mine = self.owned[req.id]
        keys = req.block_keys(self.block_size).upto(full)
        cached, key = self.cached, self.key
        for i in range(done, full):
            b = mine[i]
            k = keys[i]
            key[b] = k
            if k not in cached:
                cached[k] = b
        self.keyed[req.id] = full

    def count_lookup(self, hit: int, tokens: int) -> None:
        """Record a lookup that admitted a request: ``hit`` of ``tokens`` tokens were cached."""
        self.hit_tokens += hit
        self.query_tokens += tokens
