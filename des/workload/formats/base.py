"""What every trace format shares: its description, the table it returns, and the checks.

A trace format is a :class:`TraceFormat`: a name, a reader ``(path, options) ->
DataFrame``, the unit of the times it returns and the file names it is inferred from.
Every reader returns the *trace table*, one row per request sorted (stably) by arrival:

==================  ==========  ==============================================================
column              dtype       meaning
==================  ==========  ==============================================================
``arrival_time``    float64     when the request arrived, in the format's unit (``unit``), as
                                recorded (:class:`~des.workload.arrivals.Trace` shifts and
                                scales it to simulated seconds)
``prompt_tokens``   int64       >= 1
``output_tokens``   int64       >= 1
``conversation_id`` int64       the chat the row is a turn of (its turns are its rows in
                                arrival order); :data:`NO_CONVERSATION` (-1) for none
``prefix_group``    int64       rows of one group >= 0 open with the same shared prefix;
                                :data:`NO_PREFIX_GROUP` (-1) for none
``prefix_tokens``   int64       that prefix's length, the same on every row of the group;
                                :data:`NO_PREFIX_TOKENS` (0) on rows without a group
``hash_ids``        object      a tuple of ints >= 0, one per block of ``hash_block_tokens``
                                prompt tokens (the last block may be partial); ``()`` where
                                the row states none
==================  ==========  ==============================================================

The last four are *optional*: a column is in the table only when the file has it (so
``"hash_ids" in table`` says whether the trace states block identities at all); within
it, rows that state nothing carry the sentinel. Notes about rows a reader skipped
deliberately (failed requests) are in ``table.attrs["notes"]``, one sentence each.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from des.workload.formats.checks import existing_file, first_line, has_columns, numbers, show
from des.workload.formats.files import FileProblem, NestedTooDeep, csv_table, json_value, utf8_bytes

if TYPE_CHECKING:
    import pandas as pd

#: The columns every trace table has (arrival time in the file's unit, then token counts).
COLUMNS = ("arrival_time", "prompt_tokens", "output_tokens")
#: Optional columns of the trace table, in their order after :data:`COLUMNS`.
OPTIONAL = ("conversation_id", "prefix_group", "prefix_tokens", "hash_ids")
NO_CONVERSATION = -1
NO_PREFIX_GROUP = -1
NO_PREFIX_TOKENS = 0
#: Tokens per hash id unless the scenario says otherwise (Mooncake's block size).
HASH_BLOCK_TOKENS = 512


@dataclass(frozen=True)
class ReadOptions:
    """What a reader needs from the scenario besides the path."""

    hash_block_tokens: int = HASH_BLOCK_TOKENS
    model: str | None = None  # keep only the rows of this model (formats filtering on it)
    log_type: str | None = None  # keep only the rows of this log type (formats filtering on it)


Reader = Callable[[Path, ReadOptions], "pd.DataFrame"]


@dataclass(frozen=True)
class TraceFormat:
    """A trace format: ``read(path, options)`` returns the trace table (see the module).

    ``unit`` names the unit of the times it returns, ``ticks_per_second`` how many of
    them make a second (the default ``time_scale`` of a replay is its inverse; a replay
    divides by it, so that 3052 ms become exactly 3.052 s); ``suffixes`` are the file name
    endings it is inferred from; ``columns`` says what it reads (for errors and the
    README); ``signature`` lists columns that identify a file of this format, so that a
    file read in the wrong format gets a hint; ``filters`` names the replay options
    (:class:`ReadOptions` fields) it can keep rows by, e.g. ``model``.
    """

    name: str
    read: Reader
    columns: str
    unit: str = "seconds"
    ticks_per_second: int = 1
    suffixes: tuple[str, ...] = ()
    signature: tuple[str, ...] = ()
    filters: tuple[str, ...] = ()

    @property
    def unit_seconds(self) -> float:
        """The length of the format's time unit in seconds."""
        return 1.0 / self.ticks_per_second


class MissingColumns(ValueError):
    """A file lacks columns its format needs; ``present`` lists the ones it has."""

    def __init__(self, message: str, present: Sequence[str]):
        super().__init__(message)
        self.present = tuple(present)


