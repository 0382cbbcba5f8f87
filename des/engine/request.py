"""The request entity: its lengths, its progress through the engine, and its timestamps.

Progress is counted in tokens. ``computed`` tokens have their KV in the cache;
``generated`` output tokens have been emitted. Before the next token can be emitted
the engine must compute ``remaining = prompt_tokens + generated - computed`` tokens:
the whole prompt for a new request, one token for a decoding one, and the prompt plus
everything generated so far for a request preempted by recomputation. The step that
brings ``remaining`` to zero emits one token.

A request visits one instance (colocated serving) or two (a prefill instance, then a
decode instance its KV cache is transferred to); the instances record themselves in
its per-visit fields. The KV blocks a request holds are kept by each instance's
scheduler, keyed by request id, never on the request: during a transfer it holds
blocks on two instances at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

COMPLETED, REJECTED, UNFINISHED = "completed", "rejected", "unfinished"


@dataclass(slots=True, eq=False)
class Request:
    """One request. Times in seconds, sizes in tokens; instances by their cluster-wide index (-1: none)."""

    id: int
    arrival_time: float
    prompt_tokens: int
    output_tokens: int
    scheduled_time: float = math.nan
    first_token_time: float = math.nan
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
    done: Any = None  # a simpy.Event fired when the request leaves, for closed-loop users

    @property
    def remaining(self) -> int:
        """Tokens to compute before the next token is emitted."""
        return self.prompt_tokens + self.generated - self.computed

    @property
    def peak_tokens(self) -> int:
        """KV tokens held just before the last token is emitted: ``prompt + output - 1``."""
        return self.prompt_tokens + self.output_tokens - 1
