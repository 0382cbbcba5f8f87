"""The what-if page's jobs: each run or sweep in a process of its own, so that it can be
cancelled at any moment and no job can stop the server answering.

Processes come from a fork server that has imported :mod:`des.ui.work` once, so a job
starts in milliseconds with the library loaded. A job's process leads its own process
group (a sweep's pool workers join it), so cancelling ends them all. At most
``max_running`` jobs run at once; the rest wait in order. A page's what-if jobs replace
one another (:meth:`Jobs.submit` with ``replace``): only the newest of an owner's runs is
worth finishing. At most ``max_queued`` wait (:class:`Busy` beyond). Finished jobs are
forgotten, oldest first, beyond ``keep``.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing as mp
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

#: Seconds between two progress messages of a job.
PROGRESS_EVERY = 0.1
#: Seconds a cancelled job has to end before its process group is killed.
GRACE = 2.0


@dataclass
class Job:
    """One run or sweep: ``state`` is queued, running, done, error or cancelled."""

    id: str
    kind: str
    owner: str
    args: dict[str, Any]
    folder: Path
    state: str = "queued"
    progress: float | None = None
    message: str = ""
    result: dict[str, Any] | None = None
    problems: list[dict[str, str]] = field(default_factory=list)
    started: float | None = None
    ended: float | None = None
    process: Any = None

    def view(self) -> dict[str, Any]:
        """What the page polls for."""
        wall = None if self.started is None else (self.ended or time.monotonic()) - self.started
        return {
            "id": self.id,
            "kind": self.kind,
            "state": self.state,
            "progress": self.progress,
            "message": self.message,
            "result": self.result,
            "problems": self.problems,
            "wall": wall,
        }

    @property
    def finished(self) -> bool:
        return self.state in ("done", "error", "cancelled")


def _child(kind: str, args: dict[str, Any], folder: str, conn: Connection) -> None:
    """A job's process: do the work, send progress, then the result or the problems."""
    os.setpgrp()  # a process group of its own: cancelling ends its sweep workers too
    from des.errors import ScenarioError
    from des.interrupt import Terminated, sigterm_raises
    from des.ui import form, work

    last = [0.0]

    def report(fraction: float | None, message: str) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY:
            last[0] = now
            conn.send(("progress", fraction, message))

    try:
        with sigterm_raises():
            if kind == "run":
                out = work.run(args["doc"], report)
            else:
                out = work.sweep(args["doc"], args["fractions"], args["replications"], Path(folder), report)
        conn.send(("done", out))
    except ScenarioError as exc:
        conn.send(("error", form.problems(exc)))
    except Terminated:  # cancelled
        pass
    except Exception as exc:  # the page shows what went wrong; the server goes on
        problem = form.problems(ScenarioError(("internal", f"{type(exc).__name__}: {exc}")))[0]
        conn.send(("error", [{**problem, "trace": traceback.format_exc()}]))
    finally:
        conn.close()


class Busy(Exception):
    """A job refused: as many are waiting as may."""


