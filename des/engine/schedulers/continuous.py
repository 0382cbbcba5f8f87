"""Continuous (iteration-level) batching, as vLLM's V1 scheduler does it.

Before every step the batch is re-decided within a token budget
(``max_num_batched_tokens``), a sequence cap (``max_num_seqs``) and the free KV
blocks:

1. running requests first, oldest first: each gets the tokens it needs (one for a
   decode, the rest of its prompt for a prefill, cut to the budget when chunked
   prefill is on). When the KV blocks for them run out, the newest running request
   is preempted: its blocks are freed, its progress dropped (recomputed later, or
   found in the prefix cache) and it goes back to the front of the queue.
2. then, unless someone was preempted this step, waiting requests in FCFS order
   (preempted ones first) while the budget, the sequence cap and the KV blocks allow;
   the queue's head blocks the rest (no overtaking).

Constant work per step. The running set is split into the few requests still
computing their prompt (*prefilling*, in admission order) and the many *decoding*
one token per step. A decoding request's progress is not updated step by step: it
records the instance's decode-step counter ``tau`` at which its ``computed`` and
``generated`` were last written (its *base*), and is ``tau - base`` tokens further
on. The decoding set keeps running aggregates: its size, the sum of its contexts,
how many of its members cross a KV block boundary at each step (by the residue of
``base - computed`` modulo the block size) and, by step, who finishes then. A step in
which every running request gets what it needs (the common case) therefore costs a
handful of operations plus the prefilling requests; only a step short of budget or
blocks walks the running set in order, as vLLM does. Every request's times are
exactly those of a step-by-step walk (the old array scheduler, kept in the tests as
an oracle, checks it).

On a ``prefill`` instance of disaggregated serving a request leaves once it emits its
first token. On a ``decode`` instance it arrives holding its transferred prompt's KV
blocks (``add(req, blocks)``) in a queue of its own, *ready*, admitted before the
ordinary waiting queue (which there holds only preempted requests): a ready request
needs no memory it does not hold but for its next token, and admitting it first is
what guarantees progress (a preempted request at the head of the queue could
otherwise wait forever for blocks held by ready requests behind it). The KV links'
reservations of blocks for prompts still to come are served last, at step
boundaries, from what the running, ready and waiting requests leave, and not at all
while a preempted request waits: new transfers neither starve the preempted nor take
the blocks the requests already here need to grow. Blocks of requests that left stay
held, by request id, until ``free``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from pydantic import Field

from des.cost.base import BatchShape
from des.engine.kvcache import BlockManager, CacheConfig, ceil_div
from des.engine.plan import Plan, PlanContext, colocated
from des.engine.request import Request
from des.engine.schedulers.base import Role, Step, held_tokens, length_rejection


class ContinuousSettings(CacheConfig):
    """vLLM-style engine arguments of a continuous-batching instance. Sizes in tokens."""

    max_num_seqs: int = Field(128, ge=1)
    max_num_batched_tokens: int = Field(2048, ge=1)
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True

    @property
    def max_batch(self) -> int:
        """Most sequences in one step."""
        return self.max_num_seqs

    @property
    def profile_tokens(self) -> int:
        """Tokens of the largest step, for the activation memory of the KV plan."""
        return self.max_num_batched_tokens

    @property
    def token_budget(self) -> int | None:
        """Most tokens one step may compute."""
        return self.max_num_batched_tokens

    @property
    def prefix_caching(self) -> bool:
        return self.enable_prefix_caching

    def build(self, kv: BlockManager, max_model_len: int, role: Role = "colocated") -> ContinuousScheduler:
        return ContinuousScheduler(self, kv, self.max_model_len or max_model_len, role)


class ContinuousConfig(ContinuousSettings):
    """Continuous batching on ``cluster.replicas`` colocated instances."""

    kind: Literal["continuous"] = "continuous"

    def plan(self, ctx: PlanContext) -> Plan:
        """One pool of ``cluster.replicas`` instances serving whole requests."""
        return colocated(self, ctx)


#: Where a request stands on the instance running it.
PREFILLING, DECODING = 1, 2


@dataclass(slots=True)
class Batch:
    """What a step computes beyond one token for each decoding request: the tokens of
    each prefilling request that gets some, and the decoding requests left without."""

    prefill: list[tuple[Request, int]] = field(default_factory=list)
    starved: list[Request] = field(default_factory=list)


class ContinuousScheduler:
    """Iteration-level scheduler over a paged KV cache."""

    def __init__(self, cfg: ContinuousSettings, kv: BlockManager, max_model_len: int, role: Role = "colocated"):
        self.kv = kv
        self.block_size = kv.block_size
        self.max_seqs = cfg.max_num_seqs
        self.max_tokens = cfg.max_num_batched_tokens
        self.chunked = cfg.enable_chunked_prefill
        self.max_model_len = max_model_len
        self.role = role
        self.leaves_after_prefill = role == "prefill"
        self.waiting: deque[Request] = deque()
        self.ready: deque[Request] = deque()  # requests holding their KV, admitted first
        self.held: dict[int, int] = {}  # request id -> KV blocks, for requests not running
        self.unrecorded_preemptions = 0  # preemptions of a batch that came out empty
        self.step_cached = 0  # tokens found in the prefix cache by this step's admissions
        # the running set: every request in admission order, and the prefilling ones
        self.running: dict[Request, None] = {}
        self.prefilling: dict[Request, None] = {}
        self.admissions = 0  # numbers admissions, to release in admission order
        # the decoding set, by aggregates (see the module docstring)
        self.tau = 0
        self.decoders = 0
        self.context = 0  # sum over decoders of (computed at base - base)
        self.crossing = [0] * self.block_size  # decoders by (base - computed at base) mod block size
        self.finishing: dict[int, list[Request]] = {}  # tau -> decoders finishing when it is reached
        self.shared: list[dict[Request, None]] = [{} for _ in range(self.block_size)]  # cached content, by residue
        self.sharing = 0  # running requests whose content others may share

    # -- protocol -------------------------------------------------------------------
    def rejection(self, req: Request) -> str | None:
        reason = length_rejection(req, self.max_model_len, self.kv, self.role)
        if reason is None and not self.chunked and held_tokens(req, self.role) > self.max_tokens:
            # a preempted request must recompute prompt + generated tokens in one step
            reason = "exceeds_token_budget"
        return reason

    def add(self, req: Request, blocks: int = 0) -> None:
        if blocks:
            self.held[req.id] = blocks
            self.ready.append(req)
            if self.kv.caching:  # a transferred prompt's full blocks may serve later prompts here
                self.kv.commit(req, req.computed)
        else:
            self.waiting.append(req)

    def free(self, req_id: int) -> None:
        self.kv.release(req_id, self.held.pop(req_id))

    def num_waiting(self) -> int:
        return len(self.waiting) + len(self.ready)

    def wakeup_time(self) -> float | None:
        return None

    def sync(self) -> None:
        """Write every decoding request's progress onto it (at the end of a run)."""
        for req in self.running:
            if req.phase == DECODING:
                self._materialize(req)

    # -- the decoding set ----------------------------------------------------------------
    def _materialize(self, req: Request) -> None:
        """Write a decoding request's progress at the current ``tau`` (aggregates unchanged)."""
        d = self.tau - req.base
        if d:
            req.computed += d
            req.generated += d
            req.base = self.tau

    def _start_decoding(self, req: Request) -> None:
        """``req`` (progress written, needing one token a step from now on) joins the decoders."""
        tau = self.tau
        req.phase = DECODING
        req.base = tau
        self.decoders += 1
        self.context += req.computed - tau
        r = (tau - req.computed) % self.block_size
        self.crossing[r] += 1
        end = tau + req.output_tokens - req.generated
        bucket = self.finishing.get(end)
        if bucket is None:
            self.finishing[end] = [req]
        else:
            bucket.append(req)
        if req.segments is not None and self.kv.caching:
            self.shared[r][req] = None

    def _stop_decoding(self, req: Request) -> None:
        """``req`` (progress written) leaves the decoders; its finishing entry goes stale."""
        self.decoders -= 1
        self.context -= req.computed - req.base
        r = (req.base - req.computed) % self.block_size
        self.crossing[r] -= 1
        if req.segments is not None and self.kv.caching:
            self.shared[r].pop(req, None)
        req.phase = 0

    def _leave(self, req: Request) -> None:
        """``req`` leaves the running set (finished, done here, or preempted)."""
        if req.phase == DECODING:
            self._stop_decoding(req)
        else:
            self.prefilling.pop(req, None)
        req.phase = 0
        req.owner = None
        del self.running[req]
        if req.segments is not None:
            self.sharing -= 1

    def _preempt_newest(self) -> Request:
        req = next(reversed(self.running))
        if req.phase == DECODING:
            self._materialize(req)
        self._leave(req)
        blocks = ceil_div(req.computed, self.block_size)
        self.kv.preempted(req, req.computed)
        self.kv.release(req.id, blocks)
        req.computed = 0
        req.preemptions += 1
        self.waiting.appendleft(req)
        return req

    # -- scheduling -----------------------------------------------------------------
    def schedule(self, now: float) -> Step[Batch] | None:
        self.step_cached = 0
        return self._schedule(now)

    def _schedule(self, now: float) -> Step[Batch] | None:
        kv, bs = self.kv, self.block_size
        budget = self.max_tokens
        batch = Batch()
        preempted = 0
        need = self.decoders
        for req in self.prefilling:
            need += req.prompt_tokens + req.generated - req.computed
        if need <= budget:  # everyone gets what it needs
            blocks = self.crossing[self.tau % bs]
            for req in self.prefilling:
                c = req.computed
                k = req.prompt_tokens + req.generated - c
                blocks += ceil_div(c + k, bs) - ceil_div(c, bs)
                batch.prefill.append((req, k))
            if blocks <= kv.free:
                kv.take(blocks)
                budget -= need
            else:
                budget, preempted = self._ordered(batch, budget)
        elif self.running:
            budget, preempted = self._ordered(batch, budget)
        if not preempted:
            if self.ready:
                budget = self._admit(self.ready, now, budget, batch)
            if self.waiting and budget > 0:
                budget = self._admit(self.waiting, now, budget, batch)
        if kv.waiters and not self.waiting:
            kv.serve()  # what is left goes to the links' reservations
        tokens = self.max_tokens - budget
        if tokens == 0:
            if not preempted:
                return None
            # Preemption emptied the batch (on a decode instance, blocks held by ready
            # requests can leave even the oldest running request short): as the engine's
            # next iteration would, decide again, now admitting; the next step formed
            # counts these preemptions.
            self.unrecorded_preemptions += preempted
            return self._schedule(now)
        if self.unrecorded_preemptions:
            preempted += self.unrecorded_preemptions
            self.unrecorded_preemptions = 0
        shape = self._shape(batch)
        step = Step(shape, batch, shape.num_seqs, shape.num_seqs, preempted, shape.num_emitting)
        step.cached_tokens = self.step_cached
        return step

    def _ordered(self, batch: Batch, budget: int) -> tuple[int, int]:
        """The running set walked in admission order, as vLLM does when the budget or the
        blocks do not reach everyone: each request gets what it needs, cut to the budget
        left (without chunked prefill: all or nothing, and nobody after a request left
        out); then blocks are allocated in order, preempting the newest request while
        they run out. Fills ``batch``; returns the budget left and the preemptions."""
        kv, bs = self.kv, self.block_size
        batch.prefill.clear()
        plan: list[tuple[Request, int]] = []
        left = budget
        for req in self.running:
            if req.phase == DECODING:
                self._materialize(req)
            n = req.prompt_tokens + req.generated - req.computed
            if self.chunked:
                k = n if n <= left else left
            else:
                k = n if n <= left and (not plan or plan[-1][1]) else 0
            plan.append((req, k))
            left -= k
        blocks = 0
        for req, k in plan:
            c = req.computed
            blocks += ceil_div(c + k, bs) - ceil_div(c, bs)
        preempted = 0
        if blocks <= kv.free:
            kv.take(blocks)
            scheduled = plan
        else:  # allocate in order, preempting the newest when blocks run out
            scheduled = []
            for req, k in plan:
                if k == 0 or req.owner is not self:
                    break
                c = req.computed
                more = ceil_div(c + k, bs) - ceil_div(c, bs)
                victim = None
                while more > kv.free and victim is not req:
                    victim = self._preempt_newest()
                    preempted += 1
                if victim is req:
                    break
                kv.take(more)
                scheduled.append((req, k))
        done = set()
        for req, k in scheduled:
            if k == 0:
                continue
            budget -= k
            done.add(req)
            if req.phase != DECODING:
                batch.prefill.append((req, k))
        for req in self.running:
            if req.phase == DECODING and req not in done:
                batch.starved.append(req)
        return budget, preempted

    def _admit(self, waiting: deque[Request], now: float, budget: int, batch: Batch) -> int:
        """Admit requests from the head of ``waiting`` while budget, sequence cap and blocks
        allow (the head blocks the rest); adds them to ``batch``; returns the budget left."""
        kv, bs, held = self.kv, self.block_size, self.held
        while waiting and budget > 0 and len(self.running) < self.max_seqs:
            req = waiting[0]
            tokens = req.prompt_tokens + req.generated  # KV it needs before its next token
            has = held.get(req.id, 0)
            computed, hit, found, evictable = req.computed, 0, NO_BLOCKS, 0
            if kv.caching and not has:  # holds no KV here: reuse the longest cached prefix
                hit, found, evictable = kv.lookup(req, tokens)
                computed = max(computed, hit)
            n = tokens - computed
            k = n if n <= budget else budget
            if k < n and not self.chunked:
                break
            blocks = ceil_div(computed + k, bs) - has - len(found)
            if blocks + evictable > kv.free:
                break
            waiting.popleft()
            if has:
                del held[req.id]
            if kv.caching and not has:
                kv.touch(req.id, found)
                kv.count_lookup(hit, tokens)
                req.computed = computed
                req.cached_tokens += hit
                self.step_cached += hit
            kv.take(blocks)
            if req.scheduled_time != req.scheduled_time:  # NaN: first time scheduled
                req.scheduled_time = now
            self.running[req] = None
            if req.segments is not None:
                self.sharing += 1
            req.owner = self
            req.admitted = self.admissions
            self.admissions += 1
            if req.generated and n == 1:  # a decode: it joins the decoders at once
                self._start_decoding(req)
            else:
                req.phase = PREFILLING
                self.prefilling[req] = None
                batch.prefill.append((req, k))
            budget -= k
        return budget

    def _shape(self, batch: Batch) -> BatchShape:
        """The step's aggregates: the decoders not starved, then the prefill chunks."""
        n = self.decoders - len(batch.starved)
        context = self.context + self.decoders * self.tau
        for req in batch.starved:
            context -= req.computed  # written by the ordered walk
        shape = BatchShape.decodes(n, context) if n else BatchShape()
        for req, k in batch.prefill:
            c = req.computed
            shape.add_chunk(c, k, k == req.prompt_tokens + req.generated - c)
        return shape

    def finish_step(self, step: Step[Batch], now: float) -> list[Request]:
        batch, kv = step.items, self.kv
        tau = self.tau = self.tau + 1
        for req in batch.starved:  # they did not move: from now on a step behind the others
            self._stop_decoding(req)
            self._start_decoding(req)
        if self.sharing and kv.caching:
            self._commit(batch, tau)
        done = []
        bucket = self.finishing.pop(tau, None)
        if bucket:
            for req in bucket:
                if req.owner is self and req.phase == DECODING and req.base + req.output_tokens - req.generated == tau:
                    self._materialize(req)
                    done.append(req)
        for req, k in batch.prefill:
            c = req.computed = req.computed + k
            g = req.generated
            if c != req.prompt_tokens + g:  # a chunk short of the prompt's end: nothing emitted
                if g and c == req.prompt_tokens + g - 1:  # a recomputation one token short: a decode now
                    del self.prefilling[req]
                    self._start_decoding(req)
                continue
            g = req.generated = g + 1
            if g == 1:
                req.first_token_time = now
            if g == req.output_tokens or self.leaves_after_prefill:
                done.append(req)
            else:  # emitted; one token a step from now on
                del self.prefilling[req]
                self._start_decoding(req)
        if not done:
            return []
        if len(done) > 1:
            done.sort(key=_admitted)  # in admission order (by id for prefill instances' transfers)
            if self.leaves_after_prefill:
                done.sort(key=_by_id)
        held, bs = self.held, self.block_size
        for req in done:
            if req.generated == req.output_tokens:
                req.finish_time = now
            self._leave(req)
            held[req.id] = ceil_div(req.computed, bs)
        return done

    def _commit(self, batch: Batch, tau: int) -> None:
        """Key the blocks this step filled, of requests whose content others may share, in
        admission order (the first to fill a block of some content is the one cached)."""
        full: list[tuple[int, Request, int]] = []
        for req in self.shared[tau % self.block_size]:  # decoders whose last block just filled
            self._materialize(req)
            full.append((req.admitted, req, req.computed))
        for req, k in batch.prefill:
            if req.segments is not None:
                full.append((req.admitted, req, req.computed + k))
        if len(full) > 1:
            full.sort(key=_first)
        commit = self.kv.commit
        for _, req, computed in full:
            commit(req, computed)


def _first(item: tuple[int, Request, int]) -> int:
    return item[0]


def _by_id(req: Request) -> int:
    return req.id


def _admitted(req: Request) -> int:
    return req.admitted


NO_BLOCKS: list[int] = []
