"""Figures the library itself writes (``des calibrate``, ``des compare``): drawn on the
Agg backend in matplotlib's default style, whatever style the caller set, so that the
same inputs give the same image. matplotlib is imported only when one is drawn."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec

P = ParamSpec("P")


def in_default_style(draw: Callable[P, None]) -> Callable[P, None]:
    """``draw`` run on the Agg backend inside ``plt.style.context("default")``."""

    @functools.wraps(draw)
    def drawn(*args: P.args, **kwargs: P.kwargs) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        with plt.style.context("default"):
            draw(*args, **kwargs)

    return drawn