class OptionError(ValueError):
    """A problem with a replay's option ``field`` (e.g. ``model``) rather than with the file."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def fail(path: Path, msg: str) -> ValueError:
    return ValueError(f"{str(path)!r} {msg}")


def load_csv(path: Path) -> pd.DataFrame:
    """A CSV file (``#`` starts a comment; compressed as its name says, see
    :mod:`~des.workload.formats.files`) as read by pandas; ValueError if it cannot be parsed,
    or if a row's field count differs from the header's (naming the row and its line)."""
    import pandas as pd

    existing_file(path)
    try:
        data = utf8_bytes(path)
    except FileProblem as exc:
        raise ValueError(f"cannot parse {str(path)!r}: {exc}") from None
    except OSError as exc:
        raise ValueError(f"cannot parse {str(path)!r}: {first_line(exc)}") from None
    try:
        return csv_table(data)
    except FileProblem as exc:  # a row of another width than the header's
        raise fail(path, str(exc)) from None
    except (OSError, UnicodeDecodeError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ValueError(f"cannot parse {str(path)!r}: {first_line(exc)}") from None


def load_jsonl(path: Path) -> pd.DataFrame:
    """A file of one JSON object per line (blank lines skipped; compressed as its name says, a
    leading byte order mark dropped, see :mod:`~des.workload.formats.files`), the keys as
    columns; a key missing from a line is NaN there. Values stay as JSON has them (lists stay lists)."""
    import pandas as pd

    existing_file(path)
    try:
        text = utf8_bytes(path).decode("utf-8")
    except FileProblem as exc:
        raise ValueError(f"cannot parse {str(path)!r}: {exc}") from None
    except OSError as exc:
        raise ValueError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from None
    rows: list[dict[str, Any]] = []
    for i, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        try:
            row = json_value(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"cannot parse {str(path)!r}: line {i + 1} is not valid JSON ({exc.msg})") from None
        except NestedTooDeep as exc:
            raise ValueError(f"cannot parse {str(path)!r}: line {i + 1} is {exc}") from None
        if not isinstance(row, dict):
            raise ValueError(
                f"cannot parse {str(path)!r}: line {i + 1} holds {type(row).__name__} {_short(row)}, "
                "not a JSON object (JSONL has one object per line)"
            )
        rows.append(row)
    return pd.DataFrame(rows)


def _short(value: object, limit: int = 40) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def require(path: Path, frame: pd.DataFrame, columns: Sequence[str]) -> None:
    """Raise :class:`MissingColumns` unless ``frame`` has ``columns``, then ValueError if it has no rows."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        present = [str(c) for c in frame.columns]
        raise MissingColumns(f"{str(path)!r} lacks column(s) {', '.join(missing)}; {has_columns(present)}", present)
    if len(frame) == 0:
        raise fail(path, "has no rows")


def where(path: Path, column: str) -> str:
    """The place of a bad value, for :func:`~des.workload.formats.checks.positive_ints` and friends."""
    return f"{str(path)!r} row {{row}}: {column}"


def optional_ids(path: Path, raw: pd.Series, column: str, none: int, what: str) -> np.ndarray:
    """An optional id column: integers >= 0, blank (or JSON null) for ``none``."""
    values = numbers(raw)
    blank = raw.isna().to_numpy()
    bad = ~blank & (~np.isfinite(values) | (values < 0) | (values != np.round(values)))
    if bad.any():
        i = int(np.argmax(bad))
        raise fail(path, f"row {i + 1}: {column} {show(raw.iloc[i])} is not an integer >= 0 (blank: {what})")
    return np.where(blank, none, np.nan_to_num(values)).astype(np.int64)


