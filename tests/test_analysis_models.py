"""What one 4090 can serve (analysis/models.py): the section's table and figure, read off a
small version of ``scenarios/models-4090.yaml``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from analysis import capacity, models
from analysis.common import RATE, Sweep, slo_metrics
from des.catalog.memory import weight_bytes
from des.scenario import load_scenario
from tests.helpers import SCENARIOS, des_cli


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """The shipped study with 60 s runs, 2 replications and 3 loads."""
    root = tmp_path_factory.mktemp("models")
    study = yaml.safe_load((SCENARIOS / "models-4090.yaml").read_text())
    study["base"] = str(SCENARIOS / study["base"])
    study["set"] = {**study["set"], "horizon": {"duration": 60, "drain": False}, "warmup": 10}
    study |= {"load": {"fractions": [0.3, 0.8, 1.1]}, "replications": 2}
    path = root / "models-4090.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    proc = des_cli("sweep", str(path), "--out", str(root / models.STUDY), "--workers", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    spec = yaml.safe_load((SCENARIOS / "speculative.yaml").read_text())
    spec["base"] = str(SCENARIOS / spec["base"])
    spec["set"] = {**spec["set"], "horizon": {"duration": 60, "drain": False}, "warmup": 10}
    spec |= {"grid": {RATE: [1.0, 11.0, 14.0]}, "replications": 2}
    path = root / "speculative.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = des_cli("sweep", str(path), "--out", str(root / models.SPEC), "--workers", "1", "--quiet")
    assert proc.returncode == 0, proc.stderr
    return root


def test_each_variant_reads_its_own_model_and_memory_plan(results):
    info = models.variants(Sweep(results / models.STUDY))
    assert list(info.index) == [
        "qwen2.5-7b", "llama-3.1-8b", "qwen3-8b", "qwen2.5-14b-awq", "qwen3-30b-a3b-awq", "gpt-oss-20b-mxfp4",
    ]  # fmt: skip
    # a variant naming gpt-oss-20b alone runs it in its own format, not the base model's bf16
    assert info.loc["gpt-oss-20b-mxfp4", "weights"] == "mxfp4"
    assert info.loc["qwen2.5-14b-awq", "weights"] == "int4-awq"
    assert info.loc["qwen2.5-7b", "weights"] == "bf16"
    # the weights are the catalog model's in its format; the MoE runs a tenth of its parameters
    sc = load_scenario(SCENARIOS / "qwen7b-4090-poisson.yaml", ["model=qwen3-30b-a3b", "precision.weights=int4-awq"])
    assert info.loc["qwen3-30b-a3b-awq", "weights_gib"] == weight_bytes(sc.model, sc.precision) / models.GiB
    moe = info.loc["qwen3-30b-a3b-awq"]
    assert 0.05 < moe["active"] / moe["params"] < 0.15
    dense = info.loc["qwen2.5-7b"]
    assert dense["active"] == dense["params"]
    assert (info["kv_tokens"] > 0).all()


def test_the_section_holds_every_variant_and_its_capacity(results, tmp_path):
    text, figures = models.section(results, tmp_path)
    assert figures["models"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert figures["speculative"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # speculation: every variant has a row; at light load each proposer beats the plain engine's TPOT
    spec = Sweep(results / models.SPEC).points
    light = spec[spec[RATE] == 1.0].set_index("variant")["tpot_p50"]
    assert (light.drop(models.PLAIN) < light[models.PLAIN]).all()
    for variant in ("ngram-a0.7", "ngram-a0.4", "draft-0.5b-a0.7"):
        assert f"| {variant} | {1e3 * light[variant]:.1f} |" in text
    sweep = Sweep(results / models.STUDY)
    slo = slo_metrics(sweep.study["set"]["slo"])
    assert slo == {"ttft_p99": 2.0, "tpot_p50": 0.1}
    caps = models.capacities(sweep.points, slo)
    for _, row in caps.iterrows():
        assert f"{row['saturation']:.2f}" in text
        if row["capacity"] == row["capacity"]:
            assert capacity.cell(row, models._f(row["ci_low"]), models._f(row["ci_high"])) in text
    assert "| qwen2.5-14b (int4-awq) | 14.8B |" in text
    assert "| qwen3-30b-a3b (int4-awq) | 3.4B of 30.5B |" in text
    best = max(caps.index, key=lambda v: capacity.middle(caps.loc[v]))
    assert f"{best} carries the most traffic" in text
    assert "{" not in text  # every placeholder filled


def test_the_command_line_prints_capacities_and_draws(results, tmp_path, capsys):
    png = models.main([str(results / models.STUDY), "--out", str(tmp_path / "m.png")])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert all(f"{v}:" in out for v in ("qwen2.5-7b", "qwen3-30b-a3b-awq"))


def test_crossover_is_the_first_rate_where_speculation_costs_more():
    def curve(variant, e2e, stable=(True, True, True, True)):
        return pd.DataFrame({"variant": variant, RATE: [1.0, 5.0, 9.0, 12.0], "e2e_mean": e2e, "all_stable": stable})

    points = pd.concat([
        curve("off", [2.0, 2.5, 4.0, 9.0]),
        curve("pays", [1.0, 1.5, 3.0, 8.0]),
        curve("stops", [1.0, 2.0, 4.5, 20.0]),
        curve("late", [1.0, 1.5, 3.0, 20.0]),
    ])  # fmt: skip
    assert models.crossover(points, "pays") is None
    assert models.crossover(points, "stops") == (5.0, 9.0)
    assert models.crossover(points, "late") == (9.0, 12.0)
    # past the plain engine's last stable rate nothing is compared: its latency there is the run's length
    unstable = pd.concat(
        [curve("off", [2.0, 2.5, 4.0, 9.0], (True, True, True, False)), curve("late", [1, 1.5, 3, 20])]
    )
    assert models.crossover(unstable, "late") is None
