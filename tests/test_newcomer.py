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
        (
            "qwen2.5-14b",
            "it fits with cluster.pools.0.tp: 2 (2 x rtx4090) or with cluster.pools.0.pp: 2 (2 x rtx4090) or with "
            "precision.weights: fp8",
        ),
        (
            "qwen2.5-32b",
            "it fits with cluster.pools.0.tp: 4 (4 x rtx4090) or with cluster.pools.0.pp: 4 (4 x rtx4090) or with "
            "precision.weights: int4-awq",
        ),
        ("qwen2.5-72b", "it fits with cluster.pools.0.tp: 8 (8 x rtx4090) or with cluster.pools.0.pp: 8 (8 x rtx4090)"),
    ],
)
def test_a_model_that_does_not_fit_says_what_would(model, fits):
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(None, [f"model={model}"])
    [(where, message)] = err.value.problems
    assert where == "model" and message.endswith(fits)
    tp = int(re.search(r"cluster.pools.0.tp: (\d+)", fits).group(1))  # type: ignore[union-attr]
    assert des.load_scenario(None, [f"model={model}", f"cluster.tp={tp}"]).layout.pools[0].tp == tp
    assert des.load_scenario(None, [f"model={model}", f"cluster.pp={tp}"]).layout.num_gpus == tp
    if tp > 2:  # and not with half as many: the smallest degree is named
        with pytest.raises(des.ScenarioError):
            des.load_scenario(None, [f"model={model}", f"cluster.tp={tp // 2}"])


# -- SLO units (item 3) ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "limit"),
    [("ttft_p99<=2s", 2.0), ("ttft_p99<=2000ms", 2.0), ("ttft_p99<=2 s", 2.0), ("tpot_p50<=50ms", 0.05),
     ("e2e_p99<=1.5min", 90.0), ("tpot_p99<=0.05", 0.05), ("throughput_rps>=3", 3.0)],
)  # fmt: skip
def test_slo_limits_take_time_units(text, limit):
    from des.study.capacity import metric_names, parse_slo

    term = parse_slo(text, metric_names())
    assert term.limit == pytest.approx(limit) and term.note == ""


@pytest.mark.parametrize(("text", "says"), [("ttft_p99<=2000", "meant 2000ms?"), ("tpot_p99<=0.00001", "under")])
def test_a_bare_latency_limit_in_an_implausible_unit_is_doubted(text, says):
    from des.study.capacity import metric_names, parse_slo

    term = parse_slo(text, metric_names())
    assert says in term.note and term.note.startswith(f"--slo {text}:")


def test_a_unit_on_a_rate_or_an_unknown_unit_is_an_error():
    from des.study.capacity import metric_names, parse_slo

    for text in ("throughput_rps>=3s", "ttft_p99<=2x"):
        with pytest.raises(des.ScenarioError) as err:
            parse_slo(text, metric_names())
        assert err.value.problems[0][0] == "--slo"


def test_the_scenario_slo_takes_units_and_doubts_implausible_numbers():
    from des.scenario import scenario_warnings

    sc = des.load_scenario(None, ["slo={ttft: 2000ms, tpot: 50 ms}"])
    assert sc.slo is not None and sc.slo.limits() == {"ttft": 2.0, "tpot": 0.05}
    assert sc.resolved()["slo"] == {"ttft": 2.0, "tpot": 0.05, "e2e": None, "attainment": 0.99}
    [doubt] = [w for w in scenario_warnings(des.load_scenario(None, ["slo={ttft: 2000}"])) if w.startswith("slo.")]
    assert "meant 2000ms?" in doubt
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(None, ["slo={ttft: 2x}"])
    assert err.value.problems[0][0] == "slo.ttft"


def test_des_capacity_warns_on_a_bare_implausible_limit(tmp_path):
    from tests.helpers import des_cli

    res = des_cli("capacity", "--slo", "ttft_p99<=2000", "--replications", "2", "--set", "horizon.duration=20",
                  "--set", "warmup=2", "--high", "3", "--low", "1", "--out", str(tmp_path / "c"))  # fmt: skip
    assert "warning: --slo ttft_p99<=2000: 2000 s is implausible" in " ".join(res.stderr.split())


