"""Shared prefixes: every prompt opens with one of a few system prompts.

``workload.shared_prefix: {tokens, groups, weights}``: each request picks one of
``groups`` prefixes (uniformly, or with probabilities proportional to ``weights``)
from its own generator; its prompt is the prefix's ``tokens`` tokens followed by its
own ``prompt_tokens`` (drawn as without a prefix), so it is ``tokens + prompt_tokens``
long. Requests of one group share the prefix's KV blocks when prefix caching is on.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from pydantic import Field, NonNegativeFloat, PositiveInt, model_validator

from des.config import Strict
from des.workload._buffer import Buffered
from des.workload.spec import ContentIds, RequestSpec


class SharedPrefix(Strict):
    """``groups`` shared prefixes of ``tokens`` tokens each; ``weights``: their shares."""

    tokens: PositiveInt
    groups: PositiveInt = 1
    weights: list[NonNegativeFloat] | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _weights(self) -> SharedPrefix:
        if self.weights is not None:
            if len(self.weights) != self.groups:
                raise ValueError(f"weights: needs {self.groups} entries, one per group (got {len(self.weights)})")
            if sum(self.weights) <= 0:
                raise ValueError("weights: at least one must be positive")
        return self

    def picker(self, rng: np.random.Generator) -> Callable[[], int]:
        """Draws the group of each next request."""
        if self.groups == 1:
            return lambda: 0
        p = None if self.weights is None else np.asarray(self.weights, float) / sum(self.weights)
        return Buffered(lambda n: rng.choice(self.groups, size=n, p=p))

    def spec(self, group: int, own: int, output: int, ids: ContentIds) -> RequestSpec:
        """A request of ``group`` with ``own`` tokens of its own after the prefix."""
        segments = ((ids.named(("prefix", group)), self.tokens), (ids.new(), own))
        return RequestSpec(self.tokens + own, output, segments, prefix_group=group)
