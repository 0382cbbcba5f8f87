"""Golden summaries of the shipped scenarios, compared within their bands (see tests/golden.py)."""

from __future__ import annotations

import json
import math

import pytest
from scipy import stats

import des
from tests.golden import GOLDEN, METRICS, pinned, shipped

SCENARIOS = shipped()


def test_every_shipped_scenario_has_a_golden_file():
    assert {p.stem for p in SCENARIOS} == {p.stem for p in GOLDEN.glob("*.json")}


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_shipped_scenario_matches_its_golden_summary(path):
    golden = json.loads((GOLDEN / f"{path.stem}.json").read_text())
    got = pinned(des.simulate(des.load_scenario(path)).summary)
    r = golden["replications"]
    k = stats.t.ppf(0.9995, r - 1) * math.sqrt(1 + 1 / r)
    outside = []
    for m in METRICS:
        g = golden["metrics"][m]
        if g["mean"] is None:
            assert math.isnan(got[m]) == (g["own_seed"] is None), m
            continue
        band = k * g["sd"] + 1e-9 * max(1.0, abs(g["mean"]))
        if abs(got[m] - g["mean"]) > band:
            outside.append(f"{m}: {got[m]:.6g} outside {g['mean']:.6g} ± {band:.3g}")
    assert not outside, "; ".join(outside)
