"""Closed-form step-time models: ``constant`` (queueing theory) and ``linear`` (fits).

``constant{step_time}``: every step lasts ``step_time`` seconds whatever the batch,
which turns a slot of the batch into a server of a textbook queue.

``linear{base, per_prefill_token, per_decode_token, per_context_token}``:
``base + a·prefill_tokens + b·decode_tokens + c·(decode KV tokens read)``, seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field, PositiveFloat

from des.config import Strict
from des.cost.base import BatchShape, CostContext


@dataclass(frozen=True, slots=True)
class Constant:
    seconds: float

    def step_time(self, shape: BatchShape) -> float:
        return self.seconds


@dataclass(frozen=True, slots=True)
class Linear:
    base: float
    per_prefill_token: float
    per_decode_token: float
    per_context_token: float

    def step_time(self, shape: BatchShape) -> float:
        return (
            self.base
            + self.per_prefill_token * shape.prefill_tokens
            + self.per_decode_token * shape.decode_tokens
            + self.per_context_token * shape.decode_context
        )


class ConstantConfig(Strict):
    """Every step lasts ``step_time`` seconds."""

    kind: Literal["constant"] = "constant"
    step_time: PositiveFloat

    @property
    def async_scheduling(self) -> bool:
        """No engine: each batch is formed when the step before it ends."""
        return False

    def build(self, ctx: CostContext) -> Constant:
        return Constant(self.step_time)


class LinearConfig(Strict):
    """Step time linear in the batch's token counts, in seconds and seconds per token."""

    kind: Literal["linear"] = "linear"
    base: PositiveFloat
    per_prefill_token: float = Field(0.0, ge=0)
    per_decode_token: float = Field(0.0, ge=0)
    per_context_token: float = Field(0.0, ge=0)

    @property
    def async_scheduling(self) -> bool:
        """No engine: each batch is formed when the step before it ends."""
        return False

    def build(self, ctx: CostContext) -> Linear:
        return Linear(self.base, self.per_prefill_token, self.per_decode_token, self.per_context_token)
