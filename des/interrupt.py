"""SIGTERM as an exception in the main thread, so that des unwinds on it as on Ctrl-C:
a sweep's workers ended, staging files removed, locks released, nothing committed.

An exception raised by a signal handler can be lost: C code that clears errors swallows
it when the handler runs inside Python code it called (seen: ``import scipy`` started
lazily in the middle of a run, whose Cython module init drops the error of a nested
import, and the run went on to write its results and exit 0). So the handler also
records the signal, and :func:`check` raises it again where the code passes regularly:
before a staged write is committed (:meth:`des.output.Staged.commit`), after each run
of a sweep, and when a command returns.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(SystemExit):
    """SIGTERM received (its exit status, 128 + 15, as a shell reports it)."""


_received: int | None = None


def _raise(signum: int, frame: object) -> None:
    global _received
    _received = signum
    raise Terminated(128 + signum)


def check() -> None:
    """Raise :class:`Terminated` if SIGTERM has been received (within :func:`sigterm_raises`)."""
    if _received is not None:
        raise Terminated(128 + _received)


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """For the block, SIGTERM raises :class:`Terminated` in the main thread. Not when SIGTERM
    is ignored (as inherited: the caller wants it so), nor outside the main thread."""
    global _received
    catch = threading.current_thread() is threading.main_thread()
    catch = catch and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    previous = signal.signal(signal.SIGTERM, _raise) if catch else None
    try:
        yield
    finally:
        if catch:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
            _received = None
