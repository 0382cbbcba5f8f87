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

The running set is kept as parallel numpy arrays in admission order (prompt, output,
generated and computed tokens, blocks held), so a step costs a fixed number of array
operations whatever the batch size; the scalar path runs only when the KV cache is
short and someone must be preempted. The :class:`Request` objects are brought up to
date when they leave the running set.
"""

from __future__ import annotations

from collections import deque
from typing import Literal

import numpy as np
from pydantic import Field

from des.config import Strict
from des.cost.base import BatchShape
from des.engine.kvcache import BlockManager
from des.engine.request import Request
from des.engine.schedulers.base import Step, length_rejection


class ContinuousConfig(Strict):
    """vLLM-style engine arguments. Sizes in tokens."""

    kind: Literal["continuous"] = "continuous"
    max_num_seqs: int = Field(128, ge=1)
    max_num_batched_tokens: int = Field(2048, ge=1)
    enable_chunked_prefill: bool = True
    block_size: int = Field(16, ge=1)
    gpu_memory_utilization: float = Field(0.92, gt=0, le=1)
    max_model_len: int | None = Field(None, ge=1)
    num_gpu_blocks_override: int | None = Field(None, ge=1)

    @property
    def max_batch(self) -> int:
        """Most sequences in one step."""
        return self.max_num_seqs

    @property
    def profile_tokens(self) -> int:
        """Tokens of the largest step, for the activation memory of the KV plan."""
        return self.max_num_batched_tokens

    def build(self, kv: BlockManager, max_model_len: int) -> ContinuousScheduler:
        return ContinuousScheduler(self, kv, self.max_model_len or max_model_len)


#: Batches up to this size get their shape from a Python loop, which beats numpy's
#: per-call overhead on a handful of sequences.
SCALAR_SHAPE = 24


def _ceil_div(a, b: int):
    return -(-a // b)


class ContinuousScheduler:
    """Iteration-level scheduler over a paged KV cache."""

    def __init__(self, cfg: ContinuousConfig, kv: BlockManager, max_model_len: int):
        self.kv = kv
        self.bs = kv.block_size
        self.max_seqs = cfg.max_num_seqs
        self.max_tokens = cfg.max_num_batched_tokens
        self.chunked = cfg.enable_chunked_prefill
        self.max_model_len = max_model_len
        self.waiting: deque[Request] = deque()
        # the running set: Request objects and their counters, in admission order
        self.reqs: list[Request] = []
        cap = cfg.max_num_seqs
        self.prompt = np.zeros(cap, np.int64)
        self.out = np.zeros(cap, np.int64)
        self.gen = np.zeros(cap, np.int64)
        self.comp = np.zeros(cap, np.int64)
        self.blk = np.zeros(cap, np.int64)
        self.n = 0

    # -- protocol -------------------------------------------------------------------
    def rejection(self, req: Request) -> str | None:
        reason = length_rejection(req, self.max_model_len, self.kv)
        if reason is None and not self.chunked and req.peak_tokens > self.max_tokens:
            # a preempted request must recompute prompt + generated tokens in one step
            reason = "exceeds_token_budget"
        return reason

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.n)

    def num_waiting(self) -> int:
        return len(self.waiting)

    def wakeup_time(self) -> float | None:
        return None

    @property
    def running(self) -> list[Request]:
        """The running requests, oldest admission first, their fields brought up to date."""
        self.sync()
        return self.reqs[: self.n]

    def sync(self) -> None:
        """Copy the running requests' progress from the arrays onto the Request objects."""
        for i in range(self.n):
            self._sync(i)

    # -- running-set bookkeeping ----------------------------------------------------
    def _push(self, req: Request) -> None:
        i = self.n
        self.reqs.append(req)
        self.prompt[i] = req.prompt_tokens
        self.out[i] = req.output_tokens
        self.gen[i] = req.generated
        self.comp[i] = req.computed
        self.blk[i] = req.blocks
        self.n = i + 1

    def _sync(self, i: int) -> Request:
        req = self.reqs[i]
        req.generated = int(self.gen[i])
        req.computed = int(self.comp[i])
        req.blocks = int(self.blk[i])
        return req

    def _preempt_last(self) -> None:
        i = self.n - 1
        req = self._sync(i)
        self.kv.release(req)
        req.computed = 0
        req.preemptions += 1
        self.reqs.pop()
        self.n = i
        self.waiting.appendleft(req)

    # -- scheduling -----------------------------------------------------------------
    def schedule(self, now: float) -> Step[np.ndarray] | None:
        kv, bs, n = self.kv, self.bs, self.n
        budget = self.max_tokens
        preempted = 0
        tokens = 0  # tokens scheduled this step
        decoding = False  # every member decodes one token (the common, cheap case)
        if n:
            comp, gen = self.comp[:n], self.gen[:n]
            need = self.prompt[:n] + gen - comp
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
            extra = (comp + k + (bs - 1)) // bs - self.blk[:n]
            blocks = int(extra.sum())
            if blocks <= kv.free:
                kv.take(blocks)
                self.blk[:n] += extra
                budget -= tokens
            else:
                k, budget, preempted = self._schedule_under_pressure(k, budget)
                tokens = self.max_tokens - budget
                decoding = False
        else:
            k = np.zeros(0, np.int64)
        if not preempted:
            admitted, budget = self._admit(now, budget)
            if admitted:
                k = np.concatenate([k, np.array(admitted, np.int64)])
                tokens += sum(admitted)
                decoding = False
        if tokens == 0:
            return None
        if decoding:
            shape = BatchShape(n, 0, 0.0, 0, n, int(comp.sum()) + n, n)
        else:
            shape = self._shape(k)
        step = Step(shape, k, shape.num_seqs, shape.num_seqs, preempted, shape.num_emitting)
        step.decoding = decoding
        return step

    def _schedule_under_pressure(self, k: np.ndarray, budget: int) -> tuple[np.ndarray, int, int]:
        """The scalar path: allocate in order, preempting the newest when blocks run out."""
        kv, bs = self.kv, self.bs
        preempted = 0
        out = []
        i = 0
        while i < self.n:
            ki = int(k[i]) if i < k.size else 0
            if ki == 0:
                break
            need_blocks = _ceil_div(int(self.comp[i]) + ki, bs) - int(self.blk[i])
            while need_blocks > kv.free:
                victim = self.n - 1
                self._preempt_last()
                preempted += 1
                if victim == i:
                    break
            else:
                if need_blocks > 0:
                    kv.take(need_blocks)
                    self.blk[i] += need_blocks
                out.append(ki)
                budget -= ki
                i += 1
                continue
            break
        k_out = np.zeros(self.n, np.int64)  # those left unscheduled (budget spent) get 0
        k_out[: len(out)] = out
        return k_out, budget, preempted

    def _admit(self, now: float, budget: int) -> tuple[list[int], int]:
        """Admit waiting requests FCFS while budget, sequence cap and blocks allow;
        returns the tokens each admitted request gets this step, and the budget left."""
        waiting, kv, bs = self.waiting, self.kv, self.bs
        ks = []
        while waiting and budget > 0 and self.n < self.max_seqs:
            req = waiting[0]
            need = req.prompt_tokens + req.generated - req.computed
            k = need if need <= budget else budget
            if k < need and not self.chunked:
                break
            blocks = _ceil_div(req.computed + k, bs) - req.blocks
            if blocks > kv.free:
                break
            waiting.popleft()
            kv.take(blocks)
            req.blocks += blocks
            if req.scheduled_time != req.scheduled_time:  # NaN: first time scheduled
                req.scheduled_time = now
            self._push(req)
            ks.append(k)
            budget -= k
        return ks, budget

    def _shape(self, k: np.ndarray) -> BatchShape:
        """The step's aggregates when it holds prefill chunks (see BatchShape)."""
        m = k.size
        if m <= SCALAR_SHAPE:
            shape = BatchShape()
            for ki, c, g, p in zip(
                k.tolist(), self.comp[:m].tolist(), self.gen[:m].tolist(), self.prompt[:m].tolist(), strict=True
            ):
                if ki == 0:
                    continue
                need = p + g - c
                if g and need == 1:
                    shape.add_decode(c)
                else:
                    shape.add_chunk(c, ki, ki == need)
            return shape
        comp = self.comp[:m]
        need = self.prompt[:m] + self.gen[:m] - comp
        decode = (need == 1) & (self.gen[:m] > 0) & (k == 1)
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
        comp, gen = self.comp[:m], self.gen[:m]
        comp += k
        if step.decoding:  # everyone emits; nobody's first token
            gen += 1
            fin = gen == self.out[:m]
        else:
            emit = comp == self.prompt[:m] + gen
            gen += emit
            first = emit & (gen == 1)
            if first.any():
                for i in np.flatnonzero(first).tolist():
                    self.reqs[i].first_token_time = now
            fin = emit & (gen == self.out[:m])
        if not fin.any():
            return []
        return self._release(np.flatnonzero(fin), now)

    def _release(self, idx: np.ndarray, now: float) -> list[Request]:
        done = []
        for i in idx.tolist():
            req = self._sync(i)
            req.finish_time = now
            self.kv.release(req)
            done.append(req)
        keep = np.ones(self.n, bool)
        keep[idx] = False
        n = int(keep.sum())
        for a in (self.prompt, self.out, self.gen, self.comp, self.blk):
            a[:n] = a[: self.n][keep]
        self.reqs = [r for r, kp in zip(self.reqs, keep.tolist(), strict=True) if kp]
        self.n = n
        return done

    # -- fast-forward ------------------------------------------------------------------
    def steady_steps(self, step: Step[np.ndarray], limit: int) -> int:
        """How many steps from ``step`` on (at most ``limit``) keep the same members,
        are pure decodes and release nobody; 1 when ``step`` itself is not one."""
        n = self.n
        k = step.items
        # A step with no prefill admitted nobody, so the queue's head is blocked by the
        # sequence cap, the budget or the KV cache, none of which loosens while the same
        # members decode (they only take more blocks).
        if not step.decoding or k.size != n:
            return 1
        j = int((self.out[:n] - self.gen[:n]).min()) - 1  # the step after these finishes someone
        j = min(j, limit)
        if j <= 1:
            return max(j, 1)
        # KV: the blocks for comp + i tokens (step i, 1-based) must be free for every i <= j
        comp, blk, bs, free = self.comp[:n], self.blk[:n], self.bs, self.kv.free
        if int((_ceil_div(comp + j, bs) - blk).clip(0).sum()) > free:
            lo, hi = 1, j  # largest feasible j by bisection (feasibility is monotone)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if int((_ceil_div(comp + mid, bs) - blk).clip(0).sum()) <= free:
                    lo = mid
                else:
                    hi = mid - 1
            j = lo
        return j

    def advance(self, step: Step[np.ndarray], j: int) -> np.ndarray:
        """Apply ``j`` steady decode steps at once; returns the KV blocks in use at each."""
        n, bs = self.n, self.bs
        comp = self.comp[:n]
        blk = self.blk[:n]
        others = self.kv.used - int(blk.sum())
        held = np.maximum(_ceil_div(np.add.outer(comp, np.arange(1, j + 1)), bs), blk[:, None])
        used = others + held.sum(axis=0)
        new_blk = np.maximum(_ceil_div(comp + j, bs), self.blk[:n])
        self.kv.take(int((new_blk - self.blk[:n]).sum()))
        self.blk[:n] = new_blk
        self.comp[:n] += j
        self.gen[:n] += j
        return used
