"""The prefix-caching analysis (analysis/caching.py): capacities and hit rates read off
the two caching studies, on small versions of them, and the report's section."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from analysis import caching, capacity
from analysis.common import RATE, Sweep
from tests.helpers import SCENARIOS, des_cli


def small(name: str, **changes: Any) -> dict[str, Any]:
    """A shipped caching study, shortened: its base given as a path, ``changes`` applied."""
    study = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    study["base"] = str(SCENARIOS / study["base"])
    return {**study, **changes}


SYSTEM = small(
    "caching-system-prompt",
    load={"fractions": [0.3, 0.8, 1.1]},
    replications=2,
)
SYSTEM["set"] = {**SYSTEM["set"], "horizon": {"duration": 40, "drain": False}, "warmup": 5}
CHAT = small("caching-chat", grid={RATE: [0.3, 1.0, 1.6]}, replications=2)
CHAT["set"] = {**CHAT["set"], "horizon": {"duration": 150, "drain": False}, "warmup": 30}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("caching")
    for study in (SYSTEM, CHAT):
        path = root / f"{study['name']}.yaml"
        path.write_text(yaml.safe_dump(study))
        proc = des_cli("sweep", str(path), "--out", str(root / study["name"]), "--workers", "1", "--quiet")
        assert proc.returncode == 0, proc.stderr
    return root


def test_gain_and_shares_of_hand_made_tables():
    caps = pd.DataFrame({"capacity": [6.0, 2.0]}, index=["cached", "uncached"])
    assert caching.gain(caps) == 3.0
    assert math.isnan(caching.gain(pd.DataFrame({"capacity": [6.0, None]}, index=["cached", "uncached"])))
    assert caching._share(pd.Series([0.795, 0.804])) == "80 %"
    assert caching._share(pd.Series([0.5, 0.92])) == "50–92 %"


def test_the_section_reports_what_the_sweeps_hold(results, tmp_path):
    lines, figures = caching.section(results, tmp_path)
    assert figures["caching"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = "\n".join(lines)
    points = {name: Sweep(results / name).points for name, _, _ in caching.STUDIES}
    for name, _, _ in caching.STUDIES:
        caps = capacity.capacities(points[name], capacity.DEFAULT_SLO, by=["variant"]).set_index("variant")
        row = caps.loc["cached"]
        if not pd.isna(row["capacity"]):
            assert f"{row['capacity']:.2f} [" in text
    # caching off hits nothing; on, behind 1024-token prompts with ~256 tokens of their
    # own, it serves at most 1024 of every ~1280 prompt tokens (cold misses: less)
    sys_points = points["caching-system-prompt"]
    assert (sys_points.loc[sys_points["variant"] == "uncached", "prefix_cache_hit_rate"] == 0).all()
    cached = sys_points.loc[sys_points["variant"] == "cached", "prefix_cache_hit_rate"]
    assert ((cached > 0.7) & (cached < 0.82)).all()
    assert f"serves {caching._share(cached)} of the prompt tokens" in text
    # chat: each turn re-sends its history, so more hits at light load than near capacity
    chat = points["caching-chat"]
    hits = chat[chat["variant"] == "cached"].sort_values(RATE)["prefix_cache_hit_rate"].to_numpy()
    assert hits[0] > 0.8 and hits[-1] < hits[0]


def test_the_command_line_prints_capacities_and_draws(results, tmp_path, capsys):
    png = caching.main([str(results), "--out", str(tmp_path / "c.png")])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "caching-system-prompt cached:" in out and "caching-chat uncached:" in out
