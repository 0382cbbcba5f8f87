"""A data file's bytes, read the same way for every format (traces and request logs).

- **Text**: UTF-8, a byte order mark at the start dropped (:func:`utf8_bytes`).
- **CSV rows of the header's width**: :func:`ragged_row` finds a row whose field count
  differs from the header's (pandas would take extra leading fields as the index and
  shift every column, or fill a short row with blanks), counting fields the way pandas'
  C parser splits them; :func:`csv_table` reads a CSV only after it found none (every
  CSV des reads: traces, request logs, rate schedules, length files, kernel profiles).
- **JSON** nested too deeply for Python's parser (it raises ``RecursionError``) is a
  :class:`NestedTooDeep` error (:func:`json_value`).
- **Size**: at most :data:`MAX_FILE_BYTES` read from one file, a pipe a chunk at a time;
  a device (``/dev/zero``) or socket is refused (:func:`read_bytes`).
- **Compression** by the name's last suffix, as pandas infers it for CSV: ``.gz``,
  ``.bz2``, ``.xz``, ``.zip`` (one file inside), ``.zst`` (with the ``zstandard``
  package), ``.tar`` and ``.tar.gz``/``.tar.bz2``/``.tar.xz`` (one file inside). The
  suffix before it names the format: ``t.jsonl.gz`` is JSON lines (:func:`data_suffix`).

Problems are :class:`FileProblem`\\ s, one line without the path: each reader words its
own message around them.
"""

from __future__ import annotations

import bz2
import gzip
import importlib
import io
import json
import lzma
import os
import re
import stat
import tarfile
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from des.workload.formats.checks import first_line

if TYPE_CHECKING:
    import pandas as pd

#: Compression by the file name's ending (longest first), as pandas infers it.
COMPRESSIONS = {
    ".tar.gz": "tar",
    ".tar.bz2": "tar",
    ".tar.xz": "tar",
    ".tar": "tar",
    ".gz": "gzip",
    ".bz2": "bz2",
    ".xz": "xz",
    ".zip": "zip",
    ".zst": "zstd",
}


#: The UTF-8 byte order mark some editors (and Excel) write at the start of a file.
BOM = b"\xef\xbb\xbf"


class FileProblem(ValueError):
    """What is wrong with a file's bytes, as a phrase without the path (``not valid gzip data (...)``)."""


class NestedTooDeep(ValueError):
    """JSON of arrays or objects nested beyond Python's recursion limit (valid, but not parseable)."""


#: What :class:`NestedTooDeep` says (after "line 3 is" or "JSON").
TOO_DEEP = "nested too deeply to parse (arrays or objects inside one another beyond Python's recursion limit)"


def json_value(text: str | bytes) -> Any:
    """``json.loads(text)``: ``json.JSONDecodeError`` as it raises it, and :class:`NestedTooDeep`
    for nesting deeper than its recursion can follow (a ``RecursionError`` traceback otherwise)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise NestedTooDeep(TOO_DEEP) from None


def compression(path: Path) -> str | None:
    """The compression the file name implies (see :data:`COMPRESSIONS`), None for none."""
    name = path.name.lower()
    return next((kind for end, kind in COMPRESSIONS.items() if name.endswith(end)), None)


def data_suffix(path: Path) -> str:
    """The file name's suffix (lower case) once a compression suffix is set aside: ``.jsonl``
    for ``t.jsonl.gz``, ``.csv`` for ``t.CSV``."""
    name = path.name.lower()
    end = next((end for end in COMPRESSIONS if name.endswith(end)), "")
    return Path(name[: len(name) - len(end)]).suffix


#: The most bytes des reads from one file: 2 GiB. A million requests take some 40 s and
#: 1.4 GB to simulate (README, ``des bench``); a 2 GiB trace or log holds tens of millions.
MAX_FILE_BYTES = 2 * 2**30
#: Bytes read at a time from a pipe, whose size is not known beforehand.
_CHUNK = 2**24


def read_bytes(path: Path) -> bytes:
    """The file's content, decompressed as its name says; :class:`FileProblem` if it cannot be,
    if it is a device (``/dev/zero`` never ends) or socket rather than a file, or if it holds more
    than :data:`MAX_FILE_BYTES` (a pipe is read a chunk at a time up to that bound; the bound
    is on the bytes read, before decompression). ``OSError`` from reading passes through, for
    the caller's message."""
    raw = _bounded_bytes(path)
    kind = compression(path)
    if kind is None:
        return raw
    try:
        return _decompress(kind, raw)
    except (OSError, EOFError, zlib.error, lzma.LZMAError, zipfile.BadZipFile, tarfile.TarError) as exc:
        raise FileProblem(f"not valid {kind} data ({first_line(exc)})") from None


