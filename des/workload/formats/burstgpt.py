"""BurstGPT's request traces (format ``burstgpt``): the CSVs of ``HPMLL/BurstGPT``.

Checked against the repository's ``README.md`` (schema) and its replay code
(``example/src/burstgpt/workload.py`` and its test): a header row
``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``, then one row
per request to ChatGPT or GPT-4 behind Azure:

- ``Timestamp``: submission time, **seconds** from 0:00:00 on the trace's first day
  (so a replay moves the first request to t = 0, as for any recorded clock);
- ``Model``: ``ChatGPT`` or ``GPT-4``; ``model:`` on the replay keeps only that model's
  rows (exact match);
- ``Request tokens``, ``Response tokens``: prompt and output tokens.
- ``Log Type``: ``Conversation log`` (the ChatGPT web UI) or ``API log``; ``log_type:``
  on the replay keeps only that type's rows (exact match);
- ``Total tokens`` (their sum) is not read.

**Failed requests.** BurstGPT keeps the requests that failed, with ``Response tokens``
0 (``BurstGPT_1.csv`` "contains ... some failure that Response tokens are 0s"; the
``_without_fails`` files leave them out). A failed request produced no output, so there
is nothing to replay: such rows are skipped, and a note says how many (``des run``
prints it as a warning). Every other value must be valid: ``Request tokens`` an integer
>= 1, ``Response tokens`` an integer >= 0, ``Timestamp`` a number >= 0; a trace left
with no rows is an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from des.workload.formats.base import (
    OptionError,
    ReadOptions,
    TraceFormat,
    fail,
    load_csv,
    require,
    skipped,
    table,
    where,
)
from des.workload.formats.checks import positive_ints, times_from

if TYPE_CHECKING:
    import pandas as pd

REQUIRED = ("Timestamp", "Request tokens", "Response tokens")
#: Replay options that keep rows by a column: option -> column.
FILTERS = {"model": "Model", "log_type": "Log Type"}


def read_burstgpt(path: Path, options: ReadOptions) -> pd.DataFrame:
    """A BurstGPT trace as a trace table, failed requests (0 response tokens) skipped."""
    frame = load_csv(path)
    wanted = {column: getattr(options, option) for option, column in FILTERS.items()}
    wanted = {column: value for column, value in wanted.items() if value is not None}
    require(path, frame, REQUIRED + tuple(wanted))
    arrival = times_from(frame["Timestamp"], where(path, "Timestamp"))
    prompt = positive_ints(frame["Request tokens"], where(path, "Request tokens"))
    output = positive_ints(frame["Response tokens"], where(path, "Response tokens"), minimum=0)
    keep = np.ones(len(frame), dtype=bool)
    for option, column in FILTERS.items():
        if column not in wanted:
            continue
        values = frame[column].astype(str).where(frame[column].notna(), "")
        keep &= np.array(values == wanted[column], dtype=bool)
        if not keep.any():
            present = sorted(set(values) - {""})
            what = option.replace("_", " ")
            among = " among the rows of the model kept" if option != "model" and "Model" in wanted else ""
            raise OptionError(
                option,
                f"no row of {str(path)!r}{among} is of {what} {wanted[column]!r}; its {what}s: {', '.join(present)}",
            )
    failed = keep & (output == 0)
    keep = keep & ~failed
    if not keep.any():
        raise fail(path, "has no request left to replay: every row has Response tokens 0 (a failed request)")
    notes = skipped(path, int(failed.sum()), int(failed.sum() + keep.sum()), "Response tokens 0 (failed requests)")
    return table(arrival[keep], prompt[keep], output[keep], notes=notes)


BURSTGPT = TraceFormat(
    "burstgpt",
    read_burstgpt,
    "Timestamp (s), Model, Request tokens, Response tokens (0: a failed request, skipped)",
    signature=REQUIRED,
    filters=tuple(FILTERS),
)
