"""A scenario's workload section, and the SimPy processes it becomes.

:class:`Workload` is the validated ``workload`` section: the arrival process, the
length laws of prompts and outputs (tokens), and what requests share (a system prompt,
chat histories). :func:`arrival_processes` assembles it: the maker of new requests
(lengths drawn from their own streams, content ids for prefix caching), the starter
of conversations, and then whatever processes the arrival kind makes of them
(:meth:`~des.workload.arrivals.Open.processes` and its kin), every request handed to
the engine's ``submit``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import simpy
from pydantic import model_validator

from des.config import MAX_TIME, Strict
from des.workload.arrivals import ArrivalConfig, Closed, Trace
from des.workload.client import ClientSpec
from des.workload.conversations import Conversations, conversation
from des.workload.lengths import LengthConfig, LengthStream
from des.workload.shared_prefix import SharedPrefix
from des.workload.source import Budget, Make, Session, Sources, Start, Submit
from des.workload.spec import ContentIds, RequestSpec


class Workload(Strict):
    """How requests arrive, how long their prompts and outputs are (tokens), and what
    they share: a system prompt (``shared_prefix``) or a chat history (``conversations``)."""

    arrival: ArrivalConfig
    prompt_tokens: LengthConfig | None = None
    output_tokens: LengthConfig | None = None
    shared_prefix: SharedPrefix | None = None
    conversations: Conversations | None = None

    @model_validator(mode="after")
    def _lengths_needed(self) -> Workload:
        if not isinstance(self.arrival, Trace):
            for key in ("prompt_tokens", "output_tokens"):
                if getattr(self, key) is None:
                    raise ValueError(f"{key}: required (a length distribution) unless the arrivals replay a trace")
        if isinstance(self.arrival, Trace):
            columns = self.arrival.table.columns
            if self.shared_prefix is not None and "prefix_group" not in columns:
                raise ValueError("shared_prefix: a trace takes prefixes from its prefix_group column, and it has none")
            if "prefix_group" in columns and "prefix_tokens" not in columns and self.shared_prefix is None:
                raise ValueError(
                    "shared_prefix: required, the trace's prefix_group rows have no prefix_tokens "
                    "(give {tokens: N} for their prefix length)"
                )
        if isinstance(self.arrival, Trace):
            last = float(self.arrival.table["arrival_time"].max())
            if last > MAX_TIME:
                raise ValueError(
                    f"arrival: the replay's last request arrives at {last:g} s, beyond {MAX_TIME:g} s (317 years), "
                    "where a double no longer times a step (check its times, time_scale and rate_scale)"
                )
        if self.conversations is not None and isinstance(self.arrival, Closed | Trace):
            raise ValueError(
                "conversations: need an open arrival process (poisson, gamma, onoff, mmpp, nhpp) to start them; "
                "a trace states its own conversations (conversation_id)"
            )
        return self


def arrival_processes(
    env: simpy.Environment,
    workload: Workload,
    streams: Mapping[str, np.random.Generator],
    submit: Submit,
    duration: float,
    num_requests: int | None,
    context_limit: int,
    client: ClientSpec | None = None,
) -> list[simpy.Process]:
    """The SimPy processes that bring ``workload``'s requests to ``submit``, until
    ``duration`` seconds or ``num_requests`` requests (None: no limit).

    Each component draws from its own stream of ``streams``: ``prompt_tokens``,
    ``output_tokens``, ``prefix`` (a request's prefix group), ``turns`` and ``think`` (a
    conversation's length and pauses), ``arrivals`` and ``think`` (the arrival kind's
    own), ``client`` (closed-loop clients' turnaround, ``client``'s lognormal:
    :mod:`des.workload.client`). No conversation goes on past
    ``context_limit`` tokens (prompt plus output).
    """
    w = workload
    src = Sources(env, submit, duration, Budget(num_requests), streams, ContentIds(), shared_prefix=w.shared_prefix)
    if client is not None:
        src.turnaround = client.sampler(streams["client"])
    if w.prompt_tokens is not None and w.output_tokens is not None:
        prompt = LengthStream(w.prompt_tokens, streams["prompt_tokens"])
        output = LengthStream(w.output_tokens, streams["output_tokens"])
        src.make = _new_requests(w, prompt, output, streams, src.ids)
        if w.conversations is not None:
            src.start = _conversations(src, w.conversations, prompt, output, context_limit)
    return [env.process(p) for p in w.arrival.processes(src)]


def _new_requests(
    w: Workload,
    prompt: LengthStream,
    output: LengthStream,
    streams: Mapping[str, np.random.Generator],
    ids: ContentIds,
) -> Make:
    """The maker of ``w``'s new requests: lengths drawn from ``prompt`` and ``output``, a
    shared prefix group when ``w`` has one, explicit content when they start conversations."""
    prefix = w.shared_prefix
    chats = w.conversations is not None
    if prefix is not None:
        group = prefix.picker(streams["prefix"])

        def make() -> RequestSpec:
            spec = prefix.spec(group(), prompt(), output(), ids)
            if chats:
                spec.answer_id = ids.new()
            return spec

        return make
    if chats:
        return lambda: RequestSpec(p := prompt(), output(), ((ids.new(), p),), ids.new())
    return lambda: RequestSpec(prompt(), output())


def _conversations(
    src: Sources,
    chats: Conversations,
    prompt: LengthStream,
    output: LengthStream,
    limit: int,
) -> Start:
    """What starts each conversation from its first request (numbered in order); its next
    turns draw their new tokens and outputs from ``prompt`` and ``output``."""
    turns = LengthStream(chats.turns, src.streams["turns"])
    think = chats.think_time.sampler(src.streams["think"])
    count = iter(range(1 << 62))
    env, submit, ids = src.env, src.submit, src.ids

    def start(first: RequestSpec) -> Session:
        first.conversation_id, first.turn = next(count), 1
        return conversation(env, first, turns(), think, prompt, output, submit, ids, limit, src.one_more)

    return start
