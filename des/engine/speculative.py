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

:meth:`SpeculativeConfig.proposer` says what the proposer is as a model (:class:`Proposer`):
the transformer its ``k`` passes per step run through, the weights it keeps resident
beside the target's and the KV bytes it adds to every token. ``ngram`` is none: vLLM's
``NgramProposer`` (``vllm/v1/spec_decode/ngram_proposer.py``) matches the sequence's last
n-gram against its earlier tokens with a Numba-compiled search on the CPU, no GPU work
and no KV (des neglects its CPU time). ``draft``: a catalog model with its own weights
(bf16) and KV (vLLM's ``DraftModelProposer``); ``eagle``: a one-layer decoder of the
target's shapes (vLLM's ``EagleProposer``, ``vllm/v1/spec_decode/eagle.py``: EAGLE
heads are one decoder layer plus a fusing projection, sharing the target's embedding and
LM head); ``mtp``: the target's own ``num_nextn_predict_layers`` layers (DeepSeek's MTP
module, run by the same ``EagleProposer``), sharing its embedding and LM head.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field, ValidationInfo, field_validator, model_validator

from des import catalog
from des.catalog.memory import kv_bytes_per_token, weight_bytes
from des.catalog.precision import Precision
from des.catalog.specs import ModelSpec
from des.config import Strict
from des.errors import did_you_mean

#: Proposers that need a model of their own (vLLM: ``speculative_config.model``).
NEEDS_MODEL = frozenset({"draft", "eagle"})
#: Proposers for which vLLM's scheduler sets ``num_lookahead_tokens = k``
#: (``SpeculativeConfig.use_eagle()``: eagle, eagle3, mtp; ``uses_draft_model()``:
#: draft_model), allocating KV slots for the next step's drafts ahead of time
#: (``vllm/v1/core/sched/scheduler.py``, ``Scheduler.__init__``).
LOOKAHEAD = frozenset({"draft", "eagle", "mtp"})
#: The most tokens proposed per sequence per step: vLLM's rejection sampler asserts
#: ``max_spec_len <= MAX_SPEC_LEN``, 128 (``vllm/v1/sample/rejection_sampler.py``; 32 in
#: its first V1 releases). Useful values are a few (vLLM's examples use 2 to 5).
MAX_SPECULATIVE_TOKENS = 128


@dataclass(frozen=True, slots=True)
class Proposer:
    """A proposer as a model: each of its passes runs ``spec`` (its layers and LM head);
    it keeps ``weight_bytes`` of weights resident beside the target's and adds
    ``kv_bytes_per_token`` of KV to every token (over an instance's ``tp`` GPUs);
    ``precision`` is the format its weights run in."""

    spec: ModelSpec
    precision: Precision
    weight_bytes: int
    kv_bytes_per_token: int


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
    num_speculative_tokens: int = Field(ge=0, le=MAX_SPECULATIVE_TOKENS)
    acceptance_rate: float = Field(ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _model_matches_method(self) -> SpeculativeConfig:
        if self.method in NEEDS_MODEL and not self.model:
            raise ValueError(f"model: method {self.method} needs a model (the {self.method} model's name)")
        if self.method not in NEEDS_MODEL and self.model is not None:
            raise ValueError(f"model: method {self.method} takes no model (got {self.model!r})")
        return self

    @field_validator("model")
    @classmethod
    def _model_known(cls, v: str | None, info: ValidationInfo) -> str | None:
        if v is not None and info.data.get("method") == "draft" and v not in catalog.model_names():
            names = catalog.model_names()
            raise ValueError(f"unknown model {v!r}{did_you_mean(v, names)}; valid: {', '.join(names)}")
        return v

    @property
    def active(self) -> bool:
        """Whether tokens are proposed at all (``k > 0``; ``k = 0`` is speculation off:
        no proposer loaded, every step the plain one)."""
        return self.num_speculative_tokens > 0

    @property
    def lookahead(self) -> int:
        """KV slots allocated for the next step's drafts beyond a step's tokens (tokens)."""
        return self.num_speculative_tokens if self.method in LOOKAHEAD else 0

    def proposer(self, target: ModelSpec, precision: Precision, tp: int = 1) -> Proposer | None:
        """What proposes the tokens for ``target`` served at ``precision`` on ``tp`` GPUs
        (None: n-gram lookup, no model). Raises ValueError for ``mtp`` on a model
        without MTP layers."""
        if self.method == "ngram":
            return None
        if self.method == "draft":
            assert self.model is not None
            spec = catalog.model(self.model)
            bf16 = Precision(kv_cache_dtype=precision.kv_cache_dtype)  # a catalog model: bf16 weights
            return Proposer(spec, bf16, weight_bytes(spec, bf16), kv_bytes_per_token(spec, bf16, tp))
        if self.method == "eagle":
            layers = 1
        else:
            layers = target.num_nextn_predict_layers
            if not layers:
                raise ValueError(
                    f"mtp needs the model's multi-token-prediction layers, and {target.name} has none "
                    "(num_nextn_predict_layers: 0); use ngram, draft or eagle"
                )
        spec = target.model_copy(
            update={"name": f"{target.name}-{self.method}", "num_layers": layers, "first_k_dense": 0}
        )
        # its layers' weights (and EAGLE's fusing projection, 2 h x h); embedding and LM head are the target's
        fuse = 2 * target.hidden_size**2 if self.method == "eagle" else 0
        shared = spec.embedding_params + (0 if spec.tie_word_embeddings else spec.lm_head_params)
        resident = weight_bytes(spec, precision) - 2 * shared  # the shared ones in bf16
        return Proposer(spec, precision, resident + 2 * fuse, kv_bytes_per_token(spec, precision, tp))

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
