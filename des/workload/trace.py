"""Reading request traces: CSV or JSONL with arrival_time, prompt_tokens, output_tokens.

Rows are sorted by arrival time (stably); times are seconds from the start of the
trace and are shifted so the first request arrives at ``t = 0`` only if asked.
Every problem is reported as a ``ValueError`` naming the file, the row and the value.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

COLUMNS = ("arrival_time", "prompt_tokens", "output_tokens")
#: Largest token count accepted from a file (far beyond any context window).
MAX_TOKENS = 1_000_000_000


def first_line(exc: BaseException) -> str:
    """An exception's message cut to its first non-empty line."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def show(value) -> str:
    """A value read from a file, as the user wrote it (not a numpy repr)."""
    if hasattr(value, "item"):
        value = value.item()
    return repr(value)


def read_trace(path: Path) -> pd.DataFrame:
    """The trace at ``path`` as a DataFrame of the three columns, sorted by arrival."""
    if not path.exists():
        raise ValueError(f"cannot read {str(path)!r}: no such file")
    if not path.is_file():
        raise ValueError(f"cannot read {str(path)!r}: not a file")
    suffix = path.suffix.lower()
    try:
        if suffix in (".jsonl", ".ndjson", ".json"):
            frame = pd.read_json(path, lines=suffix != ".json")
        else:
            frame = pd.read_csv(path, comment="#")
    except (OSError, UnicodeDecodeError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ValueError(f"cannot parse {str(path)!r}: {first_line(exc)}") from None
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{str(path)!r} lacks column(s) {', '.join(missing)}; has: {', '.join(map(str, frame.columns)) or 'none'}"
        )
    if len(frame) == 0:
        raise ValueError(f"{str(path)!r} has no rows")
    out = {}
    for col in COLUMNS:
        raw = frame[col]
        values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float)
        if col == "arrival_time":
            bad = ~np.isfinite(values) | (values < 0)
            what = "a time >= 0 (seconds)"
        else:
            bad = ~np.isfinite(values) | (values < 1) | (values != np.round(values)) | (values > MAX_TOKENS)
            what = f"a positive integer up to {MAX_TOKENS:,}"
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{str(path)!r} row {i + 1}: {col} {show(raw.iloc[i])} is not {what}")
        out[col] = values if col == "arrival_time" else values.astype(np.int64)
    table = pd.DataFrame(out)
    return table.sort_values("arrival_time", kind="stable", ignore_index=True)
