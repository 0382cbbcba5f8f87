"""The capacity readout (analysis/capacity.py) on hand-made grids whose answers are worked out here."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis import capacity
from analysis.common import RATE

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


def test_the_point_at_saturation_is_not_overloaded_by_the_rates_rounding():
    # a sweep writes fraction x S rounded to 4 digits: S = 15.7143 gives 7.857, 14.14 and 15.72,
    # so the point at 1.0 x S reads 0.04 % above the S read back from them (their median ratio);
    # it is at saturation, not past it: its stable, measured TTFT (2.34 s) is interpolated towards
    points = grid([0.5, 0.9, 1.0], [0.2, 0.23, 2.34], True, saturation=None).assign(load=[0.5, 0.9, 1.0])
    points[RATE] = [7.857, 14.14, 15.72]
    row = capacity.capacities(points, SLO).iloc[0]
    t = math.log(2 / 0.23) / math.log(2.34 / 0.23)
    assert row["capacity"] == pytest.approx(14.14 + (15.72 - 14.14) * t)
    # a point really past S still fails, and is not interpolated towards
    past = points.assign(**{RATE: [7.857, 14.14, 15.80]})
    row = capacity.capacities(past, SLO).iloc[0]
    assert (row["capacity"], row["ci_high"]) == pytest.approx((14.14, 15.714), rel=1e-4)
