"""Inter-token latency: every gap between two tokens a client receives, kept cheaply.

vLLM's benchmark (``vllm bench serve``) and its ``inter_token_latency`` metric record, for
each request, the time between consecutive streamed chunks: one gap per step in which the
request emits (a speculative step's several tokens arrive together, as one chunk). A
continuous-batching scheduler's decoding sequences emit in every step of their instance,
so most gaps are just the time since the instance's previous step ended: one value shared
by every sequence that emitted in both. An :class:`ItlLog` keeps those as two numbers per
step (its end, and how many sequences emitted in it and in the step before), and the
others one record each: a request's second token on a disaggregated decode instance (its
first gap, which held its KV transfer), a sequence's first token after it was starved of a
step or preempted and recomputed. (A colocated request's second token comes a step after
its first: an ordinary gap; the scheduler only dates it, ``second_token_time``.) The distribution of gaps is the
weighted one (:func:`des.metrics.summary.itl_metrics`); its cost is a few operations per
step and one record per request and per starved or preempted sequence, never per token.
"""

from __future__ import annotations

import math
from array import array

import numpy as np


class ItlLog:
    """Gaps between tokens on one scheduler, seconds. Every step appends its end (``end``)
    and how many sequences emitted in it and in the scheduler's step before (``weight``):
    their gap is the time between the two steps' ends (:meth:`ordinary`). Gaps that are
    not are recorded one each (:meth:`add`): ``time`` the gap ended, ``gap`` its length."""

    __slots__ = ("end", "weight", "time", "gap")

    def __init__(self) -> None:
        self.end: array[float] = array("d")
        self.weight: array[int] = array("q")
        self.time: array[float] = array("d")
        self.gap: array[float] = array("d")

    def add(self, time: float, gap: float) -> None:
        """One gap of one sequence, ``gap`` seconds ending at ``time``."""
        self.time.append(time)
        self.gap.append(gap)

    @property
    def last_end(self) -> float:
        """When the scheduler's last step ended (NaN before the first)."""
        return self.end[-1] if self.end else math.nan

    def ordinary(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The steps' shared gaps: (end, gap, weight) of every step after the first."""
        end = np.frombuffer(self.end) if self.end else np.zeros(0)
        weight = np.frombuffer(self.weight, dtype=np.int64) if self.weight else np.zeros(0, dtype=np.int64)
        return end[1:], np.diff(end), weight[1:]

    def __len__(self) -> int:
        return len(self.end) + len(self.time)
