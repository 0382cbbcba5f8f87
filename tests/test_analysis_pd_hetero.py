"""Unlike GPUs, priced (analysis/pd_hetero.py): the part's tables and figure, read off a small
version of ``scenarios/pd-hetero.yaml``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from analysis import pd_hetero
from analysis.common import CONFIG, Sweep
from tests.helpers import SCENARIOS, des_cli


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """The shipped study with 40 s runs, 2 replications, three configurations and two loads."""
    root = tmp_path_factory.mktemp("hetero")
    study = yaml.safe_load((SCENARIOS / "pd-hetero.yaml").read_text())
    study["base"] = str(SCENARIOS / study["base"])
    for variant in study["variants"].values():
        variant |= {"horizon": {"duration": 40}, "warmup": 5}
    keep = ("2xH100", "2xL40S", "H100P+L40SD")
    study["grid"]["config"] = {k: v for k, v in study["grid"]["config"].items() if k in keep}
    study |= {"load": {"fractions": [0.3, 0.9]}, "replications": 2}
    path = root / "pd-hetero.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    proc = des_cli("sweep", str(path), "--out", str(root / pd_hetero.STUDY), "--workers", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    return root


def test_prices_and_power_are_the_pools_gpus(results):
    cost = pd_hetero.prices(Sweep(results / pd_hetero.STUDY))
    chat = cost.loc["chat"]
    assert chat.loc["2xH100", "usd_per_hour"] == pytest.approx(2 * 2.99)
    assert chat.loc["H100P+L40SD", "usd_per_hour"] == pytest.approx(2.99 + 0.86)
    assert chat.loc["H100P+L40SD", "watts"] == pytest.approx(700 + 350)
    assert chat.loc["2xL40S", "output_tokens"] == pytest.approx(256, rel=0.01)


def test_the_part_tables_every_configuration_at_its_price(results, tmp_path):
    sweep = Sweep(results / pd_hetero.STUDY)
    rows = pd_hetero.table(sweep)
    r = rows[(rows["variant"] == "chat") & (rows["slo"] == "default") & (rows[CONFIG] == "2xH100")].iloc[0]
    per_hour = r["usd_per_hour"]
    assert r["usd_per_million"] == pytest.approx(per_hour / (r["capacity_mid"] * r["output_tokens"] * 3600) * 1e6)
    assert r["per_dollar_hour"] == pytest.approx(r["capacity_mid"] / per_hour)
    text, figures = pd_hetero.section(results, tmp_path)
    assert figures["hetero"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "{" not in text
    for config in ("2xH100", "2xL40S", "H100P+L40SD"):
        assert f"| {config} | 2 | $" in text
