"""The progress of a long run or sweep on stderr: a transient bar at a terminal, else a
line every :data:`HEARTBEAT` seconds (:func:`progress`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from des.render.console import ERR

Callback = Callable[..., None]


#: Wall seconds between two progress lines of a run whose stderr is not a terminal.
HEARTBEAT = 10.0


def _heartbeat() -> Callback:
    """A run's progress as a line on stderr every :data:`HEARTBEAT` wall seconds (the first after as many)."""
    import time

    due = time.monotonic() + HEARTBEAT

    def beat(p: Any) -> None:
        nonlocal due
        now = time.monotonic()
        if now < due:
            return
        due = now + HEARTBEAT
        of = f" of {p.horizon:,.0f}" if p.horizon else ""
        state = f"draining, {p.in_system:,} left" if p.draining else f"{p.in_system:,} in system"
        ERR.print(f"simulating: {p.now:,.1f}{of} s simulated, {p.arrived:,} requests, {state}", highlight=False)

    return beat


def _sweep_heartbeat(label: str) -> Callback:
    """A sweep's progress as a line on stderr every :data:`HEARTBEAT` wall seconds (the first after as many)."""
    import time

    due = time.monotonic() + HEARTBEAT

    def beat(done: float, total: int, reused: int, phase: str = "") -> None:
        nonlocal due
        now = time.monotonic()
        if now < due:
            return
        due = now + HEARTBEAT
        share = f", {done / total:.0%} of the work" if total and done % 1 else ""
        what = f"{label}, {phase}" if phase else label
        ERR.print(f"{what}: {int(done):,} of {total:,} runs done ({reused:,} reused){share}", highlight=False)

    return beat


def progress(
    kind: str, quiet: bool = False, label: str = "sweeping"
) -> tuple[Callback | None, AbstractContextManager[Any]]:
    """A transient progress bar on stderr when it is a terminal: ``(callback, context)``.

    ``kind`` ``"run"``: the callback takes a :class:`des.simulation.RunProgress` (share of
    the arrival horizon simulated, then the requests left while the run drains).
    ``"sweep"``: it takes ``(runs done, runs in all, runs reused, phase)``, the runs done
    counting the share done of each run in flight (so the bar and its ETA move inside long
    runs), the phase naming what the sweep does first (``probing saturation``). Without a terminal
    there is no bar; a run or sweep then prints a line every :data:`HEARTBEAT` seconds
    once it has taken that long (a short one prints none). ``label`` names a sweep's
    bar and lines. ``quiet``: nothing, and no callback.
    """
    if quiet:
        return None, nullcontext()
    if not ERR.is_terminal:
        return (_heartbeat() if kind == "run" else _sweep_heartbeat(label)), nullcontext()
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    if kind == "run":
        columns: Iterable[Any] = (
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[now]:>10,.1f} s simulated"),
            TextColumn("{task.fields[n]:>8,} requests"),
            TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(),
        )
    else:
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("runs"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        )
    bar = Progress(*columns, console=ERR, transient=True)
    task = bar.add_task("simulating" if kind == "run" else label, total=None, now=0.0, n=0, note="")

    def run_update(p: Any) -> None:
        if p.draining:
            bar.update(task, description="draining", completed=1.0, total=1.0, now=p.now, n=p.arrived)
            bar.update(task, note=f"{p.in_system:,} left")
        else:
            frac = p.fraction
            total = None if frac is None else 1.0
            bar.update(
                task, completed=frac or 0.0, total=total, now=p.now, n=p.arrived, note=f"{p.in_system:,} in system"
            )

    def sweep_update(done: float, total: int, reused: int, phase: str = "") -> None:
        bar.update(task, completed=done, total=total, description=f"{label}, {phase}" if phase else label)

    return (run_update if kind == "run" else sweep_update), bar
