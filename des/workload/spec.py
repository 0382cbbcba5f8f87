"""What the workload asks of the engine: one request's lengths and what its tokens are.

A :class:`RequestSpec` carries a request's prompt and output lengths (tokens) and, for
prefix caching, what its prompt *is*: a sequence of segments ``(content_id,
tokens)`` (see :mod:`des.engine.content`) and the content id of its answer, plus the
conversation and shared-prefix group it belongs to. :class:`ContentIds` hands out the
integer content ids of one run: fresh ones for new text, and the same one for the
same named content (a shared prefix group, a trace's block hash).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

#: A run of ``tokens`` tokens of the content ``content_id``.
Segment = tuple[int, int]


@dataclass(slots=True)
class RequestSpec:
    """One request to submit: lengths in tokens, its content, its conversation and prefix group."""

    prompt_tokens: int
    output_tokens: int
    segments: tuple[Segment, ...] | None = None  # what the prompt is; None: content of its own
    answer_id: int | None = None  # content id of its output, for a conversation's next turn
    conversation_id: int = -1
    turn: int = 0
    prefix_group: int = -1
    previous: Any = None  # the request of the turn before, whose whole sequence this prompt begins with


class ContentIds:
    """Integer content ids of one run, all >= 0: ``new()`` for fresh text, ``named(key)``
    for content that recurs under a name (equal keys, equal ids)."""

    __slots__ = ("_next", "_named")

    def __init__(self) -> None:
        self._next = 0
        self._named: dict[Hashable, int] = {}

    def new(self) -> int:
        i = self._next
        self._next = i + 1
        return i

    def named(self, key: Hashable) -> int:
        i = self._named.get(key)
        if i is None:
            i = self._named[key] = self.new()
        return i
