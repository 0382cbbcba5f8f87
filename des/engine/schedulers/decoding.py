"""The running sequences of a continuous-batching instance, and the decoding ones as aggregates.

A :class:`Seq` is a request while it runs on one instance: the scheduler's bookkeeping
of it (its :class:`Phase`, its admission number, where its progress was last written),
kept off the shared :class:`~des.engine.request.Request`. A request preempted and
admitted again runs as a new ``Seq``; the old one is ``LEFT`` for good.

The :class:`DecodingSet` holds the many sequences that decode one token per step, at
constant work per step. A member's progress is not written step by step: the set
counts its own steps (``tau``), a member records the ``tau`` at which its ``computed``
and ``generated`` were last written (its *base*) and is ``tau - base`` tokens further
on (:meth:`~DecodingSet.materialize` writes it). The set keeps running aggregates: its
size, the sum of its members' contexts, how many members cross a KV block boundary at
each step (by the residue of ``base - computed`` modulo the block size), by step who
finishes then, and (with prefix caching) the members whose content others may share,
by the same residue: those whose last block fills at a step.

With windowed layers (``window`` tokens, :class:`~des.cost.base.BatchShape`) it also keeps
Σ ``min(context, window − 1)``: members still below the cap grow one token a step like the
plain sum, members at it stay there; a member crosses at a step known when it joins (kept
by step, like the finishing ones), so each member costs O(1) over its whole stay and a
step stays constant work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import IntEnum

from des.engine.request import Request


class Phase(IntEnum):
    """Where a sequence stands on the instance running it."""

    LEFT = 0  # no longer runs here: finished, left for its next stage, or preempted
    PREFILLING = 1  # computing its prompt (or recomputing after a preemption)
    DECODING = 2  # one token a step, a member of the decoding set


LEFT, PREFILLING, DECODING = Phase.LEFT, Phase.PREFILLING, Phase.DECODING


@dataclass(slots=True, eq=False)
class Seq:
    """``req`` running on an instance, the ``admitted``-th admission there (counting from 0).

    ``base`` (while decoding): the decoding set's step count when ``req``'s progress was
    last written onto it; ``cap_at`` (with windowed layers): the step count from which its
    context is at the window's cap. With speculative decoding
    (:mod:`des.engine.schedulers.speculating`), ``q``: query tokens it computes in the step
    being formed (its last token and the proposed ones; 0: none), ``slots``: KV slots taken
    for that step beyond its ``computed``. ``last_emit``: when it last emitted, while its next
    token's gap is not the time since its instance's previous step (:mod:`des.engine.itl`).
    """

    req: Request
    admitted: int
    phase: Phase = PREFILLING
    base: int = 0
    cap_at: int = 0
    q: int = 0
    slots: int = 0
    last_emit: float = math.nan  # its last token, while its next one ends no ordinary gap (:mod:`des.engine.itl`)


class DecodingSet:
    """The sequences decoding one token a step on an instance with KV blocks of
    ``block_size`` tokens; ``caching``: track the members whose content others may share."""

    __slots__ = (
        "block_size", "caching", "tau", "size", "context", "crossing", "finishing", "shared",
        "cap", "growing", "grow_context", "capped", "capping",
    )  # fmt: skip

    def __init__(self, block_size: int, caching: bool, window: int = 0):
        self.block_size = block_size
        self.caching = caching
        self.cap = window - 1 if window else 0  # a windowed layer reads min(context, cap) + 1 tokens
        self.growing = 0  # members below the cap
        self.grow_context = 0  # their sum of (computed at base - base)
        self.capped = 0  # members at the cap
        self.capping: dict[int, list[Seq]] = {}  # tau -> members reaching the cap then
        self.tau = 0  # decode steps counted so far
        self.size = 0
        self.context = 0  # sum over members of (computed at base - base)
        self.crossing = [0] * block_size  # members by (base - computed at base) mod block size
        self.finishing: dict[int, list[Seq]] = {}  # tau -> members finishing when it is reached
        self.shared: list[dict[Seq, None]] = [{} for _ in range(block_size)]  # shareable members, by residue

    def materialize(self, seq: Seq) -> None:
        """Write a member's progress at the current ``tau`` onto its request (aggregates unchanged)."""
        d = self.tau - seq.base
        if d:
            req = seq.req
            req.computed += d
            req.generated += d
            seq.base = self.tau

    def start(self, seq: Seq) -> None:
        """``seq`` (progress written, needing one token a step from now on) joins the set."""
        tau = self.tau
        req = seq.req
        seq.phase = DECODING
        seq.base = tau
        self.size += 1
        self.context += req.computed - tau
        r = (tau - req.computed) % self.block_size
        self.crossing[r] += 1
        end = tau + req.output_tokens - req.generated
        bucket = self.finishing.get(end)
        if bucket is None:
            self.finishing[end] = [seq]
        else:
            bucket.append(seq)
        if req.segments is not None and self.caching:
            self.shared[r][seq] = None
        if self.cap:
            c = req.computed
            if c >= self.cap:
                seq.cap_at = tau
                self.capped += 1
            else:
                at = seq.cap_at = tau + self.cap - c
                self.growing += 1
                self.grow_context += c - tau
                bucket = self.capping.get(at)
                if bucket is None:
                    self.capping[at] = [seq]
                else:
                    bucket.append(seq)

    def stop(self, seq: Seq) -> None:
        """``seq`` (progress written) leaves the set; its finishing entry goes stale."""
        req = seq.req
        self.size -= 1
        self.context -= req.computed - seq.base
        r = (seq.base - req.computed) % self.block_size
        self.crossing[r] -= 1
        if req.segments is not None and self.caching:
            self.shared[r].pop(seq, None)
        if self.cap:
            if seq.cap_at <= self.tau:
                self.capped -= 1
            else:
                self.growing -= 1
                self.grow_context -= req.computed - seq.base

    @property
    def new_blocks(self) -> int:
        """KV blocks the members need for the next step's tokens (those whose last block is full)."""
        return self.crossing[self.tau % self.block_size]

    @property
    def total_context(self) -> int:
        """Sum of the members' contexts (tokens of KV each attends over)."""
        return self.context + self.size * self.tau

    @property
    def window_context(self) -> int:
        """Sum of the members' ``min(context, window − 1)`` (0 without a window)."""
        return self.grow_context + self.growing * self.tau + self.capped * self.cap

    def advance(self, starved: list[Seq]) -> list[Seq]:
        """Count a step, in which the members ``starved`` (of budget or blocks) got no token
        (from now on they are a step behind the others); the members whose last token it
        emitted, progress written."""
        tau = self.tau = self.tau + 1
        if self.cap:
            reaching = self.capping.pop(tau, None)
            if reaching:
                for seq in reaching:
                    if seq.phase is DECODING and seq.cap_at == tau:  # not a stale entry
                        self.growing -= 1
                        self.grow_context -= seq.req.computed - seq.base
                        self.capped += 1
        for seq in starved:
            self.stop(seq)
            self.start(seq)
        bucket = self.finishing.pop(tau, None)
        done = []
        if bucket:
            for seq in bucket:
                req = seq.req
                if seq.phase is DECODING and seq.base + req.output_tokens - req.generated == tau:
                    self.materialize(seq)
                    done.append(seq)
        return done

    def filled(self) -> dict[Seq, None]:
        """The shareable members whose last block the step just counted filled."""
        return self.shared[self.tau % self.block_size]
