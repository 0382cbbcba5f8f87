"""Time distributions (seconds), for think times between the turns of a conversation.

- ``fixed{value}``: always ``value``;
- ``exponential{mean}``: memoryless, mean ``mean``;
- ``uniform{low, high}``: uniform on ``[low, high]``;
- ``lognormal{mean, sigma}``: ``mean`` the mean of the times, ``sigma`` the standard
  deviation of their logarithm (as the token-length law of the same name); its second
  moment, ``mean² exp(sigma²)``, must be a float (a larger ``sigma`` overflowed, a larger
  ``mean`` drew infinite times).

Each gives a sampler drawing from the generator it is handed, in chunks (fixed size,
so the draws depend only on the seed).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Literal

import numpy as np
from pydantic import Field, NonNegativeFloat, PositiveFloat, model_validator

from des.config import Strict
from des.registry import Registry, check_union, kind_of
from des.workload._buffer import Buffered
from des.workload.lengths import check_sigma

#: ln of the largest float.
_LOG_FLOAT_MAX = math.log(np.finfo(float).max)


class FixedTime(Strict):
    dist: Literal["fixed"] = "fixed"
    value: NonNegativeFloat

    def sampler(self, rng: np.random.Generator) -> Callable[[], float]:
        value = self.value
        return lambda: value


class ExponentialTime(Strict):
    dist: Literal["exponential"] = "exponential"
    mean: PositiveFloat

    def sampler(self, rng: np.random.Generator) -> Callable[[], float]:
        return Buffered(lambda n: rng.exponential(self.mean, n))


class UniformTime(Strict):
    dist: Literal["uniform"] = "uniform"
    low: NonNegativeFloat
    high: NonNegativeFloat

    @model_validator(mode="after")
    def _ordered(self) -> UniformTime:
        if self.low > self.high:
            raise ValueError(f"high: low ({self.low}) is greater than high ({self.high})")
        return self

    def sampler(self, rng: np.random.Generator) -> Callable[[], float]:
        return Buffered(lambda n: rng.uniform(self.low, self.high, n))


class LogNormalTime(Strict):
    dist: Literal["lognormal"] = "lognormal"
    mean: PositiveFloat
    sigma: PositiveFloat

    @model_validator(mode="after")
    def _representable(self) -> LogNormalTime:
        check_sigma(self.sigma)
        if 2 * math.log(self.mean) + self.sigma**2 >= _LOG_FLOAT_MAX:
            raise ValueError(
                f"mean: {self.mean:g} s with sigma {self.sigma:g}: the times' second moment, mean² exp(sigma²), "
                "overflows a float"
            )
        return self

    def sampler(self, rng: np.random.Generator) -> Callable[[], float]:
        mu = math.log(self.mean) - self.sigma**2 / 2
        return Buffered(lambda n: rng.lognormal(mu, self.sigma, n))


TIMES: Registry[type[Strict]] = Registry("time distribution")
for _cls in (FixedTime, ExponentialTime, UniformTime, LogNormalTime):
    TIMES.register(kind_of(_cls), _cls)

TimeConfig = Annotated[FixedTime | ExponentialTime | UniformTime | LogNormalTime, Field(discriminator="dist")]
check_union(TimeConfig, TIMES)
