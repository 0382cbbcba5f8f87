"""Batching policies, registered by ``scheduler.kind``.

``SCHEDULERS`` maps each kind to its configuration class, whose ``build(kv,
max_model_len)`` returns the scheduler. :func:`register` refuses duplicate kinds and
:func:`scheduler_config` names the valid kinds when given an unknown one.
"""

from __future__ import annotations

from des.engine.schedulers.base import Scheduler, Step
from des.engine.schedulers.continuous import ContinuousConfig, ContinuousScheduler
from des.engine.schedulers.static import StaticConfig, StaticScheduler

SCHEDULERS: dict[str, type] = {}


def register(config_cls: type) -> type:
    """Add a scheduler's configuration class under its ``kind``; duplicates are errors."""
    kind = config_cls.model_fields["kind"].default
    if kind in SCHEDULERS:
        raise ValueError(f"scheduler kind {kind!r} is already registered")
    SCHEDULERS[kind] = config_cls
    return config_cls


register(StaticConfig)
register(ContinuousConfig)

__all__ = [
    "SCHEDULERS",
    "register",
    "Scheduler",
    "Step",
    "StaticConfig",
    "StaticScheduler",
    "ContinuousConfig",
    "ContinuousScheduler",
]
