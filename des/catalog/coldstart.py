"""What a new serving instance costs before it serves: a cold start, in seconds.

A new instance reads its weights from storage, starts its engine (process, imports, CUDA
context), compiles the model (``torch.compile``) and captures CUDA graphs; it is paid for
throughout and serves nothing::

    seconds = weight_bytes / weights_bandwidth + engine_start
              + (torch_compile + graph_capture   if CUDA graphs are on)

``weight_bytes`` is the instance's whole model (all its tensor- and pipeline-parallel ranks
read their shards at once from storage shared at ``weights_bandwidth``, bytes/s, the node's
storage or network rate); :func:`des.catalog.memory.weight_bytes` gives it. Whether CUDA graphs
are on is the cost model's ``enforce_eager`` (``RooflineConfig.enforce_eager``: graphs off),
and vLLM compiles only when not eager (``vllm/config/vllm.py``: ``VllmConfig.__post_init__``
sets ``CompilationMode.VLLM_COMPILE`` when the mode is unset and not ``enforce_eager``,
``CompilationMode.NONE`` otherwise), so an eager instance skips both. Defaults, with their
sources, are in ``des/catalog/data/coldstart.yaml`` and read on first use
(:func:`default_cold_start`); a scenario overrides them field by field
(:func:`cold_start_spec`), or gives a number of seconds (:func:`cold_start_seconds`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

from pydantic import Field, PositiveFloat, ValidationError

from des.config import Strict, load_yaml
from des.errors import ScenarioError, reword, validation_errors


class ColdStartSpec(Strict):
    """A cold start's parts: ``weights_bandwidth`` (bytes/s at which the weights are read),
    ``engine_start``, ``torch_compile`` and ``graph_capture`` (seconds each); ``source``:
    where the figures come from."""

    weights_bandwidth: PositiveFloat
    engine_start: float = Field(ge=0)
    torch_compile: float = Field(ge=0)
    graph_capture: float = Field(ge=0)
    source: str = ""

    def seconds(self, weight_bytes: int, cuda_graphs: bool = True) -> float:
        """Seconds from an instance's launch until it serves, for ``weight_bytes`` of
        weights: ``weight_bytes / weights_bandwidth + engine_start``, plus
        ``torch_compile + graph_capture`` when ``cuda_graphs`` (not ``enforce_eager``)."""
        if weight_bytes < 0:
            raise ValueError(f"weight_bytes must be >= 0 (got {weight_bytes})")
        total = weight_bytes / self.weights_bandwidth + self.engine_start
        if cuda_graphs:
            total += self.torch_compile + self.graph_capture
        return total


@cache
def default_cold_start() -> ColdStartSpec:
    """The catalog's cold start (``des/catalog/data/coldstart.yaml``), read once."""
    text = resources.files("des.catalog").joinpath("data/coldstart.yaml").read_text()
    return ColdStartSpec.model_validate(load_yaml(text))


def cold_start_spec(overrides: Mapping[str, Any] | None = None, path: str = "cold_start") -> ColdStartSpec:
    """The catalog's cold start with the fields ``overrides`` gives replaced (a scenario's
    mapping, e.g. ``{weights_bandwidth: 2.0e9}``); its ``source`` says which were given.
    Bad fields raise ScenarioError naming ``path.field``."""
    base = default_cold_start()
    if not overrides:
        return base
    if not isinstance(overrides, Mapping):
        raise ScenarioError((path, f"must be a mapping of cold-start fields (got {overrides!r})"))
    given = dict(overrides)
    if "source" not in given:
        changed = ", ".join(f"{k}={v!r}" for k, v in sorted(given.items()))
        given["source"] = f"catalog defaults with {changed} set by the scenario"
    try:
        return ColdStartSpec.model_validate({**base.model_dump(), **given})
    except ValidationError as exc:
        raise ScenarioError(
            [(".".join([path, *map(str, e["loc"])]), reword(e["msg"])) for e in validation_errors(exc)]
        ) from None
    except ScenarioError as exc:
        raise exc.prefixed(path) from None


def cold_start_seconds(value: Any, weight_bytes: int, cuda_graphs: bool = True, path: str = "cold_start") -> float:
    """Seconds of cold start a scenario's ``cold_start`` means (issue #21's contract): a
    number of seconds (≥ 0, taken as given), ``auto`` or None (the catalog's
    :class:`ColdStartSpec` for ``weight_bytes`` of weights), or a mapping of its fields
    overriding the catalog's (:func:`cold_start_spec`). Bad values raise ScenarioError
    naming ``path``."""
    if value is None or value == "auto":
        return default_cold_start().seconds(weight_bytes, cuda_graphs)
    if isinstance(value, Mapping):
        return cold_start_spec(value, path).seconds(weight_bytes, cuda_graphs)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ScenarioError(
            (path, f"must be a number of seconds, 'auto' or a mapping of cold-start fields (got {value!r})")
        )
    if not math.isfinite(value) or value < 0:
        raise ScenarioError((path, f"must be a finite number of seconds >= 0 (got {value!r})"))
    return float(value)
