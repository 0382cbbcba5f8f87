"""Checks of the values des reads from files (traces, request logs, empirical lengths).

Every check raises a one-line ``ValueError`` placing the bad value (file, row) and
showing it as the user wrote it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

#: Largest token count accepted from a file (far beyond any context window).
MAX_TOKENS = 1_000_000_000


def first_line(exc: BaseException) -> str:
    """An exception's message cut to its first non-empty line."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def show(value) -> str:
    """A value read from a file, as the user wrote it (not a numpy repr): a whole number that
    pandas read as a float (its column has blanks) without its ``.0``, a blank as ``(blank)``."""
    if hasattr(value, "item"):
        value = value.item()
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "(blank)"
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return repr(int(value))
    return repr(value)


def existing_file(path: Path) -> None:
    """Raise ValueError unless ``path`` is a file."""
    if not path.exists():
        raise ValueError(f"cannot read {str(path)!r}: no such file")
    if not path.is_file():
        raise ValueError(f"cannot read {str(path)!r}: not a file")


def numbers(raw: pd.Series) -> np.ndarray:
    """``raw`` as floats, NaN where a value is not a number (blanks, text, and booleans,
    which pandas would otherwise read as 1 and 0)."""
    import pandas as pd

    if raw.dtype == bool:
        return np.full(len(raw), np.nan)
    if raw.dtype == object:
        raw = raw.map(lambda v: None if isinstance(v, bool) else v)
    return pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)


def positive_ints(raw: pd.Series, where: str, minimum: int = 1) -> np.ndarray:
    """``raw`` as int64 token counts; ValueError at the first value that is not an integer
    from ``minimum`` (1: positive) up to :data:`MAX_TOKENS`, placed by ``where`` (its
    ``{row}`` counts from 1)."""
    values = numbers(raw)
    bad = ~np.isfinite(values) | (values < minimum) | (values != np.round(values)) | (values > MAX_TOKENS)
    if bad.any():
        i = int(np.argmax(bad))
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ValueError(f"{where.format(row=i + 1)} {show(raw.iloc[i])} is not {kind} up to {MAX_TOKENS:,}")
    return values.astype(np.int64)


def times_from(raw: pd.Series, where: str, unit: str = "seconds") -> np.ndarray:
    """``raw`` as float times >= 0 (in the file's ``unit``); ValueError at the first that is
    not one, placed by ``where`` (its ``{row}`` counts from 1)."""
    values = numbers(raw)
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{where.format(row=i + 1)} {show(raw.iloc[i])} is not a time >= 0 ({unit})")
    return values
