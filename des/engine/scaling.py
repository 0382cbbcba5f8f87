"""How a pool scales, as configuration: the scenario's ``autoscaler`` block and the checks of it
against the pool it scales. No SimPy here: the scenario and the engine's plan import it without
the runtime (:mod:`des.engine.autoscaler`, whose docstring says what each field does).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import Field, NonNegativeInt, PositiveInt, field_validator, model_validator

from des.catalog.coldstart import ColdStartSpec, cold_start_spec, default_cold_start
from des.config import Seconds, Strict, parse_seconds
from des.errors import ScenarioError

#: The most instances an autoscaled pool may have (as :data:`des.engine.layout.MAX_INSTANCES`).
MAX_INSTANCES = 10_000

Metric = Literal["queue_length", "kv_use", "running", "utilization", "arrival_rate"]
#: Metrics that are shares of an instance's capacity: their target lies in (0, 1].
SHARES = ("kv_use", "utilization")
#: Kubernetes HPA's default tolerance (``--horizontal-pod-autoscaler-tolerance``).
TOLERANCE = 0.1
#: The shortest ``interval`` (seconds). No autoscaler evaluates more often: KEDA's
#: ``pollingInterval`` is whole seconds (30 by default), HPA syncs every 15 s
#: (``--horizontal-pod-autoscaler-sync-period``), Knative's autoscaler ticks every 2 s. Each
#: evaluation is a simulation event, so a run costs its length over the interval in them.
MIN_INTERVAL = 1.0
#: The longest cold start (seconds): a day. The catalog's slowest, DeepSeek-V3's 1.3 TB of
#: bf16 weights read at the default 0.5 GB/s, is 46 minutes; requests held for a longer one
#: keep the autoscaler evaluating, once an ``interval``, until it serves.
MAX_COLD_START = 86_400.0


class AutoscalerConfig(Strict):
    """How a pool scales (see :mod:`des.engine.autoscaler`). Seconds for times; ``target`` in the
    metric's unit per instance (requests for ``queue_length`` and ``running``, a share in
    (0, 1] for ``kv_use`` and ``utilization``, requests per second for ``arrival_rate``).
    ``cold_start``: seconds from the decision to serving, ``auto`` (the catalog's weights
    bandwidth, engine start, compile and graph capture for this model:
    :mod:`des.catalog.coldstart`), or some of those figures replaced."""

    metric: Metric
    target: float = Field(gt=0)
    scale_up_threshold: float | None = Field(None, gt=0)
    scale_down_threshold: float | None = Field(None, ge=0)
    min_instances: NonNegativeInt = 1
    max_instances: PositiveInt = Field(le=MAX_INSTANCES)
    interval: Annotated[Seconds, Field(gt=0)] = 15.0
    cooldown: Annotated[Seconds, Field(ge=0)] = 300.0
    cooldown_up: Annotated[Seconds, Field(ge=0)] = 0.0
    cold_start: float | Literal["auto"] | ColdStartSpec = "auto"

    @field_validator("cold_start", mode="before")
    @classmethod
    def _cold_start(cls, v: Any) -> Any:
        """Seconds (a number, or a duration such as ``90s``), ``auto``, or some of the catalog's
        figures replaced (a mapping of :class:`~des.catalog.coldstart.ColdStartSpec` fields)."""
        if v == "auto" or isinstance(v, ColdStartSpec):
            return v
        if isinstance(v, dict):
            try:
                return cold_start_spec(v)
            except ScenarioError as exc:
                raise ScenarioError([(p.removeprefix("cold_start."), m) for p, m in exc.problems]) from None
        seconds, _ = parse_seconds(v)
        if not seconds >= 0 or not math.isfinite(seconds):
            raise ValueError(
                f"must be >= 0 seconds, auto, or {{weights_bandwidth, engine_start, graph_capture}} (got {v!r})"
            )
        if seconds > MAX_COLD_START:
            raise ValueError(cold_start_beyond(seconds))
        return seconds

    @field_validator("interval")
    @classmethod
    def _interval(cls, v: float) -> float:
        if v < MIN_INTERVAL:
            raise ValueError(
                f"{v:g} s is shorter than {MIN_INTERVAL:g} s: no autoscaler evaluates more often (KEDA polls in "
                "whole seconds, HPA every 15 s, Knative every 2 s), and each evaluation is a simulation event"
            )
        return v

    @model_validator(mode="after")
    def _check(self) -> AutoscalerConfig:
        if self.min_instances > self.max_instances:
            raise ValueError(f"min_instances: {self.min_instances} is more than max_instances ({self.max_instances})")
        if self.metric in SHARES and self.target > 1:
            raise ValueError(f"target: {self.target:g} is beyond 1: {self.metric} is a share of an instance's capacity")
        if self.up < self.target:
            raise ValueError(f"scale_up_threshold: {self.up:g} is below the target ({self.target:g})")
        if self.down > self.target:
            raise ValueError(f"scale_down_threshold: {self.down:g} is above the target ({self.target:g})")
        return self

    @property
    def up(self) -> float:
        """The mean per instance above which it scales up."""
        return self.scale_up_threshold if self.scale_up_threshold is not None else self.target * (1 + TOLERANCE)

    @property
    def down(self) -> float:
        """The mean per instance below which it scales down."""
        return self.scale_down_threshold if self.scale_down_threshold is not None else self.target * (1 - TOLERANCE)


def cold_start_beyond(seconds: float) -> str:
    """Why a cold start of ``seconds`` is refused: it is beyond :data:`MAX_COLD_START`."""
    return (
        f"{seconds:,.6g} s is beyond {MAX_COLD_START:,.0f} s (a day): the slowest model's start is under an hour, "
        "and the run would evaluate the autoscaler every interval until it served"
    )


def scaling_problem(
    config: AutoscalerConfig | None,
    instances: int,
    dp: int,
    pp: int,
    field: str,
    entry: bool = True,
    weight_bytes: int = 0,
) -> str | None:
    """Why a pool of ``instances`` at t = 0 (named ``field``) cannot have ``config``'s
    autoscaler, or None: its start outside ``[min_instances, max_instances]``; engines of
    data-parallel ranks or pipeline stages (not modelled: they would scale as whole
    servers); scale from zero on a pool that requests do not enter (a decode pool); a cold
    start (of ``auto`` or the catalog's figures replaced, for ``weight_bytes`` of weights,
    bytes) beyond :data:`MAX_COLD_START`, even without compiling and graph capture."""
    if config is None:
        return (
            None if instances > 0 else f"{field}: 0 instances serve nothing (0 is for an autoscaler's scale from zero)"
        )
    if not config.min_instances <= instances <= config.max_instances:
        return (
            f"{field}: {instances} instances at the start lie outside the autoscaler's "
            f"[{config.min_instances}, {config.max_instances}] (min_instances, max_instances)"
        )
    if dp > 1 or pp > 1:
        what = "data-parallel ranks (dp)" if dp > 1 else "pipeline stages (pp)"
        return f"autoscaler: scaling engines of several {what} is not modelled (scale single-rank engines)"
    if not entry and config.min_instances == 0:
        return (
            "autoscaler.min_instances: 0 is for the pool requests enter (scale from zero); a decode pool "
            "needs at least 1 to receive transfers"
        )
    cold = config.cold_start
    if not isinstance(cold, float | int):
        seconds = (default_cold_start() if cold == "auto" else cold).seconds(weight_bytes, cuda_graphs=False)
        if seconds > MAX_COLD_START:
            return f"autoscaler.cold_start: {cold_start_beyond(seconds)}"
    return None
