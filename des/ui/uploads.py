"""The files the what-if page uploads (traces, schedules), kept in the server's own folder.

An upload is streamed to disk as it arrives, so it never sits whole in memory, and refused
past :attr:`Uploads.max_bytes` (at once when its ``Content-Length`` says so). At most
:attr:`Uploads.keep` uploads, of :attr:`Uploads.max_total` bytes together, are kept; older
ones are removed first.
"""

from __future__ import annotations

import errno
import itertools
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import BinaryIO

from starlette.concurrency import run_in_threadpool

#: The largest upload, bytes.
MAX_UPLOAD = 512 * 2**20
#: How many uploads are kept.
KEEP = 16
#: The most bytes the kept uploads may hold together.
MAX_TOTAL = 2**30


class Refused(Exception):
    """An upload not kept: ``status`` the HTTP status, the message what the page shows."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def safe_name(name: str) -> str:
    """The file name an upload is kept under: its own name's last part, in safe characters."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", Path(name).name).lstrip(".") or "upload"


def open_new(path: Path) -> BinaryIO:
    """A new file to write an upload into (never an existing one)."""
    return path.open("xb")


class Uploads:
    """The upload folder ``folder``, bounded as the module says."""

    def __init__(self, folder: Path, max_bytes: int = MAX_UPLOAD, keep: int = KEEP, max_total: int = MAX_TOTAL):
        self.folder = folder
        self.max_bytes = max_bytes
        self.keep = keep
        self.max_total = max_total
        self._ids = itertools.count(1)
        folder.mkdir(parents=True, exist_ok=True)

    async def save(self, name: str, chunks: AsyncIterator[bytes], declared: int | None = None) -> Path:
        """Stream ``chunks`` into a new file named after ``name``; :class:`Refused` when it
        is (or says it is) larger than :attr:`max_bytes`, or the disk is full."""
        from des.ui.guard import size

        too_big = Refused(413, f"larger than the {size(self.max_bytes)} the page accepts")
        if declared is not None and declared > self.max_bytes:
            raise too_big
        folder = self.folder / str(next(self._ids))
        folder.mkdir()
        path = folder / safe_name(name)
        written = 0
        try:
            with open_new(path) as out:
                async for chunk in chunks:
                    written += len(chunk)
                    if written > self.max_bytes:
                        raise too_big
                    await run_in_threadpool(out.write, chunk)
        except OSError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise Refused(507, "no space left on device: the upload was not kept") from None
            raise Refused(500, f"the upload could not be written: {exc.strerror or exc}") from None
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        self._trim(keeping=folder)
        return path

    def _trim(self, keeping: Path) -> None:
        """Remove the oldest uploads beyond :attr:`keep`, or beyond :attr:`max_total` bytes."""
        kept = sorted((p for p in self.folder.iterdir() if p.is_dir()), key=lambda p: int(p.name))
        sizes = {p: sum(f.stat().st_size for f in p.iterdir()) for p in kept}
        total = sum(sizes.values())
        for old in list(kept):
            if old == keeping or (len(kept) <= self.keep and total <= self.max_total):
                break
            shutil.rmtree(old, ignore_errors=True)
            kept.remove(old)
            total -= sizes[old]

    def shown(self, text: str) -> str:
        """``text`` with every upload's path in this folder given as the file's own name
        (what the user picked), not the server's temporary path."""
        return re.sub(re.escape(str(self.folder)) + r"/\d+/", "", text)
