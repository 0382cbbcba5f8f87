"""Calibration files: the efficiency factors ``des calibrate`` fitted, with their provenance.

A scenario names one with ``gpu: {base: rtx4090, calibration: path}`` (relative paths
against the scenario's folder); its ``efficiency`` replaces the catalog entry's. The
file also records the profile it was fitted to and the fit's error per op group, so a
plan built on it says where its step times come from. Reading it needs nothing beyond
YAML and pydantic; fitting lives in :mod:`des.tools.calibrate`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, NonNegativeFloat, PositiveInt, ValidationError

from des.catalog.efficiency import Efficiency
from des.config import Strict, load_yaml
from des.errors import reword, validation_errors


class GroupFit(Strict):
    """How well one op group's factors reproduce the profile (errors as fractions)."""

    points: PositiveInt
    median_abs_error: NonNegativeFloat
    max_abs_error: NonNegativeFloat
    factors: list[str] = []


class CalibrationFile(Strict):
    """What ``des calibrate`` writes: factors for ``gpu`` fitted to a profile of ``model``."""

    format: Literal[1] = 1
    gpu: str
    model: str
    profile: dict[str, str] = Field(default_factory=dict)
    efficiency: Efficiency
    fit: dict[str, GroupFit] = Field(default_factory=dict)

    def to_yaml(self) -> str:
        header = (
            "# des calibration file, written by `des calibrate`. Use it from a scenario as\n"
            f"#   gpu: {{base: {self.gpu}, calibration: <path of this file>}}\n"
            "# Efficiency factors are fractions of the GPU's spec-sheet peaks; times in seconds.\n"
        )
        return header + yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False, width=100)


def read_calibration(path: Path) -> CalibrationFile:
    """The calibration file at ``path``; any problem as one ``ValueError`` line naming it."""
    where = f"calibration: {str(path)!r}"
    try:
        text = path.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise ValueError(f"{where} is a folder, not a calibration file") from None
    except FileNotFoundError:
        raise ValueError(f"{where}: no such file") from None
    except OSError as exc:
        raise ValueError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{where} is not UTF-8 text") from None
    return parse_calibration(text, where)


def parse_calibration(text: str, where: str) -> CalibrationFile:
    """The calibration file whose content is ``text``, validated as a scenario reads it; any
    problem as one ``ValueError`` line starting with ``where`` (``des calibrate`` checks what it
    is about to write with it)."""
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{where}{line}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where} does not hold a mapping (is it a des calibration file?)")
    try:
        return CalibrationFile.model_validate(data)
    except ValidationError as exc:
        errors = validation_errors(exc)
        err = errors[0]
        loc = ".".join(str(x) for x in err["loc"]) or "file"
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        value = err.get("input")
        shown = err["type"] not in ("extra_forbidden", "missing", "scenario_error")
        got = f" (got {value!r})" if shown and not isinstance(value, dict | list) else ""
        more = f" and {len(errors) - 1} more" if len(errors) > 1 else ""
        raise ValueError(f"{where}: {loc}: {reword(msg)}{got}{more}") from None
