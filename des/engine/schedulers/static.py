"""Static batching: take a batch, run it until its longest member is done, repeat.

An idle instance takes up to ``max_batch_size`` waiting requests in FIFO order,
waiting at most ``max_wait`` seconds after the oldest one arrived for the batch to
fill. The batch is padded: its prompts to the longest prompt (one prefill step of
``width × longest prompt`` tokens) and its rows kept until the longest output is done,
so every step costs the full width. The KV cache is contiguous: each row reserves
``longest prompt + longest output - 1`` tokens for the whole batch, and a request
joins the batch only while the reservation fits. Results are released at the end of
the batch (``release_on: batch_end``, as a non-streaming server returns them) or at
each request's own last token (``release_on: finish``). Either way the batch's
reservation is returned when the batch ends, so ``free`` has nothing to give back.
Static batching serves whole requests: its instances are ``colocated`` only.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from pydantic import Field, NonNegativeFloat

from des.cost.base import BatchShape
from des.engine.itl import ItlLog
from des.engine.kvcache import BlockManager, CacheConfig
from des.engine.policy import MAX_BATCH, Role, Step, length_rejection
from des.engine.request import Request


class StaticConfig(CacheConfig):
    """Static batching. ``max_wait`` in seconds."""

    kind: Literal["static"] = "static"
    max_batch_size: int = Field(8, ge=1, le=MAX_BATCH)
    max_wait: NonNegativeFloat = 0.0
    release_on: Literal["batch_end", "finish"] = "batch_end"

    @property
    def max_batch(self) -> int:
        """Most sequences in one step."""
        return self.max_batch_size

    @property
    def profile_tokens(self) -> int:
        """Tokens of the largest step, for the activation memory of the KV plan."""
        return 2048

    @property
    def prefix_caching(self) -> bool:
        """False: a static batch reserves contiguous KV rows."""
        return False

    @property
    def token_budget(self) -> int | None:
        """None: a static batch computes its whole padded prompt in one step."""
        return None

    @property
    def speculative(self) -> None:
        """None: a padded batch runs its rows in lockstep, and does not speculate."""
        return None

    def given(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """The settings a pool states: ``overrides`` (the pool's own) over every one here."""
        return {**self.model_dump(exclude={"kind"}), **overrides}

    def policy(
        self, overrides: Mapping[str, Any], speculative: object = None, defaults: Mapping[str, Any] | None = None
    ) -> StaticConfig:
        """A pool's settings: ``overrides`` over these (validated as one). (``speculative``:
        refused for static batching by the scenario, :mod:`des.engine.features`;
        ``defaults``: unused, a static batch is no vLLM entry point's and its own defaults
        apply.)"""
        return self.model_validate({**self.model_dump(), **overrides}) if overrides else self

    def build(
        self, kv: BlockManager, max_model_len: int, role: Role = "colocated", rng: np.random.Generator | None = None
    ) -> StaticScheduler:
        if role != "colocated":
            raise ValueError(f"static batching serves whole requests; it cannot be a {role} pool")
        return StaticScheduler(self, kv, self.max_model_len or max_model_len)


class _Batch:
    __slots__ = ("members", "width", "prompt", "length", "reserved", "steps_done", "held")

    def __init__(self, members: list[Request], prompt: int, length: int, reserved: int):
        self.members = members  # requests still generating, in FIFO order
        self.width = len(members)
        self.prompt = prompt  # padded prompt length, tokens
        self.length = length  # steps the batch runs: its longest output
        self.reserved = reserved  # KV blocks
        self.steps_done = 0
        self.held: list[Request] = []  # done, waiting for the batch end


class StaticScheduler:
    """FIFO static batches with padding and a contiguous KV reservation."""

    def __init__(self, cfg: StaticConfig, kv: BlockManager, max_model_len: int):
        self.kv = kv
        self.max_batch = cfg.max_batch_size
        self.max_wait = cfg.max_wait
        self.release_at_end = cfg.release_on == "batch_end"
        self.max_model_len = max_model_len
        self.itl = ItlLog()  # the gaps between tokens (des.engine.itl)
        self.waiting: deque[Request] = deque()
        self.batch: _Batch | None = None

    def rejection(self, req: Request) -> str | None:
        return length_rejection(req, self.max_model_len, self.kv)

    def add(self, req: Request, blocks: int = 0) -> None:
        if blocks:
            raise ValueError("static batching takes no request that already holds KV blocks")
        self.waiting.append(req)

    def free(self, req_id: int) -> None:
        """Nothing to give back: a batch's reservation returns when the batch ends."""

    def num_waiting(self) -> int:
        return len(self.waiting)

    def wakeup_time(self) -> float | None:
        if self.batch is None and self.waiting and len(self.waiting) < self.max_batch:
            return self.waiting[0].arrival_time + self.max_wait
        return None

    def _form(self, now: float) -> _Batch | None:
        waiting = self.waiting
        if not waiting:
            return None
        if len(waiting) < self.max_batch and now < waiting[0].arrival_time + self.max_wait:
            return None
        members: list[Request] = []
        prompt = length = 0
        per_row = 0
        for req in waiting:
            if len(members) == self.max_batch:
                break
            p, n = max(prompt, req.prompt_tokens), max(length, req.output_tokens)
            row = self.kv.blocks_for(p + n - 1)
            if (len(members) + 1) * row > self.kv.free:
                break
            members.append(req)
            prompt, length, per_row = p, n, row
        for _ in members:
            waiting.popleft()
        reserved = per_row * len(members)
        self.kv.take(reserved)
        for req in members:
            req.scheduled_time = now
        return _Batch(members, prompt, length, reserved)

    def schedule(self, now: float, seen: float | None = None) -> Step[list[Request]] | None:
        """The current batch's next step, or a new batch formed at ``now`` from what is
        queued (a static batch is formed only once the last has ended: ``seen`` unused)."""
        batch = self.batch
        if batch is None:
            batch = self.batch = self._form(now)
            if batch is None:
                return None
        w = batch.width
        window = self.kv.window
        shape = BatchShape(num_seqs=w, num_emitting=w, window=window)
        if batch.steps_done == 0:
            p = batch.prompt
            shape.prefill_tokens = w * p
            shape.prefill_pairs = w * p * (p + 1) / 2
            shape.prefill_context = w * p
            if window:  # each padded prompt's windows, as one chunk (BatchShape.add_chunk)
                one = BatchShape(window=window)
                one.add_chunk(0, p, True)
                shape.prefill_window_pairs = w * one.prefill_window_pairs
                shape.prefill_window_context = w * one.prefill_window_context
        else:
            shape.decode_tokens = w
            shape.decode_context = w * (batch.prompt + batch.steps_done)
            if window:
                shape.decode_window_context = w * min(batch.prompt + batch.steps_done, window)
        active = len(batch.members)
        return Step(shape, batch.members, active, w, 0, active)

    def gap_logs(self) -> list[ItlLog]:
        return [self.itl]

    def sync(self) -> None:
        """Requests are updated in place as steps end: nothing to write."""

    def finish_step(self, step: Step[list[Request]], now: float) -> list[Request]:
        batch = self.batch
        assert batch is not None
        batch.steps_done += 1
        released: list[Request] = []
        still: list[Request] = []
        # every member's gap after its first token: the time since the batch's last step
        self.itl.end.append(now)
        self.itl.weight.append(len(batch.members) if batch.steps_done > 1 else 0)
        if batch.steps_done == 2:
            for req in batch.members:
                req.second_token_time = now
        for req in batch.members:
            if req.emit(now) == req.output_tokens:
                if self.release_at_end:
                    batch.held.append(req)
                else:
                    req.finish_time = now
                    released.append(req)
            else:
                still.append(req)
        batch.members = still
        if batch.steps_done == batch.length:
            for req in batch.held:
                req.finish_time = now
            released.extend(batch.held)
            self.kv.give(batch.reserved)
            self.batch = None
        return released
