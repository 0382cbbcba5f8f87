"""Request traces: the helpers every trace reader shares, and what a replay measures.

The readers of each trace format (des's own CSV and JSONL, Mooncake, Azure, BurstGPT,
``vllm bench serve`` results) live in :mod:`des.workload.formats`; :func:`read_trace`
reads a file in any of them. Rows come back sorted by arrival time (stably) with times
as recorded (any time >= 0: seconds from a start, or epoch timestamps);
:class:`des.workload.arrivals.Trace` moves the first arrival to ``t = 0`` and scales
them. Every problem is reported as a one-line ``ValueError`` naming the file, the row
and the value. :func:`trace_stats` measures a replay's rate and burstiness: the figures
to fit a synthetic arrival process to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

#: The columns every trace table has (arrival time in the file's unit, then token counts).
COLUMNS = ("arrival_time", "prompt_tokens", "output_tokens")
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


def read_trace(path: Path, format: str | None = None) -> pd.DataFrame:
    """The trace at ``path`` in ``format`` (default: inferred from its name), sorted by
    arrival: see :func:`des.workload.formats.read_trace`."""
    from des.workload.formats import read_trace as read

    return read(path, format)


@dataclass(frozen=True)
class TraceStats:
    """Arrivals of a replay: ``requests`` over ``span`` seconds (first to last), their mean
    ``rate`` (gaps per second, ``(requests - 1) / span``) and ``cv``, the coefficient of
    variation of the gaps (1 for Poisson, above 1 bursty); None where undefined."""

    requests: int
    span: float
    rate: float | None
    cv: float | None


def trace_stats(times: np.ndarray) -> TraceStats:
    """:class:`TraceStats` of sorted arrival times (seconds)."""
    gaps = np.diff(times)
    span = float(times[-1] - times[0]) if len(times) else 0.0
    rate = (len(gaps) / span) if span > 0 else None
    mean = float(gaps.mean()) if len(gaps) else 0.0
    cv = float(gaps.std() / mean) if len(gaps) > 1 and mean > 0 else None
    return TraceStats(int(len(times)), span, rate, cv if cv is None or math.isfinite(cv) else None)
