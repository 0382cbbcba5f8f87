"""A cold start's seconds: weights over the storage bandwidth, engine start, and compile and
CUDA-graph capture when graphs are on; the catalog defaults and their overrides."""

from __future__ import annotations

import pytest

from des import catalog
from des.catalog.coldstart import ColdStartSpec, cold_start_seconds, cold_start_spec, default_cold_start
from des.catalog.memory import weight_bytes
from des.catalog.precision import Precision
from des.errors import ScenarioError


def test_qwen7b_bf16_cold_start_is_bytes_over_bandwidth_plus_start_compile_and_capture():
    spec = default_cold_start()
    nbytes = weight_bytes(catalog.model("qwen2.5-7b"), Precision(weights="bf16"))
    assert nbytes == 15_231_233_024  # 7.62e9 parameters x 2 bytes
    assert (
        spec.seconds(nbytes)
        == nbytes / spec.weights_bandwidth + spec.engine_start + spec.torch_compile + spec.graph_capture
    )
    assert spec.seconds(nbytes, cuda_graphs=False) == nbytes / spec.weights_bandwidth + spec.engine_start


def test_a_hand_worked_cold_start():
    spec = ColdStartSpec(weights_bandwidth=2.0e9, engine_start=10.0, torch_compile=5.0, graph_capture=3.0)
    assert spec.seconds(8_000_000_000) == 4.0 + 10.0 + 5.0 + 3.0
    assert spec.seconds(8_000_000_000, cuda_graphs=False) == 14.0
    assert spec.seconds(0) == 18.0
    with pytest.raises(ValueError):
        spec.seconds(-1)


def test_the_defaults_cite_vllm_logs():
    spec = default_cold_start()
    assert (spec.weights_bandwidth, spec.engine_start, spec.torch_compile, spec.graph_capture) == (
        5.0e8,
        19.0,
        19.4,
        15.0,
    )
    for ref in ("vllm#11005", "vllm#15225", "vllm#38820", "vllm#40323", "vllm#20264"):
        assert ref in spec.source
    assert default_cold_start() is spec  # read once


def test_a_scenario_overrides_field_by_field():
    spec = cold_start_spec({"weights_bandwidth": 4.0e9, "graph_capture": 0})
    base = default_cold_start()
    assert spec.weights_bandwidth == 4.0e9 and spec.graph_capture == 0
    assert (spec.engine_start, spec.torch_compile) == (base.engine_start, base.torch_compile)
    assert "weights_bandwidth" in spec.source and "graph_capture" in spec.source
    assert cold_start_spec(None) is base and cold_start_spec({}) is base


@pytest.mark.parametrize(
    ("given", "line"),
    [
        ({"weights_bandwidth": 0}, "error: cluster.autoscaler.cold_start.weights_bandwidth: must be > 0"),
        ({"engine_start": -1.0}, "error: cluster.autoscaler.cold_start.engine_start: must be >= 0"),
        ({"graph_capture": "5s"}, "error: cluster.autoscaler.cold_start.graph_capture: must be a number"),
        ({"torch_compile": True}, "error: cluster.autoscaler.cold_start.torch_compile: must be a number"),
        ({"warmup": 1.0}, "error: cluster.autoscaler.cold_start.warmup: extra inputs are not permitted"),
        ([1, 2], "error: cluster.autoscaler.cold_start: must be a mapping"),
    ],
)
def test_bad_overrides_are_one_line_naming_the_field(given, line):
    with pytest.raises(ScenarioError) as err:
        cold_start_spec(given, path="cluster.autoscaler.cold_start")
    lines = err.value.lines()
    assert len(lines) == 1 and lines[0].startswith(line), lines


def test_a_scenario_value_is_seconds_auto_or_fields():
    nbytes = weight_bytes(catalog.model("qwen2.5-7b"))
    assert cold_start_seconds(30, nbytes) == 30.0
    assert cold_start_seconds(0.0, nbytes, cuda_graphs=False) == 0.0
    assert cold_start_seconds("auto", nbytes) == default_cold_start().seconds(nbytes)
    assert cold_start_seconds(None, nbytes, cuda_graphs=False) == default_cold_start().seconds(nbytes, False)
    fast = {"weights_bandwidth": 5.0e9, "torch_compile": 7.5}
    assert cold_start_seconds(fast, nbytes) == cold_start_spec(fast).seconds(nbytes)
    assert cold_start_seconds(fast, nbytes) == nbytes / 5.0e9 + 19.0 + 7.5 + 15.0


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (-1.0, "must be a finite number of seconds >= 0 (got -1.0)"),
        (float("inf"), "must be a finite number of seconds >= 0"),
        ("fast", "must be a number of seconds, 'auto' or a mapping"),
        (True, "must be a number of seconds, 'auto' or a mapping"),
    ],
)
def test_a_bad_scenario_value_is_one_line(value, problem):
    with pytest.raises(ScenarioError) as err:
        cold_start_seconds(value, 10**9, path="cluster.autoscaler.cold_start")
    lines = err.value.lines()
    assert len(lines) == 1 and lines[0].startswith(f"error: cluster.autoscaler.cold_start: {problem}"), lines
