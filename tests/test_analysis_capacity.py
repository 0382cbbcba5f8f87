"""A capacity read off a load grid, reported as what the grid knows (issue #17, item 6):
interpolated between two loads it is a number; where the first failure is an unstable or
overloaded point, or the SLO held at every load of a load grid, the grid only brackets it
between the last load that held and the first that failed (or the saturation), and the
readout, the report's words and the figure say "between a and b", never a point equal to
a grid value. Hand-made grids whose answers are worked out here."""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import pandas as pd
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from analysis import caching, capacity, pd_capacity  # noqa: E402
from analysis.common import RATE  # noqa: E402

SLO = {"ttft_p99": 2.0, "tpot_p50": 0.1}


def grid(loads, ttft, stable, saturation: float | None = 40.0, config: str = "continuous-x4", gpus: int = 4):
    """A load curve at ``loads`` of ``saturation`` (plain rates when None): p99 TTFT means
    ``ttft`` with intervals of ±20 %, median TPOT far within its limit."""
    t = np.array(ttft, float)
    rates = [f * (saturation or 1.0) for f in loads]
    frame = pd.DataFrame(
        {
            "variant": "chat",
            "config": config,
            RATE: rates,
            "all_stable": stable,
            "ttft_p99": t,
            "ttft_p99_lo": 0.8 * t,
            "ttft_p99_hi": 1.2 * t,
            "tpot_p50": 0.03,
            "tpot_p50_lo": 0.028,
            "tpot_p50_hi": 0.032,
            "tpot_p99": 0.03,
            "tpot_p99_lo": 0.028,
            "tpot_p99_hi": 0.032,
            "throughput_rps": rates,
            "gpus": gpus,
        }
    )
    if saturation is not None:
        frame.insert(2, "load", loads)
    return frame


#: pd-split's chat curve of four colocated replicas before issue #17: the SLO's means hold
#: with room to spare at every load, but one 100 s replication at 0.95 of saturation was
#: flagged unstable. The grid knows the capacity is between 0.85 and 0.95 of S, no more.
UNSTABLE_TOP = grid([0.2, 0.55, 0.85, 0.95], [0.17, 0.22, 0.31, 0.35], [True, True, True, False])


def test_a_capacity_the_grid_brackets_is_read_as_the_bracket():
    row = capacity.capacities(UNSTABLE_TOP, SLO, by=["variant"]).iloc[0]
    assert not row["interpolated"] and not row["holds_everywhere"]
    # the last load that held, and the first that failed: 0.85 and 0.95 of 40 req/s
    assert (row["capacity"], row["capacity_high"]) == pytest.approx((34.0, 38.0))
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((34.0, 38.0))
    assert capacity.is_bracket(row)
    assert capacity.estimate(row) == "34.00–38.00"
    assert capacity.said(row, "req/s") == "between 34.00 and 38.00 req/s"
    assert capacity.middle(row) == pytest.approx(36.0)
    text = capacity.describe(row, SLO)
    assert text.startswith("chat: between 34.00 and 38.00 req/s (the SLO held at 34.00 and failed at 38.00")
    assert "34.00 req/s, 95 %" not in text  # never the grid point alone, as if it were an estimate


def test_the_report_prints_a_bracketed_capacity_per_gpu_as_a_bound():
    table = pd_capacity.capacity_table(UNSTABLE_TOP, ["variant", "config"]).set_index("slo")
    row = table.loc["default"]
    assert (row["capacity"], row["capacity_high"]) == pytest.approx((8.5, 9.5))  # per GPU, of 4
    # "≥ 8.50": the SLO held at 8.50; the interval ends at 9.50, where it failed
    assert pd_capacity.fmt_capacity(row) == "≥ 8.50 [8.50, 9.50]"
    assert capacity.said(row) == "between 8.50 and 9.50"


def test_an_interpolated_capacity_is_a_number():
    # 0.5 s at 0.5 S, 8 s at 0.9 S (both stable): 2 s, their geometric mean, halfway in load
    row = capacity.capacities(grid([0.5, 0.9, 1.1], [0.5, 8.0, 20.0], [True, True, False]), SLO).iloc[0]
    assert row["interpolated"] and row["capacity"] == pytest.approx(28.0)
    assert row["capacity_high"] == pytest.approx(row["capacity"])
    assert not capacity.is_bracket(row)
    assert (capacity.estimate(row), capacity.said(row)) == ("28.00", "28.00")
    assert capacity.middle(row) == pytest.approx(28.0)


