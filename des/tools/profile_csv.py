"""Reading a profile's CSV tables, with one error line for a file that cannot be read.

Shared by the kernel-profile readers of ``des calibrate`` (LLMServingSim's and Vidur's
formats) and the NCCL profile reader of ``des calibrate --network``; each checks its own
columns and values afterwards, and names its own flag or argument in the error. The
tables are read as every CSV des reads (:func:`des.workload.formats.files.csv_table`):
a row with more or fewer fields than the header is refused where it is, rather than read
shifted into the wrong columns.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from des.workload.formats.files import FileProblem, csv_table, utf8_bytes

#: The longest kernel time (seconds) a kernel profile may state: one layer's kernel, which
#: takes microseconds to milliseconds on a GPU. A longer one is a unit mistake or a broken
#: file, and no fit des could use comes from it (every ``time_us`` at 1e300 fitted an
#: uncertainty of 606, which ``des run`` then refuses).
MAX_KERNEL_S = 10.0
#: What pandas raises on a file it cannot read or parse as CSV.
UNPARSABLE = (OSError, UnicodeDecodeError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError)


def read_csv(path: Path, problem: Callable[[str], Exception]) -> pd.DataFrame:
    """The table at ``path``; one that cannot be read or parsed raises ``problem(line)``,
    the line naming the file and what is wrong (``row 2 (line 3) has 4 fields, but the
    header has 3: ...``, or pandas's first line of complaint)."""
    try:
        return csv_table(utf8_bytes(path))
    except FileProblem as exc:
        raise problem(f"{str(path)!r}: {exc}") from None
    except UNPARSABLE as exc:
        text = str(exc).strip().splitlines()
        raise problem(f"{str(path)!r}: cannot parse it ({text[0] if text else type(exc).__name__})") from None
