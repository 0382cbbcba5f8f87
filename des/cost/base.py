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
    from des.catalog.precision import Precision
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

    A model with windowed layers (sliding window or chunked local attention of ``window``
    tokens; 0: none) has those layers attend over at most ``window`` tokens: the same sums
    with each context cut to the window, ``decode_window_context`` (Σ ``min(context + 1,
    window)``), ``prefill_window_pairs`` (Σ over a chunk's queries of ``min(position,
    window)``) and ``prefill_window_context`` (the keys a chunk's windows span). Without a
    window they stay 0 and the cost models ignore them. Chunked local attention attends
    ``(position − 1) mod chunk + 1`` keys; ``min(position, chunk)`` bounds it from above.

    Speculative decoding (:mod:`des.cost.speculative`): a decoding sequence verifying
    ``q - 1`` proposed tokens computes ``q`` rows, all counted in ``decode_tokens``, and
    reads its context plus those ``q`` tokens (``decode_context``); ``spec_tokens`` is
    the sum of the ``q - 1`` (so ``decode_tokens - spec_tokens`` sequences decode), and
    every verified row goes through the LM head and sampler. 0 without speculation.
    """

    num_seqs: int = 0
    prefill_tokens: int = 0
    prefill_pairs: float = 0.0
    prefill_context: int = 0
    decode_tokens: int = 0
    decode_context: int = 0
    num_emitting: int = 0
    window: int = 0
    decode_window_context: int = 0
    prefill_window_pairs: float = 0.0
    prefill_window_context: int = 0
    spec_tokens: int = 0

    def layer_average(self, window_share: float) -> tuple[float, float, float]:
        """The decode context, prefill context and prefill pairs averaged over the layers
        when ``window_share`` of them attend within the window (its windowed sums); a shape
        that carries no window (``window`` 0) counts as full attention."""
        d, x, pairs = self.decode_context, self.prefill_context, self.prefill_pairs
        if window_share and self.window:
            return (
                d - window_share * (d - self.decode_window_context),
                x - window_share * (x - self.prefill_window_context),
                pairs - window_share * (pairs - self.prefill_window_pairs),
            )
        return d, x, pairs

    @classmethod
    def decodes(cls, num: int, context: int, window: int = 0, window_context: int = 0) -> BatchShape:
        """``num`` sequences decoding one token each, whose KV holds ``context`` tokens in
        all before the step (each reads its context plus the new token); with a ``window``,
        ``window_context`` is Σ ``min(context, window − 1)`` over them (each reads that plus
        the new token on the windowed layers)."""
        if window:
            return cls(
                num_seqs=num, decode_tokens=num, decode_context=context + num, num_emitting=num,
                window=window, decode_window_context=window_context + num,
            )  # fmt: skip
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
        w = self.window
        if w:
            if prior + chunk <= w:
                self.prefill_window_pairs += chunk * (prior + (chunk + 1) / 2)
            elif prior >= w:
                self.prefill_window_pairs += chunk * w
            else:  # the first w - prior queries see their whole prefix, the rest w keys
                m = w - prior
                self.prefill_window_pairs += m * (prior + (m + 1) / 2) + (chunk - m) * w
            self.prefill_window_context += min(prior + chunk, w - 1 + chunk)

    def add_decode(self, context: int) -> None:
        """Add one decoding sequence whose KV holds ``context`` tokens before this step."""
        self.num_seqs += 1
        self.decode_tokens += 1
        self.decode_context += context + 1
        self.num_emitting += 1
        if self.window:
            self.decode_window_context += min(context + 1, self.window)


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
    ``query_len``: query tokens of each decoding sequence (``k + 1`` when verifying ``k``
    speculative tokens), which a decode's attention computes against its context.

    ``moe_group``: data-parallel ranks of a mixture of experts that share its experts and
    step together (1: the engine steps alone); ``all2all``: how their MoE layers exchange
    tokens (:func:`des.catalog.interconnect.moe_exchange_bytes`)."""

    gpu: GPUSpec
    model: ModelSpec
    precision: Precision
    tp: int = 1
    frontend: FrontendSpec | None = None
    multipliers: Mapping[UncertaintyGroup, float] | None = None
    query_len: int = 1
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
