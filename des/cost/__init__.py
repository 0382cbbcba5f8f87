"""Step-time models: pure functions of a step's :class:`BatchShape` and the specs.

``COST_MODELS`` maps each ``cost_model.kind`` to its configuration class; a config's
``build(gpu=..., model=..., precision=..., tp=...)`` returns an object with
``step_time(shape) -> seconds``.
"""

from __future__ import annotations

from des.cost.base import BatchShape, CostModel
from des.cost.roofline import Roofline, RooflineConfig, build_roofline
from des.cost.simple import Constant, ConstantConfig, Linear, LinearConfig

COST_MODELS = {"constant": ConstantConfig, "linear": LinearConfig, "roofline": RooflineConfig}

__all__ = [
    "BatchShape",
    "CostModel",
    "COST_MODELS",
    "Constant",
    "ConstantConfig",
    "Linear",
    "LinearConfig",
    "Roofline",
    "RooflineConfig",
    "build_roofline",
]