def prefix_lengths(path: Path, raw: pd.Series, groups: np.ndarray, prompt: np.ndarray) -> np.ndarray:
    """``prefix_tokens``: each grouped row's prefix length (>= 1, at most its prompt, the same
    on every row of its group); blank on rows without a group."""
    values = numbers(raw)
    blank = raw.isna().to_numpy()
    grouped = groups != NO_PREFIX_GROUP
    for i in range(len(raw)):
        if not grouped[i]:
            if not blank[i]:
                raise fail(path, f"row {i + 1}: prefix_tokens {show(raw.iloc[i])} on a row without a prefix_group")
            continue
        v = values[i]
        if not (math.isfinite(v) and v >= 1 and v == round(v)):
            raise fail(
                path,
                f"row {i + 1}: prefix_tokens {show(raw.iloc[i])} is not a positive integer "
                f"(the length of prefix_group {groups[i]}'s prefix)",
            )
        if v > prompt[i]:
            raise fail(
                path,
                f"row {i + 1}: prefix_tokens {int(v)} exceeds the row's prompt_tokens {prompt[i]} "
                "(a prompt opens with its group's prefix)",
            )
    out = np.where(grouped, np.nan_to_num(values), NO_PREFIX_TOKENS).astype(np.int64)
    first: dict[int, int] = {}
    for i in np.flatnonzero(grouped).tolist():
        g = int(groups[i])
        j = first.setdefault(g, i)
        if out[i] != out[j]:
            raise fail(
                path,
                f"row {i + 1}: prefix_tokens {out[i]} differs from {out[j]} on row {j + 1} "
                f"of the same prefix_group {g} (one group, one prefix)",
            )
    return out


def hash_lists(path: Path, raw: pd.Series, prompt: np.ndarray, block: int, column: str = "hash_ids") -> list[Any]:
    """Each row's block hash ids as a tuple of ints >= 0 (``()`` where the row has none): one id
    per ``block`` prompt tokens, the last block possibly partial, so ``prompt // block`` to
    ``ceil(prompt / block)`` of them."""
    out: list[Any] = []
    for i, value in enumerate(raw.tolist()):
        if value is None or (isinstance(value, float) and math.isnan(value)):
            out.append(())
            continue
        if not isinstance(value, list):
            raise fail(path, f"row {i + 1}: {column} is {_short(value)}, not a list of integers")
        for j, h in enumerate(value):
            if isinstance(h, bool) or not isinstance(h, int) or h < 0:
                raise fail(path, f"row {i + 1}: {column}[{j}] is {_short(h)}, not an integer >= 0")
        p = int(prompt[i])
        lo, hi = p // block, -(-p // block)
        if not lo <= len(value) <= hi:
            need = f"{hi}" if lo == hi else f"{hi} (or {lo} without the partial last block)"
            raise fail(
                path,
                f"row {i + 1}: {len(value)} {column} for {p} prompt tokens, but blocks of {block} tokens "
                f"need {need}; is the block size right? (workload.arrival.hash_block_tokens)",
            )
        out.append(tuple(value))
    return out


def table(
    arrival: np.ndarray,
    prompt: np.ndarray,
    output: np.ndarray,
    optional: dict[str, Any] | None = None,
    notes: Sequence[str] = (),
) -> pd.DataFrame:
    """The trace table of these columns, sorted stably by arrival, with ``notes`` in its attrs."""
    import pandas as pd

    data: dict[str, Any] = {"arrival_time": arrival.astype(float), "prompt_tokens": prompt, "output_tokens": output}
    for col in OPTIONAL:
        if optional and col in optional:
            data[col] = optional[col]
    frame = pd.DataFrame(data)
    if "hash_ids" in frame:
        frame["hash_ids"] = frame["hash_ids"].astype(object)
    out = frame.sort_values("arrival_time", kind="stable", ignore_index=True)
    out.attrs["notes"] = list(notes)
    return out


def skipped(path: Path, count: int, total: int, why: str) -> list[str]:
    """The note for ``count`` of ``total`` rows skipped on purpose (none when nothing was)."""
    return [f"{path.name}: skipped {count:,} of {total:,} rows: {why}"] if count else []


__all__ = [
    "COLUMNS",
    "OPTIONAL",
    "NO_CONVERSATION",
    "NO_PREFIX_GROUP",
    "NO_PREFIX_TOKENS",
    "HASH_BLOCK_TOKENS",
    "ReadOptions",
    "Reader",
    "TraceFormat",
    "MissingColumns",
    "OptionError",
]
