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

from des.engine.kvcache import BlockManager
from des.engine.policy import Role
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
    """Continuous batching (the scenario's ``scheduler``: every pool's policy)."""

    kind: Literal["continuous"] = "continuous"

    def policy(self, overrides: Mapping[str, Any], speculative: SpeculativeConfig | None) -> ContinuousSettings:
        """A pool's settings: ``overrides`` over these, with ``speculative`` (validated as one)."""
        own = self.model_dump(exclude={"kind"})
        return ContinuousSettings.model_validate({**own, **overrides, "speculative": speculative})
