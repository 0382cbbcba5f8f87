"""Samples drawn in chunks and served one at a time.

A SimPy process asks for one gap or one length at a time; drawing them one by one from
numpy is slow, so they are drawn ``CHUNK`` at a time. The chunk size is fixed, so the
values served (and so every run) depend only on the generator's seed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

#: Draws per refill.
CHUNK = 1024


class Buffered:
    """``Buffered(draw)()`` returns the next of the values ``draw(CHUNK)`` yields, refilling as needed."""

    __slots__ = ("_draw", "_buf", "_i")

    def __init__(self, draw: Callable[[int], np.ndarray]):
        self._draw = draw
        self._buf: list[Any] = []
        self._i = 0

    def __call__(self) -> Any:
        if self._i >= len(self._buf):
            self._buf = self._draw(CHUNK).tolist()
            self._i = 0
        v = self._buf[self._i]
        self._i += 1
        return v
