"""A per-request log measured on a server, as CSV or JSONL, and the same written back.

One row per request with ``arrival_time`` (seconds, any origin: the table is shifted so
the first request arrives at 0), ``prompt_tokens``, ``output_tokens`` and the request's
measured latencies in either form:

- ``ttft`` and ``e2e`` (seconds after its arrival; ``latency`` is accepted for ``e2e``), or
- ``first_token_time`` and ``finish_time`` (or ``last_token_time``): timestamps on the
  clock of ``arrival_time``.

Optional: ``success`` (true/false or 1/0; default true) and, in JSONL, ``itl`` (the
list of inter-token gaps in seconds). :func:`read_request_log` returns the columns of
:data:`des.workload.formats.COLUMNS`; problems are one-line ``ValueError``s naming the
file, the row and the value.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from des.workload.formats.checks import MAX_TOKENS, first_line, has_columns, show
from des.workload.formats.files import (
    FileProblem,
    NestedTooDeep,
    csv_table,
    data_suffix,
    json_value,
    utf8_bytes,
)

if TYPE_CHECKING:
    import pandas as pd

END_NAMES = ("e2e", "latency")
#: What a ``success`` cell may hold (CSV cells arrive as text; JSONL as JSON values).
TRUTH: dict[object, bool] = {True: True, False: False, "true": True, "false": False, "1": True, "0": False}
FINISH_NAMES = ("finish_time", "last_token_time")


def _fail(path: Path, msg: str) -> ValueError:
    return ValueError(f"{str(path)!r}: {msg}")


def _load(path: Path, jsonl: bool | None) -> pd.DataFrame:
    import pandas as pd

    if not path.exists():
        raise _fail(path, "no such file")
    if not path.is_file():
        raise _fail(path, "not a file")
    if jsonl is None:
        jsonl = data_suffix(path) in (".jsonl", ".ndjson")
    try:
        if jsonl:
            rows = []
            for i, line in enumerate(utf8_bytes(path).decode("utf-8").splitlines()):
                if line.strip():
                    row = _json_line(path, line, i + 1)
                    if not isinstance(row, dict):
                        raise _fail(path, f"line {i + 1} is not a JSON object")
                    rows.append(row)
            return pd.DataFrame(rows)
        # as text: Python's float() parses decimals correctly rounded, so written numbers come back exact
        return csv_table(utf8_bytes(path), dtype=str, keep_default_na=False)
    except FileProblem as exc:
        raise _fail(path, str(exc)) from None
    except UnicodeDecodeError:
        raise _fail(path, "is not UTF-8 text") from None
    except (OSError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        if isinstance(exc, ValueError) and str(exc).startswith(repr(str(path))):
            raise
        raise _fail(path, f"cannot parse it ({first_line(exc)})") from None


def _json_line(path: Path, line: str, number: int) -> object:
    """Line ``number`` of a JSONL file, parsed."""
    try:
        return json_value(line)
    except json.JSONDecodeError as exc:
        raise _fail(path, f"not valid JSON lines (line {number}: {exc.msg})") from None
    except NestedTooDeep as exc:
        raise _fail(path, f"line {number} is {exc}") from None


def _float(value: object) -> float:
    """A number read from a file, or NaN (bools and blanks are not numbers)."""
    if isinstance(value, bool) or value is None:
        return math.nan
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def _column(path: Path, frame: pd.DataFrame, col: str, what: str, integer: bool = False) -> np.ndarray:
    raw = frame[col]
    values = np.array([_float(v) for v in raw], dtype=float)
    if integer:
        bad = ~np.isfinite(values) | (values < 1) | (values != np.round(values)) | (values > MAX_TOKENS)
    else:
        bad = ~np.isfinite(values) | (values < 0 if what.endswith(">= 0") else False)
    if bad.any():
        i = int(np.argmax(bad))
        raise _fail(path, f"row {i + 1}: {col} {show(raw.iloc[i])} is not {what}")
    return values


def read_request_log(path: Path, jsonl: bool | None = None) -> pd.DataFrame:
    """The per-request rows of a measured CSV or JSONL log (see the module docstring);
    ``jsonl`` None decides by the suffix (``.jsonl``, ``.ndjson``: JSON lines; also compressed,
    as ``.jsonl.gz``: see :mod:`~des.workload.formats.files`)."""
    import pandas as pd

    frame = _load(path, jsonl)
    if frame.empty:
        raise _fail(path, "has no rows")
    cols = set(frame.columns)
    missing = [c for c in ("arrival_time", "prompt_tokens", "output_tokens") if c not in cols]
    end = next((c for c in END_NAMES if c in cols), None)
    finish = next((c for c in FINISH_NAMES if c in cols), None)
    relative = "ttft" in cols and end is not None
    absolute = "first_token_time" in cols and finish is not None
    if not (relative or absolute):
        missing.append("ttft and e2e (or first_token_time and finish_time)")
    if missing:
        raise _fail(path, f"lacks column(s) {'; '.join(missing)}; {has_columns(frame.columns)}")
    arrival = _column(path, frame, "arrival_time", "a finite time")
    prompt = _column(path, frame, "prompt_tokens", f"a positive integer up to {MAX_TOKENS:,}", integer=True)
    output = _column(path, frame, "output_tokens", f"a positive integer up to {MAX_TOKENS:,}", integer=True)
    if relative:
        ttft = _column(path, frame, "ttft", "a time >= 0")
        assert end is not None
        e2e = _column(path, frame, end, "a time >= 0")
    else:
        assert finish is not None
        first = _column(path, frame, "first_token_time", "a finite time")
        last = _column(path, frame, finish, "a finite time")
        ttft, e2e = first - arrival, last - arrival
        bad = ttft < 0
        if bad.any():
            i = int(np.argmax(bad))
            raise _fail(
                path, f"row {i + 1}: first_token_time {show(frame['first_token_time'].iloc[i])} is before its arrival"
            )
    bad = e2e < ttft * (1 - 1e-12)
    if bad.any():
        i = int(np.argmax(bad))
        raise _fail(path, f"row {i + 1}: the request ends ({e2e[i]!r} s) before its first token ({ttft[i]!r} s)")
    success = np.ones(len(frame), bool)
    if "success" in cols:
        raw = frame["success"]
        mapped = raw.map(lambda v: TRUTH.get(v.strip().lower() if isinstance(v, str) else v))
        if mapped.isna().any():
            i = int(np.argmax(mapped.isna().to_numpy()))
            raise _fail(path, f"row {i + 1}: success {show(raw.iloc[i])} is not true or false")
        success = mapped.to_numpy(bool)
    itl: list[list[float] | None] = [None] * len(frame)
    has_itl = "itl" in cols
    if has_itl:
        for i, gaps in enumerate(frame["itl"]):
            ok = isinstance(gaps, list) and all(
                isinstance(g, int | float) and not isinstance(g, bool) and math.isfinite(g) and g >= 0 for g in gaps
            )
            if not ok:
                raise _fail(path, f"row {i + 1}: itl {show(gaps)} is not a list of times >= 0")
            itl[i] = [float(g) for g in gaps]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(output > 1, (e2e - ttft) / (output - 1), np.nan)
    out = pd.DataFrame(
        {
            "arrival_time": arrival - arrival.min(),
            "prompt_tokens": prompt.astype(np.int64),
            "output_tokens": output.astype(np.int64),
            "ttft": ttft,
            "e2e": e2e,
            "tpot": tpot,
            "itl": itl,
            "success": success,
        }
    )
    out.attrs["meta"] = {"arrivals": "arrival_time"}
    out.attrs["has_itl"] = has_itl
    return out


def write_request_log(frame: pd.DataFrame, path: Path, timestamps: bool = False) -> None:
    """Write per-request rows as CSV (``.csv``) or JSONL (``.jsonl``): latencies as ``ttft`` and
    ``e2e``, or with ``timestamps`` as ``first_token_time`` and ``finish_time``. Floats are
    written in full (repr), so reading the file back gives the same numbers."""
    rows = []
    for r in frame.itertuples(index=False):
        row: dict[str, object] = {
            "arrival_time": float(r.arrival_time),
            "prompt_tokens": int(r.prompt_tokens),
            "output_tokens": int(r.output_tokens),
        }
        if timestamps:
            row["first_token_time"] = float(r.arrival_time + r.ttft)
            row["finish_time"] = float(r.arrival_time + r.e2e)
        else:
            row["ttft"] = float(r.ttft)
            row["e2e"] = float(r.e2e)
        row["success"] = bool(r.success)
        rows.append(row)
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        if "itl" in frame.columns:
            for row, gaps in zip(rows, frame["itl"], strict=True):
                if gaps is not None:
                    row["itl"] = [float(g) for g in gaps]
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        return
    header = list(rows[0]) if rows else ["arrival_time", "prompt_tokens", "output_tokens", "ttft", "e2e", "success"]
    lines = [",".join(header)]
    for row in rows:
        lines.append(",".join(repr(row[k]).lower() if isinstance(row[k], bool) else repr(row[k]) for k in header))
    path.write_text("\n".join(lines) + "\n")
