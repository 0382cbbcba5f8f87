"""What the report's figures draw (issue #17, item 7), read off the matplotlib Figure each
draw function returns: an SLO line only on a panel of the statistic it bounds (or named
after it where a panel shows several), the note that explains static batching's p99 TPOT,
and plain tick labels (0.2, 6) on every log axis."""

from __future__ import annotations

import re

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from analysis import burstiness, common, latency_vs_load  # noqa: E402
from analysis.common import CV, RATE  # noqa: E402

SLO = {"ttft": 2.0, "tpot": 0.1}
METRICS = ("ttft", "tpot", "e2e")
PCTS = ("p50", "p90", "p99")
PLAIN = re.compile(r"^(−|-)?\d+(\.\d+)?(e[+-]\d+)?$")


def with_columns(frame: pd.DataFrame, scale: float) -> pd.DataFrame:
    """Latency columns (mean, _lo, _hi) that grow with the frame's row, p99 three times p50."""
    k = np.arange(1, len(frame) + 1, dtype=float)
    for m, base in zip(METRICS, (0.1, 0.03, 3.0), strict=True):
        for pct, f in zip(PCTS, (1.0, 2.0, 3.0), strict=True):
            v = base * f * scale * k
            frame[f"{m}_{pct}"], frame[f"{m}_{pct}_lo"], frame[f"{m}_{pct}_hi"] = v, 0.8 * v, 1.25 * v
    return frame


def burstiness_points() -> pd.DataFrame:
    frames = []
    for n, variant in enumerate(("1-gpu", "2-gpus", "4-gpus")):
        f = pd.DataFrame({"variant": variant, CV: [1.0, 2.0, 4.0, 6.0], RATE: 8.0 * 2**n, "all_stable": True})
        frames.append(with_columns(f, 1 / (n + 1)))
    return pd.concat(frames, ignore_index=True)


def headline_points() -> pd.DataFrame:
    frames = []
    for variant, saturation, scale in (("continuous", 13.0, 1.0), ("static", 2.0, 20.0)):
        for cv in (1.0, 3.0):
            loads = np.array([0.1, 0.5, 0.9, 1.1])
            f = pd.DataFrame(
                {"variant": variant, CV: cv, "load": loads, RATE: loads * saturation, "all_stable": loads < 1}
            )
            frames.append(with_columns(f, scale))
    return pd.concat(frames, ignore_index=True)


def slo_lines(ax) -> list[float]:
    """The heights of the horizontal lines across a panel (``axhline``: x from 0 to 1 of the axes)."""
    out = []
    for line in ax.get_lines():
        x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
        if len(x) == 2 and tuple(x) == (0.0, 1.0) and y[0] == y[1]:
            out.append(float(y[0]))
    return out


def curve_labels(ax) -> list[str]:
    return [str(line.get_label()) for line in ax.get_lines() if not str(line.get_label()).startswith("_")]


def texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def test_slo_metrics_and_their_words():
    from analysis import capacity

    assert common.slo_metrics(SLO) == {"ttft_p99": 2.0, "tpot_p50": 0.1} == capacity.DEFAULT_SLO
    assert common.slo_metrics(None) == {}
    assert common.slo_text("tpot_p50", 0.1) == "SLO: median TPOT ≤ 0.1 s"
    assert common.slo_text("ttft_p99", 2.0) == "SLO: p99 TTFT ≤ 2 s"


def test_burstiness_draws_each_slo_line_on_the_panel_of_its_statistic():
    fig = burstiness.draw(burstiness_points(), SLO)
    drawn = {}
    for ax in fig.axes:
        for y in slo_lines(ax):
            drawn[y] = ax
    assert set(drawn) == {2.0, 0.1}, "one line per SLO"
    tpot, ttft = drawn[0.1], drawn[2.0]
    # the median-TPOT limit sits among median TPOT curves only, and says so
    assert tpot.get_title().startswith("median") and "time per output token" in tpot.get_title()
    assert curve_labels(tpot) and not any("p99" in label for label in curve_labels(tpot))
    assert any("median TPOT" in t for t in texts(tpot))
    # the p99-TTFT limit among p99 TTFT curves
    assert ttft.get_title().startswith("p99") and "time to first token" in ttft.get_title()
    assert any("p99 TTFT" in t for t in texts(ttft))
    # no other panel carries a line or a label of an SLO
    for ax in fig.axes:
        if ax not in (tpot, ttft):
            assert not slo_lines(ax) and not any("SLO" in t for t in texts(ax)), ax.get_title()
    plt.close(fig)


def test_latency_vs_load_names_each_slo_lines_statistic_and_explains_static_tpot():
    points = headline_points()
    fig = latency_vs_load.draw(points, SLO, release_on="batch_end")
    labels = [t for ax in fig.axes for t in texts(ax) if "SLO" in t]
    assert labels and set(labels) == {"SLO: p99 TTFT ≤ 2 s", "SLO: median TPOT ≤ 0.1 s"}
    notes = [(ax, t) for ax in fig.axes for t in texts(ax) if "batch_end" in t]
    assert len(notes) == 1, "one note, on the first TPOT panel"
    ax, note = notes[0]
    assert ax.get_ylabel().startswith("time per output token")
    worst = points[(points["variant"] == "static") & points["all_stable"]]["tpot_p99"].max()
    assert f"up to {worst:.1f} s" in note and "batch ends" in note
    plt.close(fig)
    # results released at each request's own end, or no static variant: nothing to explain
    for fig in (
        latency_vs_load.draw(points, SLO, release_on="finish"),
        latency_vs_load.draw(points[points["variant"] == "continuous"], SLO, release_on=None),
    ):
        assert not any("batch_end" in t for ax in fig.axes for t in texts(ax))
        plt.close(fig)


@pytest.mark.parametrize(
    "figure",
    [
        lambda: burstiness.draw(burstiness_points(), SLO),
        lambda: latency_vs_load.draw(headline_points(), SLO),
    ],
    ids=["burstiness", "latency_vs_load"],
)
def test_log_axes_are_labelled_with_plain_numbers(figure):
    fig = figure()
    fig.canvas.draw()
    checked = 0
    for ax in fig.axes:
        for scale, ticks in ((ax.get_yscale(), ax.get_yticklabels()), (ax.get_xscale(), ax.get_xticklabels())):
            if scale != "log":
                continue
            shown = [t.get_text() for t in ticks if t.get_text()]  # none on a shared axis's inner panels
            assert all(PLAIN.match(s) for s in shown), shown  # never 2×10⁻¹ nor 10⁰
            checked += bool(shown)
    assert checked >= 4
    plt.close(fig)


@pytest.mark.parametrize(
    "low, high, expected",
    [
        (0.02, 0.25, ["0.02", "0.05", "0.1", "0.2"]),  # room for 1, 2 and 5 times each power
        (2.0, 80.0, ["2", "5", "10", "20", "50"]),
        (0.005, 5000.0, ["0.01", "0.1", "1", "10", "100", "1000"]),  # six decades: the powers alone
    ],
)
def test_plain_log_ticks_thin_out_on_a_short_axis(low, high, expected):
    fig, ax = plt.subplots(figsize=(3, 2.4))
    ax.plot([1, 2], [low, high])
    ax.set_yscale("log")
    ax.set_ylim(low, high)
    common.plain_log_axis(ax.yaxis)
    fig.canvas.draw()
    shown = [t.get_text() for t in ax.get_yticklabels() if low <= t.get_position()[1] <= high]
    assert shown == expected
    assert isinstance(ax.yaxis.get_major_locator(), common.PlainLogLocator)
    plt.close(fig)
