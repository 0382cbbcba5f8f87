"""Base class for validated configuration data.

Configuration objects are frozen pydantic models that reject unknown keys. They hold
data only: no file I/O happens in their validators except reading a file the user
named (traces, empirical length tables), and only to check it once at load time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo


class Strict(BaseModel):
    """A frozen pydantic model that forbids unknown keys and non-finite numbers."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)


def resolve_path(path: Path, info: ValidationInfo) -> Path:
    """``path`` made absolute against the validation context's ``base_dir`` (the
    directory of the scenario file), so relative paths mean the same from any CWD."""
    base = (info.context or {}).get("base_dir") if info is not None else None
    if path.is_absolute() or base is None:
        return path
    return Path(base) / path


#: A path field of a scenario: relative paths are relative to the scenario file (:func:`resolve_path`).
FilePath = Annotated[Path, AfterValidator(resolve_path)]


_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, ~10x faster, when built


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` through libyaml when PyYAML has it (errors are the same ``yaml.YAMLError``)."""
    return yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 (a safe loader)
