"""The step-time interface: a batch's aggregates in, seconds out.

Schedulers describe each GPU step by a :class:`BatchShape` of aggregates (token
counts and sums of contexts), never by the list of its sequences, so the cost of a
step is O(1) whatever the batch size, and the fast-forward engine can cost a span of
decode steps from running sums. Cost models are pure functions of the shape and the
specs, built once per run from a :class:`CostContext`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from des.catalog.efficiency import UncertaintyGroup
    from des.catalog.memory import Precision
    from des.catalog.specs import GPUSpec, ModelSpec
    from des.cost.frontend import FrontendSpec


@dataclass(slots=True)
class BatchShape:
    """Aggregates of one GPU step. Sizes in tokens.

    ``num_seqs``: sequences the GPU computes (for static batching the padded width);
    ``prefill_tokens``: new tokens of prefill chunks (padding included);
    ``prefill_pairs``: Σ over chunks of ``chunk × (prior + (chunk + 1) / 2)``, the
    query-key pairs causal attention evaluates; ``prefill_context``: Σ over chunks of
    ``prior + chunk``, the KV a chunk reads; ``decode_tokens``: sequences decoding one
    token; ``decode_context``: Σ of their contexts (KV read, tokens);
    ``num_emitting``: sequences that emit a token (rows through the LM head).
    """

    num_seqs: int = 0
    prefill_tokens: int = 0
    prefill_pairs: float = 0.0
    prefill_context: int = 0
    decode_tokens: int = 0
    decode_context: int = 0
    num_emitting: int = 0

    @classmethod
    def decodes(cls, num: int, context: int) -> BatchShape:
        """``num`` sequences decoding one token each, whose KV holds ``context`` tokens in
        all before the step (each reads its context plus the new token)."""
        return cls(num_seqs=num, decode_tokens=num, decode_context=context + num, num_emitting=num)

    @property
    def new_tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens

    def add_chunk(self, prior: int, chunk: int, emits: bool) -> None:
        """Add one prefill chunk of ``chunk`` tokens after ``prior`` computed tokens."""
        self.num_seqs += 1
        self.prefill_tokens += chunk
        self.prefill_pairs += chunk * (prior + (chunk + 1) / 2)
        self.prefill_context += prior + chunk
        self.num_emitting += emits

    def add_decode(self, context: int) -> None:
        """Add one decoding sequence whose KV holds ``context`` tokens before this step."""
        self.num_seqs += 1
        self.decode_tokens += 1
        self.decode_context += context + 1
        self.num_emitting += 1


class CostModel(Protocol):
    """Seconds one GPU step takes for a batch of the given shape."""

    def step_time(self, shape: BatchShape) -> float: ...


@dataclass(frozen=True, slots=True)
class CostContext:
    """What a cost model is built for: ``tp`` GPUs of ``gpu`` serving ``model`` at ``precision``
    behind ``frontend`` (None: no serving stack around the steps).

    ``multipliers``: this run's draw of the step-time model's error, one factor per group
    of work (:mod:`des.cost.uncertainty`), which a cost model built from efficiency
    factors scales its groups' times by; None (no draw) for the model as fitted.

    ``moe_group``: data-parallel ranks of a mixture of experts that share its experts and
    step together (1: the engine steps alone); ``all2all``: how their MoE layers exchange
    tokens (:func:`des.catalog.interconnect.moe_exchange_bytes`)."""

    gpu: GPUSpec
    model: ModelSpec
    precision: Precision
    tp: int = 1
    frontend: FrontendSpec | None = None
    multipliers: Mapping[UncertaintyGroup, float] | None = None
    moe_group: int = 1
    all2all: str = "allgather_reducescatter"


class CostKind(Protocol):
    """What the cost-model registry holds: a configuration that builds a cost model."""

    @property
    def kind(self) -> str: ...

    @property
    def async_scheduling(self) -> bool:
        """Whether the engine forms the next batch while a step runs (vLLM V1's async
        scheduling), so that the batch after it sees only the requests that reached the
        scheduler by the step's start (:mod:`des.engine.instance`)."""
        ...

    def build(self, ctx: CostContext) -> CostModel: ...