def _bounded_bytes(path: Path) -> bytes:
    """The bytes of the file at ``path``, at most :data:`MAX_FILE_BYTES` of them (see :func:`read_bytes`)."""
    with path.open("rb") as handle:
        info = os.fstat(handle.fileno())
        mode = info.st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
            kind = "a socket" if stat.S_ISSOCK(mode) else "a device"
            raise FileProblem(f"is {kind}, not a file")
        if stat.S_ISREG(mode):
            if info.st_size > MAX_FILE_BYTES:
                raise FileProblem(_too_large(f"{info.st_size:,} bytes"))
            return handle.read()
        chunks, total = [], 0  # a pipe: its size is known once it ends
        while chunk := handle.read(_CHUNK):
            total += len(chunk)
            if total > MAX_FILE_BYTES:
                raise FileProblem(_too_large(f"more than {MAX_FILE_BYTES:,} bytes"))
            chunks.append(chunk)
        return b"".join(chunks)


def _too_large(size: str) -> str:
    return f"holds {size}, beyond the {MAX_FILE_BYTES // 2**30} GiB des reads from one file"


def utf8_bytes(path: Path) -> bytes:
    """The file's content (:func:`read_bytes`) checked to be UTF-8 text, a leading byte order
    mark dropped; :class:`FileProblem` naming the first byte that is not UTF-8."""
    data = read_bytes(path)
    if data.startswith(BOM):
        data = data[len(BOM) :]
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FileProblem(f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start:,})") from None
    return data


def user_bytes(path: Path, what: str = "file") -> bytes:
    """:func:`utf8_bytes` of a file the user named, every problem as one ``ValueError`` line
    naming it: missing, a folder (not a ``what``), unreadable, badly compressed, not UTF-8."""
    where = repr(str(path))
    try:
        return utf8_bytes(path)
    except FileNotFoundError:
        raise ValueError(f"{where}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{where}: is a folder, not a {what}") from None
    except OSError as exc:
        raise ValueError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except FileProblem as exc:
        raise ValueError(f"{where}: {exc}") from None


def csv_table(data: bytes, **options: Any) -> pd.DataFrame:
    """The CSV ``data`` (UTF-8 bytes, as :func:`utf8_bytes` returns them) as pandas reads it with
    ``comment="#"``, ``index_col=False`` and ``options``, once :func:`ragged_row` found every row
    of the header's width (no field is taken for an index, none shifted): :class:`FileProblem`
    naming the first row that is not (``row 2 (line 3) has 3 fields, but the header has 2: ...``).
    pandas's own errors (``ParserError``, ``EmptyDataError``, ``ValueError``) pass through."""
    import pandas as pd

    ragged = ragged_row(data)
    if ragged:
        raise FileProblem(ragged.describe())
    return pd.read_csv(io.BytesIO(data), comment="#", index_col=False, **options)


