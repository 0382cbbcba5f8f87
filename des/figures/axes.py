"""What the report's figures and the what-if page's share on their axes: log axes labelled
with plain numbers (:func:`plain_log_axis`), SLO lines that name the statistic they
bound (:func:`slo_line`, :func:`slo_text`), and writing a figure (:func:`save`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

if TYPE_CHECKING:
    from matplotlib.figure import Figure


class PlainLogLocator(LogLocator):
    """Major ticks of a log axis at 1, 2 and 5 times each power of ten, or, when the axis
    has no room for them all (:meth:`~matplotlib.axis.Axis.get_tick_space`), at 1 and 3
    times, else at the powers alone; at 1 to 9 times when a short axis holds fewer than
    two of the 1, 2 and 5 ticks."""

    CHOICES: tuple[tuple[float, ...], ...] = ((1.0, 2.0, 5.0), (1.0, 3.0), (1.0,))

    def __init__(self) -> None:
        super().__init__(base=10.0, subs=self.CHOICES[0])

    @staticmethod
    def count(subs: tuple[float, ...], lo: float, hi: float) -> int:
        """How many ticks ``s x 10^e`` (``s`` in ``subs``) lie in ``[lo, hi]``."""
        low, high = math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1
        ticks = [s * 10.0**e for e in range(low, high + 1) for s in subs]
        return sum(lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9) for t in ticks)

    def tick_values(self, vmin, vmax):
        lo, hi = sorted((float(vmin), float(vmax)))
        if lo > 0 and math.isfinite(hi):
            room = max(int(self.axis.get_tick_space()), 2) if self.axis is not None else 9
            subs: tuple[float, ...] = next((s for s in self.CHOICES if self.count(s, lo, hi) <= room), self.CHOICES[-1])
            if self.count(self.CHOICES[0], lo, hi) < 2:
                subs = tuple(float(k) for k in range(1, 10))
            self.set_params(subs=subs)
        return super().tick_values(vmin, vmax)


def plain(v: float, _pos=None) -> str:
    """A tick label as a plain number: 0.02, 5, 100 (never 2×10⁻², nor 10⁰)."""
    return f"{v:g}"


def plain_log_axis(axis) -> None:
    """Label a log axis as plain numbers (0.02, 5, 100) at 1, 2 and 5 times each power of
    ten, fewer where the axis has no room (:class:`PlainLogLocator`), minor ticks unlabelled."""
    axis.set_major_locator(PlainLogLocator())
    axis.set_major_formatter(FuncFormatter(plain))
    axis.set_minor_formatter(NullFormatter())


def plain_log_axes(fig) -> None:
    """:func:`plain_log_axis` on every logarithmic axis of a figure."""
    for ax in fig.axes:
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                plain_log_axis(axis)


#: How an SLO line names the statistic and the metric it bounds (:func:`slo_text`).
STATISTIC_NAME = {"p50": "median", "p90": "p90", "p95": "p95", "p99": "p99"}
METRIC_NAME = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "end-to-end latency"}


def slo_text(column: str, limit: float) -> str:
    """``SLO: median TPOT ≤ 0.1 s`` for the column ``tpot_p50``: what the line of an SLO is about."""
    metric, _, stat = column.rpartition("_")
    return f"SLO: {STATISTIC_NAME.get(stat, stat)} {METRIC_NAME.get(metric, metric)} ≤ {limit:g} s"


def slo_line(ax, limit: float | None, label: str | None = None, at: float = 0.01, boxed: bool = False) -> None:
    """A labelled horizontal line at an SLO ``limit`` (seconds); nothing without one. Name
    the statistic it bounds in ``label`` (:func:`slo_text`) when the panel shows others;
    the label starts ``at`` that fraction of the panel's width, on a white ground if
    ``boxed`` (when curves cross it)."""
    if limit is None:
        return
    ax.axhline(limit, color="black", lw=1, alpha=0.6, gid="slo")
    ax.annotate(
        label or f"SLO {limit:g} s",
        (at, limit),
        xycoords=("axes fraction", "data"),
        xytext=(2, 3),
        textcoords="offset points",
        fontsize=8,
        gid="slo",
        zorder=5,
        bbox={"boxstyle": "square,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8} if boxed else None,
    )


def save(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` to ``path`` (its folders made) at 130 dpi, cropped to what it draws, and close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return path
