"""Writing a run's results folder: requests.parquet, steps.parquet, summary.json, scenario.yaml;
and the files of ``des calibrate`` (:func:`write_files`), and of any command through
:class:`Staged` (``des compare``'s: :func:`des.tools.compare.write_comparison`).

Each file is written to a temporary name in the folder (``.NAME.XXXXXXXX.tmp``, a
*staging file*) and moved into place, so an interrupted write never leaves a truncated
file and a failed run leaves earlier results untouched; a failed write removes its
staging files, and :func:`remove_stale_staging` removes those a killed process left.
Same scenario and seed give byte-identical files.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import re
import secrets
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from des.errors import ScenarioError
from des.interrupt import check

if TYPE_CHECKING:
    from des.metrics import Result


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


#: A staging file of :class:`Staged` for the file NAME: ``.NAME.`` then 8 characters
#: (hex digits; tempfile's ``[a-z0-9_]`` in earlier versions) then ``.tmp``.
STAGING = re.compile(r"\.(?P<name>.+)\.[a-z0-9_]{8}\.tmp")


class Staged:
    """Files written under temporary names in one folder, moved into place together.

    Everything is written before anything is replaced, so a failure (disk full, a
    serialisation error) leaves the folder's earlier files as they were. A write that
    fails removes its own staging file; :meth:`discard` (or leaving a ``with`` block by
    an exception) removes the others, and :func:`discard_pending` those of every
    ``Staged`` of the process (for a worker ended by a signal).
    """

    def __init__(self, folder: Path):
        self.folder = folder
        self.moves: list[tuple[Path, Path]] = []
        self.stale: list[Path] = []  # files of an earlier run this one does not write, removed at commit

    def __enter__(self) -> Staged:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is not None:
            self.discard()

    def drop(self, name: str) -> None:
        """Remove ``name`` from the folder at commit, if it is there (it would describe another run)."""
        self.stale.append(self.folder / name)

    def write(self, name: str, write: Callable[[Path], object]) -> None:
        target = self.folder / name
        if target.exists() and not target.is_file():
            raise OSError(f"{str(target)!r} exists and is not a file")
        tmp = self._reserve(name, target)
        try:
            write(tmp)
            os.chmod(tmp, 0o666 & ~_umask())
        except BaseException as exc:
            self.moves.remove((tmp, target))
            tmp.unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise OSError(f"cannot write {str(target)!r}: {exc.strerror or exc}") from exc
            raise

    def _reserve(self, name: str, target: Path) -> Path:
        """A new, empty staging file for ``name``, known to :meth:`discard` before it exists."""
        _PENDING.add(self)
        while True:
            tmp = self.folder / f".{name}.{secrets.token_hex(4)}.tmp"
            self.moves.append((tmp, target))
            try:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                return tmp
            except FileExistsError:
                self.moves.pop()  # another writer's: draw another name
            except OSError as exc:
                self.moves.pop()
                raise OSError(f"cannot write {str(target)!r}: {exc.strerror or exc}") from exc

    def commit(self) -> list[Path]:
        try:
            check()  # nothing is committed once des has been told to stop (des.interrupt)
        except BaseException:
            self.discard()
            raise
        for i, (tmp, target) in enumerate(self.moves):
            try:
                os.replace(tmp, target)
            except OSError as exc:
                self.moves = self.moves[i:]
                self.discard()
                raise OSError(f"cannot write {str(target)!r}: {exc.strerror or exc}") from exc
        for path in self.stale:
            path.unlink(missing_ok=True)
        _PENDING.discard(self)
        return [t for _, t in self.moves]

    def discard(self) -> None:
        for tmp, _ in self.moves:
            tmp.unlink(missing_ok=True)
        self.moves = []
        _PENDING.discard(self)


#: The :class:`Staged` of this process with staging files on disk.
_PENDING: set[Staged] = set()


def discard_pending() -> None:
    """Remove the staging files of every :class:`Staged` of this process not yet committed."""
    for staged in list(_PENDING):
        staged.discard()


def remove_stale_staging(folder: Path, names: Collection[str]) -> list[Path]:
    """Remove the staging files of ``names`` (files des writes in ``folder``) that an
    interrupted process left there; any other file, a user's ``.tmp`` included, stays.
    Call it only while no other process writes the folder (under its lock)."""
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return []
    removed = []
    for entry in entries:
        m = STAGING.fullmatch(entry.name)
        if m and m["name"] in names and entry.is_file(follow_symlinks=False):
            Path(entry.path).unlink(missing_ok=True)
            removed.append(Path(entry.path))
    return removed


#: The files :func:`write_result` writes (``des run``).
RESULT_FILES = (
    "requests.parquet", "steps.parquet", "transfers.parquet", "windows.parquet", "summary.json", "scenario.yaml",
)  # fmt: skip
#: The lock file of a results folder (named when only sweeps took it).
LOCK = ".sweep.lock"


class FolderLocked(OSError):
    """Another des command (a sweep, a capacity search, a run) is writing to the folder."""


@contextmanager
def folder_lock(out_dir: Path, holder: str, tidy: bool = False) -> Iterator[None]:
    """Hold the lock of ``out_dir`` (the file ``.sweep.lock`` in it, created with the
    folder when missing) for the block: one des command writes a folder at a time.

    ``holder`` (``sweep``, ``capacity search``, ``run``) and the process id are written
    into the file, for the message of a command refused meanwhile; raises
    :class:`FolderLocked` when another process, or another ``folder_lock`` of this one,
    holds it. With ``tidy`` (``des run``), a lock file this call created is removed at
    the end, and so are the folders it created if the block fails, so that a run that
    fails or is interrupted writes nothing.
    """
    made_dirs = []
    probe = out_dir
    while not probe.exists() and probe != probe.parent:
        made_dirs.append(probe)
        probe = probe.parent
    ok = False
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        fd, made = _take(out_dir / LOCK, holder)
        try:
            yield
            ok = True
        finally:
            if tidy and made:  # while it is held: whoever opened it meanwhile sees it gone (_take)
                (out_dir / LOCK).unlink(missing_ok=True)
            os.close(fd)
    finally:
        if tidy and not ok:
            for folder in made_dirs:  # the deepest first; one with another's files in it stays
                try:
                    folder.rmdir()
                except OSError:
                    break


def _take(path: Path, holder: str) -> tuple[int, bool]:
    """An open descriptor of the lock file ``path``, locked by this call, and whether
    this call created the file."""
    while True:
        try:
            fd, made = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644), True
        except FileExistsError:
            try:
                fd, made = os.open(path, os.O_RDWR), False
            except FileNotFoundError:  # removed by a run that just ended: create it
                continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            current = _same_file(fd, path)
            if current:
                os.ftruncate(fd, 0)
                os.write(fd, f"{holder} {os.getpid()}\n".encode())
        except BlockingIOError:
            who = _holder_of(fd)
            os.close(fd)
            raise FolderLocked(f"{who} is writing to {str(path.parent)!r}") from None
        except BaseException:
            os.close(fd)
            raise
        if current:
            return fd, made
        os.close(fd)  # a lock file removed by a run that ended after it was opened: take its successor


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (st.st_dev, st.st_ino)


def _holder_of(fd: int) -> str:
    """Who holds a lock file, as its holder wrote it."""
    try:
        m = re.fullmatch(r"([a-z ]+) (\d+)\n", os.pread(fd, 200, 0).decode())
    except (OSError, UnicodeDecodeError):
        m = None
    return f"another des {m[1]} (pid {m[2]})" if m else "another des command"


def parquet_writer(frame: Any, metadata: dict[str, str] | None = None) -> Any:
    """A writer of ``frame`` as Parquet (no pandas index; zstd), with ``metadata`` in its schema."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    if metadata:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
    return lambda tmp: pq.write_table(table, tmp, compression="zstd")