class Jobs:
    """The server's jobs; every method is safe to call from any thread."""

    def __init__(self, root: Path, max_running: int = 2, keep: int = 64, max_queued: int = 16):
        self.root = root
        self.max_running = max_running
        self.keep = keep
        self.max_queued = max_queued
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._ctx = mp.get_context("forkserver")
        self._ctx.set_forkserver_preload(["des.ui.work"])

    def warm(self) -> None:
        """Start the fork server now (it imports the library: a second or two, so the page's
        first run does not wait for it), with SIGINT ignored: it then ignores a Ctrl-C at
        the terminal from its first instruction, as its jobs do, rather than dying of one
        half-started. Call from the main thread, where handlers are set."""
        from multiprocessing import forkserver

        saved = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            forkserver.ensure_running()
        finally:
            signal.signal(signal.SIGINT, saved)

    def submit(self, kind: str, args: dict[str, Any], owner: str = "", replace: bool = False) -> Job:
        """Queue a job (``kind`` run or sweep); with ``replace``, the owner's unfinished jobs
        of that kind are cancelled first. :class:`Busy` when :attr:`max_queued` jobs wait
        (after those cancelled)."""
        with self._lock:
            if replace:
                for job in self._jobs.values():
                    if job.owner == owner and job.kind == kind and not job.finished:
                        self._cancel(job)
            running = sum(job.state == "running" for job in self._jobs.values())
            waiting = sum(job.state == "queued" for job in self._jobs.values())
            if waiting >= self.max_queued and running >= self.max_running:
                raise Busy(f"{waiting} jobs are waiting already: cancel one, or wait for them to finish")
            jid = f"{next(self._ids)}-{os.urandom(4).hex()}"
            job = Job(jid, kind, owner, args, self.root / jid)
            self._jobs[jid] = job
            self._forget()
            self._start_waiting()
            return job

    def get(self, jid: str) -> Job | None:
        with self._lock:
            return self._jobs.get(jid)

    def cancel(self, jid: str) -> Job | None:
        with self._lock:
            job = self._jobs.get(jid)
            if job is not None and not job.finished:
                self._cancel(job)
                self._start_waiting()
            return job

    def shutdown(self) -> None:
        """Cancel every job (the server is stopping) and remove their folders."""
        with self._lock:
            for job in self._jobs.values():
                if not job.finished:
                    self._cancel(job)
        shutil.rmtree(self.root, ignore_errors=True)

    def running(self) -> int:
        with self._lock:
            return sum(job.state == "running" for job in self._jobs.values())

    # -- with the lock held ------------------------------------------------------------

    def _cancel(self, job: Job) -> None:
        was = job.state
        job.state, job.message, job.ended = "cancelled", "cancelled", time.monotonic()
        if was == "running" and job.process is not None:
            _stop(job.process)

    def _start_waiting(self) -> None:
        running = sum(job.state == "running" for job in self._jobs.values())
        for job in self._jobs.values():
            if running >= self.max_running:
                return
            if job.state == "queued":
                self._start(job)
                running += 1

    def _start(self, job: Job) -> None:
        job.folder.mkdir(parents=True, exist_ok=True)
        mine, theirs = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=_child, args=(job.kind, job.args, str(job.folder), theirs), daemon=False)
        proc.start()
        theirs.close()
        job.process, job.state, job.started, job.message = proc, "running", time.monotonic(), "starting"
        threading.Thread(target=self._watch, args=(job, mine), daemon=True).start()

    def _forget(self) -> None:
        """Forget finished jobs beyond the newest ``keep`` of each kind (so a page's many
        runs never push out its sweeps), removing their folders."""
        for kind in ("run", "sweep"):
            done = [jid for jid, job in self._jobs.items() if job.finished and job.kind == kind]
            for jid in done[: max(0, len(done) - self.keep)]:
                shutil.rmtree(self._jobs.pop(jid).folder, ignore_errors=True)

    # -- a job's watcher thread --------------------------------------------------------

    def _watch(self, job: Job, conn: Connection) -> None:
        """Read the job's messages until its process ends; then start the next job."""
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                if job.state != "running":
                    continue
                if msg[0] == "progress":
                    job.progress, job.message = msg[1], msg[2]
                elif msg[0] == "done":
                    job.state, job.result, job.progress, job.message = "done", msg[1], 1.0, "done"
                else:
                    job.state, job.problems, job.message = "error", [_logged(p, job) for p in msg[1]], "error"
        conn.close()
        job.process.join()
        with self._lock:
            if job.state == "running":  # ended without a word: killed from outside, or out of memory
                from des.errors import ScenarioError
                from des.ui.form import problems

                why = f"the job's process ended with status {job.process.exitcode}"
                job.state, job.problems = "error", problems(ScenarioError(("internal", why)))
            if job.ended is None or job.state != "cancelled":
                job.ended = time.monotonic()
            self._start_waiting()


def _logged(problem: dict[str, Any], job: Job) -> dict[str, Any]:
    """A problem for the page; an internal error's traceback goes to the server's stderr
    (where a bug can be reported from), not to the page."""
    trace = problem.pop("trace", None)
    if trace:
        print(f"des ui: job {job.id} ({job.kind}) failed:\n{trace}", file=sys.stderr, flush=True)
    return problem


def _stop(process: Any) -> None:
    """End a job's process group: SIGTERM now, SIGKILL after :data:`GRACE` seconds."""
    _signal(process, signal.SIGTERM)

    def kill() -> None:
        process.join(GRACE)
        if process.exitcode is None:
            _signal(process, signal.SIGKILL)

    threading.Thread(target=kill, daemon=True).start()


def _signal(process: Any, sig: int) -> None:
    """Send ``sig`` to the job's process group, or to its process alone when it has not yet
    made its group (cancelled as it starts)."""
    try:
        if os.getpgid(process.pid) == process.pid:
            os.killpg(process.pid, sig)
            return
    except (ProcessLookupError, PermissionError):
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(process.pid, sig)
