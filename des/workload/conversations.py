"""Multi-turn conversations: each arrival starts a chat whose next turns re-send its history.

``workload.conversations: {turns, think_time}``: the arrival process starts
conversations. A conversation has ``turns`` turns (a length distribution). Its first
turn is a request like any other (with a shared prefix when the workload has one).
Each next turn arrives ``think_time`` seconds (a time distribution) after the previous
answer ends and sends the previous prompt, the previous answer and ``prompt_tokens``
new tokens: its prompt begins with the previous turn's whole sequence, which prefix
caching can reuse. A conversation ends after its last turn, when a turn is rejected,
when its next turn would not fit ``max_model_len`` (prompt plus output), or at the
horizon (no turn is sent after ``duration``, and every turn counts towards
``num_requests``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy

from des.config import Strict
from des.workload.lengths import LengthConfig
from des.workload.spec import ContentIds, RequestSpec, Segment
from des.workload.times import TimeConfig


class Conversations(Strict):
    """How many turns a conversation has (a length law) and how long users think between them (seconds)."""

    turns: LengthConfig
    think_time: TimeConfig


def next_turn(previous: RequestSpec, new: int, output: int, ids: ContentIds) -> RequestSpec:
    """The turn after ``previous``: its whole sequence, then ``new`` tokens of a new message."""
    assert previous.segments is not None and previous.answer_id is not None
    history: tuple[Segment, ...] = (*previous.segments, (previous.answer_id, previous.output_tokens))
    prompt = previous.prompt_tokens + previous.output_tokens + new
    return RequestSpec(
        prompt,
        output,
        (*history, (ids.new(), new)),
        ids.new(),
        previous.conversation_id,
        previous.turn + 1,
        previous.prefix_group,
    )


def conversation(
    env: simpy.Environment,
    first: RequestSpec,
    turns: int,
    think: Callable[[], float],
    new_tokens: Callable[[], int],
    output_tokens: Callable[[], int],
    submit: Callable[[RequestSpec, bool], Any],
    ids: ContentIds,
    limit: int,
    still_open: Callable[[], bool],
) -> Generator[simpy.Event, Any, None]:
    """The SimPy process of one conversation of ``turns`` turns starting with ``first``
    (submitted now); ``still_open()`` says whether the horizon allows one more request."""
    spec = first
    for _ in range(turns):
        outcome = yield submit(spec, True)
        if outcome.status == "rejected" or spec.turn >= turns:
            return
        pause = think()
        if pause > 0:
            yield env.timeout(pause)
        nxt = next_turn(spec, new_tokens(), output_tokens(), ids)
        nxt.previous = outcome
        if nxt.prompt_tokens + nxt.output_tokens > limit or not still_open():
            return
        spec = nxt
