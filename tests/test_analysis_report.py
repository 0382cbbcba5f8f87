"""The report around the sections (analysis/report.py): its facts on hand-made sweeps'
points, worked out here, and its template filled from them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from analysis import report
from analysis.common import CV, RATE
from analysis.markdown import render

LOADS = [0.1, 0.5, 0.9, 1.1]


def curve(variant: str, cv: float, saturation: float, ttft: list[float], throughput: list[float]) -> pd.DataFrame:
    """A load curve at :data:`LOADS` of ``saturation``: p99 TTFT means ``ttft`` (intervals ±20 %),
    median TPOT 20 ms, the point past saturation unstable."""
    t = np.array(ttft)
    return pd.DataFrame(
        {
            "variant": variant,
            CV: cv,
            "load": LOADS,
            RATE: [f * saturation for f in LOADS],
            "all_stable": [True, True, True, False],
            "ttft_p99": t,
            "ttft_p99_lo": 0.8 * t,
            "ttft_p99_hi": 1.2 * t,
            "tpot_p50": 0.02,
            "tpot_p50_lo": 0.019,
            "tpot_p50_hi": 0.021,
            "throughput_rps": throughput,
        }
    )


def headline() -> pd.DataFrame:
    # continuous, Poisson: 0.5 s at 5 req/s, 8 s at 9: 2 s (their geometric mean) halfway, at 7 req/s;
    # bursty: 0.5 s at 1 req/s, 8 s at 5: 2 s at 3 req/s; static fails at its lowest load
    return pd.concat(
        [
            curve("continuous", 1.0, 10, [0.2, 0.5, 8.0, 30.0], [1, 5, 9, 9.5]),
            curve("continuous", 3.0, 10, [0.5, 8.0, 20.0, 40.0], [1, 5, 8.5, 9.0]),
            curve("static", 1.0, 2, [9.0, 20.0, 40.0, 80.0], [0.2, 1.0, 1.8, 1.9]),
            curve("static", 3.0, 2, [12.0, 25.0, 50.0, 90.0], [0.2, 1.0, 1.7, 1.8]),
        ],
        ignore_index=True,
    )


def test_capacity_facts_of_hand_made_curves():
    facts = report.capacity_facts(headline())
    assert facts["continuous_capacity"] == pytest.approx(7.0)
    assert facts["bursty_loss"] == pytest.approx(1 - 3 / 7)
    assert (facts["static_low_rate"], facts["static_low_ttft"]) == (0.2, 9.0)
    assert (facts["continuous_max_throughput"], facts["static_max_throughput"]) == (9.5, 1.9)
    assert facts["throughput_ratio"] == pytest.approx(5.0)
    assert (facts["slo_ttft"], facts["slo_tpot_ms"]) == (2.0, 100.0)
    # the interval: where the upper ends (x 1.2) cross 2 s, and where the lower ends (x 0.8) do
    lo, hi = (5 + 4 * math.log(2 / (k * 0.5)) / math.log(16) for k in (1.2, 0.8))
    assert facts["capacity_lines"].split("\n") == [
        f"- continuous (cv 1): 7.00 req/s, 95 % CI [{lo:.2f}, {hi:.2f}]; highest throughput 9.50 req/s",
        f"- continuous (cv 3): 3.00 req/s, 95 % CI [{lo - 4:.2f}, {hi - 4:.2f}]; highest throughput 9.00 req/s",
        "- static (cv 1): no load in the grid meets the SLO (already at 0.2 req/s: ttft_p99 9, tpot_p50 0.02); "
        "highest throughput 1.90 req/s",
        "- static (cv 3): no load in the grid meets the SLO (already at 0.2 req/s: ttft_p99 12, tpot_p50 0.02); "
        "highest throughput 1.80 req/s",
    ]


def test_headline_facts():
    runs = pd.DataFrame({"num_requests": [1_000, 2_500, 40_000]})
    study = {"replications": 3, "set": {"slo": {"ttft": 2, "tpot": 0.1}}}
    facts = report.headline_facts(headline(), runs, study)
    assert facts["fractions"] == "0.1, 0.5, 0.9, 1.1"
    assert facts["saturations"] == "continuous 10.00 req/s, static 2.00 req/s"  # rate / load, per scheduler
    assert (facts["reps"], facts["runs"], facts["requests"]) == (3, 3, 43_500)
    assert facts["goodput_slo"] == "ttft ≤ 2 s and tpot ≤ 0.1 s"


def test_static_tpot_facts_read_the_highest_p99_at_a_stable_point():
    points = headline().assign(tpot_p99=[0.02, 0.03, 0.05, 0.2] * 2 + [0.5, 3.0, 6.1, 40.0] * 2)
    # static's 40 s per token is at its unstable point, past saturation: left out
    assert report.static_tpot_facts(points) == {"static_tpot_p99_max": 6.1}
    assert math.isnan(report.static_tpot_facts(points[points["variant"] == "continuous"])["static_tpot_p99_max"])


def test_burstiness_facts_read_cv_1_and_the_highest_cv_per_gpu_count():
    points = pd.DataFrame(
        {
            "variant": ["1-gpu"] * 3 + ["2-gpus"] * 3,
            CV: [1.0, 3.0, 6.0] * 2,
            "ttft_p99": [0.333, 2.0, 8.774, 0.27, 1.0, 3.83],
        }
    )
    assert report.burstiness_facts(points)["burstiness_table"].split("\n") == [
        "| GPUs | p99 TTFT at cv 1 | at cv 6 |",
        "|---|---|---|",
        "| 1 gpu | 0.33 s | 8.77 s |",
        "| 2 gpus | 0.27 s | 3.83 s |",
    ]


def test_the_report_template_puts_the_sections_between_burstiness_and_the_detail_figures():
    runs = pd.DataFrame({"num_requests": [1_000]})
    facts = report.headline_facts(headline(), runs, {"set": {"slo": {"ttft": 2}}})
    facts |= report.capacity_facts(headline())
    facts |= report.static_tpot_facts(headline().assign(tpot_p99=0.5))
    facts |= report.burstiness_facts(pd.DataFrame({"variant": ["1-gpu"], CV: [1.0], "ttft_p99": [0.5]}))
    facts |= {"factor_sources": "rtx4090: fitted to a profile", "factor_provenance": "fitted"}
    sections = {"pd_section": "## P/D\n", "caching_section": "## Caching\n", "models_section": "## Models\n"}
    sections["day_section"] = "## Day\n"
    text = render("report", facts | sections)
    assert text.startswith("# des report: RTX 4090s serving Qwen2.5-7B\n\n")
    assert (
        "(burstiness.png)\n\n## P/D\n\n## Caching\n\n## Models\n\n## Day\n\n## Latency distributions at 1 req/s\n"
        in text
    )
    assert "Continuous batching carries **7.0 req/s** of Poisson traffic" in text
    assert "continuous batching (5.0x). Bursty arrivals (cv 3) cost\ncontinuous batching 57% of its SLO" in text
    assert "`mmpp{rates, mean_sojourn}`" in text  # a literal brace of the template
    assert "factors come from:\nrtx4090: fitted to a profile (the runs' `factor_provenance`: fitted)." in text
    assert text.endswith("for the roofline constants and how they were set.\n")


def test_factor_facts_say_where_each_gpus_factors_come_from():
    import des

    moved: dict[str, Any] = {"provenance": "transferred", "basis": "Ada and Hopper fits"}
    gpu = {"base": "rtx4090", "efficiency": moved}
    scenario = des.load_scenario(None, [("gpu", gpu)]).resolved()
    runs = pd.DataFrame({"factor_provenance": ["transferred", "transferred"]})
    facts = report.factor_facts(runs, scenario)
    # the catalog's sds (gemm, attention, elementwise) and the front-end's; no all-reduce at tp 1
    stated = facts["factor_sources"]
    assert stated.startswith("rtx4090: transferred from Ada and Hopper fits; sd of ln(time): gemm 0.042, ")
    assert "communication" not in stated and stated.endswith("cpu 0.5")
    tp2 = des.load_scenario(None, [("gpu", gpu), ("cluster.tp", 2)]).resolved()
    assert "communication 0.57, cpu 0.5" in report.factor_facts(runs, tp2)["factor_sources"]
    bare = {**gpu, "efficiency": {**moved, "uncertainty": {}}}
    none = des.load_scenario(None, [("gpu", bare), ("cost_model", {"kind": "constant", "step_time": 0.01})])
    assert report.factor_facts(runs, none.resolved())["factor_sources"].endswith("no uncertainty stated")
    assert facts["factor_provenance"] == "transferred"
    assert report.factor_facts(pd.DataFrame({"x": [1]}), scenario)["factor_provenance"].startswith("not recorded")
