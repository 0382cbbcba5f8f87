"""Reading a profile's CSV tables, with one error line for a file pandas cannot parse.

Shared by the kernel-profile readers of ``des calibrate`` (LLMServingSim's and Vidur's
formats) and the NCCL profile reader of ``des calibrate --network``; each checks its own
columns and values afterwards, and names its own flag or argument in the error.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

#: What pandas raises on a file it cannot read or parse as CSV.
UNPARSABLE = (OSError, UnicodeDecodeError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError)


def read_csv(path: Path, problem: Callable[[str], Exception]) -> pd.DataFrame:
    """The table at ``path``; one that cannot be read or parsed raises ``problem(line)``,
    the line naming the file and pandas's first line of complaint."""
    try:
        return pd.read_csv(path)
    except UNPARSABLE as exc:
        text = str(exc).strip().splitlines()
        raise problem(f"{str(path)!r}: cannot parse it ({text[0] if text else type(exc).__name__})") from None
