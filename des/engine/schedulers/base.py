"""The scheduler interface every batching policy implements.

An instance calls ``schedule(now)`` before every step; the scheduler re-decides the
batch and returns a :class:`Step` (or ``None`` when nothing can run now). After the
step's duration the instance calls ``finish_step(step, now)``, which applies the
step's progress and returns the requests that leave the instance at ``now``.
Schedulers never scan requests beyond their batch and the head of their queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

import numpy as np

from des.cost.base import BatchShape
from des.engine.kvcache import BlockManager
from des.engine.request import Request

Items = TypeVar("Items")


@dataclass(slots=True)
class Step(Generic[Items]):
    """One GPU step: its cost shape, its members and its bookkeeping counts.

    ``items`` holds the scheduler's own description of the members (the static
    batch's requests; the continuous scheduler's tokens per running sequence);
    ``batch_size`` counts sequences doing useful work, ``width`` the sequences the GPU
    computes (more than ``batch_size`` when a static
    batch carries finished, padded rows).
    """

    shape: BatchShape
    items: Items
    batch_size: int = 0
    width: int = 0
    preempted: int = 0
    emitted: int = 0
    decoding: bool = False  # every member decodes one token


class Scheduler(Protocol):
    kv: BlockManager

    def rejection(self, req: Request) -> str | None:
        """Why ``req`` can never be served here (a short reason), or None."""

    def add(self, req: Request) -> None:
        """Queue a newly arrived request."""

    def has_work(self) -> bool: ...

    def num_waiting(self) -> int: ...

    def schedule(self, now: float) -> Step[Any] | None:
        """The next step's batch, or None when nothing can start now."""

    def wakeup_time(self) -> float | None:
        """When ``schedule`` may return a step with no new arrival (static ``max_wait``)."""

    def finish_step(self, step: Step[Any], now: float) -> list[Request]:
        """Apply the step's progress at its end time ``now``; return the requests released."""

    def sync(self) -> None:
        """Bring the Request objects of the requests it holds up to date (at the end of a run)."""

    def steady_steps(self, step: Step[Any], limit: int) -> int:
        """How many steps, from ``step`` on and at most ``limit``, are pure decodes of the
        same members that release nobody (so many can be applied at once); at least 1."""

    def advance(self, step: Step[Any], j: int) -> np.ndarray:
        """Apply ``j`` such steady steps at once (instead of ``finish_step``); return the
        KV blocks in use during each."""


class SchedulerKind(Protocol):
    """What the scheduler registry holds: a configuration that builds a scheduler."""

    @property
    def kind(self) -> str: ...

    def build(self, kv: BlockManager, max_model_len: int) -> Scheduler: ...


def length_rejection(req: Request, max_model_len: int, kv: BlockManager, width: int = 1) -> str | None:
    """Reasons shared by all schedulers: the context limit and the KV cache's size."""
    if req.prompt_tokens + req.output_tokens > max_model_len:
        return "exceeds_max_model_len"
    if width * kv.blocks_for(req.peak_tokens) > kv.num_blocks:
        return "exceeds_kv_capacity"
    return None
