"""The request entity: its lengths, its progress through the engine, and its timestamps.

Progress is counted in tokens. ``computed`` tokens have their KV in the cache;
``generated`` output tokens have been emitted. Before the next token can be emitted
the engine must compute ``remaining = prompt_tokens + generated - computed`` tokens:
the whole prompt for a new request, one token for a decoding one, and the prompt plus
everything generated so far for a request preempted by recomputation. The step that
brings ``remaining`` to zero emits one token.

A request visits one instance (colocated serving) or two (a prefill instance, then a
decode instance its KV cache is transferred to); the instances record themselves in
its per-visit fields. The KV blocks a request holds are counted by each instance's
block manager and scheduler, keyed by request id, never on the request: during a
transfer it holds blocks on two instances at once. So is how a scheduler tracks it
while it runs (:class:`des.engine.schedulers.decoding.Seq`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from des.engine.content import BlockKeys, Segment, unique_answer_id, unique_prompt_id

COMPLETED, REJECTED, UNFINISHED = "completed", "rejected", "unfinished"


@dataclass(slots=True, eq=False)
class Request:
    """One request. Times in seconds, sizes in tokens; instances by their cluster-wide index (-1: none)."""

    id: int
    arrival_time: float
    prompt_tokens: int
    output_tokens: int
    queued_time: float = math.nan  # when it last reached an instance's scheduler (vLLM's queued_ts)
    scheduled_time: float = math.nan
    first_token_time: float = math.nan
    second_token_time: float = math.nan  # when its second token was emitted (its first inter-token gap's end)
    last_token_time: float = math.nan  # its last token before a preemption (the gap after runs from there)
    finish_time: float = math.nan
    preemptions: int = 0
    status: str = UNFINISHED
    reason: str = ""
    instance: int = -1  # the last instance that served it
    prefill_instance: int = -1
    decode_instance: int = -1
    transfer_start: float = math.nan
    transfer_end: float = math.nan
    generated: int = 0
    computed: int = 0
    cached_tokens: int = 0  # tokens whose KV was found in a prefix cache instead of computed
    segments: tuple[Segment, ...] | None = None  # what its prompt is (des.engine.content); None: unique
    answer_id: int | None = None  # content id of its output (None: unique)
    conversation_id: int = -1
    turn: int = 0
    prefix_group: int = -1
    done: Any = None  # a simpy.Event fired when the request leaves, for closed-loop users
    previous: Request | None = None  # a conversation's turn before: its sequence begins this prompt
    _keys: BlockKeys | None = None

    def block_keys(self, block_size: int) -> BlockKeys:
        """The keys of its KV blocks of ``block_size`` tokens: prompt, then output."""
        keys = self._keys
        if keys is None or keys.block_size != block_size:
            prompt = self.segments or ((unique_prompt_id(self.id), self.prompt_tokens),)
            answer = self.answer_id if self.answer_id is not None else unique_answer_id(self.id)
            keys = self._keys = BlockKeys((*prompt, (answer, self.output_tokens)), block_size)
            before = self.previous
            if before is not None and before._keys is not None and before._keys.block_size == block_size:
                # the blocks of the turn before lie whole in this prompt: their keys are these
                whole = (before.prompt_tokens + before.output_tokens) // block_size
                keys.keys.extend(before._keys.keys[:whole])
            self.previous = None  # keep no chain of turns alive
        return keys

    def emit(self, now: float) -> int:
        """One more output token, emitted at ``now`` (seconds); the first dates
        ``first_token_time``. Returns the tokens generated so far."""
        g = self.generated = self.generated + 1
        if g == 1:
            self.first_token_time = now
        return g

    def preempt(self) -> None:
        """Its KV is dropped: everything computed must be computed again (or found cached)."""
        self.computed = 0
        self.preemptions += 1

    @property
    def remaining(self) -> int:
        """Tokens to compute before the next token is emitted."""
        return self.prompt_tokens + self.generated - self.computed

    @property
    def peak_tokens(self) -> int:
        """KV tokens held just before the last token is emitted: ``prompt + output - 1``."""
        return self.prompt_tokens + self.output_tokens - 1
