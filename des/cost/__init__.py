"""Step-time models: pure functions of a step's :class:`BatchShape` and the specs.

``COST_MODELS`` holds each ``cost_model.kind``'s configuration class (a
:class:`CostKind`); its ``build(CostContext)`` returns an object with
``step_time(shape) -> seconds``. ``CostConfig`` is the tagged union the scenario
validates ``cost_model`` with (checked against the registry at import).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from des.cost.base import BatchShape, CostContext, CostKind, CostModel
from des.cost.roofline import Roofline, RooflineConfig, build_roofline
from des.cost.simple import Constant, ConstantConfig, Linear, LinearConfig
from des.registry import Registry, check_union, config_registrar

COST_MODELS: Registry[type[CostKind]] = Registry("cost model kind")
register = config_registrar(COST_MODELS)
register(ConstantConfig)
register(LinearConfig)
register(RooflineConfig)

CostConfig = Annotated[ConstantConfig | LinearConfig | RooflineConfig, Field(discriminator="kind")]
check_union(CostConfig, COST_MODELS)

__all__ = [
    "BatchShape",
    "CostContext",
    "CostKind",
    "CostModel",
    "COST_MODELS",
    "CostConfig",
    "register",
    "Constant",
    "ConstantConfig",
    "Linear",
    "LinearConfig",
    "Roofline",
    "RooflineConfig",
    "build_roofline",
]
