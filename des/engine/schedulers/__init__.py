"""Batching policies, registered by ``scheduler.kind``.

``SCHEDULERS`` holds each kind's configuration class (a :class:`PolicyKind`): the
scenario's ``scheduler``, every pool's batching policy, whose ``policy(overrides,
speculative)`` gives one pool's settings (the pool's own over it), which ``build`` each
instance's scheduler. Where requests are served, by how many instances of which GPUs,
is the deployment's (:mod:`des.engine.deployment`), not the policy's. ``SchedulerConfig``
is the tagged union the scenario validates ``scheduler`` with, written out so a type
checker sees its members (checked against the registry at import).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Protocol

from pydantic import Field

from des.engine.policy import PolicyConfig, Scheduler, Step
from des.engine.schedulers.continuous import ContinuousScheduler
from des.engine.schedulers.settings import ContinuousConfig, ContinuousSettings
from des.engine.schedulers.static import StaticConfig, StaticScheduler
from des.engine.speculative import SpeculativeConfig
from des.registry import Registry, check_union, config_registrar


class PolicyKind(Protocol):
    """What the scheduler registry holds: a batching policy's configuration, the defaults of
    every pool."""

    @property
    def kind(self) -> str: ...

    def given(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """The settings a pool states: ``overrides`` over the ones set here."""
        ...

    def policy(
        self,
        overrides: Mapping[str, Any],
        speculative: SpeculativeConfig | None,
        defaults: Mapping[str, Any] | None = None,
    ) -> PolicyConfig:
        """One pool's settings: ``overrides`` over these, over ``defaults`` (what fills the
        settings neither gives), with ``speculative``."""
        ...


SCHEDULERS: Registry[type[PolicyKind]] = Registry("scheduler kind")
register = config_registrar(SCHEDULERS)
register(StaticConfig)
register(ContinuousConfig)

SchedulerConfig = Annotated[StaticConfig | ContinuousConfig, Field(discriminator="kind")]
check_union(SchedulerConfig, SCHEDULERS)

__all__ = [
    "SCHEDULERS",
    "SchedulerConfig",
    "PolicyKind",
    "register",
    "Scheduler",
    "Step",
    "StaticConfig",
    "StaticScheduler",
    "ContinuousConfig",
    "ContinuousScheduler",
    "ContinuousSettings",
]
