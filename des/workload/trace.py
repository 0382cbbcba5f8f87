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


def read_trace(path: Path) -> pd.DataFrame:
    """The trace at ``path`` as a DataFrame of the three columns, sorted by arrival."""
    if not path.is_file():
        raise ValueError(f"cannot read {str(path)!r}: no such file")
    suffix = path.suffix.lower()
    try:
        if suffix in (".jsonl", ".ndjson", ".json"):
            frame = pd.read_json(path, lines=suffix != ".json")
        else:
            frame = pd.read_csv(path, comment="#")
    except (OSError, UnicodeDecodeError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ValueError(f"cannot parse {str(path)!r}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
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
            bad = ~np.isfinite(values) | (values < 1) | (values != np.round(values))
            what = "a positive integer"
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{str(path)!r} row {i + 1}: {col} {raw.iloc[i]!r} is not {what}")
        out[col] = values if col == "arrival_time" else values.astype(np.int64)
    table = pd.DataFrame(out)
    return table.sort_values("arrival_time", kind="stable", ignore_index=True)