def _decompress(kind: str, raw: bytes) -> bytes:
    if kind == "gzip":
        return gzip.decompress(raw)
    if kind == "bz2":
        return bz2.decompress(raw)
    if kind == "xz":
        return lzma.decompress(raw)
    if kind == "zip":
        with zipfile.ZipFile(io.BytesIO(raw)) as archive:
            names = [info.filename for info in archive.infolist() if not info.is_dir()]
            return archive.read(_one(kind, names))
    if kind == "tar":
        with tarfile.open(fileobj=io.BytesIO(raw)) as archive:
            members = {m.name: m for m in archive.getmembers() if m.isfile()}
            handle = archive.extractfile(members[_one(kind, list(members))])
            assert handle is not None  # a regular file
            return handle.read()
    assert kind == "zstd", kind
    try:
        zstandard = importlib.import_module("zstandard")
    except ImportError:
        raise FileProblem("zstd data needs the zstandard package to read (pip install zstandard)") from None
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)) as reader:
        return bytes(reader.read())


def _one(kind: str, names: list[str]) -> str:
    """The single file an archive must hold."""
    if len(names) != 1:
        held = ", ".join(names) if names else "none"
        raise FileProblem(f"a {kind} archive must hold one file, this one holds {len(names)} ({held})")
    return names[0]


@dataclass(frozen=True)
class RaggedRow:
    """A CSV data row whose field count differs from its header's."""

    row: int  # among the data rows, from 1 (as the readers number rows)
    line: int  # the physical line it starts on, from 1
    fields: int
    header: int

    def describe(self) -> str:
        """``row 2 (line 3) has 4 fields, but the header has 3 ...``: where the row is and what to do."""
        fix = (
            "name the extra column in the header"
            if self.fields > self.header
            else "a blank value still needs its comma"
        )
        return (
            f"row {self.row} (line {self.line}) has {self.fields} field{'s' if self.fields != 1 else ''}, "
            f"but the header has {self.header}: "
            f"each row needs one field per column ({fix})"
        )


NEWLINE, QUOTE, HASH, COMMA, MARK = 10, 34, 35, 44, 1
#: A quoted field (from a field's start to its closing quote, ``""`` inside being a quote, and
#: the one character pandas keeps literally after it), or a comment outside quotes.
_QUOTED_OR_COMMENT = re.compile(rb'"(?<![^,\n]")[^"]*(?:""[^"]*)*"#?|#[^\n]*')


