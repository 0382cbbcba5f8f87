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

Under vLLM V1's async scheduling (``cost_model.async_scheduling``, on by default since
vLLM 0.11) the engine core forms the batch of step N+1 while step N runs: with a batch
queue of two, ``EngineCore.step_with_batch_queue`` (``vllm/v1/engine/core.py``)
schedules N+1 and launches it, and only then blocks on N's output; the busy loop hands
new requests to the scheduler (``_process_input_queue``) between two such calls. So
step N+1 admits only the requests that reached the scheduler by about the start of
step N (des neglects the CPU time of ``update_from_output(N-1)`` before it, well under
a millisecond), a later one waits for N+2, and an idle engine schedules a request at
once; a batch that comes out empty is followed at once by the next. The instance says
when the batch was formed (``schedule(now, seen)``); the waiting queue is in the order
requests reached the scheduler (preempted ones, which reached it long before, first),
so admission stops at the first request too late. What vLLM's scheduler does for
N+1 otherwise matches what des decides at N's end: it advances ``num_computed_tokens``
when it schedules (``_update_after_schedule``; ``AsyncScheduler`` adds an output
placeholder), so a prompt completed in N decodes in N+1 and its blocks and
preemptions are decided as des decides them; a request whose last token by length
(``max_tokens``) comes out of N is not scheduled into N+1 (``Scheduler.schedule``:
"Async scheduling: Avoid scheduling an extra step"), so no placeholder token is wasted
on des's requests, whose output lengths are known. Not modelled: a request that stops
on EOS or a stop string does get one wasted decode in N+1, and a request finishing in
N frees its KV blocks and its place under ``max_num_seqs`` only in
``update_from_output(N)``, after N+1 was formed (des frees them for N+1).

Constant work per step. The running set is split into the few requests still
computing their prompt (*prefilling*, in admission order) and the many *decoding* one
token per step, kept as running aggregates (:mod:`des.engine.schedulers.decoding`). A
step in which every running request gets what it needs (the common case) therefore
costs a handful of operations plus the prefilling requests; only a step short of
budget or blocks walks the running set in order, as vLLM does. Every request's times
are exactly those of a step-by-step walk (the old array scheduler, kept in the tests
as an oracle, checks it). Blocks go through the instance's block manager as through
vLLM's KV cache manager: ``lookup`` then ``allocate`` at admission, a bulk ``take``
for the running set's growth, ``hold`` and ``release`` for requests outside a batch.

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

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import Field

from des.cost.base import BatchShape
from des.engine.itl import ItlLog
from des.engine.kvcache import BlockManager, CacheConfig
from des.engine.policy import MAX_BATCH, Role, Step, length_rejection
from des.engine.request import Request
from des.engine.schedulers.decoding import DECODING, LEFT, DecodingSet, Seq


class ContinuousBatching(CacheConfig):
    """vLLM-style engine arguments of continuous batching, as an engine runs them. Sizes in
    tokens. The defaults are vLLM's ``SchedulerConfig`` dataclass's (128 sequences, 2048
    tokens), which no vLLM entry point runs: a scenario's unset values are filled by
    :mod:`des.engine.defaults` (``vllm serve``'s or the ``LLM`` class's, by GPU)."""

    max_num_seqs: int = Field(128, ge=1, le=MAX_BATCH)
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


@dataclass(slots=True)
class Batch:
    """What a step computes beyond one token for each decoding sequence: the tokens of
    each prefilling sequence that gets some, and the decoding sequences left without."""

    prefill: list[tuple[Seq, int]] = field(default_factory=list)
    starved: list[Seq] = field(default_factory=list)


