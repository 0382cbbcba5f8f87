"""The interface every batching policy implements, and what the policies share.

(The policies themselves live in :mod:`des.engine.schedulers`; this module sits below
them and below :mod:`des.engine.layout`, which lays out pools of them.)

An instance calls ``schedule(now)`` before every step; the scheduler re-decides the
batch and returns a :class:`Step` (or ``None`` when nothing can run now). Under async
scheduling the instance says when the batch was formed, ``schedule(now, seen)``: a
request that reached the scheduler after ``seen`` waits for the next batch. After the
step's duration the instance calls ``finish_step(step, now)``, which applies the
step's progress and returns the requests that leave the instance at ``now``. A
request that leaves keeps its KV blocks until whoever knows its next stage calls
``free(request_id)``: the cluster's exit right away when it is done, a KV link once
its cache has been transferred to a decode instance. Schedulers never scan requests
beyond their batch and the head of their queue.

An instance plays one :data:`Role`: ``colocated`` (a request's whole life),
``prefill`` (up to its first token, then it leaves) or ``decode`` (from a
transferred prompt's KV on).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

import numpy as np

from des.cost.base import BatchShape
from des.engine.itl import ItlLog
from des.engine.kvcache import BlockManager
from des.engine.request import Request
from des.engine.speculative import SpeculativeConfig

Items = TypeVar("Items")
Role = Literal["colocated", "prefill", "decode"]
ROLES: tuple[Role, ...] = ("colocated", "prefill", "decode")
#: The most sequences one step may hold (``max_num_seqs``, ``max_batch_size``): as many as
#: the most instances or data-parallel ranks a pool may have
#: (:data:`des.engine.layout.MAX_INSTANCES`), 40 times vLLM's default of 256; beyond, a
#: batch's counts leave what a table column (int64) and a step's cost arithmetic hold.
MAX_BATCH = 10_000


@dataclass(slots=True)
class Step(Generic[Items]):
    """One GPU step: its cost shape, its members and its bookkeeping counts.

    ``items`` holds the scheduler's own description of the members (the static
    batch's requests; the continuous scheduler's tokens per running sequence);
    ``batch_size`` counts sequences doing useful work, ``width`` the sequences the GPU
    computes (more than ``batch_size`` when a static batch carries finished, padded
    rows); ``preempted`` the requests preempted to make room for it; ``emitted`` the
    tokens it emits; ``decoding``: every member decodes one token; ``cached_tokens``
    the tokens its admissions found in the prefix cache (and did not compute).
    """

    shape: BatchShape
    items: Items
    batch_size: int = 0
    width: int = 0
    preempted: int = 0
    emitted: int = 0
    decoding: bool = False
    cached_tokens: int = 0


class Scheduler(Protocol):
    """One instance's batching policy over the instance's KV blocks."""

    def rejection(self, req: Request) -> str | None:
        """Why ``req`` can never be served here (a short reason), or None."""
        ...

    def add(self, req: Request, blocks: int = 0) -> None:
        """Queue a request that already holds ``blocks`` KV blocks here (a transferred prompt's)."""
        ...

    def schedule(self, now: float, seen: float | None = None) -> Step[Any] | None:
        """The batch of the step starting at ``now``, or None when nothing can start now.
        ``seen``: the batch was formed then, so it admits only requests that reached the
        scheduler by that time (vLLM's async scheduling); None: formed at ``now``."""
        ...

    def finish_step(self, step: Step[Any], now: float) -> list[Request]:
        """Apply the step's progress at its end time ``now``; return the requests leaving."""
        ...

    def free(self, req_id: int) -> None:
        """Give back the KV blocks a request that left still holds."""
        ...

    def num_waiting(self) -> int: ...

    def wakeup_time(self) -> float | None:
        """When ``schedule`` may return a step with no new arrival (static ``max_wait``)."""
        ...

    def sync(self) -> None:
        """Write onto the requests it holds any progress it keeps elsewhere (at the end of a run)."""
        ...

    def gap_logs(self) -> list[ItlLog]:
        """Its logs of the gaps between the tokens its requests receive (one per batch in flight)."""
        ...


class PolicyConfig(Protocol):
    """The configuration of a batching policy that runs on an instance.

    ``profile_tokens`` and ``token_budget`` are two roles, not two names of one knob:
    the step size the memory plan reserves activations for, and the budget a step's
    tokens are measured against. Continuous batching's ``max_num_batched_tokens`` plays
    both; a static batch has a profile (a fixed 2048 tokens) and no budget.
    """

    @property
    def max_batch(self) -> int:
        """Most sequences in one step."""
        ...

    @property
    def profile_tokens(self) -> int:
        """Tokens of the largest step, for the activation memory of the KV plan."""
        ...

    @property
    def token_budget(self) -> int | None:
        """Most tokens one step may compute (None: no budget)."""
        ...

    @property
    def block_size(self) -> int: ...

    @property
    def gpu_memory_utilization(self) -> float: ...

    @property
    def max_model_len(self) -> int | None: ...

    @property
    def num_gpu_blocks_override(self) -> int | None: ...

    @property
    def prefix_caching(self) -> bool:
        """Whether the instance's KV blocks are cached for reuse by content."""
        ...

    @property
    def speculative(self) -> SpeculativeConfig | None:
        """How the policy's decodes speculate (None: they do not)."""
        ...

    def build(
        self, kv: BlockManager, max_model_len: int, role: Role = "colocated", rng: np.random.Generator | None = None
    ) -> Scheduler:
        """One instance's scheduler over ``kv``; ``rng``: the run's speculative-decoding stream."""
        ...


def held_tokens(req: Request, role: Role) -> int:
    """The most KV tokens ``req`` ever holds on an instance of ``role``: its prompt on a
    prefill instance, ``prompt + output - 1`` elsewhere."""
    return req.prompt_tokens if role == "prefill" else req.peak_tokens


def length_rejection(
    req: Request, max_model_len: int, kv: BlockManager, role: Role = "colocated", width: int = 1
) -> str | None:
    """Reasons shared by all schedulers: the context limit and the KV cache's size."""
    if req.prompt_tokens + req.output_tokens > max_model_len:
        return "exceeds_max_model_len"
    if width * kv.blocks_for(held_tokens(req, role)) > kv.num_blocks:
        return "exceeds_kv_capacity"
    return None
