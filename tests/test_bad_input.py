"""Bad input is reported, never crashes, and never corrupts earlier results.

The requirement: invalid scenario values, unknown names (scheduler kinds, GPUs, models,
distributions, arrival processes, routers, cost-model kinds), unreadable or malformed
trace files, bad empirical length files, bad ``--set`` overrides, malformed YAML and
unknown keys at any level all give exit status 2 with one line per problem of the form
``error: <dotted.path>: <problem>``, naming the field and echoing the bad value (plus
the valid choices, or the file's path), never a traceback; and a failing
``des run --out DIR`` leaves an existing DIR's files byte-identical.

Most cases go through the Python API (``des.load_scenario`` raising
``des.ScenarioError`` whose ``.problems`` are ``(dotted_path, message)`` pairs); a few go
through the ``des`` command in subprocesses (run concurrently, each into its own copy of
a real results folder).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import des
from des import catalog
from des.cost import COST_MODELS
from des.engine.router import ROUTERS
from des.engine.schedulers import SCHEDULERS
from des.workload.arrivals import Poisson, Trace
from des.workload.lengths import Empirical
from tests.helpers import ROOT

LESSON_STATIC = ROOT / "scenarios" / "lesson-static.yaml"
LESSON_CONTINUOUS = ROOT / "scenarios" / "lesson-continuous.yaml"
RESULT_FILES = {"requests.parquet", "steps.parquet", "windows.parquet", "summary.json", "scenario.yaml"}

PROCESSES = ["poisson", "gamma", "mmpp", "onoff", "closed", "trace"]
DISTS = ["fixed", "uniform", "geometric", "lognormal", "empirical"]

#: A small valid open-loop scenario; every case below breaks exactly one thing in it.
BASE: dict = {
    "name": "bad-input-base",
    "seed": 0,
    "gpu": "rtx4090",
    "model": "qwen2.5-7b",
    "horizon": {"duration": 60},
    "warmup": 10,
    "workload": {
        "arrival": {"process": "poisson", "rate": 2.0},
        "prompt_tokens": {"dist": "lognormal", "mean": 512, "sigma": 0.6},
        "output_tokens": {"dist": "geometric", "mean": 128},
    },
    "cost_model": {"kind": "roofline"},
    "scheduler": {
        "kind": "continuous",
        "max_num_seqs": 64,
        "max_num_batched_tokens": 2048,
        "enable_chunked_prefill": True,
        "block_size": 16,
        "gpu_memory_utilization": 0.92,
    },
    "cluster": {"replicas": 1, "router": "round_robin"},
}

EFFICIENCY = {"mfu_prefill": 0.5, "mfu_decode": 0.3, "mbu": 0.8, "step_overhead": 0.002}
TRACE_HEADER = "arrival_time,prompt_tokens,output_tokens\n"


# -- helpers ---------------------------------------------------------------------------


def base(**replace) -> dict:
    """A deep copy of BASE with top-level keys replaced (None removes the key)."""
    data = copy.deepcopy(BASE)
    for key, value in replace.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def with_workload(**replace) -> dict:
    """BASE with keys of ``workload`` replaced (None removes the key)."""
    data = base()
    for key, value in replace.items():
        if value is None:
            data["workload"].pop(key, None)
        else:
            data["workload"][key] = value
    return data


def problems_of(source, overrides=()) -> list[tuple[str, str]]:
    """The problems ``load_scenario`` reports; checks their shape on the way."""
    with pytest.raises(des.ScenarioError) as info:
        des.load_scenario(source, overrides)
    problems = info.value.problems
    assert isinstance(problems, list) and problems, "a ScenarioError must carry at least one problem"
    for item in problems:
        assert isinstance(item, tuple) and len(item) == 2, item
        path, message = item
        assert isinstance(path, str) and path, item
        assert isinstance(message, str) and message.strip(), item
        # one line per problem: a newline would break the CLI's `error: path: msg` lines
        assert "\n" not in path and "\n" not in message, item
        assert "Traceback" not in message, item
    return problems


def one_problem(source, overrides=()) -> tuple[str, str]:
    """The single problem ``load_scenario`` reports."""
    problems = problems_of(source, overrides)
    assert len(problems) == 1, problems
    return problems[0]


def message_at(problems: list[tuple[str, str]], path: str) -> str:
    """The message for ``path`` (which must be among the problems)."""
    found = [m for p, m in problems if p == path]
    assert found, f"no problem at {path!r}: {problems}"
    return found[0]


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def trace_scenario(path: Path, **arrival) -> dict:
    """A scenario replaying the trace at ``path`` with unit step cost."""
    return {
        "name": "bad-trace",
        "workload": {"arrival": {"process": "trace", "path": str(path), **arrival}},
        "cost_model": {"kind": "constant", "step_time": 1.0},
        "scheduler": {"kind": "continuous", "max_num_seqs": 4},
    }


def empirical_scenario(path: Path, **dist) -> dict:
    return with_workload(prompt_tokens={"dist": "empirical", "path": str(path), **dist})


# -- positive controls: the cases below fail for the stated reason only ------------------


def test_base_scenario_is_valid():
    sc = des.load_scenario(base())
    assert isinstance(sc.workload.arrival, Poisson) and sc.workload.arrival.rate == 2.0
    assert sc.scheduler.kind == "continuous"


def test_valid_override_is_applied():
    sc = des.load_scenario(base(), ["workload.arrival.rate=3.5", ("cluster.replicas", 2)])
    assert isinstance(sc.workload.arrival, Poisson) and sc.workload.arrival.rate == 3.5
    assert sc.cluster.pools[0].instances == 2


def test_good_trace_and_empirical_files_load(tmp_path):
    trace = write(tmp_path / "t.csv", TRACE_HEADER + "0,1,5\n1.5,2,3\n")
    sc = des.load_scenario(trace_scenario(trace))
    assert isinstance(sc.workload.arrival, Trace) and list(sc.workload.arrival.table["output_tokens"]) == [5, 3]
    lengths = write(tmp_path / "lengths.txt", "10\n20\n30\n")
    sc = des.load_scenario(empirical_scenario(lengths))
    assert isinstance(sc.workload.prompt_tokens, Empirical)


# -- unknown names: the bad name and the valid choices --------------------------------


UNKNOWN_NAMES = [
    # (override key, bad value, expected path, valid choices that must be listed)
    ("scheduler.kind", "fancy", "scheduler.kind", list(SCHEDULERS)),
    ("gpu", "h9000", "gpu", catalog.gpu_names()),
    ("model", "gpt-9", "model", catalog.model_names()),
    ("model.base", "gpt-9", "model", catalog.model_names()),
    ("gpu.base", "h9000", "gpu", catalog.gpu_names()),
    ("workload.prompt_tokens.dist", "zipf", "workload.prompt_tokens.dist", DISTS),
    ("workload.output_tokens.dist", "pareto", "workload.output_tokens.dist", DISTS),
    ("workload.arrival.process", "hawkes", "workload.arrival.process", PROCESSES),
    ("cluster.router", "fastest", "cluster.router", list(ROUTERS)),
    ("cost_model.kind", "magic", "cost_model.kind", list(COST_MODELS)),
    ("precision.weights", "int3", "precision.weights", ["bf16", "fp8", "int4-awq"]),
    ("precision.kv_cache_dtype", "fp4", "precision.kv_cache_dtype", ["bf16", "fp16", "fp8"]),
]


@pytest.mark.parametrize(("key", "bad", "path", "choices"), UNKNOWN_NAMES, ids=[c[0] for c in UNKNOWN_NAMES])
def test_unknown_name_lists_valid_choices(key, bad, path, choices):
    got_path, message = one_problem(base(), [(key, bad)])
    assert got_path == path
    assert bad in message
    for choice in choices:
        assert choice in message, f"{choice!r} missing from {message!r}"


def test_unknown_static_release_mode_lists_choices():
    path, message = one_problem(base(scheduler={"kind": "static", "release_on": "never"}))
    assert path == "scheduler.release_on"
    assert "never" in message and "batch_end" in message and "finish" in message


@pytest.mark.parametrize("bad", [5, ["rtx4090"]], ids=["int", "list"])
def test_non_string_catalog_base_is_an_error(bad):
    """``gpu: {base: 5}`` must be a ScenarioError naming gpu, not a TypeError."""
    problems = problems_of(base(gpu={"base": bad}))
    assert all(p == "gpu" or p.startswith("gpu.") for p, _ in problems), problems


# -- invalid values: the field and the value ------------------------------------------


BAD_VALUES = [
    # (override key, bad value, text that must appear in the message). Values are chosen
    # so the echo cannot be mistaken for the bound in the message ("must be > 0").
    ("workload.arrival.rate", -1.25, "-1.25"),
    ("workload.arrival.rate", 0, "0"),
    ("workload.arrival.rate", "fast", "fast"),
    ("workload.arrival.rate", math.nan, "nan"),
    ("seed", -7, "-7"),
    ("seed", 1.5, "1.5"),
    ("warmup", -3.5, "-3.5"),
    ("horizon.duration", -5, "-5"),
    ("horizon.num_requests", -9, "-9"),
    ("horizon.num_requests", 2.5, "2.5"),
    ("horizon.drain", "perhaps", "perhaps"),
    ("cluster.replicas", -2, "-2"),
    ("cluster.replicas", 1.5, "1.5"),
    ("cluster.tp", -4, "-4"),
    ("scheduler.max_num_seqs", -6, "-6"),
    ("scheduler.max_num_seqs", "lots", "lots"),
    ("scheduler.max_num_batched_tokens", -3, "-3"),
    ("scheduler.block_size", -16, "-16"),
    ("scheduler.gpu_memory_utilization", 1.5, "1.5"),
    ("scheduler.gpu_memory_utilization", -0.25, "-0.25"),
    ("scheduler.enable_chunked_prefill", "maybe", "maybe"),
    ("workload.prompt_tokens.mean", -512, "-512"),
    ("workload.prompt_tokens.sigma", -0.75, "-0.75"),
    ("workload.output_tokens.mean", 0.5, "0.5"),
    ("workload.output_tokens.min", -8, "-8"),
    ("gpu.memory_bytes", -1, "-1"),
    ("gpu.memory_bandwidth", -2e12, "-2"),
    ("model.num_layers", -28, "-28"),
    ("model.num_key_value_heads", 5, "5"),
]


@pytest.mark.parametrize(("key", "bad", "echo"), BAD_VALUES, ids=[f"{k}={v}" for k, v, _ in BAD_VALUES])
def test_invalid_value_names_field_and_value(key, bad, echo):
    path, message = one_problem(base(), [(key, bad)])
    assert path == key
    assert echo in message, message


@dataclass
class Case:
    id: str
    data: dict
    path: str
    echo: list[str] = field(default_factory=list)
    only: bool = True  # exactly one problem expected


BAD_SECTIONS = [
    Case("gamma-cv", with_workload(arrival={"process": "gamma", "rate": 1, "cv": -1}), "workload.arrival.cv", ["-1"]),
    Case(
        "mmpp-lengths",
        with_workload(arrival={"process": "mmpp", "rates": [1, 2, 3], "mean_sojourn": [1, 1]}),
        "workload.arrival.mean_sojourn",
        ["3"],
    ),
    Case(
        "mmpp-row-sum",
        with_workload(
            arrival={"process": "mmpp", "rates": [1, 2], "mean_sojourn": [1, 1], "transitions": [[0, 0.5], [1, 0]]}
        ),
        "workload.arrival.transitions",
        ["0.5"],
    ),
    Case(
        "mmpp-all-zero",
        with_workload(arrival={"process": "mmpp", "rates": [0, 0], "mean_sojourn": [1, 1]}),
        "workload.arrival.rates",
    ),
    Case(
        "onoff-missing",
        with_workload(arrival={"process": "onoff", "on_rate": 1, "mean_off": 1}),
        "workload.arrival.mean_on",
        ["required"],
    ),
    Case(
        "closed-concurrency",
        with_workload(arrival={"process": "closed", "concurrency": 0}),
        "workload.arrival.concurrency",
        ["0"],
    ),
    Case(
        "closed-think-dist",
        with_workload(arrival={"process": "closed", "concurrency": 2, "think_dist": "gauss"}),
        "workload.arrival.think_dist",
        ["gauss", "fixed", "exponential"],
    ),
    Case(
        "fixed-zero", with_workload(output_tokens={"dist": "fixed", "value": 0}), "workload.output_tokens.value", ["0"]
    ),
    Case(
        "uniform-order",
        with_workload(output_tokens={"dist": "uniform", "low": 10, "high": 5}),
        "workload.output_tokens.high",
        ["10", "5"],
    ),
    Case(
        "min-over-max",
        with_workload(output_tokens={"dist": "geometric", "mean": 10, "min": 50, "max": 5}),
        "workload.output_tokens.max",
        ["50", "5"],
    ),
    Case("dist-missing", with_workload(output_tokens={"mean": 10}), "workload.output_tokens.dist", ["required"]),
    Case("process-missing", with_workload(arrival={"rate": 3}), "workload.arrival.process", ["required"]),
    Case("lengths-missing", with_workload(output_tokens=None), "workload.output_tokens", ["required"]),
    Case("arrival-not-mapping", with_workload(arrival="poisson"), "workload.arrival", ["poisson"]),
    Case("workload-missing", base(workload=None), "workload", ["required"]),
    Case("horizon-not-mapping", base(horizon=10), "horizon", ["10"]),
    Case("constant-zero", base(cost_model={"kind": "constant", "step_time": 0}), "cost_model.step_time", ["0"]),
    Case("constant-missing", base(cost_model={"kind": "constant"}), "cost_model.step_time", ["required"]),
    Case("linear-missing", base(cost_model={"kind": "linear"}), "cost_model.base", ["required"]),
    Case(
        "roofline-mbu",
        base(cost_model={"kind": "roofline", "efficiency": {**EFFICIENCY, "mbu": 2}}),
        "cost_model.efficiency.mbu",
        ["2"],
    ),
    Case("cost-kind-missing", base(cost_model={"step_time": 1}), "cost_model.kind", ["required"]),
    Case("scheduler-kind-missing", base(scheduler={"max_batch_size": 4}), "scheduler.kind", ["required"]),
    Case(
        "static-batch-zero", base(scheduler={"kind": "static", "max_batch_size": 0}), "scheduler.max_batch_size", ["0"]
    ),
    Case("static-wait-negative", base(scheduler={"kind": "static", "max_wait": -1}), "scheduler.max_wait", ["-1"]),
    Case("gpu-not-mapping", base(gpu=5), "gpu", ["5"]),
    Case(
        "gpu-no-bf16",
        base(
            gpu={
                "memory_bytes": 2.5e10,
                "memory_bandwidth": 1e12,
                "flops": {"fp8": 1e15},
                "efficiency": {"mfu_prefill": 0.5, "mfu_decode": 0.5, "mbu": 0.8, "step_overhead": 0.003},
            }
        ),
        "gpu.flops",
        ["bf16"],
    ),
    Case(
        "gpu-clock-order",
        base(gpu={"base": "rtx4090", "clocks": {"base_mhz": 3000}}),
        "gpu.clocks.base_mhz",
        ["3000", "boost_mhz 2520"],
    ),
    Case("gpu-architecture", base(gpu={"base": "rtx4090", "architecture": "volta"}), "gpu.architecture", ["volta"]),
]


@pytest.mark.parametrize("case", BAD_SECTIONS, ids=[c.id for c in BAD_SECTIONS])
def test_invalid_section(case: Case):
    problems = problems_of(case.data)
    if case.only:
        assert len(problems) == 1, problems
    message = message_at(problems, case.path)
    for text in case.echo:
        assert text in message, f"{text!r} missing from {message!r}"


NON_FINITE = [
    # Accepted today, then the run hangs (rate, duration) or crashes with a traceback.
    ("workload.arrival.rate", math.inf),
    ("horizon.duration", math.inf),
    ("cost_model", {"kind": "constant", "step_time": math.inf}),
    ("gpu.memory_bandwidth", math.inf),
]


@pytest.mark.parametrize(("key", "bad"), NON_FINITE, ids=[k for k, _ in NON_FINITE])
def test_infinite_values_are_rejected(key, bad):
    problems = problems_of(base(), [(key, bad)])
    assert any(p == key or p.startswith(key + ".") for p, _ in problems), problems


# -- unknown keys at every level ------------------------------------------------------


UNKNOWN_KEYS = [
    # (override key, value, expected path); the value replaces or extends one section
    ("colour", "red", "colour"),
    ("horizon.hours", 1, "horizon.hours"),
    ("workload.burst", 1, "workload.burst"),
    ("workload.arrival.burst", 1, "workload.arrival.burst"),
    ("workload.prompt_tokens.median", 1, "workload.prompt_tokens.median"),
    ("workload.output_tokens.cap", 1, "workload.output_tokens.cap"),
    ("scheduler.max_seqs", 1, "scheduler.max_seqs"),
    ("cost_model.mfu", 0.5, "cost_model.mfu"),
    ("cluster.zone", "eu", "cluster.zone"),
    ("precision.activations", "fp8", "precision.activations"),
    ("gpu.colour", "green", "gpu.colour"),
    ("model.colour", "blue", "model.colour"),
    ("cost_model.efficiency", {**EFFICIENCY, "colour": 1}, "cost_model.efficiency.colour"),
    ("gpu", {"base": "rtx4090", "efficiency": {**EFFICIENCY, "colour": 1}}, "gpu.efficiency.colour"),
    ("scheduler", {"kind": "static", "max_num_seqs": 4}, "scheduler.max_num_seqs"),
    ("workload.arrival", {"process": "closed", "concurrency": 2, "rate": 3}, "workload.arrival.rate"),
    ("workload.arrival", {"process": "gamma", "rate": 3, "shape": 2}, "workload.arrival.shape"),
    ("workload.arrival", {"process": "onoff", "on_rate": 1, "mean_on": 1, "mean_off": 1, "x": 1}, "workload.arrival.x"),
    ("workload.output_tokens", {"dist": "fixed", "value": 3, "mean": 3}, "workload.output_tokens.mean"),
    ("workload.output_tokens", {"dist": "uniform", "low": 1, "high": 3, "mode": 2}, "workload.output_tokens.mode"),
    ("cost_model", {"kind": "constant", "step_time": 1, "base": 1}, "cost_model.base"),
]


@pytest.mark.parametrize(("key", "value", "path"), UNKNOWN_KEYS, ids=[p for _, _, p in UNKNOWN_KEYS])
def test_unknown_key_is_an_error(key, value, path):
    got_path, message = one_problem(base(), [(key, value)])
    assert got_path == path
    assert "unknown" in message


def test_unknown_key_in_yaml_file(tmp_path):
    scenario = write(tmp_path / "s.yaml", LESSON_STATIC.read_text().replace("seed: 0", "seed: 0\nsede: 1"))
    (tmp_path / "traces").symlink_to(ROOT / "scenarios" / "traces")
    assert one_problem(scenario)[0] == "sede"


# -- cross-field rules ------------------------------------------------------------------


def test_model_that_does_not_fit_names_model():
    path, message = one_problem(base(), ["gpu.memory_bytes=1000000000"])
    assert path == "model"
    assert "qwen2.5-7b" in message and "fit" in message


def test_model_that_does_not_fit_with_tiny_utilisation():
    path, _ = one_problem(base(), [("scheduler.gpu_memory_utilization", 0.05)])
    assert path == "model"


@pytest.mark.parametrize("warmup", [60, 61, 1000])
def test_warmup_not_shorter_than_horizon(warmup):
    path, message = one_problem(base(), [("warmup", warmup)])
    assert path == "warmup"
    assert str(warmup) in message and "60" in message


def test_warmup_shorter_than_horizon_is_fine():
    assert des.load_scenario(base(), [("warmup", 59.9)]).warmup == 59.9


@pytest.mark.parametrize(
    "data",
    [
        base(horizon=None),
        base(horizon={}),
        base(horizon={"drain": False}),
        base(
            horizon=None,
            warmup=None,
            workload={**BASE["workload"], "arrival": {"process": "gamma", "rate": 1, "cv": 2}},
        ),
        base(
            horizon=None, warmup=None, workload={**BASE["workload"], "arrival": {"process": "closed", "concurrency": 4}}
        ),
    ],
    ids=["poisson-missing", "poisson-empty", "poisson-drain-only", "gamma-missing", "closed-missing"],
)
def test_horizon_needed_unless_trace(data):
    path, message = one_problem(data)
    assert path == "horizon"
    assert "duration" in message and "num_requests" in message


def test_trace_needs_no_horizon():
    sc = des.load_scenario(LESSON_STATIC)
    assert sc.horizon.duration is None and sc.horizon.num_requests is None


def test_every_problem_is_reported_at_once():
    problems = problems_of(
        base(),
        [("workload.arrival.rate", -1), ("cluster.router", "nope"), ("colour", "red"), ("scheduler.max_num_seqs", 0)],
    )
    assert {p for p, _ in problems} == {"workload.arrival.rate", "cluster.router", "colour", "scheduler.max_num_seqs"}
    assert len(problems) == 4


def test_error_lines_have_the_documented_form():
    with pytest.raises(des.ScenarioError) as info:
        des.load_scenario(base(), [("workload.arrival.rate", -1), ("cluster.router", "nope")])
    lines = info.value.lines()
    assert len(lines) == 2
    assert any(line.startswith("error: workload.arrival.rate: ") and "-1" in line for line in lines), lines
    assert any(line.startswith("error: cluster.router: ") and "nope" in line for line in lines), lines


def test_failed_load_does_not_mutate_the_callers_mapping():
    data = base()
    before = copy.deepcopy(data)
    problems_of(data, ["workload.arrival.rate=-1", "gpu.memory_bytes=5", "colour=red"])
    assert data == before


# -- --set overrides ------------------------------------------------------------------


@pytest.mark.parametrize("text", ["noequals", "=3", "a..b=3", ".a=1", "a.=1", "a b=1", "", "workload.arrival.rate"])
def test_malformed_override_syntax(text):
    path, message = one_problem(base(), [text])
    assert path == "--set"
    assert repr(text) in message


@pytest.mark.parametrize(
    ("text", "path", "echo"),
    [
        ("workload.arrival.rate.x=3", "workload.arrival.rate", "workload.arrival.rate.x"),
        ("name.first=x", "name", "name.first"),
        ("horizon.duration.unit=s", "horizon.duration", "horizon.duration.unit"),
        ("workload.arrival.rate=fast", "workload.arrival.rate", "fast"),
        ("workload.arrival.rate=[", "workload.arrival.rate", "["),
        ("workload.arrival.rate=", "workload.arrival.rate", "''"),
        ("cluster.replicas=two", "cluster.replicas", "two"),
        ("scheduler.kind=fancy", "scheduler.kind", "fancy"),
        ("colour=red", "colour", "unknown"),
        ("workload.arrival.burstiness=2", "workload.arrival.burstiness", "unknown"),
        ("gpu.memory_bytes=1000000000", "model", "fit"),
    ],
)
def test_bad_override_value(text, path, echo):
    got_path, message = one_problem(base(), [text])
    assert got_path == path
    assert echo in message


# -- malformed or unreadable scenario files -------------------------------------------


YAML_FILES = [
    ("unclosed-bracket", "name: x\nworkload: {arrival: [\n", ["line"]),
    ("tab-indent", "name: x\n\tseed: 1\n", ["line 2"]),
    ("bad-indent", "name: x\n  seed: 1\n seed2: 3\n", []),
    ("empty", "", ["mapping"]),
    ("top-level-list", "- 1\n- 2\n", ["mapping"]),
    ("top-level-scalar", "hello\n", ["mapping"]),
    ("not-utf8", b"\xff\xfe\x00name: \x80\x81\n", []),
]


@pytest.mark.parametrize(("name", "content", "echo"), YAML_FILES, ids=[c[0] for c in YAML_FILES])
def test_malformed_yaml_file(tmp_path, name, content, echo):
    path = write(tmp_path / f"{name}.yaml", content)
    got_path, message = one_problem(path)
    assert got_path == "scenario"
    assert str(path) in message
    for text in echo:
        assert text in message


def test_missing_scenario_file(tmp_path):
    path = tmp_path / "nope.yaml"
    got_path, message = one_problem(path)
    assert got_path == "scenario"
    assert str(path) in message


def test_scenario_path_is_a_directory(tmp_path):
    got_path, message = one_problem(tmp_path)
    assert got_path == "scenario"
    assert str(tmp_path) in message


# -- trace files ------------------------------------------------------------------------


TRACES = [
    # (id, file name, content, texts that must appear in the message besides the path)
    ("missing-column", "t.csv", "arrival_time,prompt_tokens\n0,1\n", ["output_tokens"]),
    ("missing-columns", "t.csv", "time,prompt,output\n0,1,2\n", ["arrival_time", "prompt_tokens", "output_tokens"]),
    ("non-numeric-time", "t.csv", TRACE_HEADER + "0,1,5\nabc,2,3\n", ["arrival_time", "abc", "row 2"]),
    ("non-numeric-tokens", "t.csv", TRACE_HEADER + "0,1,5\n1,two,3\n", ["prompt_tokens", "two", "row 2"]),
    ("negative-time", "t.csv", TRACE_HEADER + "0,1,5\n-1,2,3\n", ["arrival_time", "-1", "row 2"]),
    ("nan-time", "t.csv", TRACE_HEADER + "0,1,5\nnan,2,3\n", ["arrival_time", "row 2"]),
    ("infinite-time", "t.csv", TRACE_HEADER + "0,1,5\ninf,2,3\n", ["arrival_time", "row 2"]),
    ("fractional-tokens", "t.csv", TRACE_HEADER + "0,1,5\n1,2.5,3\n", ["prompt_tokens", "2.5"]),
    ("zero-output-tokens", "t.csv", TRACE_HEADER + "0,1,5\n1,2,0\n", ["output_tokens", "0"]),
    ("zero-prompt-tokens", "t.csv", TRACE_HEADER + "0,0,5\n", ["prompt_tokens", "0", "row 1"]),
    ("negative-tokens", "t.csv", TRACE_HEADER + "0,1,5\n1,-2,3\n", ["prompt_tokens", "-2"]),
    ("blank-cell", "t.csv", TRACE_HEADER + "0,1,5\n1,,3\n", ["prompt_tokens", "row 2"]),
    ("huge-tokens", "t.csv", TRACE_HEADER + "0,1,1e30\n", ["output_tokens"]),
    ("empty-file", "t.csv", "", []),
    ("header-only", "t.csv", TRACE_HEADER, ["no rows"]),
    ("comments-only", "t.csv", "# nothing here\n", []),
    ("ragged-row", "t.csv", TRACE_HEADER + "0,1,5\n1,2,3,4,5\n", []),
    ("unterminated-quote", "t.csv", TRACE_HEADER + '0,1,5\n"1,2,3\n', []),
    ("binary", "t.csv", b"\x00\xff\xfe\x80\x81garbage\x00\n\xff", []),
    ("jsonl-malformed", "t.jsonl", '{"arrival_time": 0, "prompt_tokens": 1\n', []),
    ("jsonl-missing-column", "t.jsonl", '{"arrival_time": 0, "prompt_tokens": 1}\n', ["output_tokens"]),
    (
        "jsonl-negative-time",
        "t.jsonl",
        '{"arrival_time": -3, "prompt_tokens": 1, "output_tokens": 2}\n',
        ["arrival_time", "-3"],
    ),
    ("jsonl-empty", "t.jsonl", "", []),
    ("json-not-a-table", "t.json", '{"a": 1}', []),
]


@pytest.mark.parametrize(("name", "filename", "content", "echo"), TRACES, ids=[c[0] for c in TRACES])
def test_bad_trace_file(tmp_path, name, filename, content, echo):
    path = write(tmp_path / filename, content)
    got_path, message = one_problem(trace_scenario(path))
    assert got_path == "workload.arrival.path"
    assert str(path) in message
    for text in echo:
        assert text in message, f"{text!r} missing from {message!r}"


def test_missing_trace_file(tmp_path):
    path = tmp_path / "nope.csv"
    got_path, message = one_problem(trace_scenario(path))
    assert got_path == "workload.arrival.path"
    assert str(path) in message


def test_trace_path_is_a_directory(tmp_path):
    got_path, message = one_problem(trace_scenario(tmp_path))
    assert got_path == "workload.arrival.path"
    assert str(tmp_path) in message


def test_relative_trace_path_is_reported_against_the_scenario_folder(tmp_path):
    scenario = write(
        tmp_path / "sc" / "s.yaml",
        "workload:\n  arrival: {process: trace, path: traces/missing.csv}\n"
        "cost_model: {kind: constant, step_time: 1.0}\n",
    )
    got_path, message = one_problem(scenario)
    assert got_path == "workload.arrival.path"
    assert str(tmp_path / "sc" / "traces" / "missing.csv") in message


def test_trace_other_fields(tmp_path):
    path = write(tmp_path / "t.csv", TRACE_HEADER + "0,1,5\n")
    got_path, message = one_problem(trace_scenario(path, time_scale=-0.5))
    assert got_path == "workload.arrival.time_scale" and "-0.5" in message
    got_path, message = one_problem(trace_scenario(path, speed=2))
    assert got_path == "workload.arrival.speed" and "unknown" in message


@pytest.mark.parametrize(
    ("content", "value"),
    [
        (TRACE_HEADER + "0,1,5\n-1,2,3\n", "-1"),
        (TRACE_HEADER + "0,1,5\n1,2.5,3\n", "2.5"),
        (TRACE_HEADER + "0,1,5\n1,2,0\n", "0"),
    ],
    ids=["negative-time", "fractional-tokens", "zero-tokens"],
)
def test_trace_values_are_echoed_as_written(tmp_path, content, value):
    """The bad value reads as in the file (``-1``), not as a numpy repr (``np.int64(-1)``)."""
    path = write(tmp_path / "t.csv", content)
    _, message = one_problem(trace_scenario(path))
    assert value in message
    assert "np." not in message, message


# -- trace formats: a malformed file of each, and the replay's format options -----------------


MOONCAKE = '{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]}\n'
AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
AZURE = AZURE_HEADER + "2023-11-16 18:15:46.6805900,374,44\n"
BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
BURSTGPT = BURSTGPT_HEADER + "5,ChatGPT,472,18,490,Conversation log\n"
CHAT_HEADER = "arrival_time,prompt_tokens,output_tokens,conversation_id,prefix_group,prefix_tokens\n"


def bench(**change) -> str:
    """A valid ``vllm bench serve --save-detailed`` result of two requests, with keys changed
    (None removes one)."""
    data = {
        "request_rate": 2.0,
        "input_lens": [10, 20],
        "output_lens": [3, 2],
        "ttfts": [0.1, 0.1],
        "itls": [[0.02, 0.02], [0.02]],
        "latencies": [0.14, 0.12],
        "start_times": [100.0, 100.5],
        "errors": ["", ""],
    }
    for key, value in change.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    return json.dumps(data)


PATH = "workload.arrival.path"
FORMAT_TRACES = [
    # (id, file name, arrival options, content, the field blamed, texts the message must hold)
    # mooncake
    ("mooncake-missing-column", "m.jsonl", {"format": "mooncake"}, '{"timestamp": 0, "input_length": 9}\n', PATH,
     ["output_length", "has: timestamp, input_length"]),
    ("mooncake-negative-time", "m.jsonl", {"format": "mooncake"},
     MOONCAKE + '{"timestamp": -5, "input_length": 10, "output_length": 5}\n', PATH,
     ["row 2", "timestamp", "-5", "milliseconds"]),
    ("mooncake-text-length", "m.jsonl", {"format": "mooncake"},
     '{"timestamp": 0, "input_length": "long", "output_length": 5}\n', PATH, ["input_length", "'long'"]),
    ("mooncake-zero-output", "m.jsonl", {"format": "mooncake"},
     '{"timestamp": 0, "input_length": 9, "output_length": 0}\n', PATH, ["output_length", "0", "positive"]),
    ("mooncake-bool-length", "m.jsonl", {"format": "mooncake"},
     '{"timestamp": 0, "input_length": true, "output_length": 5}\n', PATH, ["input_length", "True"]),
    ("mooncake-hash-ids-not-a-list", "m.jsonl", {"format": "mooncake"},
     '{"timestamp": 0, "input_length": 9, "output_length": 5, "hash_ids": 7}\n', PATH,
     ["row 1", "hash_ids is 7", "not a list of integers"]),
    ("mooncake-hash-id-text", "m.jsonl", {"format": "mooncake"},
     '{"timestamp": 0, "input_length": 900, "output_length": 5, "hash_ids": [0, "a"]}\n', PATH,
     ["hash_ids[1]", '"a"', "integer >= 0"]),
    ("mooncake-hash-id-negative", "m.jsonl", {"format": "mooncake"},
     '{"timestamp": 0, "input_length": 9, "output_length": 5, "hash_ids": [-1]}\n', PATH, ["hash_ids[0]", "-1"]),
    ("mooncake-hash-id-fraction", "m.jsonl", {"format": "mooncake"},
     '{"timestamp": 0, "input_length": 9, "output_length": 5, "hash_ids": [1.5]}\n', PATH, ["hash_ids[0]", "1.5"]),
    ("mooncake-hash-id-bool", "m.jsonl", {"format": "mooncake"},
     '{"timestamp": 0, "input_length": 9, "output_length": 5, "hash_ids": [true]}\n', PATH, ["hash_ids[0]", "true"]),
    ("mooncake-too-many-hash-ids", "m.jsonl", {"format": "mooncake"},
     '{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1, 2]}\n', PATH,
     ["3 hash_ids for 1000 prompt tokens", "blocks of 512 tokens need 2", "hash_block_tokens"]),
    ("mooncake-too-few-hash-ids", "m.jsonl", {"format": "mooncake"},
     '{"timestamp": 0, "input_length": 2000, "output_length": 5, "hash_ids": [0, 1]}\n', PATH,
     ["need 4 (or 3 without the partial last block)"]),
    ("mooncake-empty", "m.jsonl", {"format": "mooncake"}, "", PATH, ["timestamp", "has: none"]),
    ("mooncake-blank-lines", "m.jsonl", {"format": "mooncake"}, "\n\n", PATH, ["timestamp"]),
    ("mooncake-not-json", "m.jsonl", {"format": "mooncake"}, MOONCAKE + "{timestamp: 3}\n", PATH,
     ["line 2", "not valid JSON"]),
    ("mooncake-array-line", "m.jsonl", {"format": "mooncake"}, MOONCAKE + "[1, 2]\n", PATH,
     ["line 2", "list", "not a JSON object"]),
    ("mooncake-read-as-jsonl", "m.jsonl", {}, MOONCAKE, PATH,
     ["lacks column(s) arrival_time", "format: mooncake", "not the jsonl inferred from its name"]),
    # azure
    ("azure-missing-column", "a.csv", {"format": "azure"}, "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,3\n",
     PATH, ["GeneratedTokens"]),
    ("azure-bad-timestamp", "a.csv", {"format": "azure"}, AZURE + "yesterday,374,44\n", PATH,
     ["row 2", "TIMESTAMP 'yesterday'", "2023-11-16 18:15:46.6805900"]),
    ("azure-epoch-timestamp", "a.csv", {"format": "azure"}, AZURE_HEADER + "1700000000,374,44\n", PATH,
     ["TIMESTAMP 1700000000", "not a date and time"]),
    ("azure-blank-timestamp", "a.csv", {"format": "azure"}, AZURE + ",374,44\n", PATH,
     ["row 2", "TIMESTAMP (blank) is not a date"]),
    ("azure-zero-output", "a.csv", {"format": "azure"}, AZURE + "2023-11-16 18:15:47.1,374,0\n", PATH,
     ["row 2", "GeneratedTokens 0"]),
    ("azure-text-tokens", "a.csv", {"format": "azure"}, AZURE + "2023-11-16 18:15:47.1,many,3\n", PATH,
     ["ContextTokens 'many'"]),
    ("azure-empty", "a.csv", {"format": "azure"}, "", PATH, ["cannot parse"]),
    ("azure-header-only", "a.csv", {"format": "azure"}, AZURE_HEADER, PATH, ["no rows"]),
    ("azure-read-as-csv", "a.csv", {}, AZURE, PATH, ["format: azure", "not the csv inferred"]),
    # burstgpt
    ("burstgpt-missing-column", "b.csv", {"format": "burstgpt"}, "Timestamp,Model,Request tokens\n5,ChatGPT,3\n",
     PATH, ["Response tokens"]),
    ("burstgpt-negative-response", "b.csv", {"format": "burstgpt"}, BURSTGPT + "6,ChatGPT,10,-3,7,API log\n",
     PATH, ["row 2", "Response tokens -3", "integer >= 0"]),
    ("burstgpt-zero-request", "b.csv", {"format": "burstgpt"}, BURSTGPT + "6,ChatGPT,0,3,3,API log\n", PATH,
     ["row 2", "Request tokens 0", "positive integer"]),
    ("burstgpt-bad-time", "b.csv", {"format": "burstgpt"}, BURSTGPT + "noon,ChatGPT,10,3,13,API log\n", PATH,
     ["Timestamp 'noon'", "seconds"]),
    ("burstgpt-all-failed", "b.csv", {"format": "burstgpt"}, BURSTGPT_HEADER + "5,GPT-4,10,0,10,API log\n", PATH,
     ["no request left", "Response tokens 0"]),
    ("burstgpt-unknown-model", "b.csv", {"format": "burstgpt", "model": "gpt-5"}, BURSTGPT, "workload.arrival.model",
     ["'gpt-5'", "its models: ChatGPT"]),
    ("burstgpt-model-of-failed-rows-only", "b.csv", {"format": "burstgpt", "model": "GPT-4"},
     BURSTGPT + "6,GPT-4,10,0,10,API log\n", PATH, ["no request left"]),
    ("burstgpt-read-as-csv", "b.csv", {}, BURSTGPT, PATH, ["format: burstgpt"]),
    # vllm-bench
    ("bench-not-json", "r.json", {}, "{not json", PATH, ["not valid JSON"]),
    ("bench-array", "r.json", {}, '[{"arrival_time": 0, "prompt_tokens": 1, "output_tokens": 2}]', PATH,
     ["not from a JSON array", ".jsonl"]),
    ("bench-no-input-lens", "r.json", {}, bench(input_lens=None), PATH, ["input_lens"]),
    ("bench-lens-not-a-list", "r.json", {}, bench(input_lens=5), PATH, ["input_lens is not a list"]),
    ("bench-null-ttfts", "r.json", {}, bench(input_lens=[10, 20]).replace('"ttfts": [0.1, 0.1]', '"ttfts": null'), PATH,
     ["lacks the per-request lists ttfts"]),
    ("bench-lengths-differ", "r.json", {}, bench(output_lens=[3]), PATH, ["output_lens has 1 entries"]),
    ("bench-negative-length", "r.json", {}, bench(input_lens=[-1, 20]), PATH, ["input_lens[0]", "-1"]),
    ("bench-no-requests", "r.json", {}, bench(input_lens=[], output_lens=[], ttfts=[], itls=[], latencies=[],
     start_times=[], errors=[]), PATH, ["no requests"]),
    ("bench-all-failed", "r.json", {}, bench(errors=["boom", "boom"], output_lens=[0, 0]), PATH,
     ["no successful request", "all 2 failed"]),
    ("bench-no-arrivals", "r.json", {}, bench(start_times=None, request_rate=None), PATH,
     ["neither start_times nor request_rate"]),
    ("bench-empty-file", "r.json", {}, "", PATH, ["not valid JSON"]),
    # des's own table: the optional columns
    ("chat-negative-conversation", "c.csv", {}, CHAT_HEADER + "0,10,2,,,\n1,10,2,-1,,\n", PATH,
     ["row 2", "conversation_id -1 is not an integer >= 0"]),
    ("chat-text-conversation", "c.csv", {}, CHAT_HEADER + "0,10,2,abc,,\n", PATH, ["conversation_id 'abc'"]),
    ("chat-fractional-group", "c.csv", {}, CHAT_HEADER + "0,10,2,,1.5,4\n", PATH, ["prefix_group 1.5"]),
    ("chat-prefix-without-group", "c.csv", {}, "arrival_time,prompt_tokens,output_tokens,prefix_tokens\n0,10,2,4\n",
     PATH, ["prefix_tokens but no prefix_group"]),
    ("chat-prefix-longer-than-prompt", "c.csv", {}, CHAT_HEADER + "0,10,2,,0,40\n", PATH,
     ["row 1", "prefix_tokens 40 exceeds", "prompt_tokens 10"]),
    ("chat-prefix-disagrees", "c.csv", {}, CHAT_HEADER + "0,100,2,,3,40\n1,100,2,,3,50\n", PATH,
     ["row 2", "prefix_tokens 50 differs from 40 on row 1", "prefix_group 3"]),
    ("chat-prefix-without-its-group", "c.csv", {}, CHAT_HEADER + "0,100,2,,,40\n", PATH,
     ["row 1", "prefix_tokens 40 on a row without a prefix_group"]),
    ("chat-zero-prefix", "c.csv", {}, CHAT_HEADER + "0,100,2,,3,0\n", PATH, ["prefix_tokens 0", "positive"]),
    ("chat-blank-prefix-in-a-group", "c.csv", {}, CHAT_HEADER + "0,100,2,,3,\n", PATH,
     ["row 1", "prefix_tokens (blank) is not a positive integer"]),
    ("csv-hash-ids", "c.csv", {}, TRACE_HEADER.strip() + ",hash_ids\n0,10,2,1\n", PATH, ["hash_ids", "JSONL"]),
    ("jsonl-hash-ids-and-conversation", "c.jsonl", {},
     '{"arrival_time": 0, "prompt_tokens": 10, "output_tokens": 2, "hash_ids": [1], "conversation_id": 1}\n', PATH,
     ["hash_ids and conversation_id", "cannot be combined"]),
    ("jsonl-hash-ids-text", "c.jsonl", {},
     '{"arrival_time": 0, "prompt_tokens": 10, "output_tokens": 2, "hash_ids": "1,2"}\n', PATH,
     ["hash_ids is \"1,2\"", "not a list"]),
    # the replay's fields
    ("unknown-format", "t.csv", {"format": "parquet"}, TRACE_HEADER + "0,1,5\n", "workload.arrival.format",
     ["'parquet'", "valid: csv, jsonl, mooncake, azure, burstgpt, vllm-bench"]),
    ("model-without-a-model-column", "t.csv", {"model": "GPT-4"}, TRACE_HEADER + "0,1,5\n",
     "workload.arrival.model", ["csv trace has no model column", "burstgpt"]),
    ("log-type-without-a-column", "t.csv", {"log_type": "API log"}, TRACE_HEADER + "0,1,5\n",
     "workload.arrival.log_type", ["csv trace has no log type column", "burstgpt"]),
    ("zero-hash-block", "m.jsonl", {"format": "mooncake", "hash_block_tokens": 0}, MOONCAKE,
     "workload.arrival.hash_block_tokens", ["0"]),
    ("zero-time-scale", "m.jsonl", {"format": "mooncake", "time_scale": 0}, MOONCAKE, "workload.arrival.time_scale",
     ["0"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "filename", "options", "content", "field", "echo"), FORMAT_TRACES, ids=[c[0] for c in FORMAT_TRACES]
)
def test_bad_trace_of_each_format(tmp_path, name, filename, options, content, field, echo):
    path = write(tmp_path / filename, content)
    got_path, message = one_problem(trace_scenario(path, **options))
    assert got_path == field, message
    if field == PATH:
        assert str(path) in message
    for text in echo:
        assert text in message, f"{text!r} missing from {message!r}"
    assert "np." not in message and "Traceback" not in message, message


# -- empirical length files -------------------------------------------------------------


EMPIRICAL = [
    # (id, content, column, texts that must appear besides the path)
    ("empty", "", None, []),
    ("header-only", "length\n", None, []),
    ("non-numeric", "10\nabc\n30\n", None, ["abc"]),
    ("zero", "10\n0\n", None, ["0"]),
    ("negative", "10\n-4\n", None, ["-4"]),
    ("fractional", "10\n2.5\n", None, ["2.5"]),
    ("infinite", "10\ninf\n", None, []),
    ("two-columns", "10,1\n20,2\n", None, ["column"]),
    ("column-missing", "a,b\n10,1\n", "c", ["'c'", "a", "b"]),
    ("column-non-numeric", "a,b\n10,1\nx,2\n", "a", ["x"]),
    ("binary", b"\x00\xff\xfe\x80\x81garbage\x00\n\xff", None, []),
    ("ragged", "10\n20,30\n", None, []),
]


@pytest.mark.parametrize(("name", "content", "column", "echo"), EMPIRICAL, ids=[c[0] for c in EMPIRICAL])
def test_bad_empirical_file(tmp_path, name, content, column, echo):
    path = write(tmp_path / "lengths.txt", content)
    extra = {"column": column} if column else {}
    got_path, message = one_problem(empirical_scenario(path, **extra))
    assert got_path == "workload.prompt_tokens.path"
    assert str(path) in message
    for text in echo:
        assert text in message, f"{text!r} missing from {message!r}"


def test_missing_empirical_files_are_all_reported(tmp_path):
    data = with_workload(
        prompt_tokens={"dist": "empirical", "path": str(tmp_path / "p.txt")},
        output_tokens={"dist": "empirical", "path": str(tmp_path / "o.txt")},
    )
    problems = problems_of(data)
    assert str(tmp_path / "p.txt") in message_at(problems, "workload.prompt_tokens.path")
    assert str(tmp_path / "o.txt") in message_at(problems, "workload.output_tokens.path")


def test_empirical_unknown_key_and_bad_bounds(tmp_path):
    path = write(tmp_path / "lengths.txt", "10\n20\n")
    assert one_problem(empirical_scenario(path, sep=";"))[0] == "workload.prompt_tokens.sep"
    got_path, message = one_problem(empirical_scenario(path, min=50))
    assert got_path.startswith("workload.prompt_tokens") and "50" in message


# -- the command line ---------------------------------------------------------------------


def des_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "des.cli", "run", *args]


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative name -> SHA-256 of its bytes), hidden temp files included."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@dataclass
class CliCase:
    id: str
    args: Callable[[Path], list[str]]  # given a scratch folder, the arguments before --out
    paths: list[str]  # each must start an `error: <path>: ` line, and nothing else is printed
    fresh: bool = False  # --out names a folder that does not exist yet (and must not be created)


def _yaml_in(work: Path, text: str, name: str = "s.yaml") -> Path:
    return write(work / name, text)


def _trace_scenario_file(work: Path) -> Path:
    trace = write(work / "t.csv", TRACE_HEADER + "0,1,5\n-1,2,3\n")
    return _yaml_in(
        work,
        f"workload:\n  arrival: {{process: trace, path: {trace}}}\ncost_model: {{kind: constant, step_time: 1.0}}\n",
    )


def _format_trace_file(filename: str, content: str, fmt: str | None = None) -> Callable[[Path], list[str]]:
    """The args of ``des run`` on a scenario replaying a trace file of ``content``."""

    def args(work: Path) -> list[str]:
        trace = write(work / filename, content)
        extra = f", format: {fmt}" if fmt else ""
        scenario = _yaml_in(
            work,
            f"workload:\n  arrival: {{process: trace, path: {trace}{extra}}}\n"
            "cost_model: {kind: constant, step_time: 1.0}\n",
        )
        return [str(scenario)]

    return args


def _ragged_empirical_override(work: Path) -> str:
    lengths = write(work / "l.txt", "10\n20,30\n")
    return f"workload.prompt_tokens={{dist: empirical, path: {lengths}}}"


CLI_CASES = [
    CliCase(
        "several-problems",
        lambda w: [
            "--set",
            "workload.arrival.rate=-1",
            "--set",
            "cluster.router=nope",
            "--set",
            "colour=red",
            "--set",
            "scheduler.kind=fancy",
        ],
        ["workload.arrival.rate", "cluster.router", "colour", "scheduler.kind"],
    ),
    CliCase("bad-set-syntax", lambda w: [str(LESSON_STATIC), "--set", "noequals"], ["--set"]),
    CliCase("model-does-not-fit", lambda w: ["--set", "gpu.memory_bytes=1000000000"], ["model"], fresh=True),
    CliCase("negative-seed", lambda w: [str(LESSON_STATIC), "--seed", "-1"], ["--seed"]),
    CliCase("malformed-yaml", lambda w: [str(_yaml_in(w, "name: x\nworkload: {arrival: [\n"))], ["scenario"]),
    CliCase("bad-trace", lambda w: [str(_trace_scenario_file(w))], ["workload.arrival.path"]),
    CliCase(
        "bad-mooncake",
        _format_trace_file(
            "m.jsonl", '{"timestamp": 0, "input_length": 9, "output_length": 5, "hash_ids": 7}\n', "mooncake"
        ),
        ["workload.arrival.path"],
    ),
    CliCase("bad-azure", _format_trace_file("a.csv", AZURE + "yesterday,374,44\n", "azure"), ["workload.arrival.path"]),
    CliCase(
        "bad-burstgpt",
        _format_trace_file("b.csv", BURSTGPT_HEADER + "5,GPT-4,10,0,10,API log\n", "burstgpt"),
        ["workload.arrival.path"],
    ),
    CliCase("bad-vllm-bench", _format_trace_file("r.json", bench(output_lens=[3])), ["workload.arrival.path"]),
    CliCase(
        "bad-chat-columns",
        _format_trace_file("c.csv", CHAT_HEADER + "0,100,2,,3,40\n1,100,2,,3,50\n"),
        ["workload.arrival.path"],
    ),
    CliCase("mooncake-read-as-jsonl", _format_trace_file("m.jsonl", MOONCAKE), ["workload.arrival.path"]),
    CliCase(
        "unknown-trace-format",
        _format_trace_file("t.csv", TRACE_HEADER + "0,1,5\n", "parquet"),
        ["workload.arrival.format"],
    ),
    # Known library bugs at the time of writing (see the report): a traceback or a blank line.
    CliCase("non-utf8-scenario", lambda w: [str(write(w / "bin.yaml", b"\xff\xfe\x00name: x\n"))], ["scenario"]),
    CliCase("ragged-empirical", lambda w: ["--set", _ragged_empirical_override(w)], ["workload.prompt_tokens.path"]),
    CliCase(
        "infinite-step-time",
        lambda w: [str(LESSON_STATIC), "--set", "cost_model.step_time=.inf"],
        ["cost_model.step_time"],
    ),
]


@pytest.fixture(scope="module")
def original_results(tmp_path_factory) -> Path:
    """A real results folder written by a successful ``des run``."""
    root = tmp_path_factory.mktemp("original")
    out = root / "results"
    done = subprocess.run(
        des_cmd(str(LESSON_STATIC), "--out", str(out), "--quiet"),
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert set(snapshot(out)) == RESULT_FILES
    return out


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory, original_results):
    """Every failing case run concurrently, each into its own copy of the results folder."""
    root = tmp_path_factory.mktemp("cli")
    procs = {}
    for case in CLI_CASES:
        work = root / case.id
        work.mkdir()
        out = work / "results"
        if not case.fresh:
            shutil.copytree(original_results, out)
        cmd = des_cmd(*case.args(work), "--out", str(out))
        procs[case.id] = (
            subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
            out,
        )
    runs = {}
    for case_id, (proc, out) in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            stderr += "\n<timed out>"
        runs[case_id] = (proc.returncode, stdout, stderr, out)
    return runs


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.id for c in CLI_CASES])
def test_cli_reports_bad_input(cli_runs, original_results, case: CliCase):
    returncode, stdout, stderr, out = cli_runs[case.id]
    assert "Traceback" not in stderr, stderr
    assert returncode == 2, stderr
    lines = stderr.splitlines()
    assert lines, "no error printed"
    assert all(line.startswith("error: ") for line in lines), stderr
    for path in case.paths:
        assert any(line.startswith(f"error: {path}: ") for line in lines), (path, stderr)
    assert len(lines) == len(case.paths), stderr
    assert stdout.strip() == "", stdout
    if case.fresh:
        assert not out.exists(), "a failing run created its results folder"
    else:
        assert snapshot(out) == snapshot(original_results), "the existing results folder changed"


def test_cli_write_failure_leaves_earlier_results_untouched(tmp_path, original_results):
    """A run that fails while writing (here: summary.json is in the way as a folder)
    must not leave a mix of new and old files in the existing results folder."""
    out = tmp_path / "results"
    shutil.copytree(original_results, out)
    (out / "summary.json").unlink()
    (out / "summary.json" / "blocker").mkdir(parents=True)
    before = snapshot(out)
    # a different scenario, so rewritten files would differ from the old ones
    done = subprocess.run(
        des_cmd(str(LESSON_CONTINUOUS), "--out", str(out), "--quiet"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: --out: "), done.stderr
    assert snapshot(out) == before, "files of the earlier run were replaced by a failing run"


# -- calibration files named by a scenario (gpu.calibration) ---------------------------------


GOOD_EFFICIENCY = "{weight_bandwidth: 0.9, gemm_compute: 0.9, step_overhead: 0.001}"
CALIBRATIONS = [
    # (id, file content or None for no file, texts that must appear in the message besides the path)
    ("missing", None, ["no such file"]),
    ("not-yaml", "gpu: [rtx4090\n", ["not valid YAML"]),
    ("a-list", "- 1\n- 2\n", ["mapping"]),
    ("not-utf8", b"\xff\xfe\x00gpu: x\n", ["UTF-8"]),
    ("no-efficiency", "gpu: rtx4090\nmodel: llama-3.1-8b\n", ["efficiency", "required"]),
    ("unknown-key", f"gpu: x\nmodel: y\ncolour: red\nefficiency: {GOOD_EFFICIENCY}\n", ["colour", "unknown"]),
    (
        "factor-out-of-range",
        "gpu: x\nmodel: y\nefficiency: {weight_bandwidth: 3.5, gemm_compute: 0.9, step_overhead: 0}\n",
        ["efficiency.weight_bandwidth", "3.5"],
    ),
    (
        "factor-not-a-number",
        "gpu: x\nmodel: y\nefficiency: {weight_bandwidth: 0.9, gemm_compute: fast, step_overhead: 0}\n",
        ["efficiency.gemm_compute", "fast"],
    ),
    (
        "single-factor-out-of-range",
        "gpu: x\nmodel: y\nefficiency: {mbu: 1.7, mfu_prefill: 0.5, mfu_decode: 0.5, step_overhead: 0}\n",
        ["mbu", "1.7"],
    ),  # fmt: skip
    ("wrong-format", f"format: 2\ngpu: x\nmodel: y\nefficiency: {GOOD_EFFICIENCY}\n", ["format"]),
]


@pytest.mark.parametrize(("name", "content", "echo"), CALIBRATIONS, ids=[c[0] for c in CALIBRATIONS])
def test_bad_calibration_file(tmp_path, name, content, echo):
    path = tmp_path / "cal.yaml"
    if content is not None:
        write(path, content)
    got_path, message = one_problem(base(gpu={"base": "rtx4090", "calibration": str(path)}))
    assert got_path == "gpu.calibration"
    assert str(path) in message
    for text in echo:
        assert text in message, f"{text!r} missing from {message!r}"


def test_calibration_path_is_a_folder_or_not_a_path(tmp_path):
    got_path, message = one_problem(base(gpu={"base": "rtx4090", "calibration": str(tmp_path)}))
    assert got_path == "gpu.calibration" and "folder" in message and str(tmp_path) in message
    got_path, message = one_problem(base(gpu={"base": "rtx4090", "calibration": 5}))
    assert got_path == "gpu.calibration" and "5" in message


def test_good_calibration_file_loads_relative_to_the_scenario(tmp_path):
    write(tmp_path / "cals" / "mine.yaml", f"gpu: rtx4090\nmodel: llama-3.1-8b\nefficiency: {GOOD_EFFICIENCY}\n")
    scenario = write(tmp_path / "s.yaml", "gpu: {base: rtx4090, calibration: cals/mine.yaml}\n" + _workload_yaml())
    sc = des.load_scenario(scenario)
    assert sc.gpu.efficiency.weight_bandwidth == 0.9 and sc.gpu.efficiency.gemm_knee == 0.0
    assert sc.gpu.calibration == str(tmp_path / "cals" / "mine.yaml")


def _workload_yaml() -> str:
    return (
        "horizon: {duration: 10}\nworkload:\n  arrival: {process: poisson, rate: 1}\n"
        "  prompt_tokens: {dist: fixed, value: 10}\n  output_tokens: {dist: fixed, value: 5}\n"
    )


# -- des calibrate and des compare on the command line ------------------------------------------


PROFILE = ROOT / "data" / "rtx4090-vllm-kernel-profile"


def _profile_copy(work: Path, edit: Callable[[Path], None] | None = None) -> Path:
    folder = work / "profile"
    shutil.copytree(PROFILE, folder)
    for p in folder.iterdir():
        p.chmod(0o644)
    if edit is not None:
        edit(folder)
    return folder


VIDUR = ROOT / "data" / "vidur-kernel-profiles"


def _vidur_copy(work: Path, old: str, new: str) -> Path:
    """One GPU's Vidur folder of one model, its mlp.csv with ``old`` replaced by ``new`` once."""
    folder = work / "compute" / "a40"
    src = VIDUR / "compute" / "a40" / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv"
    text = src.read_text()
    assert old in text, old
    write(folder / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv", text.replace(old, new, 1))
    return folder


def _replace_in(name: str, old: str, new: str) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        path = folder / name
        path.write_text(path.read_text().replace(old, new, 1))

    return edit


def _drop_rows(name: str, layer: str) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        path = folder / name
        lines = path.read_text().splitlines()
        path.write_text("\n".join([lines[0]] + [x for x in lines[1:] if not x.startswith(layer + ",")][:-1]) + "\n")

    return edit


def _bench_json(work: Path, **fields) -> Path:
    data = {
        "request_rate": "inf",
        "input_lens": [100, 200],
        "output_lens": [10, 20],
        "ttfts": [0.05, 0.06],
        "latencies": [0.3, 0.6],
        "start_times": [10.0, 10.5],
        "errors": ["", ""],
    }
    data.update(fields)
    for key in [k for k, v in fields.items() if v is None]:
        del data[key]
    return write(work / "bench.json", json.dumps(data))


@dataclass
class CommandCase:
    id: str
    args: Callable[[Path], list[str]]  # given a scratch folder, the command's arguments
    path: str  # the one `error: <path>: ` line expected
    echo: list[str] = field(default_factory=list)


CAL = ["--gpu", "rtx4090", "--model", "llama-3.1-8b"]
COMMAND_CASES = [
    CommandCase("calibrate-no-folder", lambda w: ["calibrate", str(w / "nope"), *CAL], "PROFILE_DIR", ["no such"]),
    CommandCase(
        "calibrate-a-file", lambda w: ["calibrate", str(write(w / "f.txt", "x")), *CAL], "PROFILE_DIR", ["folder"]
    ),
    CommandCase(
        "calibrate-no-attention",
        lambda w: ["calibrate", str(_profile_copy(w, lambda f: (f / "attention.csv").unlink())), *CAL],
        "PROFILE_DIR",
        ["attention.csv", "no such file"],
    ),
    CommandCase(
        "calibrate-columns",
        lambda w: ["calibrate", str(_profile_copy(w, _replace_in("dense.csv", "time_us", "micros"))), *CAL],
        "PROFILE_DIR",
        ["dense.csv", "micros"],
    ),
    CommandCase(
        "calibrate-bad-time",
        lambda w: [
            "calibrate",
            str(_profile_copy(w, _replace_in("dense.csv", "act_fn,1,2.592", "act_fn,1,-2.592"))),
            *CAL,
        ],  # fmt: skip
        "PROFILE_DIR",
        ["row 1", "-2.592"],
    ),
    CommandCase(
        "calibrate-too-few-rows",
        lambda w: ["calibrate", str(_profile_copy(w, _drop_rows("per_sequence.csv", "sampler"))), *CAL],
        "PROFILE_DIR",
        ["sampler"],
    ),
    CommandCase(
        "calibrate-wrong-model",
        lambda w: [
            "calibrate",
            str(PROFILE),
            "--gpu",
            "rtx4090",
            "--model",
            "qwen2.5-7b",
            "--out",
            str(w / "keep.yaml"),
        ],  # fmt: skip
        "--model",
        ["qwen2.5-7b", "meta.yaml"],
    ),
    CommandCase(
        "calibrate-unknown-gpu",
        lambda w: ["calibrate", str(PROFILE), "--gpu", "tpu-v9", "--model", "llama-3.1-8b"],
        "--gpu",
        ["tpu-v9", "rtx4090"],
    ),  # fmt: skip
    CommandCase(
        "calibrate-plot-suffix",
        lambda w: ["calibrate", str(PROFILE), *CAL, "--out", str(w / "keep.yaml"), "--plot", str(w / "fig.txt")],
        "--plot",
        ["fig.txt", "png"],
    ),
    CommandCase(
        "calibrate-out-folder-missing",
        lambda w: ["calibrate", str(PROFILE), *CAL, "--out", str(w / "no" / "such" / "c.yaml")],
        "--out",
        ["no folder"],
    ),
    CommandCase(
        "calibrate-needs-model",
        lambda w: ["calibrate", str(PROFILE), "--gpu", "rtx4090", "--out", str(w / "keep.yaml")],
        "--model",
        ["required"],
    ),
    CommandCase(
        "calibrate-not-a-profile",
        lambda w: ["calibrate", str(write(w / "empty" / "notes.txt", "x").parent), *CAL],
        "PROFILE_DIR",
        ["not a kernel profile", "mlp.csv"],
    ),
    CommandCase(
        "calibrate-vidur-no-model",
        lambda w: ["calibrate", str(VIDUR / "compute" / "a40"), "--gpu", "a40", "--model", "llama-3.1-8b"],
        "--model",
        ["leave --model out"],
    ),
    CommandCase(
        "calibrate-vidur-several-gpus",
        lambda w: ["calibrate", str(VIDUR), "--gpu", "a100-80gb"],
        "PROFILE_DIR",
        ["several GPUs", "a100, a40, h100"],
    ),
    CommandCase(
        "calibrate-vidur-column",
        lambda w: ["calibrate", str(_vidur_copy(w, "time_stats.mlp_up_proj.median", "up_median")), "--gpu", "a40"],
        "PROFILE_DIR",
        ["time_stats.mlp_up_proj.median"],
    ),
    CommandCase(
        "calibrate-vidur-bad-time",
        lambda w: ["calibrate", str(_vidur_copy(w, ",1.784,", ",-1.784,")), "--gpu", "a40"],
        "PROFILE_DIR",
        ["mlp.csv", "is not a time > 0"],
    ),
    CommandCase("compare-no-file", lambda w: ["compare", str(w / "nope.json")], "RESULT", ["no such file"]),
    CommandCase(
        "compare-not-json", lambda w: ["compare", str(write(w / "r.json", "{oops"))], "RESULT", ["not valid JSON"]
    ),
    CommandCase(
        "compare-not-detailed",
        lambda w: ["compare", str(write(w / "r.json", '{"duration": 10, "completed": 5}'))],
        "RESULT",
        ["input_lens", "--save-detailed"],
    ),
    CommandCase(
        "compare-lengths", lambda w: ["compare", str(_bench_json(w, ttfts=[0.1]))], "RESULT", ["ttfts has 1", "2"]
    ),
    CommandCase(
        "compare-negative-ttft",
        lambda w: ["compare", str(_bench_json(w, ttfts=[0.05, -0.25]))],
        "RESULT",
        ["ttfts[1]", "-0.25"],
    ),
    CommandCase(
        "compare-no-send-times",
        lambda w: ["compare", str(_bench_json(w, start_times=None, ramp_up_strategy="linear"))],
        "RESULT",
        ["ramped up", "start_times"],
    ),
    CommandCase(
        "compare-all-failed",
        lambda w: ["compare", str(_bench_json(w, errors=["timeout", "timeout"], output_lens=[0, 0]))],
        "RESULT",
        ["no request succeeded"],
    ),
    CommandCase(
        "compare-csv-columns",
        lambda w: ["compare", str(write(w / "r.csv", "arrival_time,prompt_tokens,output_tokens\n0,10,5\n"))],
        "RESULT",
        ["ttft and e2e"],
    ),
    CommandCase(
        "compare-csv-bad-tokens",
        lambda w: [
            "compare",
            str(
                write(
                    w / "r.csv", "arrival_time,prompt_tokens,output_tokens,ttft,e2e\n0,10,5,0.1,0.5\n1,2.5,5,0.1,0.5\n"
                )
            ),
        ],  # fmt: skip
        "RESULT",
        ["row 2", "prompt_tokens", "2.5"],
    ),
    CommandCase("compare-unknown-suffix", lambda w: ["compare", str(write(w / "r.txt", "x"))], "--format", ["r.txt"]),
    CommandCase(
        "compare-set-workload",
        lambda w: ["compare", str(_bench_json(w)), "--set", "workload.arrival.rate=3"],
        "--set",
        ["workload.arrival.rate", "RESULT"],
    ),
    CommandCase(
        "compare-set-kind",
        lambda w: ["compare", str(_bench_json(w)), "--set", "scheduler.kind=fancy"],
        "scheduler.kind",
        ["fancy"],
    ),
]


@pytest.fixture(scope="module")
def command_runs(tmp_path_factory):
    """Every failing des calibrate / des compare case, run concurrently in its own folder
    holding a file (keep.yaml) that must survive the failure untouched."""
    root = tmp_path_factory.mktemp("commands")
    procs = {}
    for case in COMMAND_CASES:
        work = root / case.id
        work.mkdir()
        keep = write(work / "keep.yaml", "earlier results\n")
        args = case.args(work)
        cmd = [sys.executable, "-m", "des.cli", *args]
        if args[0] == "compare":
            cmd += ["--out", str(work / "out")]
        procs[case.id] = (subprocess.Popen(cmd, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
                          work, keep)  # fmt: skip
    runs = {}
    for case_id, (proc, work, keep) in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            stderr += "\n<timed out>"
        runs[case_id] = (proc.returncode, stdout, stderr, work, keep)
    return runs


@pytest.mark.parametrize("case", COMMAND_CASES, ids=[c.id for c in COMMAND_CASES])
def test_calibrate_and_compare_report_bad_input(command_runs, case: CommandCase):
    returncode, stdout, stderr, work, keep = command_runs[case.id]
    assert "Traceback" not in stderr, stderr
    assert returncode == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {case.path}: "), stderr
    for text in case.echo:
        assert text in lines[0], f"{text!r} missing from {lines[0]!r}"
    assert stdout.strip() == "", stdout
    assert keep.read_text() == "earlier results\n"
    assert not (work / "out").exists(), "a failing des compare created its results folder"
    assert not any(p.suffix == ".png" for p in work.iterdir()), "a failing des calibrate wrote a figure"


def test_a_section_without_a_kind_is_of_the_default_kind_when_its_keys_are():
    sc = des.load_scenario(base(scheduler={"max_num_seqs": 4}))
    assert sc.scheduler.kind == "continuous" and sc.scheduler.max_num_seqs == 4


@pytest.mark.parametrize(
    "arrival",
    [
        "workload.arrival={process: trace, path: PATH, format: csv}",
        "workload.arrival={process: nhpp, schedule: {kind: piecewise, path: PATH}}",
        "workload.prompt_tokens={dist: empirical, path: PATH, column: prompt}",
    ],
)
@pytest.mark.parametrize(
    "secret", ["secret: TOPSECRET-123\nmore: lines\n", "/proc/self/environ", "A=TOPSECRET-123\0B=2\n"]
)
def test_a_file_that_is_no_table_is_not_quoted(tmp_path: Path, arrival: str, secret: str):
    """A reader refusing a file whose first line is no header of column names says so,
    without quoting the line: it may be a secret (a key file, a process's environment)."""
    from tests.helpers import des_cli

    path = secret if secret.startswith("/proc") else str(tmp_path / "secret.csv")
    if not secret.startswith("/proc"):
        Path(path).write_text(secret)
    arrival = arrival.replace("PATH", path)
    r = des_cli("run", "--set", arrival, "--set", "horizon.duration=10", "--out", "o", cwd=tmp_path)
    assert r.returncode == 2
    [line] = r.stderr.strip().splitlines()
    assert "TOPSECRET" not in line and "PATH=" not in line and "\\x00" not in line and "\\u0000" not in line, line
    assert "first line is not a header of column names" in line, line


def test_a_header_of_names_is_still_quoted(tmp_path: Path):
    from tests.helpers import des_cli

    (tmp_path / "t.csv").write_text("when,how many\n1,2\n")
    r = des_cli("run", "--set", "workload.arrival={process: trace, path: t.csv}", "--out", "o", cwd=tmp_path)
    assert r.stderr.strip().endswith("lacks column(s) arrival_time, prompt_tokens, output_tokens; has: when, how many")