class ContinuousScheduler:
    """Iteration-level scheduler over a paged KV cache."""

    def __init__(self, cfg: ContinuousBatching, kv: BlockManager, max_model_len: int, role: Role = "colocated"):
        self.kv = kv
        self.max_num_seqs = cfg.max_num_seqs
        self.max_num_batched_tokens = cfg.max_num_batched_tokens
        self.chunked = cfg.enable_chunked_prefill
        self.max_model_len = max_model_len
        self.role = role
        self.leaves_after_prefill = role == "prefill"
        self.waiting: deque[Request] = deque()
        self.ready: deque[Request] = deque()  # requests holding their KV, admitted first
        self.unrecorded_preemptions = 0  # preemptions of a batch that came out empty
        self.step_cached = 0  # tokens found in the prefix cache by this step's admissions
        # the running set: every sequence in admission order, the prefilling ones, the decoding ones
        self.running: dict[Seq, None] = {}
        self.prefilling: dict[Seq, None] = {}
        self.decoding = DecodingSet(kv.block_size, kv.caching, kv.window)
        self.admissions = 0  # numbers admissions, to release in admission order
        self.sharing = 0  # running requests whose content others may share
        self.on_first_schedule: Callable[[Request], None] | None = None  # told of each request's first admission
        self.itl = ItlLog()  # the gaps between tokens this instance's requests receive
        self._end, self._emitting = self.itl.end.append, self.itl.weight.append
        self.fresh: list[Seq] = []  # decoders whose next token is their second (their first came a step before)
        self.irregular: list[Seq] = []  # decoders whose next token's gap is not the time since the last step

    # -- protocol -------------------------------------------------------------------
    def rejection(self, req: Request) -> str | None:
        # without chunked prefill the scenario holds max_num_batched_tokens >= max_model_len
        # (as vLLM refuses to start otherwise), so a request that fits the context fits a step
        return length_rejection(req, self.max_model_len, self.kv, self.role)

    def add(self, req: Request, blocks: int = 0) -> None:
        if blocks:
            self.kv.hold(req.id, blocks)
            self.ready.append(req)
            if self.kv.caching:  # a transferred prompt's full blocks may serve later prompts here
                self.kv.commit(req, req.computed)
        else:
            self.waiting.append(req)

    def free(self, req_id: int) -> None:
        self.kv.release(req_id)

    def num_waiting(self) -> int:
        return len(self.waiting) + len(self.ready)

    def wakeup_time(self) -> float | None:
        return None

    def gap_logs(self) -> list[ItlLog]:
        return [self.itl]

    def sync(self) -> None:
        """Write every decoding request's progress onto it (at the end of a run)."""
        for seq in self.running:
            if seq.phase is DECODING:
                self.decoding.materialize(seq)

    def _leave(self, seq: Seq) -> None:
        """``seq`` leaves the running set (finished, done here, or preempted)."""
        if seq.phase is DECODING:
            self.decoding.stop(seq)
        else:
            self.prefilling.pop(seq, None)
        seq.phase = LEFT
        del self.running[seq]
        if seq.req.segments is not None:
            self.sharing -= 1

    def _preempt_newest(self) -> Seq:
        seq = next(reversed(self.running))
        if seq.phase is DECODING:
            self.decoding.materialize(seq)
            # its last token: the previous step's, unless it was starved or had just joined
            seq.req.last_token_time = seq.last_emit if seq.last_emit == seq.last_emit else self.itl.last_end
        self._leave(seq)
        req = seq.req
        self.kv.preempt(req, req.computed)
        req.preempt()
        self.waiting.appendleft(req)
        return seq

    # -- scheduling -----------------------------------------------------------------
    def schedule(self, now: float, seen: float | None = None) -> Step[Batch] | None:
        """The step starting at ``now``; its batch formed at ``seen`` (None: at ``now``)
        admits only requests that reached the scheduler by then (async scheduling, see the
        module's docstring). A batch formed then that comes out empty is formed again at
        ``now``: the engine's next schedule() follows an empty batch at once."""
        self.step_cached = 0
        if seen is not None and seen < now:
            step = self._schedule(now, seen)
            if step is not None:
                return step
        return self._schedule(now, now)

    def _schedule(self, now: float, seen: float) -> Step[Batch] | None:
        kv = self.kv
        budget = self.max_num_batched_tokens
        batch = Batch()
        preempted = 0
        if self.running:
            budget, preempted = self._schedule_running(batch, budget)
        if not preempted:
            if self.ready:
                budget = self._admit(self.ready, now, seen, budget, batch)
            if self.waiting and budget > 0:
                budget = self._admit(self.waiting, now, seen, budget, batch)
        if kv.waiters and not self.waiting:
            kv.serve()  # what is left goes to the links' reservations
        tokens = self.max_num_batched_tokens - budget
        if tokens == 0:
            if not preempted:
                return None
            # Preemption emptied the batch (on a decode instance, blocks held by ready
            # requests can leave even the oldest running request short): as the engine's
            # next iteration would, decide again, now admitting; the next step formed
            # counts these preemptions.
            self.unrecorded_preemptions += preempted
            return self._schedule(now, seen)
        if self.unrecorded_preemptions:
            preempted += self.unrecorded_preemptions
            self.unrecorded_preemptions = 0
        shape = self._shape(batch)
        step = Step(shape, batch, shape.num_seqs, shape.num_seqs, preempted, shape.num_emitting)
        step.cached_tokens = self.step_cached
        return step

    def _schedule_running(self, batch: Batch, budget: int) -> tuple[int, int]:
        """The running set's tokens this step: what each needs, when the budget and the
        blocks reach everyone (the common case: a handful of operations plus the
        prefilling sequences), else as the ordered walk decides. Fills ``batch``; returns
        the budget left and the preemptions."""
        left = self._everyone(batch, budget, self.decoding.size, self.decoding.new_blocks)
        if left is not None:
            return left, 0
        return self._ordered(batch, budget)

    def _everyone(self, batch: Batch, budget: int, need: int, blocks: int) -> int | None:
        """The common case of :meth:`_schedule_running`: the decoding sequences ask for ``need``
        tokens and ``blocks`` new KV blocks, every prefilling sequence for the rest of its
        prompt; when the budget and the free blocks reach them all, take the blocks, fill
        ``batch`` and return the budget left, else None (the ordered walk decides)."""
        kv = self.kv
        for seq in self.prefilling:
            req = seq.req
            need += req.prompt_tokens + req.generated - req.computed
        if need > budget:
            return None
        growth, prefill = kv.growth, batch.prefill
        for seq in self.prefilling:
            req = seq.req
            c = req.computed
            k = req.prompt_tokens + req.generated - c
            blocks += growth(c, k)
            prefill.append((seq, k))
        if blocks > kv.free:
            return None
        kv.take(blocks)
        return budget - need

    def _ordered(self, batch: Batch, budget: int) -> tuple[int, int]:
        """The running set walked in admission order, as vLLM does when the budget or the
        blocks do not reach everyone: each sequence gets what it needs, cut to the budget
        left (without chunked prefill: all or nothing, and nobody after a sequence left
        out); then blocks are allocated in order, preempting the newest sequence while
        they run out. Fills ``batch``; returns the budget left and the preemptions."""
        batch.prefill.clear()
        plan = self._plan(budget)
        preempted = 0
        kv = self.kv
        blocks = self._plan_blocks(plan)
        if blocks <= kv.free:
            kv.take(blocks)
            scheduled = plan
        else:
            scheduled, preempted = self._allocate_preempting(plan)
        done = set()
        for seq, k in scheduled:
            if k == 0:
                continue
            budget -= k
            done.add(seq)
            if seq.phase is not DECODING:
                batch.prefill.append((seq, k))
        for seq in self.running:
            if seq.phase is DECODING and seq not in done:
                batch.starved.append(seq)
        return budget, preempted

    def _plan(self, budget: int) -> list[tuple[Seq, int]]:
        """The tokens of each running sequence, in admission order, within ``budget``."""
        plan: list[tuple[Seq, int]] = []
        left = budget
        wants, chunked = self._wants, self.chunked
        for seq in self.running:
            n, whole = wants(seq)
            if chunked or not whole:
                k = n if n <= left else left
            else:
                k = n if n <= left and (not plan or plan[-1][1]) else 0
            plan.append((seq, k))
            left -= k
        return plan

    def _wants(self, seq: Seq) -> tuple[int, bool]:
        """Tokens ``seq`` computes this step if the budget allows, and whether they go all or
        nothing without chunked prefill (here every sequence's do)."""
        if seq.phase is DECODING:
            self.decoding.materialize(seq)
        req = seq.req
        return req.prompt_tokens + req.generated - req.computed, True

    def _plan_blocks(self, plan: list[tuple[Seq, int]]) -> int:
        """KV blocks the tokens of ``plan`` need."""
        blocks = self._blocks
        return sum(blocks(seq, k) for seq, k in plan)

    def _blocks(self, seq: Seq, k: int) -> int:
        """KV blocks ``seq`` needs for ``k`` more tokens."""
        return self.kv.growth(seq.req.computed, k)

    def _allocate_preempting(self, plan: list[tuple[Seq, int]]) -> tuple[list[tuple[Seq, int]], int]:
        """Blocks for ``plan`` in order, preempting the newest sequence while they run out;
        the sequences scheduled and the preemptions."""
        kv = self.kv
        scheduled = []
        preempted = 0
        for seq, k in plan:
            if k == 0 or seq.phase is LEFT:  # nothing to do, or preempted for someone older
                break
            more = self._blocks(seq, k)
            victim = None
            while more > kv.free and victim is not seq:
                victim = self._preempt_newest()
                preempted += 1
            if victim is seq:
                break
            kv.take(more)
            scheduled.append((seq, k))
        return scheduled, preempted

    def _admit(self, waiting: deque[Request], now: float, seen: float, budget: int, batch: Batch) -> int:
        """Admit requests from the head of ``waiting`` that reached the scheduler by ``seen``
        while budget, sequence cap and blocks allow (the head blocks the rest: the queue is
        in the order requests reached it, preempted ones first); adds them to ``batch``;
        returns the budget left."""
        kv = self.kv
        while waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            req = waiting[0]
            if req.queued_time > seen:  # reached it after the batch was formed
                break
            tokens = req.prompt_tokens + req.generated  # KV it needs before its next token
            found = kv.lookup(req, tokens)  # a cached prefix to reuse (none if it holds KV here)
            computed = max(req.computed, found.hit)
            n = tokens - computed
            k = n if n <= budget else budget
            if k < n and not self.chunked:
                break
            if not kv.allocate(req.id, computed + k, found):
                break
            waiting.popleft()
            req.computed = computed
            req.cached_tokens += found.hit
            self.step_cached += found.hit
            if req.scheduled_time != req.scheduled_time:  # NaN: first time scheduled
                req.scheduled_time = now
                if self.on_first_schedule is not None:
                    self.on_first_schedule(req)
            seq = Seq(req, self.admissions)
            self.admissions += 1
            self.running[seq] = None
            if req.segments is not None:
                self.sharing += 1
            if req.generated and n == 1:  # a decode: it joins the decoders at once
                self.decoding.start(seq)
                # its last token came before it got here (a prefill instance's, or before a preemption)
                last = req.last_token_time
                self._irregular(seq, last if last == last else req.first_token_time)
            else:
                self.prefilling[seq] = None
                batch.prefill.append((seq, k))
            budget -= k
        return budget

    def _shape(self, batch: Batch) -> BatchShape:
        """The step's aggregates: the decoders not starved, then the prefill chunks."""
        dec = self.decoding
        n = dec.size - len(batch.starved)
        context = dec.total_context
        for seq in batch.starved:
            context -= seq.req.computed  # written by the ordered walk
        window = self.kv.window
        if window:
            cap = window - 1
            wctx = dec.window_context
            for seq in batch.starved:
                c = seq.req.computed
                wctx -= c if c < cap else cap
            shape = BatchShape.decodes(n, context, window, wctx) if n else BatchShape(window=window)
        else:
            shape = BatchShape.decodes(n, context) if n else BatchShape()
        for seq, k in batch.prefill:
            req = seq.req
            c = req.computed
            shape.add_chunk(c, k, k == req.prompt_tokens + req.generated - c)
        return shape

    def _irregular(self, seq: Seq, last: float) -> None:
        """``seq`` decodes from now on, its last token at ``last``: the gap its next token
        ends is recorded on its own (:meth:`_irregular_gaps`)."""
        if seq.last_emit != seq.last_emit:
            self.irregular.append(seq)
        seq.last_emit = last

    def _irregular_gaps(self, starved: list[Seq], now: float) -> int:
        """Record the gaps the irregular decoders' tokens end at ``now`` (after a join, a
        starved step, a preemption: :mod:`des.engine.itl`), one each; the starved ones wait
        for their next token. Returns how many emitted."""
        last = self.itl.last_end
        for seq in starved:  # no token this step: the next one's gap runs from their last
            if seq.last_emit != seq.last_emit:
                seq.last_emit = last
                self.irregular.append(seq)
        keep = []
        itl, emitted = self.itl, 0
        for seq in self.irregular:
            if seq.phase is not DECODING:  # left (done, or preempted: its request keeps its last token)
                seq.last_emit = math.nan
            elif seq in starved:
                keep.append(seq)
            else:
                itl.add(now, now - seq.last_emit)
                seq.last_emit = math.nan
                emitted += 1
                req = seq.req
                if req.second_token_time != req.second_token_time:
                    req.second_token_time = now
        self.irregular = keep
        return emitted

    def finish_step(self, step: Step[Batch], now: float) -> list[Request]:
        batch, kv, dec, shape = step.items, self.kv, self.decoding, step.shape
        # the gaps the decoders' tokens end (des.engine.itl): theirs since the last step, but the irregular ones
        emitting = shape.decode_tokens - shape.spec_tokens
        starved = batch.starved
        if starved or self.irregular:
            emitting -= self._irregular_gaps(starved, now)
        fresh = self.fresh
        if fresh:  # their second tokens (a starved one's comes later, its gap then on its own)
            for seq in fresh:
                if seq.phase is DECODING and not (starved and seq in starved):
                    seq.req.second_token_time = now
            fresh.clear()
        self._end(now)
        self._emitting(emitting)
        done = dec.advance(batch.starved)
        if self.sharing and kv.caching:
            self._commit(batch)
        if batch.prefill:
            self._finish_prefills(batch, now, done)
        if not done:
            return []
        if len(done) > 1:
            done.sort(key=_admitted)  # in admission order (by id for prefill instances' transfers)
            if self.leaves_after_prefill:
                done.sort(key=_by_id)
        released = []
        for seq in done:
            req = seq.req
            if req.generated == req.output_tokens:
                req.finish_time = now
            self._leave(seq)
            kv.hold(req.id, kv.blocks_for(req.computed))
            released.append(req)
        return released

    def _finish_prefills(self, batch: Batch, now: float, done: list[Seq]) -> None:
        """Apply the step's prefill chunks at its end ``now``: a prompt completed emits a
        token, then its sequence decodes, or joins ``done`` (finished, or leaving a prefill
        instance)."""
        dec = self.decoding
        for seq, k in batch.prefill:
            req = seq.req
            c = req.computed = req.computed + k
            g = req.generated
            if c != req.prompt_tokens + g:  # a chunk short of the prompt's end: nothing emitted
                if g and c == req.prompt_tokens + g - 1:  # a recomputation one token short: a decode now
                    del self.prefilling[seq]
                    dec.start(seq)
                    self._irregular(seq, req.last_token_time)
                continue
            g = req.emit(now)
            if g > 1:  # a recomputation's token: its gap runs from the last before the preemption
                self.itl.add(now, now - req.last_token_time)
                if g == 2:
                    req.second_token_time = now
            if g == req.output_tokens or self.leaves_after_prefill:
                done.append(seq)
            else:  # emitted; one token a step from now on
                del self.prefilling[seq]
                dec.start(seq)
                if g == 1:  # its next token, a step from now, is its second
                    self.fresh.append(seq)

    def _commit(self, batch: Batch) -> None:
        """Key the blocks this step filled, of requests whose content others may share, in
        admission order (the first to fill a block of some content is the one cached)."""
        full: list[tuple[int, Request, int]] = []
        dec = self.decoding
        for seq in dec.filled():  # decoders whose last block just filled
            dec.materialize(seq)
            full.append((seq.admitted, seq.req, seq.req.computed))
        for seq, k in batch.prefill:
            req = seq.req
            if req.segments is not None:
                full.append((seq.admitted, req, req.computed + k))
        if len(full) > 1:
            full.sort(key=_first)
        commit = self.kv.commit
        for _, req, computed in full:
            commit(req, computed)


def _first(item: tuple[int, Request, int]) -> int:
    return item[0]


def _by_id(seq: Seq) -> int:
    return seq.req.id


def _admitted(seq: Seq) -> int:
    return seq.admitted
