"""Checks of the values des reads from files (traces, request logs, empirical lengths).

Every check raises a one-line ``ValueError`` placing the bad value (file, row) and
showing it as the user wrote it.
"""

from __future__ import annotations

import math
import re
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


#: A column name an error may quote: a short run of letters, digits, ``_ . - ( ) /`` and
#: spaces starting with a letter (or pandas' ``Unnamed: N`` for a blank one).
COLUMN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.()/ -]{0,39}|Unnamed: \d+")
#: The most column names an error quotes.
MAX_NAMES = 12


def has_columns(columns) -> str:
    """What a file's header holds, for an error: ``has: a, b`` when every name looks like
    a column's (:data:`COLUMN_NAME`; at most :data:`MAX_NAMES` of them), else that its first
    line is not a header. An error about a file that is no table (``/proc/self/environ``, a
    key file) so never quotes what the file holds."""
    names = [str(c) for c in columns]
    if not names:
        return "has: none"
    if not all(COLUMN_NAME.fullmatch(n) for n in names):
        return "its first line is not a header of column names"
    more = f" and {len(names) - MAX_NAMES} more" if len(names) > MAX_NAMES else ""
    return f"has: {', '.join(names[:MAX_NAMES])}{more}"


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
        raise ValueError(f"{where.format(row=i + 1)} {show(raw.iloc[i])} is not {kind} up to {MAX_TOKENS:,}{also(bad)}")
    return values.astype(np.int64)


def times_from(raw: pd.Series, where: str, unit: str = "seconds") -> np.ndarray:
    """``raw`` as float times >= 0 (in the file's ``unit``); ValueError at the first that is
    not one, placed by ``where`` (its ``{row}`` counts from 1)."""
    values = numbers(raw)
    bad = ~np.isfinite(values) | (values < 0)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"{where.format(row=i + 1)} {show(raw.iloc[i])} is not a time >= 0 ({unit}){also(bad)}")
    return values


#: How many more bad rows a problem names after its first.
MORE_ROWS = 4


def also(bad: np.ndarray) -> str:
    """The rows (from 1) after the first where ``bad`` holds, for the end of a problem with the
    first: ``" (also rows 4, 7 and 12 more)"``, "" when it is the only one. A file with many
    bad rows says so at once, rather than one fix at a time."""
    rows = np.flatnonzero(bad)[1:]
    if rows.size == 0:
        return ""
    listed = ", ".join(str(r + 1) for r in rows[:MORE_ROWS])
    more = f" and {rows.size - MORE_ROWS:,} more" if rows.size > MORE_ROWS else ""
    return f" (also row{'s' if rows.size > 1 else ''} {listed}{more})"
