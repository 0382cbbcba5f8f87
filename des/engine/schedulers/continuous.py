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
"""

from __future__ import annotations

from collections import deque
from typing import Literal

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

    def build(self, kv: BlockManager, max_model_len: int) -> ContinuousScheduler:
        return ContinuousScheduler(self, kv, self.max_model_len or max_model_len)


class ContinuousScheduler:
    """Iteration-level scheduler over a paged KV cache."""

    def __init__(self, cfg: ContinuousConfig, kv: BlockManager, max_model_len: int):
        self.kv = kv
        self.max_seqs = cfg.max_num_seqs
        self.max_tokens = cfg.max_num_batched_tokens
        self.chunked = cfg.enable_chunked_prefill
        self.max_model_len = max_model_len
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    def rejection(self, req: Request) -> str | None:
        reason = length_rejection(req, self.max_model_len, self.kv)
        if reason is None and not self.chunked and req.peak_tokens > self.max_tokens:
            # a preempted request must recompute prompt + generated tokens in one step
            reason = "exceeds_token_budget"
        return reason

    def add(self, req: Request) -> None:
        self.waiting.append(req)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def num_waiting(self) -> int:
        return len(self.waiting)

    def wakeup_time(self) -> float | None:
        return None

    def _preempt(self, req: Request) -> None:
        self.kv.release(req)
        req.computed = 0
        req.preemptions += 1
        self.waiting.appendleft(req)

    def schedule(self, now: float) -> Step | None:
        kv, running, chunked = self.kv, self.running, self.chunked
        budget = self.max_tokens
        shape = BatchShape()
        items: list[tuple[Request, int]] = []
        preempted = 0
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            need = req.remaining
            k = need if need <= budget else budget
            if k < need and not chunked:
                break
            while not kv.grow(req, req.computed + k):
                victim = running.pop()
                self._preempt(victim)
                preempted += 1
                if victim is req:
                    break
            else:
                items.append((req, k))
                budget -= k
                self._add_shape(shape, req, k)
                i += 1
                continue
            break
        if not preempted:
            waiting = self.waiting
            while waiting and budget > 0 and len(running) < self.max_seqs:
                req = waiting[0]
                need = req.remaining
                k = need if need <= budget else budget
                if k < need and not chunked:
                    break
                if not kv.grow(req, req.computed + k):
                    break
                waiting.popleft()
                running.append(req)
                if req.scheduled_time != req.scheduled_time:  # NaN: first time scheduled
                    req.scheduled_time = now
                items.append((req, k))
                budget -= k
                self._add_shape(shape, req, k)
        if not items:
            return None
        n = len(items)
        return Step(shape, items, n, n, preempted, shape.num_emitting)

    @staticmethod
    def _add_shape(shape: BatchShape, req: Request, k: int) -> None:
        if req.generated and k == 1 and req.remaining == 1:
            shape.add_decode(req.computed)
        else:
            shape.add_chunk(req.computed, k, k == req.remaining)

    def finish_step(self, step: Step, now: float) -> list[Request]:
        done: list[Request] = []
        for req, k in step.items:
            req.computed += k
            if req.computed == req.prompt_tokens + req.generated:
                req.generated += 1
                if req.generated == 1:
                    req.first_token_time = now
                if req.generated == req.output_tokens:
                    req.finish_time = now
                    self.kv.release(req)
                    done.append(req)
        if done:
            gone = {id(r) for r in done}
            self.running = [r for r in self.running if id(r) not in gone]
        return done


__all__ = ["ContinuousConfig", "ContinuousScheduler"]
