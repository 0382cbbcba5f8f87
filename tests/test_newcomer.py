"""A planner's first hour (issue #17): names the README promises exist, typos get a "did
you mean", a model that does not fit says what would."""

from __future__ import annotations

import itertools
import re

import pytest

import des
from des.output import write_result
from tests.helpers import ROOT

README = (ROOT / "README.md").read_text()


def named_in_readme_row(file: str) -> set[str]:
    """The backticked names in the README's table row of ``file`` (brace patterns expanded)."""
    [row] = [line for line in README.splitlines() if line.startswith(f"| `{file}` |")]
    names: set[str] = set()
    for token in re.findall(r"`([^`]+)`", row.split("|")[2]):
        parts = [p.split(",") for p in re.split(r"[{}]", token) if p]
        names |= {"".join(c) for c in itertools.product(*parts)}
    return names


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    sc = des.load_scenario(None, ["scheduler.kind=disaggregated", "horizon.duration=20", "warmup=2"])
    write_result(des.simulate(sc), out)
    return out


@pytest.mark.parametrize("file", ["requests.parquet", "steps.parquet", "transfers.parquet"])
def test_every_column_the_readme_names_is_in_the_table(written, file):
    import pandas as pd

    columns = set(pd.read_parquet(written / file).columns)
    named = named_in_readme_row(file)
    assert named, f"the README names no column of {file}"
    assert named <= columns, f"the README names {sorted(named - columns)}, not columns of {file}"


def test_every_summary_key_the_readme_names_is_in_the_summary(written):
    import json

    keys = set(json.loads((written / "summary.json").read_text()))
    named = named_in_readme_row("summary.json")
    assert {"ttft_p99", "stable"} <= named and named <= keys, sorted(named - keys)


def test_the_readme_latency_formulas_name_request_columns():
    columns = set(des.simulate(des.load_scenario(None, ["horizon.duration=5", "warmup=0"])).requests.columns)
    [line] = [x for x in README.split("\n\n") if "queue_delay = " in x]
    for formula in re.findall(r"`(\w+ = [^`]+)`", line):
        names = set(re.findall(r"[a-z_][a-z0-9_]*", formula))
        assert names <= columns, f"{formula}: {sorted(names - columns)} are no columns"


@pytest.mark.parametrize(
    ("override", "path", "hint"),
    [
        ("workload.arival.rate=3", "workload.arival", "did you mean 'arrival'?"),
        ("scheduler.max_num_seq=4", "scheduler.max_num_seq", "did you mean 'max_num_seqs'?"),
        ("workload.arrival.rat=4", "workload.arrival.rat", "did you mean 'rate'?"),
        (
            "scheduler={kind: disaggregated, prefill: {max_num_seq: 3}}",
            "scheduler.prefill.max_num_seq",
            "'max_num_seqs'",
        ),
        ("gpu={base: rtx4090, memory_bandwith: 1.0e+12}", "gpu.memory_bandwith", "'memory_bandwidth'"),
        ("gpu=rtx-4090", "gpu", "did you mean 'rtx4090'?"),
        ("gpu=H100", "gpu", "did you mean 'h100-80gb'?"),
        ("model=llama3-8b", "model", "did you mean 'llama-3.1-8b'?"),
    ],
)
def test_a_typo_gets_a_did_you_mean(override, path, hint):
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(None, [override])
    [(where, message)] = err.value.problems
    assert where == path and hint in message


def test_a_key_close_to_nothing_gets_no_guess():
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(None, ["colour=red"])
    assert err.value.problems == [("colour", "unknown key")]


@pytest.mark.parametrize(
    ("model", "fits"),
    [
        ("qwen2.5-14b", "it fits with cluster.tp: 2 (2 x rtx4090) or with precision.weights: fp8"),
        ("qwen2.5-32b", "it fits with cluster.tp: 4 (4 x rtx4090) or with precision.weights: int4-awq"),
        ("qwen2.5-72b", "it fits with cluster.tp: 8 (8 x rtx4090)"),
    ],
)
def test_a_model_that_does_not_fit_says_what_would(model, fits):
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(None, [f"model={model}"])
    [(where, message)] = err.value.problems
    assert where == "model" and message.endswith(fits)
    tp = int(re.search(r"cluster.tp: (\d+)", fits).group(1))  # type: ignore[union-attr]
    assert des.load_scenario(None, [f"model={model}", f"cluster.tp={tp}"]).plan().pools[0].tp == tp
    if tp > 2:  # and not with half as many: the smallest degree is named
        with pytest.raises(des.ScenarioError):
            des.load_scenario(None, [f"model={model}", f"cluster.tp={tp // 2}"])