#: Most rows of a sampled steps.parquet (``des run --steps sampled``).
SAMPLED_STEPS = 100_000


def sampled(steps: Any) -> tuple[Any, dict[str, str]]:
    """Every k-th step (k the smallest that keeps at most :data:`SAMPLED_STEPS` rows), and
    the sampling in words for the file's metadata."""
    every = max(1, -(-len(steps) // SAMPLED_STEPS))
    note = {"des.steps": f"1 in {every} of {len(steps)} steps" if every > 1 else f"all {len(steps)} steps"}
    return steps.iloc[::every], note


def json_ready(summary: dict[str, Any]) -> dict[str, Any]:
    """NaN and infinities as null, numpy scalars as Python numbers."""
    out = {}
    for k, v in summary.items():
        if hasattr(v, "item"):
            v = v.item()
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        out[k] = v
    return out


def json_text(data: dict[str, Any]) -> str:
    return json.dumps(json_ready(data), indent=2, allow_nan=False) + "\n"


def check_writable(out_dir: Path) -> None:
    """Raise OSError now if ``out_dir`` cannot be created or written (before a long run)."""
    probe = out_dir
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise OSError(f"{str(probe)!r} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise OSError(f"{str(probe)!r} is not writable")


def write_result(result: Result, out_dir: Path, steps: str = "all") -> list[Path]:
    """Write the files of ``result`` into ``out_dir`` (created if missing): requests, steps,
    (for disaggregated serving) transfers and windows tables, the summary and the scenario.

    ``steps``: ``all`` rows of the steps table, a systematic sample (``sampled``: every
    k-th step, at most :data:`SAMPLED_STEPS` rows, the sampling stated in the file's
    metadata ``des.steps``), or ``none`` (no steps.parquet; one left by an earlier run
    is removed). Returns the files written.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    staged = Staged(out_dir)
    scenario_text = yaml.safe_dump(result.scenario.resolved(), sort_keys=False)
    try:
        staged.write("requests.parquet", parquet_writer(result.requests))
        if steps == "all":
            staged.write("steps.parquet", parquet_writer(result.steps))
        elif steps == "sampled":
            rows, note = sampled(result.steps)
            staged.write("steps.parquet", parquet_writer(rows, note))
        else:
            staged.drop("steps.parquet")
        if result.transfers is not None:
            staged.write("transfers.parquet", parquet_writer(result.transfers))
        else:
            staged.drop("transfers.parquet")
        if result.windows is not None:
            staged.write("windows.parquet", parquet_writer(result.windows))
        staged.write("summary.json", lambda tmp: tmp.write_text(json_text(result.summary)))
        staged.write("scenario.yaml", lambda tmp: tmp.write_text(scenario_text))
    except BaseException:
        staged.discard()
        raise
    return staged.commit()


def write_files(files: dict[Path, Callable[[Path], object]], flags: dict[Path, str]) -> None:
    """Write every file under a temporary name first and move them into place together,
    so a failure leaves earlier files as they were; problems name the file's flag."""
    stages: list[Staged] = []
    try:
        for path, writer in files.items():
            folder = path.parent if str(path.parent) else Path(".")
            if not folder.is_dir():
                raise ScenarioError((flags[path], f"cannot write {str(path)!r}: no folder {str(folder)!r}"))
            stage = Staged(folder)
            stages.append(stage)
            try:
                stage.write(path.name, writer)
            except OSError as exc:
                raise ScenarioError((flags[path], f"cannot write {str(path)!r}: {exc.strerror or exc}")) from None
    except BaseException:
        for stage in stages:
            stage.discard()
        raise
    for stage in stages:
        stage.commit()
