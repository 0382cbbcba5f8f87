"""Speculative decoding's settings and its acceptance law (vLLM's ``speculative_config``).

A proposer (n-gram lookup, a draft model, an EAGLE head or the model's own MTP layers)
guesses ``k`` = ``num_speculative_tokens`` tokens past a sequence's last one; the target
model verifies the ``k + 1`` positions in one forward pass and keeps the proposed
tokens up to the first one it rejects, plus its own token at that position (vLLM's
``vllm/v1/sample/rejection_sampler.py``; settings in ``vllm/config/speculative.py``).
des models the acceptance as independent: each proposed token is accepted with
probability ``α`` = ``acceptance_rate`` until the first rejection, so a verification
step yields ``T = 1 + min(k, G)`` tokens, ``G`` geometric with ``P(G ≥ j) = α^j``:

    P(T = t) = α^(t-1) (1 - α)  for t = 1..k,   P(T = k + 1) = α^k,
    E[T] = (1 - α^(k+1)) / (1 - α)   (k + 1 when α = 1),
    E[T²] = Σ_{t=1}^{k+1} (2t - 1) α^(t-1).

:class:`Acceptance` draws ``T`` per sequence per step from the run's ``speculative``
stream, never beyond what a request has left to emit.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from des.config import Strict

#: Proposers that need a model of their own (vLLM: ``speculative_config.model``).
NEEDS_MODEL = frozenset({"draft", "eagle"})


class SpeculativeConfig(Strict):
    """``scheduler.speculative``: how tokens are proposed and how often they are kept.

    ``method``: ``ngram`` (prompt lookup, no model), ``draft`` (a smaller model of the
    same tokenizer, named by ``model``), ``eagle`` (an EAGLE head, named by ``model``),
    ``mtp`` (the target's own multi-token-prediction layers: no ``model``);
    ``num_speculative_tokens``: tokens proposed per sequence per step (``k``, 0: no
    speculation); ``acceptance_rate``: probability ``α`` in [0, 1] that a proposed token
    is accepted, given the ones before it were.
    """

    method: Literal["ngram", "draft", "eagle", "mtp"]
    model: str | None = None
    num_speculative_tokens: int = Field(ge=0)
    acceptance_rate: float = Field(ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _model_matches_method(self) -> SpeculativeConfig:
        if self.method in NEEDS_MODEL and not self.model:
            raise ValueError(f"method {self.method} needs a model (the {self.method} model's name)")
        if self.method not in NEEDS_MODEL and self.model is not None:
            raise ValueError(f"method {self.method} takes no model (got {self.model!r})")
        return self

    @property
    def expected_tokens(self) -> float:
        """Mean tokens a verification step yields per sequence with output to spare."""
        return expected_tokens(self.acceptance_rate, self.num_speculative_tokens)


def expected_tokens(alpha: float, k: int) -> float:
    """``E[T] = (1 - α^(k+1)) / (1 - α)`` tokens per step (``k + 1`` when ``α = 1``)."""
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def tokens_second_moment(alpha: float, k: int) -> float:
    """``E[T²] = Σ_{t=1}^{k+1} (2t - 1) α^(t-1)`` (tokens²)."""
    return float(sum((2 * t - 1) * alpha ** (t - 1) for t in range(1, k + 2)))


class Acceptance:
    """Tokens each sequence emits in a verification step of ``k`` proposed tokens
    accepted with probability ``alpha`` each, drawn from ``rng``."""

    __slots__ = ("k", "alpha", "rng")

    def __init__(self, k: int, alpha: float, rng: np.random.Generator):
        self.k = k
        self.alpha = alpha
        self.rng = rng

    def draw(self, remaining: np.ndarray) -> np.ndarray:
        """Tokens emitted by sequences with ``remaining`` (≥ 1) tokens left to emit each:
        ``min(1 + min(k, G), remaining)``, one draw of ``G`` per sequence. No draw is made
        when the outcome is certain (``k = 0``, ``α = 0`` or ``α = 1``)."""
        k, alpha = self.k, self.alpha
        if k == 0 or alpha == 0.0:
            return np.ones_like(remaining)
        if alpha == 1.0:
            return np.minimum(remaining, k + 1)
        # numpy's geometric counts trials to the first success: the rejection, after G acceptances
        accepted = self.rng.geometric(1.0 - alpha, size=len(remaining)) - 1
        return np.minimum(1 + np.minimum(accepted, k), remaining)