# -- unsetting a key (item 8) ---------------------------------------------------------------------


def test_a_colocated_scenario_switches_to_a_split_by_unsetting_its_cluster():
    path = ROOT / "scenarios" / "qwen7b-4090x2-interference.yaml"  # cluster: {replicas: 2, router: least_outstanding}
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(path, ["scheduler.kind=disaggregated"])
    assert "null unsets it" in err.value.problems[0][1]
    sc = des.load_scenario(path, ["scheduler.kind=disaggregated", "cluster.replicas=null", "cluster.router=null"])
    assert [p.role for p in sc.layout.pools] == ["prefill", "decode"]
    assert [p.router for p in sc.layout.pools] == ["least_outstanding", "least_kv"]  # the split's defaults


def test_null_unsets_only_keys_that_take_no_null():
    sc = des.load_scenario(None, ["horizon.duration=null", "horizon.num_requests=50", "scheduler.max_model_len=null"])
    assert sc.horizon.duration is None and sc.scheduler.max_model_len is None  # null is their own value
    unset = des.load_scenario(None, ["scheduler.max_num_seqs=null"])  # unset: vllm serve's default on a 4090
    assert unset.resolved()["scheduler"]["max_num_seqs"] is None and unset.layout.pools[0].policy.max_batch == 256
    with pytest.raises(des.ScenarioError):
        des.load_scenario(None, ["workload.arrival.rate=null"])  # required: nothing to fall back to


def test_a_replay_of_a_dated_log_shows_its_first_arrival_as_a_date_and_time():
    """The Azure sample's first TIMESTAMP is 2023-11-16 18:15:46.6805900 (UTC)."""
    from des.render import run as render

    azure = des.load_scenario(None, [
        f"workload.arrival={{process: trace, path: {ROOT}/scenarios/traces/azure-sample.csv, format: azure}}",
        "horizon.duration=null", "warmup=0",
    ])  # fmt: skip
    assert "recorded at 2023-11-16 18:15:46.680 UTC" in render.workload_line(azure)
    csv = des.load_scenario(None, [
        f"workload.arrival={{process: trace, path: {ROOT}/scenarios/traces/card-8.csv}}", "horizon.duration=null",
        "warmup=0",
    ])  # fmt: skip
    assert "UTC" not in render.workload_line(csv)  # undated clocks stay numbers


# -- progress of long steps (item 5) ---------------------------------------------------------------


def test_a_piped_sweep_says_how_far_it_is_every_heartbeat(monkeypatch):
    import io

    from rich.console import Console

    from des.render import progress

    buffer = io.StringIO()
    monkeypatch.setattr(progress, "ERR", Console(file=buffer, force_terminal=False, width=200))
    tick, _ = progress.progress("sweep", label="sweeping headline")
    assert tick is not None
    tick(3, 108, 1)
    assert buffer.getvalue() == ""  # not before a heartbeat has passed
    monkeypatch.setattr(progress, "HEARTBEAT", 0.0)
    tick, _ = progress.progress("sweep", label="sweeping headline")
    assert tick is not None
    tick(48, 108, 12)
    assert buffer.getvalue() == "sweeping headline: 48 of 108 runs done (12 reused)\n"


def test_a_brief_sweep_prints_one_line_and_make_run_uses_it(tmp_path):
    from tests.helpers import des_cli

    res = des_cli("sweep", str(ROOT / "scenarios" / "lesson-grid.yaml"), "--out", str(tmp_path / "s"), "--brief")
    assert res.returncode == 0 and len(res.stdout.strip().splitlines()) == 1, res.stdout
    assert res.stdout.startswith("2 runs (2 points x 1 replications)")
    sweeps = [line for line in (ROOT / "Makefile").read_text().splitlines() if "des sweep" in line]
    assert len(sweeps) >= 10 and not any("--quiet" in line for line in sweeps)
