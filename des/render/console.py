"""The two consoles the ``des`` command writes to, and the number format its lines share.

Results go to stdout (:func:`out`), progress bars and warnings to stderr (:data:`ERR`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

ERR = Console(stderr=True)


def out() -> Console:
    """The stdout console; wide enough for the tables when not a terminal (pipes, logs)."""
    c = Console()
    return c if c.is_terminal else Console(width=160)


def fmt(v: Any) -> str:
    """A summary value for people: '-' for missing, yes/NO, thousands separators, 4 digits."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, int):
        return f"{v:,}"
    if abs(v) >= 100:
        return f"{v:,.1f}"
    return f"{v:.4g}"


def warning(note: str) -> None:
    """``warning: NOTE`` on stderr, one line however long (not wrapped at the terminal's width:
    a log or a script reads it whole)."""
    ERR.print(f"[yellow]warning:[/] {note}", highlight=False, soft_wrap=True)


def wrote(path: Path) -> None:
    out().print(f"wrote {path}", highlight=False)
