"""Inter-token latency: every gap between two tokens a client receives, kept cheaply.

vLLM's benchmark (``vllm bench serve``) and its ``inter_token_latency`` metric record, for
each request, the time between consecutive streamed chunks: one gap per step in which the
request emits (a speculative step's several tokens arrive together, as one chunk). A
continuous-batching scheduler's decoding sequences emit in every step of their instance,
so most gaps are just the time since the instance's previous step ended: one value shared
by every sequence that emitted in both. An :class:`ItlLog` keeps those as one weighted
record per step (the step's end, the gap, how many sequences it is theirs), and the
others one record each: a request's second token (its first gap, after its prefill, or,
on a disaggregated decode instance, after its KV crossed), a sequence's first token after
it was starved of a step or preempted and recomputed. The distribution of gaps is the
weighted one (:func:`des.metrics.summary.itl_metrics`); its cost is a few operations per
step and one record per request and per starved or preempted sequence, never per token.
"""

from __future__ import annotations

from array import array


class ItlLog:
    """Gaps between tokens, seconds: ``time`` a gap ended (the emitting step's end),
    ``gap`` its length, ``weight`` how many sequences' gap it is."""

    __slots__ = ("time", "gap", "weight")

    def __init__(self) -> None:
        self.time: array[float] = array("d")
        self.gap: array[float] = array("d")
        self.weight: array[int] = array("q")

    def add(self, time: float, gap: float, weight: int = 1) -> None:
        self.time.append(time)
        self.gap.append(gap)
        self.weight.append(weight)

    def __len__(self) -> int:
        return len(self.time)
