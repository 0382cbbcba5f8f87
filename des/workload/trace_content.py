"""What a trace's rows say their prompts are: the content segments of each replayed request.

A trace states content three ways (columns of the trace table,
:mod:`des.workload.formats.base`): Mooncake's block ``hash_ids``, a shared prefix
(``prefix_group``, ``prefix_tokens``) and conversations (``conversation_id``). Each
becomes segments of content ids (:mod:`des.workload.spec`), so that the prefix cache
finds what the rows share.
"""

from __future__ import annotations

from typing import Any

from des.workload.shared_prefix import SharedPrefix
from des.workload.spec import ContentIds, RequestSpec, Segment


def trace_requests(
    table: Any, ids: ContentIds, block_tokens: int, shared_prefix: SharedPrefix | None = None
) -> list[RequestSpec]:
    """The requests of a trace's rows: lengths as recorded, content as the trace states it.

    - ``hash_ids`` (Mooncake): each id names ``block_tokens`` tokens of the prompt (the
      last block may be partial); tokens beyond the ids are the request's own.
    - ``prefix_group``: the prompt opens with the group's prefix of ``prefix_tokens``
      tokens (the row's, else ``shared_prefix.tokens``; at most the prompt).
    - ``conversation_id``: a chat's rows are its turns in arrival order; a turn's prompt
      begins with the turn before's prompt and answer, then new tokens. A recorded
      prompt shorter than that history (a client that cut the context) shares the head
      of the history that fits.
    Rows stating nothing are content of their own.
    """
    n = len(table)

    def column(name: str, blank: Any) -> list[Any]:
        return table[name].tolist() if name in table else [blank] * n

    default_prefix = shared_prefix.tokens if shared_prefix is not None else 0
    rows = zip(
        table["prompt_tokens"].tolist(),
        table["output_tokens"].tolist(),
        column("hash_ids", ()),
        column("prefix_group", -1),
        column("prefix_tokens", 0),
        column("conversation_id", -1),
        strict=True,
    )
    last: dict[int, RequestSpec] = {}  # each conversation's latest turn
    specs = []
    for p, o, h, g, pt, c in rows:
        spec = RequestSpec(p, o)
        if h:
            spec.segments = _hashed(h, p, block_tokens, ids)
        elif g >= 0:
            spec.segments, spec.prefix_group = _prefixed(g, min(pt or default_prefix, p), p, ids), g
        if c >= 0:
            _next_turn(spec, last.get(c), c, ids)
            last[c] = spec
        specs.append(spec)
    return specs


def _hashed(hashes: tuple[int, ...], prompt: int, block_tokens: int, ids: ContentIds) -> tuple[Segment, ...]:
    """A prompt of ``prompt`` tokens whose blocks of ``block_tokens`` are named by ``hashes``
    (the last block cut to the prompt; tokens beyond the hashes its own)."""
    segs = [(ids.named(("hash", b)), block_tokens) for b in hashes]
    covered = block_tokens * len(hashes)
    if covered > prompt:
        segs[-1] = (segs[-1][0], prompt - block_tokens * (len(hashes) - 1))
    elif covered < prompt:
        segs.append((ids.new(), prompt - covered))
    return tuple(segs)


def _prefixed(group: int, tokens: int, prompt: int, ids: ContentIds) -> tuple[Segment, ...]:
    """A prompt of ``prompt`` tokens opening with ``group``'s prefix of ``tokens`` tokens."""
    own = ((ids.new(), prompt - tokens),) if prompt > tokens else ()
    return ((ids.named(("prefix", group)), tokens), *own)


def _next_turn(spec: RequestSpec, before: RequestSpec | None, chat: int, ids: ContentIds) -> None:
    """Make ``spec`` the turn of conversation ``chat`` after ``before`` (None: its first)."""
    p = spec.prompt_tokens
    if before is None:
        spec.segments = spec.segments or ((ids.new(), p),)
        spec.turn = 1
    else:
        assert before.segments is not None and before.answer_id is not None
        history = (*before.segments, (before.answer_id, before.output_tokens))
        spec.segments = _head(history, p) + (((ids.new(), p - _length(history)),) if p > _length(history) else ())
        spec.turn, spec.prefix_group = before.turn + 1, before.prefix_group
    spec.conversation_id, spec.answer_id = chat, ids.new()


def _length(segments: tuple[Segment, ...]) -> int:
    return sum(n for _, n in segments)


def _head(segments: tuple[Segment, ...], tokens: int) -> tuple[Segment, ...]:
    """The segments of the first ``tokens`` tokens (the last one cut short if need be)."""
    out: list[Segment] = []
    for cid, n in segments:
        if tokens <= 0:
            break
        out.append((cid, min(n, tokens)))
        tokens -= n
    return tuple(out)
