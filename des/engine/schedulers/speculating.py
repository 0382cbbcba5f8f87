"""Continuous batching with speculative decoding: decodes that verify ``k`` proposed tokens.

vLLM's V1 scheduler (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``) treats
a decoding request with ``k`` draft tokens as one that needs ``1 + k`` more tokens
computed (``num_tokens_with_spec - num_computed_tokens``): they count against the token
budget (``num_scheduled_tokens``), are cut to the budget left like any chunk (the drafts
beyond it are dropped), and are capped so that no position passes ``max_model_len``
(``max_model_len - 1 - num_computed_tokens``). Their KV slots are allocated before the
step (``allocate_slots(request, num_new_tokens, num_lookahead_tokens)``, with ``k``
lookahead slots more for draft models, EAGLE and MTP, whose proposer writes its next
drafts' KV). After the step, ``update_from_output`` takes ``num_computed_tokens`` back by
the rejected drafts, and the request's output grows by the tokens the rejection sampler
kept; ``_update_request_with_output`` stops at ``max_tokens`` and drops the rest. vLLM
proposes ``k`` drafts whatever a request has left to emit (``update_draft_token_ids``
trims only to the grammar), so a sequence near its end verifies ``k + 1`` positions and
keeps at most what it has left: des does the same.

des draws the tokens each sequence emits after the step from the acceptance law
(:class:`~des.engine.speculative.Acceptance`, the run's ``speculative`` stream): ``T =
min(1 + min(G, q − 1), left)`` for ``q`` query tokens. The KV slots taken for the step
beyond the ``T`` tokens kept are given back at once (:meth:`BlockManager.untake`), so
between steps a running sequence holds the blocks of its ``computed`` tokens, as
without speculation. (vLLM keeps a rejected slot's block with its request and reuses it
at the next step: at most the ``k + lookahead`` slots' blocks per sequence more in use
than des counts.)

Every decoding sequence's progress differs from step to step, so the running aggregates
of :class:`~des.engine.schedulers.decoding.DecodingSet` do not apply: the
:class:`SpeculativeSet` walks its members at each step (the acceptance draws are per
sequence anyway). Prefill chunks are as without speculation: vLLM drops the drafts of a
request still in its prompt, and the step that completes a prompt emits one token.
"""

from __future__ import annotations

import numpy as np

from des.cost.base import BatchShape
from des.engine.kvcache import BlockManager
from des.engine.policy import Role, Step
from des.engine.request import Request
from des.engine.schedulers.continuous import Batch, ContinuousBatching, ContinuousScheduler
from des.engine.schedulers.decoding import DECODING, Seq
from des.engine.speculative import Acceptance, SpeculativeConfig


