"""Continuous batching as a scenario states it and as a pool's instances run it.

:class:`ContinuousConfig` is the scenario's ``scheduler`` of kind ``continuous``: the
batching settings of every pool (:class:`~des.engine.schedulers.continuous.ContinuousBatching`).
:class:`ContinuousSettings` is one pool's: those settings with the pool's own over them and
the scenario's ``speculative``; it builds each instance's scheduler, plain
(:class:`~des.engine.schedulers.continuous.ContinuousScheduler`) or verifying drafts
(:class:`~des.engine.schedulers.speculating.SpeculativeScheduler`). It sits above both, so
neither scheduler module imports the other's config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from pydantic import Field

from des.engine.kvcache import BlockManager
from des.engine.policy import MAX_BATCH, Role
from des.engine.schedulers.continuous import ContinuousBatching, ContinuousScheduler
from des.engine.schedulers.speculating import SpeculativeScheduler
from des.engine.speculative import SpeculativeConfig


class ContinuousSettings(ContinuousBatching):
    """What one pool's continuous-batching instances run: the policy's settings (the
    scenario's ``scheduler`` with the pool's own over it) and the scenario's ``speculative``."""

    speculative: SpeculativeConfig | None = None

    def build(
        self, kv: BlockManager, max_model_len: int, role: Role = "colocated", rng: np.random.Generator | None = None
    ) -> ContinuousScheduler:
        """The scheduler of one instance; ``rng`` draws speculative decoding's accepted
        tokens (needed when ``speculative`` proposes any)."""
        limit = self.max_model_len or max_model_len
        spec = self.speculative
        if spec is not None and spec.active:
            if rng is None:
                raise ValueError("speculative decoding needs a random stream for its acceptance draws")
            return SpeculativeScheduler(self, spec, kv, limit, role, rng)
        return ContinuousScheduler(self, kv, limit, role)


class ContinuousConfig(ContinuousBatching):
    """Continuous batching (the scenario's ``scheduler``: every pool's policy). As vLLM's
    ``EngineArgs``, ``max_num_seqs``, ``max_num_batched_tokens`` and
    ``gpu_memory_utilization`` left out (None) take the entry point's and GPU's defaults
    when a pool is resolved (:func:`des.engine.defaults.engine_defaults`)."""

    kind: Literal["continuous"] = "continuous"
    max_num_seqs: int | None = Field(None, ge=1, le=MAX_BATCH)  # type: ignore[assignment]
    max_num_batched_tokens: int | None = Field(None, ge=1)  # type: ignore[assignment]
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)  # type: ignore[assignment]

    def given(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """The settings a pool states: ``overrides`` (the pool's own) over the ones set here."""
        return {**self.model_dump(exclude={"kind"}, exclude_none=True), **overrides}

    def policy(
        self,
        overrides: Mapping[str, Any],
        speculative: SpeculativeConfig | None,
        defaults: Mapping[str, Any] | None = None,
    ) -> ContinuousSettings:
        """A pool's settings: ``overrides`` over these, over ``defaults`` (what fills the
        settings neither gives), with ``speculative`` (validated as one)."""
        return ContinuousSettings.model_validate(
            {**(defaults or {}), **self.given(overrides), "speculative": speculative}
        )