def ragged_row(data: bytes) -> RaggedRow | None:
    """The first data row of the CSV ``data`` (``,``-separated, ``"``-quoted, ``#`` comments)
    whose field count differs from the header's, None if none does.

    Rows are split as pandas' C parser splits them: lines end at ``\\n``, ``\\r\\n`` or
    ``\\r``; empty lines, lines of only spaces and tabs, and lines starting with ``#`` are
    skipped; a ``#`` outside quotes ends the row's fields; a field opening with ``"`` runs to
    its closing quote (``""`` inside is a quote), across commas, ``#`` and line ends; a quote
    elsewhere is a character. Vectorised over the bytes: the quoted parts are told apart by
    the parity of the quotes before them when every quote sits where that is exact (quoted
    fields only, closed before a comma or a line end, no quote in a comment); otherwise one
    regular expression first collapses quoted fields and comments (slower).
    """
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    b = np.frombuffer(data, dtype=np.uint8)
    if b.size == 0:
        return None
    quotes = np.flatnonzero(b == QUOTE) if b'"' in data else None
    collapsed = quotes is not None and not _paired(b, quotes)
    if collapsed:
        # a quoted field becomes one character plus a mark per line end in it (to number
        # lines); a comment becomes its "#"
        data = _QUOTED_OR_COMMENT.sub(_collapse, data)
        b = np.frombuffer(data, dtype=np.uint8)
        quotes = None

    # up to the last quote, 1 after an odd number of quotes: inside a quoted field
    parity = None if quotes is None else np.bitwise_xor.accumulate((b[: quotes[-1]] == QUOTE).view(np.uint8))

    def unquoted(positions: np.ndarray) -> np.ndarray:
        """The positions outside quoted fields."""
        if parity is None:
            return positions
        early = positions[: np.searchsorted(positions, parity.size)]
        return np.concatenate((early[parity[early] == 0], positions[early.size :]))

    # the commas and line ends in file order: a line's fields are the commas between its end
    # and the previous line's, plus one
    is_separator = b == COMMA
    is_separator |= b == NEWLINE
    separators = unquoted(np.flatnonzero(is_separator))
    at = np.flatnonzero(b[separators] == NEWLINE)  # where each line ends among the separators
    ends = separators[at]
    if ends.size == 0 or ends[-1] != b.size - 1:  # a last line without a line end
        at = np.append(at, separators.size)
        ends = np.append(ends, b.size)
    first = np.empty_like(at)  # each line's first separator
    first[0] = 0
    first[1:] = at[:-1] + 1
    fields = at - first + 1
    starts = np.empty_like(ends)
    starts[0] = 0
    starts[1:] = ends[:-1] + 1
    hashes = unquoted(np.flatnonzero(b == HASH)) if b"#" in data else np.empty(0, dtype=np.intp)
    if hashes.size:  # a line's fields stop at its first "#": count again on the lines that have one
        with_hash = np.searchsorted(ends, hashes)
        firsts = np.flatnonzero(np.diff(with_hash, prepend=-1))
        with_hash = with_hash[firsts]
        fields[with_hash] = np.searchsorted(separators, hashes[firsts]) - first[with_hash] + 1
    # lines pandas may take as rows: not empty, not a comment; of these, the ones without a
    # comma are rows only if they hold more than spaces and tabs (checked one by one: few)
    maybe = (ends > starts) & (b[np.minimum(starts, b.size - 1)] != HASH)

    def is_row(i: int) -> bool:
        return bool(maybe[i]) and (fields[i] > 1 or bool(data[starts[i] : ends[i]].strip(b" \t")))

    header = next((int(i) for i in np.flatnonzero(maybe) if is_row(int(i))), None)
    if header is None:
        return None
    width = int(fields[header])
    odd = np.flatnonzero(maybe & (fields != width))
    odd = odd[odd > header]
    bad = next((i for i in odd.tolist() if is_row(i)), None)
    if bad is None:
        return None
    # its row number: the rows after the header up to it
    span = slice(header + 1, bad + 1)
    blank_or_one_field = np.flatnonzero(maybe[span] & (fields[span] == 1)) + header + 1
    row = int(np.count_nonzero(maybe[span] & (fields[span] > 1))) + sum(map(is_row, blank_or_one_field.tolist()))
    before = b[: starts[bad]]
    line = 1 + int(np.count_nonzero(before == NEWLINE)) + (int(np.count_nonzero(before == MARK)) if collapsed else 0)
    return RaggedRow(row=row, line=line, fields=int(fields[bad]), header=width)


def _paired(b: np.ndarray, quotes: np.ndarray) -> bool:
    """Whether the quotes at ``quotes`` only open fields (after a comma, a line end, the start or
    a quote: ``""``) and close them (before a comma, a line end, the end or a quote), and none
    is in a comment: then a byte is inside a quoted field exactly when an odd number of quotes
    precede it."""
    if quotes.size % 2:
        return False
    opening, closing = quotes[0::2], quotes[1::2]
    before = b[np.maximum(opening - 1, 0)]
    if not np.all((opening == 0) | (before == COMMA) | (before == NEWLINE) | (before == QUOTE)):
        return False
    after = b[np.minimum(closing + 1, b.size - 1)]
    if not np.all((closing == b.size - 1) | (after == COMMA) | (after == NEWLINE) | (after == QUOTE)):
        return False
    hashes = np.flatnonzero(b == HASH)
    hashes = hashes[np.searchsorted(quotes, hashes) % 2 == 0]
    if hashes.size == 0:
        return True
    newlines = np.append(np.flatnonzero(b == NEWLINE), b.size)
    next_quote = np.append(quotes, b.size)[np.searchsorted(quotes, hashes)]
    return bool(np.all(next_quote > newlines[np.searchsorted(newlines, hashes)]))


def _collapse(match: re.Match[bytes]) -> bytes:
    text = match.group()
    if text.startswith(b"#"):
        return b"#"
    return b"Q" + bytes([MARK]) * text.count(b"\n")
