"""Continuous (iteration-level) batching, as vLLM's V1 scheduler does it.

Before every step the batch is re-decided within a token budget
(``max_num_batched_tokens``), a sequence cap (``max_num_seqs``) and the free KV
blocks:

1. running requests first, oldest first: each gets the tokens it needs (one for a
   decode, the rest of its prompt for a prefill, cut to the budget when chunked
   prefill is on). When the KV blocks for them run out, the newest running request
   is preempted: its blocks are freed, its progress dropped (recomputed later) and it
   goes back to the front of the queue.
2. then, unless someone was preempted this step, waiting requests in FCFS order
   (preempted ones first) while the budget, the sequence cap and the KV blocks allow;
   the queue's head blocks the rest (no overtaking).

The running set is kept as parallel numpy arrays (:class:`RunningSet`), so a step
costs a fixed number of array operations whatever the batch size; the scalar path
runs only when the KV cache is short and someone must be preempted.

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
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pydantic import Field

from des.cost.base import BatchShape
from des.engine.kvcache import BlockManager, CacheConfig, ceil_div
from des.engine.policy import Role, Step, held_tokens, length_rejection
from des.engine.request import Request
from tests.oracle.running import RunningSet


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

    def build(
        self, kv: BlockManager, max_model_len: int, role: Role = "colocated", rng: Any = None
    ) -> ContinuousScheduler:
        return ContinuousScheduler(self, kv, self.max_model_len or max_model_len, role)


def _by_id(req: Request) -> int:
    return req.id


NO_BLOCKS: Sequence[int] = ()

#: Batches up to this size get their shape from a Python loop, which beats numpy's
#: per-call overhead on a handful of sequences.
SCALAR_SHAPE = 24


class ContinuousScheduler:
    """Iteration-level scheduler over a paged KV cache."""

    def __init__(self, cfg: ContinuousSettings, kv: BlockManager, max_model_len: int, role: Role = "colocated"):
        self.kv = kv
        self.on_first_schedule: Callable[[Request], None] | None = None
        self.block_size = kv.block_size
        self.max_seqs = cfg.max_num_seqs
        self.max_tokens = cfg.max_num_batched_tokens
        self.chunked = cfg.enable_chunked_prefill
        self.max_model_len = max_model_len
        self.role = role
        self.leaves_after_prefill = role == "prefill"
        self.waiting: deque[Request] = deque()
        self.ready: deque[Request] = deque()  # requests holding their KV, admitted first
        self.running = RunningSet(cfg.max_num_seqs)
        self.held = kv.held  # request id -> KV blocks, for requests not running (the manager's ledger)
        self.unrecorded_preemptions = 0  # preemptions of a batch that came out empty
        self.step_cached = 0  # tokens found in the prefix cache by this step's admissions

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
        self.kv.release(req_id)

    def num_waiting(self) -> int:
        return len(self.waiting) + len(self.ready)

    def wakeup_time(self) -> float | None:
        return None

    def gap_logs(self) -> list[Any]:
        """None: it predates the inter-token gap logs (the oracle compares requests and steps)."""
        return []

    def sync(self) -> None:
        """Copy the running requests' progress from the arrays onto the Request objects."""
        self.running.sync()

    def _preempt_last(self) -> None:
        req, blocks = self.running.pop_last()
        assert blocks == self.kv.blocks_for(req.computed)
        self.kv.preempt(req, req.computed)
        req.computed = 0
        req.preemptions += 1
        self.waiting.appendleft(req)

    # -- scheduling -----------------------------------------------------------------
    def schedule(self, now: float, seen: float | None = None) -> Step[np.ndarray] | None:
        """The step starting at ``now``, its batch formed at ``seen`` (async scheduling):
        formed again at ``now`` if that one is empty."""
        self.step_cached = 0
        if seen is not None and seen < now:
            step = self._schedule(now, seen)
            if step is not None:
                return step
        return self._schedule(now, now)

    def _schedule(self, now: float, seen: float) -> Step[np.ndarray] | None:
        kv, bs, run = self.kv, self.block_size, self.running
        n = run.n
        budget = self.max_tokens
        preempted = 0
        tokens = 0  # tokens scheduled this step
        decoding = False  # every member decodes one token (the common, cheap case)
        if n:
            comp, gen = run.computed[:n], run.generated[:n]
            need = run.prompt_len[:n] + gen - comp
            total = int(need.sum())
            if total <= budget:
                k, tokens = need, total
                decoding = total == n and int(gen.min()) > 0
            else:
                if self.chunked:
                    k = np.diff(np.minimum(np.cumsum(need), budget), prepend=0)
                else:
                    fits = np.cumsum(need) <= budget
                    k = need * fits
                    if not fits.all():  # FCFS: nobody after the first request that does not fit
                        k[int(np.argmin(fits)) :] = 0
                tokens = int(k.sum())
            # blocks held cover ``comp`` tokens exactly, so the extra ones are never negative
            extra = (comp + k + (bs - 1)) // bs - run.blocks[:n]
            blocks = int(extra.sum())
            if blocks <= kv.free:
                kv.take(blocks)
                run.blocks[:n] += extra
                budget -= tokens
            else:
                k, budget, preempted = self._schedule_under_pressure(k, budget)
                tokens = self.max_tokens - budget
                decoding = False
        else:
            k = np.zeros(0, np.int64)
        if not preempted:
            admitted, budget = self._admit(self.ready, now, seen, budget) if self.ready else ([], budget)
            if self.waiting and budget > 0:
                more, budget = self._admit(self.waiting, now, seen, budget)
                admitted += more
            if admitted:
                k = np.concatenate([k, np.array(admitted, np.int64)])
                tokens += sum(admitted)
                decoding = False
        if kv.num_reserving and not self.waiting:
            kv.serve()  # what is left goes to the links' reservations
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
        if decoding:
            shape = BatchShape.decodes(n, int(comp.sum()))
        else:
            shape = self._shape(k)
        step = Step(shape, k, shape.num_seqs, shape.num_seqs, preempted, shape.num_emitting)
        step.decoding = decoding
        step.cached_tokens = self.step_cached
        return step

    def _schedule_under_pressure(self, k: np.ndarray, budget: int) -> tuple[np.ndarray, int, int]:
        """The scalar path: allocate in order, preempting the newest when blocks run out."""
        kv, bs, run = self.kv, self.block_size, self.running
        preempted = 0
        out = []
        i = 0
        while i < run.n:
            ki = int(k[i]) if i < k.size else 0
            if ki == 0:
                break
            need_blocks = ceil_div(int(run.computed[i]) + ki, bs) - int(run.blocks[i])
            while need_blocks > kv.free:
                victim = run.n - 1
                self._preempt_last()
                preempted += 1
                if victim == i:
                    break
            else:
                if need_blocks > 0:
                    kv.take(need_blocks)
                    run.blocks[i] += need_blocks
                out.append(ki)
                budget -= ki
                i += 1
                continue
            break
        k_out = np.zeros(run.n, np.int64)  # those left unscheduled (budget spent) get 0
        k_out[: len(out)] = out
        return k_out, budget, preempted

    def _admit(self, waiting: deque[Request], now: float, seen: float, budget: int) -> tuple[list[int], int]:
        """Admit requests from the head of ``waiting`` that reached the scheduler by ``seen``
        while budget, sequence cap and blocks allow (the head blocks the rest); returns the
        tokens each admitted request gets this step, and the budget left."""
        kv, bs, run, held = self.kv, self.block_size, self.running, self.held
        ks = []
        while waiting and budget > 0 and run.n < self.max_seqs:
            req = waiting[0]
            if req.queued_time > seen:
                break
            tokens = req.prompt_tokens + req.generated  # KV it needs before its next token
            has = held.get(req.id, 0)
            computed, hit, found, evictable = req.computed, 0, NO_BLOCKS, 0
            if kv.caching and not has:  # holds no KV here: reuse the longest cached prefix
                hit, found, evictable = kv.lookup(req, tokens)
                computed = max(computed, hit)
            need = tokens - computed
            k = need if need <= budget else budget
            if k < need and not self.chunked:
                break
            blocks = ceil_div(computed + k, bs) - has - len(found)
            if blocks + evictable > kv.free:
                break
            waiting.popleft()
            if has:
                del held[req.id]
            if kv.caching and not has:
                kv.touch(req.id, found)
                req.computed = computed
                req.cached_tokens += hit
                self.step_cached += hit
            kv.take(blocks)
            if req.scheduled_time != req.scheduled_time:  # NaN: first time scheduled
                req.scheduled_time = now
                if self.on_first_schedule is not None:  # a pushing KV link reserves decode blocks
                    self.on_first_schedule(req)
            run.push(req, has + len(found) + blocks)
            ks.append(k)
            budget -= k
        return ks, budget

    def _shape(self, k: np.ndarray) -> BatchShape:
        """The step's aggregates when it holds prefill chunks (see BatchShape)."""
        m = k.size
        run = self.running
        if m <= SCALAR_SHAPE:
            shape = BatchShape()
            for ki, c, g, p in zip(
                k.tolist(),
                run.computed[:m].tolist(),
                run.generated[:m].tolist(),
                run.prompt_len[:m].tolist(),
                strict=True,
            ):
                if ki == 0:
                    continue
                need = p + g - c
                if g and need == 1:
                    shape.add_decode(c)
                else:
                    shape.add_chunk(c, ki, ki == need)
            return shape
        comp = run.computed[:m]
        gen = run.generated[:m]
        need = run.prompt_len[:m] + gen - comp
        decode = (need == 1) & (gen > 0) & (k == 1)
        chunk = (k > 0) & ~decode
        nd = int(decode.sum())
        kc = k[chunk]
        cc = comp[chunk]
        return BatchShape(
            num_seqs=int((k > 0).sum()),
            prefill_tokens=int(kc.sum()),
            prefill_pairs=float((kc * (cc + (kc + 1) / 2)).sum()),
            prefill_context=int((cc + kc).sum()),
            decode_tokens=nd,
            decode_context=int(comp[decode].sum()) + nd,
            num_emitting=int((k == need).sum()),
        )

    def finish_step(self, step: Step[np.ndarray], now: float) -> list[Request]:
        k = step.items
        m = k.size
        run = self.running
        comp, gen = run.computed[:m], run.generated[:m]
        if self.kv.caching and run.shared[:m].any():
            self._commit_rows(comp, k)
        comp += k
        if step.decoding:  # everyone emits; nobody's first token
            gen += 1
            self._second(gen == 2, now)
            if self.leaves_after_prefill:
                return []
            fin = gen == run.output_len[:m]
        else:
            emit = comp == run.prompt_len[:m] + gen
            gen += emit
            first = emit & (gen == 1)
            if first.any():
                for i in np.flatnonzero(first).tolist():
                    run.reqs[i].first_token_time = now
            self._second(emit & (gen == 2), now)
            fin = first if self.leaves_after_prefill else emit & (gen == run.output_len[:m])
        if not fin.any():
            return []
        return self._release(np.flatnonzero(fin), now)

    def _second(self, rows: np.ndarray, now: float) -> None:
        """The requests at ``rows`` just emitted their second token."""
        if rows.any():
            reqs = self.running.reqs
            for i in np.flatnonzero(rows).tolist():
                if reqs[i].second_token_time != reqs[i].second_token_time:
                    reqs[i].second_token_time = now

    def _commit_rows(self, comp: np.ndarray, k: np.ndarray) -> None:
        """Key the blocks that the ``k`` tokens now computed on top of ``comp`` fill, for
        the rows whose content others may share."""
        bs = self.block_size
        m = comp.size
        crossed = np.flatnonzero(((comp + k) // bs > comp // bs) & self.running.shared[:m]).tolist()
        if crossed:
            reqs, commit, after = self.running.reqs, self.kv.commit, (comp + k).tolist()
            for i in crossed:
                commit(reqs[i], after[i])

    def _release(self, idx: np.ndarray, now: float) -> list[Request]:
        """Remove the requests at rows ``idx`` from the running set; they keep their blocks."""
        done = []
        held = self.held
        for req, blocks in self.running.remove(idx):
            if req.generated == req.output_tokens:
                req.finish_time = now
            held[req.id] = blocks
            done.append(req)
        if self.leaves_after_prefill and len(done) > 1:
            done.sort(key=_by_id)  # prompts done at once queue for their transfer by arrival
        return done

    # -- fast-forward ------------------------------------------------------------------
    def steady_steps(self, step: Step[np.ndarray], limit: int) -> int:
        """How many steps from ``step`` on (at most ``limit``) keep the same members,
        are pure decodes and release nobody; 1 when ``step`` itself is not one."""
        run = self.running
        n = run.n
        k = step.items
        # A step with no prefill admitted nobody, so the queue's head is blocked by the
        # sequence cap, the budget or the KV cache, none of which loosens while the same
        # members decode (they only take more blocks).
        if not step.decoding or k.size != n or self.leaves_after_prefill:
            return 1
        j = int((run.output_len[:n] - run.generated[:n]).min()) - 1  # the step after these finishes someone
        j = min(j, limit)
        if j <= 1:
            return max(j, 1)
        # KV: the blocks for comp + i tokens (step i, 1-based) must be free for every i <= j
        comp, blk, bs, free = run.computed[:n], run.blocks[:n], self.block_size, self.kv.free
        if int((ceil_div(comp + j, bs) - blk).clip(0).sum()) > free:
            lo, hi = 1, j  # largest feasible j by bisection (feasibility is monotone)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if int((ceil_div(comp + mid, bs) - blk).clip(0).sum()) <= free:
                    lo = mid
                else:
                    hi = mid - 1
            j = lo
        return j

    def advance(self, step: Step[np.ndarray], j: int) -> np.ndarray:
        """Apply ``j`` steady decode steps at once; returns the KV blocks in use at each."""
        run, bs = self.running, self.block_size
        n = run.n
        comp = run.computed[:n]
        blk = run.blocks[:n]
        others = self.kv.used - int(blk.sum())
        held = np.maximum(ceil_div(np.add.outer(comp, np.arange(1, j + 1)), bs), blk[:, None])
        used = others + held.sum(axis=0)
        new_blk = np.maximum(ceil_div(comp + j, bs), blk)
        kv = self.kv
        kv.take(int((new_blk - blk).sum()))
        if kv.caching and run.shared[:n].any():
            self._commit_rows(comp, np.full(n, j, np.int64))
        run.blocks[:n] = new_blk
        run.computed[:n] += j
        run.generated[:n] += j
        return used