def test_a_load_grid_held_everywhere_is_bracketed_by_the_saturation():
    row = capacity.capacities(grid([0.5, 0.9, 0.95], [0.2, 0.3, 0.4], True), SLO).iloc[0]
    assert row["holds_everywhere"] and not row["interpolated"]
    assert (row["capacity"], row["capacity_high"], row["ci_high"]) == pytest.approx((38.0, 40.0, 40.0))
    assert capacity.estimate(row) == "38.00–40.00"
    assert "(the SLO held at every load tried, up to 38.00; 40.00 is the saturation throughput)" in (
        capacity.describe(row, SLO)
    )


def test_a_plain_rate_grid_held_everywhere_is_open_above():
    row = capacity.capacities(grid([1.0, 2.0, 4.0], [0.2, 0.3, 0.4], True, saturation=None), SLO).iloc[0]
    assert row["holds_everywhere"] and row["capacity"] == 4.0 and row["capacity_high"] is None
    assert (capacity.estimate(row), capacity.said(row)) == ("≥ 4.00", "at least 4.00")
    assert capacity.middle(row) == 4.0


def test_no_capacity_reads_none():
    row = capacity.capacities(grid([0.5, 0.9], [3.0, 9.0], True), SLO).iloc[0]
    assert row["capacity"] is None and row["capacity_high"] is None and not row["interpolated"]
    assert capacity.estimate(row) is None and capacity.said(row) is None and math.isnan(capacity.middle(row))


def test_the_point_at_saturation_is_not_overloaded_by_the_rates_rounding():
    # a sweep writes fraction x S rounded to 4 digits: S = 15.7143 gives 7.857, 14.14 and 15.72,
    # so the point at 1.0 x S reads 0.04 % above the S read back from them (their median ratio);
    # it is at saturation, not past it: its stable, measured TTFT (2.34 s) is interpolated towards
    points = grid([0.5, 0.9, 1.0], [0.2, 0.23, 2.34], True, saturation=None).assign(load=[0.5, 0.9, 1.0])
    points[RATE] = [7.857, 14.14, 15.72]
    row = capacity.capacities(points, SLO).iloc[0]
    t = math.log(2 / 0.23) / math.log(2.34 / 0.23)
    assert row["interpolated"] and row["capacity"] == pytest.approx(14.14 + (15.72 - 14.14) * t)
    # a point really past S still fails, and is not interpolated towards
    past = points.assign(**{RATE: [7.857, 14.14, 15.80]})
    row = capacity.capacities(past, SLO).iloc[0]
    assert not row["interpolated"] and (row["capacity"], row["capacity_high"]) == pytest.approx(
        (14.14, 15.714), rel=1e-4
    )


def test_the_capacity_figure_draws_a_bracket_as_a_bar_and_an_estimate_as_a_dot():
    points = pd.concat(
        [UNSTABLE_TOP, grid([0.5, 0.9, 1.1], [0.5, 8.0, 20.0], [True, True, False], 20.0, "continuous-x2", 2)],
        ignore_index=True,
    )
    table = pd_capacity.capacity_table(points, ["variant", "config"], {"default": SLO})
    fig = pd_capacity.draw(table)
    ax = fig.axes[0]
    bars = [line for line in ax.get_lines() if line.get_gid() == "bracket"]
    dots = [line for line in ax.get_lines() if line.get_gid() == "estimate"]
    assert len(bars) == 1 and len(dots) == 1
    assert tuple(bars[0].get_xdata()) == pytest.approx((8.5, 9.5))  # from the load that held to the one that failed
    assert tuple(dots[0].get_xdata()) == pytest.approx((7.0,))  # 28 req/s on 2 GPUs, interpolated
    labels = {t.get_text() for t in ax.texts}
    assert {"8.50–9.50", "7.00"} <= labels and "8.50" not in labels
    plt.close(fig)


def test_the_caching_gain_of_a_bracketed_capacity_is_a_range():
    caps = pd.DataFrame(
        {
            "capacity": [15.6, 5.58],
            "capacity_high": [15.6, 6.20],
            "interpolated": [True, False],
            "holds_everywhere": [False, False],
            "ci_low": [15.2, 5.58],
            "ci_high": [15.7, 6.20],
            "lowest_rate": [3.0, 1.2],
        },
        index=["cached", "uncached"],
    )
    assert caching.gain(caps) == pytest.approx(15.6 / 5.89)  # against the bracket's middle
    assert caching.gain_text(caps) == "2.5–2.8"
    assert caching.capacity_text(caps, "uncached") == "≥ 5.58 [5.58, 6.20]"
    assert caching.capacity_text(caps, "cached") == "15.60 [15.20, 15.70]"
