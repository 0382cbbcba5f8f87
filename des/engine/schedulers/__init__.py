"""Batching policies, registered by ``scheduler.kind``.

``SCHEDULERS`` holds each kind's configuration class (a :class:`SchedulerKind`), whose
``plan(ctx)`` says which pools of instances to build (:mod:`des.engine.plan`); a
pool's policy configuration ``build``s each instance's scheduler. ``SchedulerConfig`` is the tagged
union the scenario validates ``scheduler`` with, written out so a type checker sees its
members (checked against the registry at import).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from des.engine.plan import SchedulerKind
from des.engine.policy import Scheduler, Step
from des.engine.schedulers.continuous import ContinuousConfig, ContinuousScheduler
from des.engine.schedulers.disaggregated import DisaggregatedConfig
from des.engine.schedulers.static import StaticConfig, StaticScheduler
from des.registry import Registry, check_union, config_registrar

SCHEDULERS: Registry[type[SchedulerKind]] = Registry("scheduler kind")
register = config_registrar(SCHEDULERS)
register(StaticConfig)
register(ContinuousConfig)
register(DisaggregatedConfig)

SchedulerConfig = Annotated[StaticConfig | ContinuousConfig | DisaggregatedConfig, Field(discriminator="kind")]
check_union(SchedulerConfig, SCHEDULERS)

__all__ = [
    "SCHEDULERS",
    "SchedulerConfig",
    "SchedulerKind",
    "register",
    "Scheduler",
    "Step",
    "StaticConfig",
    "StaticScheduler",
    "ContinuousConfig",
    "ContinuousScheduler",
    "DisaggregatedConfig",
]
