"""A day of traffic and a burst (analysis/day.py): the section's tables and figures, read off
small versions of ``scenarios/day-4090.yaml`` and ``scenarios/burst-4090.yaml``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from analysis import day
from analysis.common import Sweep
from tests.helpers import SCENARIOS, des_cli


def shrunk(name: str, root: Path, change) -> Path:
    study = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    study["base"] = str(SCENARIOS / study["base"])
    change(study)
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    proc = des_cli("sweep", str(path), "--out", str(root / name), "--workers", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    return root / name


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """The shipped studies squeezed: a 'day' of 20 minutes, a burst of 6, 2 replications each."""
    root = tmp_path_factory.mktemp("day")

    def short_day(study):
        study["set"]["horizon"] = {"duration": 1200, "drain": True}
        study["set"]["workload"]["arrival"]["schedule"] |= {"period": 1200, "peak_time": 700}
        study["set"]["metrics"] = {"window": 60}
        study["replications"] = 2

    def short_burst(study):
        study["set"]["horizon"] = {"duration": 360, "drain": True}
        study["set"]["workload"]["arrival"]["schedule"] |= {"times": [0, 120, 240]}
        study["set"]["metrics"] = {"window": 30}
        study["replications"] = 2

    shrunk(day.STUDY, root, short_day)
    shrunk(day.BURST, root, short_burst)
    return root


def test_the_section_tables_every_variant_with_its_cost_and_windows(results, tmp_path):
    text, figures = day.section(results, tmp_path)
    for figure in figures.values():
        assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "{" not in text  # every placeholder filled
    points = Sweep(results / day.STUDY).points.set_index("variant")
    for variant, p in points.iterrows():
        assert f"| {variant} | {p['gpu_hours']:.1f}" in text
    # the fixed pair pays for two GPUs the whole run; the single GPU for one
    assert points.loc["fixed-peak", "gpu_hours"] == pytest.approx(2 * points.loc["fixed-1", "gpu_hours"], rel=0.02)
    assert points.loc["fixed-peak", "cost"] == pytest.approx(points.loc["fixed-peak", "gpu_hours"] * 0.69, rel=1e-9)
    burst = Sweep(results / day.BURST).points.set_index("variant")
    for variant in burst.index:
        assert f"| {variant} | " in text


def test_the_windows_drawn_are_the_runs_own(results):
    sweep = Sweep(results / day.STUDY)
    w = day.windows(sweep, "autoscaled")
    runs = sweep.runs
    rid = runs.loc[(runs["variant"] == "autoscaled") & (runs["replication"] == 0), "run_id"].iloc[0]
    summary = sweep.summary(str(rid))
    assert isinstance(w, pd.DataFrame) and len(w) == summary["windows"]
    assert w["gpu_hours"].sum() == pytest.approx(summary["gpu_hours"], rel=1e-9)


def test_a_section_whose_studies_are_missing_says_how_to_get_it(results, tmp_path):
    """``make run`` leaves the other studies to ``make studies`` and ``make day``: a section
    whose sweeps are missing (all, or one of two) names its studies and the target, and
    draws nothing; with both sweeps there, the section is drawn."""
    from analysis import report

    for present in ([], [day.STUDY], [day.STUDY, day.BURST]):
        res = tmp_path / f"res{len(present)}"
        res.mkdir()
        for name in present:
            (res / name).symlink_to(results / name)
        texts, figures = report.sections(res, tmp_path)
        assert set(texts) == set(report.SECTIONS)
        for key in ("pd_section", "caching_section", "models_section"):
            assert "Not in this report" in texts[key] and "`make studies`" in texts[key]
        if len(present) < 2:
            text = texts["day_section"]
            assert figures == {} and "`make day`" in text
            assert "scenarios/day-4090.yaml" in text and "scenarios/burst-4090.yaml" in text
        else:
            assert set(figures) == {"day", "burst"} and "Not in this report" not in texts["day_section"]
