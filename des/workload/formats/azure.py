"""Azure's LLM inference traces (format ``azure``): the CSVs of ``Azure/AzurePublicDataset``.

Checked against ``AzureLLMInferenceDataset2023.md`` and ``AzureLLMInferenceDataset2024.md``
(schema: ``TIMESTAMP`` "Invocation time", ``ContextTokens``, ``GeneratedTokens``), the
released ``data/AzureLLMInferenceTrace_{code,conv}.csv`` (2023) and the 2024 notebook
``analysis/AzureLLMInferenceDataset2024.ipynb``:

- ``TIMESTAMP`` is a date and time: ``2023-11-16 18:15:46.6805900`` in the 2023 release
  (seven fractional digits, no time zone) and ``2024-05-10 00:00:00.009930+00:00`` in the
  2024 one (six digits or none, with the UTC offset). Both are read as ISO 8601 to the
  nanosecond, a time without an offset as UTC, and become seconds since 00:00 UTC on the
  day of the trace's first request (as BurstGPT counts): a replay moves the first
  request to t = 0, and ``absolute_times: true`` keeps the time of day. (Seconds since
  the Unix epoch would blur the sub-microsecond digits: a float near 1.7e9 resolves
  0.24 µs; near 1e5 it resolves 1.5e-11 s.) Nanoseconds in 64 bits span 1677-09-21
  00:12:43 to 2262-04-11 23:47:16 UTC: a time outside is an error that says so.
- ``ContextTokens`` and ``GeneratedTokens``: prompt and output tokens (integers >= 1; the
  2023 release has no zeros: shortest prompt 2, shortest output 6 tokens). A row with 0
  of either is an error naming the row, not a skipped failure: the dataset does not
  say what one would mean.

Other columns are ignored. The rows are sorted by time (the released files already are).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from des.workload.formats.base import ReadOptions, TraceFormat, fail, load_csv, require, table, where
from des.workload.formats.checks import positive_ints, show

if TYPE_CHECKING:
    import pandas as pd

REQUIRED = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
NS_PER_DAY = 86_400 * 10**9


def day_seconds(path: Path, raw: pd.Series) -> tuple[np.ndarray, str]:
    """``TIMESTAMP`` strings (UTC unless they state an offset) as seconds since 00:00 UTC on the
    day of the earliest, and that midnight (ISO 8601)."""
    import pandas as pd

    text = raw.astype(str).where(raw.notna(), "")
    stamps = pd.to_datetime(text, format="ISO8601", utc=True, errors="coerce")
    # pandas reads a column at one resolution: a date beyond the nanosecond range is NaT
    # among dates that need nanoseconds, and read (e.g. in microseconds) among dates that do not
    try:
        in_ns = None if stamps.isna().any() else stamps.dt.as_unit("ns")
    except pd.errors.OutOfBoundsDatetime:
        in_ns = None
    if in_ns is None:
        first, last = pd.Timestamp.min.tz_localize("UTC"), pd.Timestamp.max.tz_localize("UTC")
        i = int(np.argmax((stamps.isna() | (stamps < first) | (stamps > last)).to_numpy()))
        what = (
            f"is outside the times that can be held to the nanosecond, {first:%Y-%m-%d %H:%M:%S} "
            f"to {last:%Y-%m-%d %H:%M:%S} UTC"
            if _is_a_date(text.iloc[i])
            else "is not a date and time such as '2023-11-16 18:15:46.6805900' (ISO 8601; UTC unless it has an offset)"
        )
        raise fail(path, f"row {i + 1}: TIMESTAMP {show(raw.iloc[i])} {what}")
    nanos = (in_ns - pd.Timestamp("1970-01-01", tz="UTC")) // pd.Timedelta(nanoseconds=1)
    ns = np.asarray(nanos, dtype=np.int64)
    day = ns.min() - ns.min() % NS_PER_DAY
    origin = pd.Timestamp(int(day), unit="ns", tz="UTC").strftime("%Y-%m-%dT%H:%M:%SZ")
    return (ns - day) / 1e9, origin


def _is_a_date(text: str) -> bool:
    """Whether ``text`` alone reads as an ISO 8601 date and time, in any range."""
    import pandas as pd

    try:
        stamp = pd.to_datetime(text, format="ISO8601", utc=True)
    except pd.errors.OutOfBoundsDatetime:
        return True  # a valid date that pandas cannot hold at any resolution it tried
    except ValueError:
        return False
    return not pd.isna(stamp)  # a blank (or "NaT") reads as NaT


def read_azure(path: Path, options: ReadOptions) -> pd.DataFrame:
    """An Azure LLM inference trace as a trace table (``arrival_time``: seconds since 00:00 UTC of its first day)."""
    frame = load_csv(path)
    require(path, frame, REQUIRED)
    arrival, origin = day_seconds(path, frame["TIMESTAMP"])
    prompt = positive_ints(frame["ContextTokens"], where(path, "ContextTokens"))
    output = positive_ints(frame["GeneratedTokens"], where(path, "GeneratedTokens"))
    out = table(arrival, prompt, output)
    out.attrs["clock_origin"] = origin
    return out


AZURE = TraceFormat(
    "azure",
    read_azure,
    "TIMESTAMP (date and time, e.g. 2023-11-16 18:15:46.6805900), ContextTokens, GeneratedTokens",
    signature=REQUIRED,
)
