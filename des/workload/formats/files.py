"""A data file's bytes, read the same way for every format (traces and request logs).

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
import lzma
import tarfile
import zipfile
import zlib
from pathlib import Path

from des.workload.formats.checks import first_line

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


class FileProblem(ValueError):
    """What is wrong with a file's bytes, as a phrase without the path (``not valid gzip data (...)``)."""


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


def read_bytes(path: Path) -> bytes:
    """The file's content, decompressed as its name says; :class:`FileProblem` if it cannot be
    (``OSError`` from reading passes through, for the caller's message)."""
    raw = path.read_bytes()
    kind = compression(path)
    if kind is None:
        return raw
    try:
        return _decompress(kind, raw)
    except (OSError, EOFError, zlib.error, lzma.LZMAError, zipfile.BadZipFile, tarfile.TarError) as exc:
        raise FileProblem(f"not valid {kind} data ({first_line(exc)})") from None


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
        raise FileProblem("zstd data, which needs the zstandard package (pip install zstandard)") from None
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)) as reader:
        return bytes(reader.read())


def _one(kind: str, names: list[str]) -> str:
    """The single file an archive must hold."""
    if len(names) != 1:
        held = ", ".join(names) if names else "none"
        raise FileProblem(f"a {kind} archive must hold one file, this one holds {len(names)} ({held})")
    return names[0]
