"""GPU and model catalog: specs as data files, resolvable by name or given inline.

``gpu("rtx4090")`` and ``model("qwen2.5-7b")`` return validated specs; an unknown
name raises :class:`~des.errors.ScenarioError` listing the valid ones. The data files
live in ``des/catalog/data/`` and are read lazily, on first use.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any, TypeVar

from pydantic import ValidationError

from des.catalog.specs import Efficiency, GPUSpec, ModelSpec
from des.config import Strict, load_yaml
from des.dotted import merge
from des.errors import ScenarioError, did_you_mean, validation_errors

Spec = TypeVar("Spec", bound=Strict)

__all__ = ["Efficiency", "GPUSpec", "ModelSpec", "gpu", "model", "gpu_names", "model_names", "resolve"]


@cache
def _table(kind: str) -> dict[str, dict[str, Any]]:
    text = resources.files("des.catalog").joinpath(f"data/{kind}.yaml").read_text()
    return load_yaml(text)


def gpu_names() -> list[str]:
    return sorted(_table("gpus"))


def model_names() -> list[str]:
    return sorted(_table("models"))


def resolve(kind: str, value: Any) -> dict[str, Any]:
    """Turn a catalog name (``kind`` is "gpus" or "models") into its field mapping.

    Mappings pass through unchanged (inline specs); a mapping with a ``base`` key takes
    the named entry and overrides the fields it lists (:func:`des.dotted.merge`). A GPU
    override naming a ``calibration`` file drops the entry's efficiency factors: the
    file's replace them (and ``efficiency`` keys given with it override the file's).
    """
    table = _table(kind)
    if isinstance(value, str):
        if value not in table:
            hint = did_you_mean(value, table)
            raise ValueError(f"unknown {kind[:-1]} {value!r}{hint}; valid: {', '.join(sorted(table))}")
        return {"name": value, **table[value]}
    if isinstance(value, dict) and "base" in value:
        if not isinstance(value["base"], str):
            raise ValueError(f"base: must be a catalog name, one of {', '.join(sorted(table))} (got {value['base']!r})")
        entry = resolve(kind, value["base"])
        if value.get("calibration") is not None:
            entry.pop("efficiency", None)
        return merge(entry, {k: v for k, v in value.items() if k != "base"})
    return value


def _load(kind: str, cls: type[Spec], name: str) -> Spec:
    try:
        return cls.model_validate(resolve(kind, name))
    except ValueError as exc:
        if isinstance(exc, ValidationError):
            errors = validation_errors(exc)
            raise ScenarioError([(f"{name}." + ".".join(map(str, e["loc"])), e["msg"]) for e in errors]) from None
        raise ScenarioError((kind[:-1], str(exc))) from None


def gpu(name: str) -> GPUSpec:
    """The catalog GPU called ``name``."""
    return _load("gpus", GPUSpec, name)


def model(name: str) -> ModelSpec:
    """The catalog model called ``name``."""
    return _load("models", ModelSpec, name)
