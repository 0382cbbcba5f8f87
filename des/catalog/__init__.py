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

from des.catalog.specs import Efficiency, GPUSpec, ModelSpec, Variant
from des.config import Strict, load_yaml
from des.dotted import merge
from des.errors import ScenarioError, did_you_mean, validation_errors

Spec = TypeVar("Spec", bound=Strict)

__all__ = [
    "Efficiency", "GPUSpec", "ModelSpec", "Variant", "gpu", "model", "gpu_names", "model_names", "resolve",
    "variants", "find_variant",
]  # fmt: skip


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
        return merge(entry, {k: v for k, v in value.items() if k != "base"} | _hand_set(entry, value))
    return value


#: Keys of an efficiency block that say where its factors come from rather than set one.
_PROVENANCE_KEYS = frozenset({"source", "provenance", "basis", "uncertainty"})


def _hand_set(entry: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """A GPU override that sets efficiency factors by hand over a catalog entry's fitted or
    transferred ones makes them ``spec`` (nothing measured behind the changed factors),
    with a basis naming what was changed, unless the override states its own provenance."""
    eff = override.get("efficiency")
    base = entry.get("efficiency")
    if not isinstance(eff, dict) or not isinstance(base, dict) or "provenance" in eff:
        return {}
    changed = sorted(k for k in eff if k not in _PROVENANCE_KEYS and eff[k] != base.get(k))
    if not changed or base.get("provenance", "spec") == "spec":
        return {}
    was = f"{base.get('provenance')} ({base['basis']})" if base.get("basis") else str(base.get("provenance"))
    basis = f"{override['base']}'s {was} factors with {', '.join(changed)} set by hand"
    return {"efficiency": {**eff, "provenance": "spec", "basis": basis}}


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


def variants() -> list[tuple[str, Variant]]:
    """Every quantised checkpoint the catalog lists, as (catalog name, variant), by name."""
    return [(name, v) for name in model_names() for v in model(name).variants]


def find_variant(repo: str) -> tuple[str, Variant]:
    """The catalog model and variant of a Hugging Face ``repo`` (e.g.
    ``Qwen/Qwen2.5-14B-Instruct-AWQ``; case-insensitive): run it as that name with the
    variant's ``precision``. Raises ScenarioError naming the known repositories."""
    found = {v.repo.lower(): (name, v) for name, v in variants()}
    if repo.lower() in found:
        return found[repo.lower()]
    known = sorted(v.repo for _, v in variants())
    hint = did_you_mean(repo, known)
    raise ScenarioError(("model", f"no catalog variant is {repo!r}{hint}; known: {', '.join(known)}"))