class SpeculativeSet:
    """The decoding sequences of an instance verifying ``k`` proposed tokens each step,
    with ``lookahead`` KV slots more, positions capped at ``max_model_len``; the tokens
    kept drawn from ``acceptance``; KV slots from ``kv``. Each member's progress is
    always written on its request."""

    __slots__ = ("kv", "k", "lookahead", "limit", "acceptance", "members", "size", "context", "full", "extra")

    def __init__(self, kv: BlockManager, k: int, lookahead: int, max_model_len: int, acceptance: Acceptance):
        self.kv = kv
        self.k = k
        self.lookahead = lookahead
        self.limit = max_model_len
        self.acceptance = acceptance
        self.members: dict[Seq, None] = {}
        self.size = 0
        self.context = 0  # sum of the members' computed tokens
        self.full: list[Seq] = []  # shareable members whose blocks the last step filled
        self.extra = 0  # tokens the last step emitted beyond one per member that stepped

    def materialize(self, seq: Seq) -> None:
        """Nothing to write: a member's progress is always on its request."""

    def start(self, seq: Seq) -> None:
        """``seq`` joins the set, needing one token (a request admitted to decode at once
        computes its next token only; the next step's :meth:`demand` gives it drafts)."""
        seq.phase = DECODING
        self.members[seq] = None
        self.size += 1
        self.context += seq.req.computed
        seq.q = seq.slots = 1

    def stop(self, seq: Seq) -> None:
        del self.members[seq]
        self.size -= 1
        self.context -= seq.req.computed

    def schedule(self, seq: Seq, q: int) -> int:
        """``seq`` computes ``q`` query tokens this step; the KV blocks they need (with the
        lookahead slots, capped at the context limit)."""
        c = seq.req.computed
        seq.q = q
        if q == 0:
            seq.slots = 0
            return 0
        end = c + q + self.lookahead
        seq.slots = (end if end < self.limit else self.limit) - c
        return self.kv.growth(c, seq.slots)

    def demand(self) -> tuple[int, int]:
        """Every member's query tokens for the next step, ``1 + k`` unless the context limit
        cuts them: their sum (tokens) and the KV blocks they need."""
        tokens = blocks = 0
        q_max, limit, schedule = 1 + self.k, self.limit, self.schedule
        for seq in self.members:
            req = seq.req
            cap = limit - req.prompt_tokens - req.generated
            q = q_max if q_max < cap else cap
            tokens += q
            blocks += schedule(seq, q)
        return tokens, blocks

    def query(self, seq: Seq) -> int:
        """Query tokens ``seq`` asks for (set by :meth:`demand`)."""
        return seq.q

    def shape(self) -> BatchShape:
        """The decodes of the step: the members with query tokens, their rows and contexts."""
        n = rows = 0
        for seq in self.members:
            q = seq.q
            if q:
                n += 1
                rows += q
        context = self.context
        for seq in self.members:
            if not seq.q:
                context -= seq.req.computed
        window = self.kv.window
        if window:  # windowed layers read at most the window of each member's context and rows
            reads = sum(min(seq.req.computed + seq.q, window) for seq in self.members if seq.q)
            return BatchShape(
                n, 0, 0.0, 0, rows, context + rows, n, window=window, decode_window_context=reads, spec_tokens=rows - n
            )
        return BatchShape(n, 0, 0.0, 0, rows, context + rows, n, spec_tokens=rows - n)

    def advance(self, starved: list[Seq]) -> list[Seq]:
        """Apply a step: each member that computed ``q`` tokens emits ``T`` of them (drawn),
        gives back the KV slots beyond them, and is done when its output is (the
        ``starved`` ones computed none); the members done, progress written."""
        stepped = [seq for seq in self.members if seq.q]
        self.full = []
        if not stepped:
            self.extra = 0
            return []
        left = np.fromiter(
            (min(seq.req.output_tokens - seq.req.generated, seq.q) for seq in stepped), np.int64, len(stepped)
        )
        kept = self.acceptance.draw(left).tolist()
        kv = self.kv
        bs = kv.block_size
        spare = emitted = 0
        done = []
        share = kv.caching
        for seq, t in zip(stepped, kept, strict=True):
            req = seq.req
            c = req.computed
            spare += -(-(c + seq.slots) // bs) - -(-(c + t) // bs)
            req.computed = c + t
            g = req.generated = req.generated + t
            emitted += t
            seq.q = seq.slots = 0
            if share and req.segments is not None and (c + t) // bs > c // bs:
                self.full.append(seq)
            if g == req.output_tokens:
                done.append(seq)
        self.context += emitted
        self.extra = emitted - len(stepped)
        if spare:
            kv.untake(spare)
        return done

    def filled(self) -> list[Seq]:
        """The shareable members whose last step filled a block."""
        return self.full


class SpeculativeScheduler(ContinuousScheduler):
    """Continuous batching whose decodes verify ``spec``'s proposed tokens, drawing the
    tokens kept from ``rng``."""

    def __init__(
        self,
        cfg: ContinuousBatching,
        spec: SpeculativeConfig,
        kv: BlockManager,
        max_model_len: int,
        role: Role,
        rng: np.random.Generator,
    ):
        super().__init__(cfg, kv, max_model_len, role)
        acceptance = Acceptance(spec.num_speculative_tokens, spec.acceptance_rate, rng)
        self.extra_slots = spec.num_speculative_tokens + spec.lookahead
        self.spec = SpeculativeSet(kv, spec.num_speculative_tokens, spec.lookahead, self.max_model_len, acceptance)
        self.decoding = self.spec  # type: ignore[assignment]

    def rejection(self, req: Request) -> str | None:
        reason = super().rejection(req)
        if reason is None and not self.leaves_after_prefill:
            # the last verification step's slots: its drafts and lookahead past the last token
            peak = min(req.peak_tokens + self.extra_slots, self.max_model_len)
            if self.kv.blocks_for(peak) > self.kv.num_blocks:
                reason = "exceeds_kv_capacity"
        return reason

    def _schedule_running(self, batch: Batch, budget: int) -> tuple[int, int]:
        left = self._everyone(batch, budget, *self.spec.demand())
        if left is not None:
            return left, 0
        budget, preempted = self._ordered(batch, budget)
        for seq in batch.starved:
            seq.q = seq.slots = 0
        return budget, preempted

    def _wants(self, seq: Seq) -> tuple[int, bool]:
        """A decoding sequence's query tokens (its last and the proposed ones), cut to the
        budget left whether or not prefill is chunked (vLLM drops the drafts past the
        budget); a prefilling one's rest of its prompt, all or nothing without chunking."""
        if seq.phase is DECODING:
            return seq.q, False
        req = seq.req
        return req.prompt_tokens + req.generated - req.computed, True

    def _blocks(self, seq: Seq, k: int) -> int:
        """A decoding sequence's blocks for its ``k`` query tokens and lookahead slots
        (:meth:`SpeculatingSet.schedule`), a prefilling one's for its chunk."""
        if seq.phase is DECODING:
            return self.spec.schedule(seq, k)
        return self.kv.growth(seq.req.computed, k)

    def _shape(self, batch: Batch) -> BatchShape:
        shape = self.spec.shape()
        for seq, k in batch.prefill:
            req = seq.req
            c = req.computed
            shape.add_chunk(c, k, k == req.prompt_tokens + req.generated - c)
        return shape

    def finish_step(self, step: Step[Batch], now: float) -> list[Request]:
        released = super().finish_step(step, now)
        step.emitted += self.spec.extra
        return released
