"""What a request's tokens *are*, without token ids: the identity of its KV blocks.

Prefix caching reuses a block of KV when a new sequence holds the same tokens at the
same positions from its start. des never sees tokens, so a request says what its
tokens are as a sequence of *segments*, each ``(content_id, length)``: a run of
``length`` tokens of the piece of content ``content_id`` (an integer; equal ids mean
equal tokens), followed by its own output, the segment ``(answer_id, output_tokens)``.

- Requests of one shared-prefix group begin with the same segment ``(prefix g, T)``.
- Turn ``k`` of a conversation sends the previous turn's segments, the previous
  answer and its new message: it begins with exactly the previous turn's whole
  sequence, whose blocks (prompt and generated) the previous turn has cached.
- A trace that states block hashes (Mooncake's ``hash_ids``, one per 512 tokens)
  gives one segment per hashed block, its content id the hash.
- A request that states nothing is its own unique content (ids derived from its
  request id, never equal to an explicit one), so only its own preempted blocks can
  ever be reused.

The key of block ``b`` (tokens ``[b·B, (b+1)·B)`` for block size ``B``) chains over the
blocks before it, as vLLM's block hashes do: ``key_b = hash((key_{b-1}, pieces_b))``
where ``pieces_b`` lists, for every segment the block overlaps, its content id and the
offset and length of the overlap. Keys are Python's hash of a tuple of integers:
deterministic from run to run, and equal only for equal prefixes (up to a 2⁻⁶⁴
chance of collision per pair of distinct blocks).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

from des.workload.spec import Segment


def unique_prompt_id(request_id: int) -> int:
    """The content id of the prompt of a request that states no content (negative:
    never an explicit id)."""
    return -2 * request_id - 1


def unique_answer_id(request_id: int) -> int:
    """The content id of a request's output when the workload names none."""
    return -2 * request_id - 2


@dataclass(slots=True)
class BlockKeys:
    """The block keys of one token sequence, computed as far as asked and kept."""

    segments: Sequence[Segment]
    block_size: int
    keys: list[int] = field(default_factory=list)
    _starts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        start = 0
        for _, n in self.segments:
            self._starts.append(start)
            start += n

    @property
    def length(self) -> int:
        """Tokens in the whole sequence."""
        return self._starts[-1] + self.segments[-1][1] if self.segments else 0

    def upto(self, n: int) -> list[int]:
        """The keys of at least the first ``n`` blocks (all full; ``n · block_size`` tokens at
        most the length): the list kept, which may hold more; read only its first ``n``."""
        keys, bs, segs, starts = self.keys, self.block_size, self.segments, self._starts
        if not keys and n > 0 and segs and segs[0][0] >= 0 and segs[0][1] >= 2 * bs:
            keys += _head_keys(segs[0][0], segs[0][1] // bs, bs)  # a named head: shared by many
        parent = keys[-1] if keys else 0
        i = 0
        for b in range(len(keys), n):
            lo, hi = b * bs, (b + 1) * bs
            i = bisect_right(starts, lo, i) - 1
            cid, length = segs[i]
            start = starts[i]
            if hi <= start + length:  # the block lies in one segment
                parent = hash((parent, cid, lo - start, bs))
            else:
                pieces: list[int] = []
                while i < len(segs) and starts[i] < hi:
                    cid, length = segs[i]
                    a = max(lo, starts[i])
                    z = min(hi, starts[i] + length)
                    pieces += (cid, a - starts[i], z - a)
                    i += 1
                i = max(i - 1, 0)
                parent = hash((parent, *pieces))
            keys.append(parent)
        return keys


#: Keys of the whole blocks of named segments at the start of a sequence, by (content id,
#: blocks, block size): every request of a shared-prefix group begins with the same ones.
_HEADS: dict[tuple[int, int, int], list[int]] = {}
_HEADS_MAX = 4096


def _head_keys(cid: int, blocks: int, block_size: int) -> list[int]:
    """The keys of the first ``blocks`` blocks of a sequence opening with content ``cid``
    (as :meth:`BlockKeys.upto` chains them)."""
    memo = (cid, blocks, block_size)
    keys = _HEADS.get(memo)
    if keys is None:
        keys, parent = [], 0
        for b in range(blocks):
            parent = hash((parent, cid, b * block_size, block_size))
            keys.append(parent)
        if len(_HEADS) >= _HEADS_MAX:
            _HEADS.clear()
        _HEADS[memo] = keys
    return keys
