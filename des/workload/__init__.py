"""Workloads: arrival processes, token-length distributions, traces and the SimPy
processes that turn them into requests. Each component draws from its own seeded
``numpy.random.Generator``; nothing here touches global random state."""

from des.workload.arrivals import MMPP, ArrivalConfig, Closed, Gamma, OnOff, Poisson, Trace
from des.workload.lengths import (
    Empirical,
    Fixed,
    Geometric,
    LengthConfig,
    LengthDist,
    LogNormal,
    Uniform,
)

__all__ = [
    "ArrivalConfig",
    "Poisson",
    "Gamma",
    "MMPP",
    "OnOff",
    "Closed",
    "Trace",
    "LengthConfig",
    "LengthDist",
    "Fixed",
    "Uniform",
    "Geometric",
    "LogNormal",
    "Empirical",
]
