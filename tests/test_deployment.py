"""The deployment as one list of pools (des.engine.deployment): old and new shapes, the one
resolution, and every feature's refusals (des.engine.features)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import des
from des.dotted import deep_copy, get_dotted, set_dotted
from des.engine import features
from des.engine.deployment import LEGACY_CLUSTER, normalise
from des.scenario import read_yaml
from des.study.spec import is_study, load_study
from tests.helpers import ROOT, des_cli

#: The most requests a run of the round trip takes (the tables compared are capped runs).
CAP = 150


def legacy(resolved: dict[str, Any]) -> dict[str, Any]:
    """A resolved scenario written back in the old shapes: ``cluster: {replicas, router, tp,
    ...}`` for one pool, ``scheduler: {kind: disaggregated, prefill, decode, router,
    kv_transfer, first_token_from}`` for a split, ``scheduler.speculative`` (the inverse of
    :func:`des.engine.deployment.normalise`, written out here to check it)."""
    data = deep_copy(resolved)
    cluster, scheduler = data.pop("cluster"), dict(data["scheduler"])
    speculative = data.pop("speculative", None)
    pools = cluster["pools"]
    if len(pools) == 1:
        (pool,) = pools
        data["cluster"] = {old: pool[new] for old, new in LEGACY_CLUSTER.items()}
        if speculative is not None:
            scheduler["speculative"] = speculative
        scheduler.update(pool["scheduler"])
    else:
        assert speculative is None
        scheduler["kind"] = "disaggregated"
        tp = {p["tp"] for p in pools}
        data["cluster"] = {"tp": pools[0]["tp"]} if len(tp) == 1 else {}
        for pool in pools:
            own = {"instances": pool["instances"], "gpu": pool["gpu"], "autoscaler": pool["autoscaler"]}
            if len(tp) > 1:
                own["tp"] = pool["tp"]
            scheduler[pool["role"]] = {**own, **pool["scheduler"]}
        scheduler["router"] = {p["role"]: p["router"] for p in pools}
        if cluster["kv_transfer"] is not None:
            link = dict(cluster["kv_transfer"])
            scheduler["first_token_from"] = link.pop("first_token_from")
            scheduler["kv_transfer"] = link
    data["scheduler"] = scheduler
    return data


def shipped() -> list[tuple[str, dict[str, Any]]]:
    """Every scenario in scenarios/ and every run of every study there (one per variant and point)."""
    out = []
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        data = read_yaml(path)
        if not is_study(data):
            out.append((path.stem, des.load_scenario(path).resolved()))
            continue
        study = load_study(path)
        seen = set()
        for run in [*study.probes, *study.runs]:
            key = (run.variant, run.point)
            if run.replication == 0 and key not in seen:
                seen.add(key)
                out.append((f"{path.stem}/{run.run_id}", run.scenario))
    return out


SHIPPED = shipped()


@pytest.mark.parametrize(("name", "resolved"), SHIPPED, ids=[n for n, _ in SHIPPED])
def test_every_shipped_scenario_loads_alike_in_the_old_and_the_new_shape(name, resolved):
    """The resolved scenario (new shape) and the same written in the old shape load to one
    resolved scenario, and its deployment resolves alike."""
    new = des.load_scenario(resolved)
    old = des.load_scenario(legacy(resolved))
    assert new.resolved() == old.resolved() == resolved
    assert new.deployment == old.deployment
    assert normalise(resolved) == (resolved, {})  # the new shape is left as it is


#: One colocated, one split, one autoscaled, one speculative and one pipelined shipped case.
ROUND_TRIP = ["qwen7b-4090-poisson", "pd-hetero", "qwen3moe-4090x2-dp-ep", "day-4090", "speculative"]


@pytest.mark.parametrize("stem", ROUND_TRIP)
def test_old_and_new_shapes_run_to_identical_tables(stem):
    name, resolved = next((n, r) for n, r in SHIPPED if n.split("/")[0] == stem)
    capped = deep_copy(resolved)
    capped["horizon"] = {**capped["horizon"], "num_requests": CAP}
    a, b = des.simulate(des.load_scenario(capped)), des.simulate(des.load_scenario(legacy(capped)))
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps), name
    assert a.summary == b.summary


def test_a_results_folder_documents_the_new_shape(tmp_path):
    r = des_cli("run", "--set", "horizon.duration=20", "--set", "warmup=0", "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    written = yaml.safe_load((tmp_path / "o" / "scenario.yaml").read_text())
    assert set(written["cluster"]) == {"pools", "kv_transfer"}
    assert written["cluster"]["pools"][0] | {"gpu": None} == {
        "name": "main", "role": "both", "instances": 1, "gpu": None, "tp": 1, "pp": 1, "dp": 1,
        "expert_parallel": False, "all2all_backend": "allgather_reducescatter", "router": "round_robin",
        "autoscaler": None, "scheduler": {},
    }  # fmt: skip
    assert "speculative" in written and "speculative" not in written["scheduler"]
    assert "prefill" not in written["scheduler"]


def test_the_switch_to_a_split_is_one_key():
    """``cluster.pools`` set to a prefill and a decode pool is the old three-key switch
    (``scheduler.kind=disaggregated``, ``cluster.replicas=null``, ``cluster.router=null``)."""
    new = des.load_scenario(None, ["cluster.pools=[{role: prefill}, {role: decode}]"])
    old = des.load_scenario(None, ["scheduler.kind=disaggregated", "cluster.replicas=null", "cluster.router=null"])
    assert new.resolved() == old.resolved()
    assert [p.role for p in new.layout.pools] == ["prefill", "decode"]
    assert [p.router for p in new.layout.pools] == ["least_outstanding", "least_kv"]


def test_a_pool_is_set_by_index_or_by_name():
    split = ["cluster.pools=[{role: prefill}, {role: decode}]"]
    by_name = des.load_scenario(None, [*split, "cluster.pools.decode.instances=3", "cluster.pools.prefill.tp=2"])
    by_index = des.load_scenario(None, [*split, "cluster.pools.1.instances=3", "cluster.pools.0.tp=2"])
    old = des.load_scenario(None, ["scheduler.kind=disaggregated", "cluster.replicas=null", "cluster.router=null",
                                   "scheduler.decode.instances=3", "scheduler.prefill.tp=2"])  # fmt: skip
    assert by_name.resolved() == by_index.resolved() == old.resolved()
    assert [(p.instances, p.tp) for p in by_name.layout.pools] == [(1, 2), (3, 1)]
    # the new shape addressed on a scenario written in the old one
    assert des.load_scenario(None, ["cluster.pools.main.instances=2"]).layout.pools[0].instances == 2
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(None, ["cluster.pools.decode.instances=2"])
    assert err.value.problems[0][0] == "cluster.pools"


def test_dotted_paths_walk_lists_by_index_and_name():
    data: dict[str, Any] = {"pools": [{"role": "both"}, {"name": "big", "role": "decode"}]}
    set_dotted(data, "pools.main.gpu.memory_bytes", 1)
    set_dotted(data, "pools.1.tp", 2)
    assert get_dotted(data, "pools.big.tp") == 2
    assert get_dotted(data, "pools.0.gpu.memory_bytes") == 1
    set_dotted(data, "pools.0.gpu", "h100-80gb")
    set_dotted(data, "pools.0.gpu.memory_bytes", 2)
    assert data["pools"][0]["gpu"] == {"base": "h100-80gb", "memory_bytes": 2}


def test_errors_name_the_key_as_written():
    """A problem names the key in the shape the scenario was written in: ``cluster.tp`` in the
    old one (and in a hint), ``cluster.pools.0.tp`` in the new one."""
    doc = des.load_scenario(None).resolved()
    with pytest.raises(des.ScenarioError) as old:
        des.load_scenario(legacy(doc), ["cluster.tp=3"])
    assert old.value.problems[0][0] == "cluster.tp"
    with pytest.raises(des.ScenarioError) as new:
        des.load_scenario(doc, ["cluster.pools.0.tp=3"])
    assert new.value.problems[0][0] == "cluster.pools.0.tp"
    with pytest.raises(des.ScenarioError) as hint:
        des.load_scenario(legacy(doc), ["model=qwen2.5-14b"])
    assert "cluster.tp: 2" in hint.value.problems[0][1]
    with pytest.raises(des.ScenarioError) as hint_new:
        des.load_scenario(doc, ["model=qwen2.5-14b"])
    assert "cluster.pools.0.tp: 2" in hint_new.value.problems[0][1]


def test_pools_take_only_the_shapes_des_models():
    for roles in (["decode", "prefill"], ["both", "both"], ["prefill"], ["both", "decode"]):
        with pytest.raises(des.ScenarioError) as err:
            des.load_scenario(None, [("cluster.pools", [{"role": r} for r in roles])])
        assert err.value.problems[0][0] == "cluster.pools"
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(
            None, [("cluster.pools", [{"role": "prefill", "name": "a"}, {"role": "decode", "name": "a"}])]
        )
    assert "repeat" in err.value.problems[0][1]


def test_the_deployment_is_resolved_once(monkeypatch):
    """Memory plans are computed at validation; running, rendering and reading the result
    read them (plan_memory is never called again)."""
    from des.catalog import memory
    from des.engine import layout
    from des.render import run as render

    sc = des.load_scenario(None, ["horizon.duration=20", "warmup=0"])
    calls: list[int] = []
    real = memory.plan_memory

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(layout, "plan_memory", counted)
    result = des.simulate(sc)
    render.summary_rows(sc, result)
    assert calls == []
    assert result.summary["kv_capacity_tokens"] == sc.deployment.finishing.memory.kv_capacity_tokens


# -- every feature's refusals, one triggering scenario each -------------------------------

SPLIT = [{"role": "prefill"}, {"role": "decode"}]
NGRAM = {"method": "ngram", "num_speculative_tokens": 2, "acceptance_rate": 0.5}
MOE = {"model": "qwen3-30b-a3b", "gpu": "h100-80gb"}

#: (refusal, overrides, the path it names, words of its problem).
REFUSAL_CASES: list[tuple[Any, dict[str, Any], str, str]] = [
    (features.static_problems, {"scheduler": {"kind": "static"}, "cluster.pools": SPLIT},
     "scheduler.kind", "static batching serves whole requests"),
    (features.data_parallel_problems, {"cluster.pools": [{"role": "prefill", "dp": 2}, {"role": "decode"}]},
     "cluster.pools.0.dp", "not modelled in a prefill pool"),
    (features.scaling_problems, {"cluster.pools": [{"role": "both", "instances": 0}]},
     "cluster.pools.0.instances", "0 instances serve nothing"),
    (features.scaling_problems,
     {"cluster.pools": SPLIT[:1] + [{"role": "decode", "autoscaler": {"metric": "running", "target": 4,
                                                                        "min_instances": 0, "max_instances": 2}}]},
     "cluster.pools.1.autoscaler.min_instances", "0 is for the pool requests enter"),
    (features.link_problems, {"cluster.pools": SPLIT, "cluster.kv_transfer": {"path": "nvlink"}},
     "cluster.kv_transfer.path", "nvlink"),
    (features.speculative_problems, {"scheduler": {"kind": "static"}, "speculative": NGRAM},
     "speculative", "static batching does not speculate"),
    (features.speculative_problems, {"cluster.pools": SPLIT, "speculative": NGRAM},
     "speculative", "not modelled for disaggregated serving"),
    (features.speculative_problems, {"speculative": {**NGRAM, "method": "mtp"}},
     "speculative.method", "multi-token-prediction layers"),
    (features.expert_problems, {"cluster.pools": [{"expert_parallel": True}]},
     "cluster.pools.0.expert_parallel", "dense model"),
    (features.expert_problems, {**MOE, "cluster.pools": [{"expert_parallel": True, "dp": 3}]},
     "cluster.pools.0.expert_parallel", "does not divide the 128 experts"),
    (features.pipeline_problems, {"cluster.pools": [{"pp": 64}]}, "cluster.pools.0.pp", "more than the 28 layers"),
    (features.pipeline_problems, {"cluster.pools": [{"role": "prefill", "pp": 2}, {"role": "decode"}]},
     "cluster.pools.0.pp", "colocated pools only"),
    (features.pipeline_problems, {"scheduler": {"kind": "static"}, "cluster.pools": [{"pp": 2}]},
     "cluster.pools.0.pp", "continuous scheduler only"),
    (features.pipeline_problems, {"cost_model": {"kind": "constant", "step_time": 0.01}, "cluster.pools": [{"pp": 2}]},
     "cluster.pools.0.pp", "roofline cost model"),
    (features.pipeline_problems, {**MOE, "cluster.pools": [{"pp": 2, "dp": 2, "expert_parallel": True}]},
     "cluster.pools.0.pp", "MoE ranks stepping together"),
    (features.pipeline_problems, {"speculative": NGRAM, "cluster.pools": [{"pp": 2}]},
     "cluster.pools.0.pp", "speculative decoding"),
    (features.pipeline_problems, {"model": "gpt-oss-20b", "gpu": "h100-80gb", "cluster.pools": [{"pp": 2}]},
     "cluster.pools.0.pp", "windowed attention"),
]  # fmt: skip


@pytest.mark.parametrize(("refusal", "overrides", "path", "words"), REFUSAL_CASES)
def test_each_refusal_names_its_field(refusal, overrides, path, words):
    base = des.load_scenario(None).resolved()
    with pytest.raises(des.ScenarioError) as err:
        des.load_scenario(base, list(overrides.items()))
    assert [p for p, _ in err.value.problems] == [path], err.value.problems
    assert words in err.value.problems[0][1]
    # the refusal itself says so, asked about the deployment alone
    data = deep_copy(base)
    for key, value in overrides.items():
        set_dotted(data, key, value)
    sc_fields = des.Scenario.model_fields
    cluster = sc_fields["cluster"].annotation.model_validate(data["cluster"])  # type: ignore[union-attr]
    assert any(p == path for p, _ in refusal(_deployed(data, cluster)))


def _deployed(data: dict[str, Any], cluster: Any) -> features.Deployed:
    from des import catalog
    from des.catalog.precision import Precision
    from des.engine.schedulers import SCHEDULERS
    from des.engine.speculative import SpeculativeConfig

    policy = SCHEDULERS.get(data["scheduler"]["kind"]).model_validate(data["scheduler"])  # type: ignore[attr-defined]
    spec = SpeculativeConfig.model_validate(data["speculative"]) if data.get("speculative") else None
    model = catalog.model(data["model"]) if isinstance(data["model"], str) else catalog.model("qwen2.5-7b")
    gpu = catalog.gpu(data["gpu"]) if isinstance(data["gpu"], str) else catalog.gpu("rtx4090")
    roofline = data["cost_model"]["kind"] == "roofline"
    return features.Deployed(cluster, policy, spec, model, gpu, Precision(), roofline)


def test_every_refusal_has_a_case():
    assert {case[0] for case in REFUSAL_CASES} == set(features.REFUSALS)


def test_a_valid_scenario_has_no_refusal():
    for name, resolved in SHIPPED[:10]:
        sc = des.load_scenario(resolved)
        assert features.problems(sc._deployed()) == [], name


def test_the_default_file_is_in_the_new_shape():
    text = Path(des.scenario.default_scenario_path()).read_text()
    data = yaml.safe_load(text)
    assert "pools" in data["cluster"] and "replicas" not in data["cluster"]
