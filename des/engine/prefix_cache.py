"""Automatic prefix caching of an instance's KV blocks, as vLLM's V1 KV cache manager does it.

(See ``vllm/v1/core/kv_cache_manager.py``, ``block_pool.py`` and ``kv_cache_utils.py``.)

- Blocks have reference counts. A request holds its blocks in sequence order.
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

What is modelled more cheaply than vLLM runs it, with the same outcome: only blocks
whose content another sequence could ever ask for carry a key and an id (*named*
blocks). A block nobody can hit — one not yet full, or one of a request whose
content is its own (no shared prefix, conversation or trace hashes) — is
*anonymous*: the free queue holds runs of anonymous blocks between named ones, in
the order they were freed, and an allocation takes whatever is at the head, evicting
the named blocks it takes. A request with content of its own is keyed only when it is
preempted, just before its blocks are freed, because only its own re-admission can
reuse them. Which anonymous block goes to whom is unobservable, so an allocation is
O(1) but for the named blocks it evicts.

``free`` counts the blocks in the free queue, cached ones included: an allocation of
``n`` blocks is possible when ``n`` plus the free blocks a cache hit would take out of
the queue does not exceed it. ``used + free = num_blocks``; of the free blocks,
``cached_free`` still hold reusable content.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import simpy

from des.engine.kvcache import NOTHING, BlockManager, Found
from des.engine.request import Request

#: An anonymous run in the free queue is ``(-count, 0)``; a named block ``(id, version)``.
Entry = tuple[int, int]


class PrefixCache(BlockManager):
    """``num_blocks`` blocks of ``block_size`` tokens with automatic prefix caching."""

    __slots__ = ("ref", "key", "version", "seq", "queue", "cached", "owned", "next_id", "cached_free")

    caching = True

    def __init__(self, num_blocks: int, block_size: int, env: simpy.Environment | None = None, window: int = 0):
        super().__init__(num_blocks, block_size, env, window)
        self.ref: dict[int, int] = {}  # named block -> holders
        self.key: dict[int, int] = {}  # named block -> content key
        self.version: dict[int, int] = {}  # named free block -> the number of its live entry in the queue
        self.seq = 0  # numbers queue entries, so that an entry left behind by a touch is known stale
        self.queue: deque[Entry] = deque([(-num_blocks, 0)])
        self.cached: dict[int, int] = {}  # content key -> named block
        self.owned: dict[int, list[int]] = {}  # request -> its named blocks, in sequence order
        self.next_id = 0
        self.cached_free = 0  # named blocks in the free queue

    def restart(self) -> None:
        """The engine stops: the content of its free blocks is lost with it."""
        super().restart()
        PrefixCache.__init__(self, self.num_blocks, self.block_size, self.env, self.window)

    # -- allocation ----------------------------------------------------------------------
    def take(self, n: int) -> None:
        """Take ``n`` blocks from the head of the free queue (they become anonymous)."""
        if n > self.free:
            raise RuntimeError(f"KV over-allocation: {n} blocks asked, {self.free} free")
        self.free -= n
        queue, version = self.queue, self.version
        while n > 0:
            b, v = queue[0]
            if b < 0:  # an anonymous run
                if -b > n:
                    queue[0] = (b + n, 0)
                    return
                queue.popleft()
                n += b
            else:
                queue.popleft()
                if version.get(b) == v:  # still free here (not touched since): evict it
                    del version[b]
                    self._evict(b)
                    n -= 1

    def untake(self, n: int) -> None:
        """Return ``n`` empty blocks: at the head of the free queue, taken again before any
        block that still holds content."""
        if n:
            self.free += n
            if self.free > self.num_blocks:
                raise RuntimeError("KV blocks returned twice")
            self.queue.appendleft((-n, 0))

    def _evict(self, b: int) -> None:
        k = self.key.pop(b)
        if self.cached.get(k) == b:
            del self.cached[k]
        del self.ref[b]
        self.cached_free -= 1

    def _free(self, req_id: int, n: int) -> None:
        """Request ``req_id`` gives back its ``n`` blocks: its anonymous tail first, then its
        named blocks last one first (each free once its last holder gives it back)."""
        named = self.owned.pop(req_id, None) or []
        anonymous = n - len(named)
        if anonymous < 0:
            raise RuntimeError(f"request {req_id} gives back {n} blocks but holds {len(named)} named ones")
        queue = self.queue
        if anonymous:  # its tail: freed first, so evicted first
            queue.append((-anonymous, 0))
        ref, version = self.ref, self.version
        freed = anonymous
        for b in reversed(named):
            r = ref[b] - 1
            ref[b] = r
            if r == 0:  # its last holder: the block is free, still holding its content
                self.seq += 1
                version[b] = self.seq
                queue.append((b, self.seq))
                freed += 1
            elif r < 0:
                raise RuntimeError(f"block {b} freed more often than taken")
        self.cached_free += freed - anonymous
        self.free += freed

    # -- content ---------------------------------------------------------------------------
    def lookup(self, req: Request, tokens: int) -> Found:
        """The longest cached prefix of full blocks of ``req``'s first ``tokens`` tokens (at
        most ``tokens - 1`` tokens); nothing for a request that holds blocks here already."""
        if tokens <= 1 or (req.segments is None and not req.preemptions) or req.id in self.held:
            return NOTHING  # content of its own, never preempted, or KV of its own here
        bs = self.block_size
        n = (tokens - 1) // bs
        keys = req.block_keys(bs).upto(n)
        cached, ref = self.cached, self.ref
        found: list[int] = []
        for i in range(n):
            b = cached.get(keys[i])
            if b is None:
                break
            found.append(b)
        evictable = sum(1 for b in found if ref[b] == 0)
        return Found(len(found) * bs, found, evictable)

    def touch(self, req_id: int, blocks: Sequence[int]) -> None:
        if not blocks:
            return
        ref, version = self.ref, self.version
        for b in blocks:
            if ref[b] == 0:  # leaves the free queue: its entry there goes stale
                del version[b]
                self.free -= 1
                self.cached_free -= 1
            ref[b] += 1
        if self.owned.get(req_id):
            raise RuntimeError(f"request {req_id} touches cached blocks while holding named ones")
        self.owned[req_id] = list(blocks)

    def commit(self, req: Request, computed: int) -> None:
        if req.segments is None:
            return  # nobody else can hit it: keyed only when preempted (see preempted)
        self._name(req, computed)

    def preempt(self, req: Request, computed: int) -> None:
        """``req`` is preempted with ``computed`` tokens of KV: its full blocks are keyed,
        so that its re-admission may find them, then freed."""
        self._name(req, computed)
        super().preempt(req, computed)

    def _name(self, req: Request, computed: int) -> None:
        full = computed // self.block_size
        mine = self.owned.setdefault(req.id, [])
        if full <= len(mine):
            return
        keys = req.block_keys(self.block_size).upto(full)
        cached, key, ref = self.cached, self.key, self.ref
        for i in range(len(mine), full):
            b = self.next_id
            self.next_id = b + 1
            k = keys[i]
            key[b] = k
            ref[b] = 1
            if k not in cached:
                cached[k] = b
            mine.append(b)
