"""How des's figures look: drawn on the Agg backend (figures are written to files, never
shown), in matplotlib's default style for the tools' figures (:func:`in_default_style`) or
seaborn's whitegrid theme for the report's (:func:`style`), one colour per scheduler
(:data:`PALETTE`). matplotlib and seaborn are imported only when a figure is drawn.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec

P = ParamSpec("P")

#: Colours per scheduler, the same in every figure.
PALETTE = {"continuous": "#1f77b4", "static": "#d62728", "disaggregated": "#2ca02c", "base": "#1f77b4"}


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


def style() -> None:
    """seaborn's whitegrid theme in its notebook context, set for the process (the report's figures)."""
    import seaborn as sns

    sns.set_theme(style="whitegrid", context="notebook")
