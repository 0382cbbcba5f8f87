"""The prefix-caching analysis (analysis/caching.py): capacities and hit rates read off
the two caching studies, on small versions of them, and the report's section."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from analysis import caching, capacity
from analysis.common import RATE, Sweep
from analysis.markdown import render
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


def curve(variant: str, rates: list[float], ttft: list[float], hits: list[float], saturation: float | None = None):
    """A hand-made load curve: p99 TTFT means ``ttft`` with intervals of ±20 %, median TPOT far
    within its limit, every point stable but one past ``saturation`` (a load grid) if given."""
    t = np.array(ttft)
    frame = pd.DataFrame(
        {
            "variant": variant,
            RATE: rates,
            "all_stable": True,
            "ttft_p99": t,
            "ttft_p99_lo": 0.8 * t,
            "ttft_p99_hi": 1.2 * t,
            "tpot_p50": 0.02,
            "tpot_p50_lo": 0.019,
            "tpot_p50_hi": 0.021,
            "throughput_rps": rates,
            "prefix_cache_hit_rate": hits,
        }
    )
    if saturation is not None:
        frame["load"] = [r / saturation for r in rates]
        frame["all_stable"] = [r <= saturation for r in rates]
    return frame


def test_facts_of_hand_made_sweeps():
    system = pd.concat(
        [
            # a load grid at 0.5, 0.9 and 1.1 of 20 req/s: p99 TTFT goes from 0.5 to 8 s between 10 and
            # 18 req/s, so it is 2 s (their geometric mean) halfway, at 14 req/s; past saturation not counted
            curve("cached", [10, 18, 22], [0.5, 8.0, 20.0], [0.795, 0.80, 0.804], saturation=20),
            curve("uncached", [5, 9, 11], [0.5, 8.0, 20.0], [0, 0, 0], saturation=10),  # halfway: 7 req/s
        ],
        ignore_index=True,
    )
    chat = pd.concat(
        [
            # a plain rate grid: 1 s at 1.0, 4 s at 1.5 conversations/s, so 2 s at 1.25
            curve("cached", [1.5, 0.5, 1.0], [4.0, 0.3, 1.0], [0.5, 0.92, 0.7]),
            curve("uncached", [0.5, 1.0, 1.5], [1.0, 4.0, 9.0], [0, 0, 0]),  # 2 s at 0.75
        ],
        ignore_index=True,
    )
    reps = {"caching-system-prompt": 3, "caching-chat": 5}
    facts = caching.facts({"caching-system-prompt": system, "caching-chat": chat}, reps)
    # the interval: where the upper ends (x 1.2) cross 2 s, and where the lower ends (x 0.8) do
    lo, hi = (10 + 8 * math.log(2 / (k * 0.5)) / math.log(16) for k in (1.2, 0.8))
    assert facts["system_cached"] == f"14.00 [{lo:.2f}, {hi:.2f}]"
    assert facts["system_uncached"] == f"7.00 [{lo / 2:.2f}, {hi / 2:.2f}]"
    assert facts["system_gain"] == pytest.approx(2.0)
    lo, hi = (1 + 0.5 * math.log(2 / k) / math.log(4) for k in (1.2, 0.8))
    assert facts["chat_cached"] == f"1.25 [{lo:.2f}, {hi:.2f}]"
    assert facts["chat_uncached"] == f"0.75 [{lo - 0.5:.2f}, {hi - 0.5:.2f}]"
    assert facts["chat_gain"] == pytest.approx(1.25 / 0.75)
    # the hit rates of caching on: one share at every load, and chat's at its lightest and heaviest load
    assert (facts["system_hits"], facts["chat_hits_light"], facts["chat_hits_heavy"]) == ("80 %", "92 %", "50 %")
    assert (facts["reps_system"], facts["reps_chat"]) == (3, 5)
    text = render("caching", facts)
    assert f"| multi-turn chat (conversations/s) | 1.25 [{lo:.2f}, {hi:.2f}] |" in text and "| 1.7x |" in text
    assert "the cache serves 80 % of the prompt tokens" in text and "carries 2.0 times the traffic" in text


def test_capacity_text_without_a_capacity_or_an_upper_end():
    caps = pd.DataFrame(
        {"capacity": [math.nan, 3.0], "ci_low": [math.nan, math.nan], "ci_high": [math.nan, math.nan],
         "lowest_rate": [0.5, 1.0]},
        index=["cached", "uncached"],
    )  # fmt: skip
    assert caching.capacity_text(caps, "cached") == "none (fails at 0.5)"
    assert caching.capacity_text(caps, "uncached") == "3.00 [below the grid, above the grid]"


def test_the_section_reports_what_the_sweeps_hold(results, tmp_path):
    text, figures = caching.section(results, tmp_path)
    assert figures["caching"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
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
