"""Hashes of the tables of every shipped scenario and of a set of test cases, to prove a
refactoring leaves results identical to the bit.

``python -m tests.digests --write FILE`` records them; ``python -m tests.digests --check
FILE`` runs the same cases again and names every case whose requests, steps, transfers,
windows or summary changed (exit 1), or says they are all identical (exit 0).

The cases: every scenario file in ``scenarios/`` and the embedded default; for each study
file, the first replication of every variant at its first point (a load study's
saturation probes stand in for its points); then :data:`EXTRA`, the engine kinds the
shipped files do not all reach (data and expert parallelism, pipeline stages,
speculative decoding, autoscaled colocated and split pools, unlike GPUs in a split,
static batching with a wait). Every run is capped at :data:`CAP` requests, so the
whole check takes a couple of minutes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from des import load_scenario, simulate
from des.dotted import deep_copy, set_dotted
from des.study.spec import is_study, load_study
from tests.helpers import ROOT

#: The most requests a case runs (the horizon's num_requests is capped at it).
CAP = 1500

_BASE: dict[str, Any] = {
    "seed": 3,
    "horizon": {"duration": 120},
    "warmup": 10,
    "workload": {
        "arrival": {"process": "poisson", "rate": 6.0},
        "prompt_tokens": {"dist": "lognormal", "mean": 512, "sigma": 0.6},
        "output_tokens": {"dist": "geometric", "mean": 128},
    },
}


def _with(**dotted: Any) -> dict[str, Any]:
    data = deep_copy(_BASE)
    for key, value in dotted.items():
        set_dotted(data, key.replace("__", "."), value)
    return data


#: Cases beyond the shipped files, each reaching an engine path of its own.
EXTRA: dict[str, dict[str, Any]] = {
    "moe-dp-ep": _with(model="qwen3-30b-a3b", gpu="h100-80gb", cluster={"dp": 2, "expert_parallel": True, "tp": 1}),
    "dense-dp": _with(cluster={"dp": 2, "replicas": 2, "router": "least_outstanding"}),
    "pipeline": _with(gpu="rtx4090", model="qwen2.5-14b", cluster={"pp": 2}),
    "speculative-ngram": _with(
        scheduler={
            "kind": "continuous",
            "speculative": {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.6},
        }
    ),
    "speculative-eagle": _with(
        model="llama-3.1-8b",
        gpu="h100-80gb",
        scheduler={
            "kind": "continuous",
            "speculative": {
                "method": "eagle",
                "model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B",
                "num_speculative_tokens": 2,
                "acceptance_rate": 0.7,
            },
        },
    ),  # fmt: skip
    "autoscaled": _with(
        cluster={
            "replicas": 1,
            "router": "least_outstanding",
            "autoscaler": {
                "metric": "queue_length",
                "target": 4,
                "min_instances": 1,
                "max_instances": 3,
                "interval": 5,
                "cold_start": 20,
                "cooldown": 30,
            },
        },
        workload__arrival={"process": "poisson", "rate": 14.0},
    ),  # fmt: skip
    "split-autoscaled": _with(
        scheduler={
            "kind": "disaggregated",
            "prefill": {"instances": 1},
            "decode": {
                "instances": 1,
                "max_num_seqs": 64,
                "autoscaler": {
                    "metric": "running",
                    "target": 32,
                    "min_instances": 1,
                    "max_instances": 3,
                    "interval": 5,
                    "cold_start": 10,
                },
            },
        },
        workload__arrival={"process": "poisson", "rate": 10.0},
    ),  # fmt: skip
    "split-hetero": _with(
        model="llama-3.1-8b",
        gpu="h100-80gb",
        scheduler={
            "kind": "disaggregated",
            "max_num_batched_tokens": 4096,
            "prefill": {"instances": 1, "tp": 2},
            "decode": {"instances": 2, "gpu": "a100-80gb"},
            "kv_transfer": {"mode": "push", "overlap": "layerwise"},
            "first_token_from": "decode",
            "router": {"decode": "least_outstanding"},
        },
        workload__arrival={"process": "poisson", "rate": 12.0},
    ),
    "static-wait": _with(scheduler={"kind": "static", "max_batch_size": 16, "max_wait": 0.5}),
    "tp2-replicas": _with(gpu="l40s", model="qwen2.5-14b", cluster={"tp": 2, "replicas": 2, "router": "least_kv"}),
}


def shipped_cases() -> dict[str, dict[str, Any]]:
    """The scenario of every case drawn from scenarios/ and the embedded default, by name."""
    cases: dict[str, dict[str, Any]] = {"default": load_scenario(None).resolved()}
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        from des.scenario import read_yaml

        data = read_yaml(path)
        if not is_study(data):
            cases[path.stem] = load_scenario(path).resolved()
            continue
        study = load_study(path)
        runs = study.probes or study.runs
        seen: set[str] = set()
        for run in runs:
            if run.replication != 0 or run.variant in seen:
                continue
            seen.add(run.variant)
            cases[f"{path.stem}/{run.run_id}"] = run.scenario
    return cases


def _frame_digest(frame: pd.DataFrame | None) -> str:
    if frame is None:
        return "none"
    h = hashlib.sha256()
    h.update(json.dumps([[str(c), str(t)] for c, t in frame.dtypes.items()]).encode())
    h.update(pd.util.hash_pandas_object(frame, index=True).to_numpy().tobytes())
    return h.hexdigest()[:16]


def digest(scenario: dict[str, Any]) -> dict[str, str]:
    """The hashes of one capped run's tables and summary."""
    data = deep_copy(scenario)
    horizon = data.setdefault("horizon", {})
    horizon["num_requests"] = min(horizon.get("num_requests") or CAP, CAP)
    result = simulate(load_scenario(data))
    summary = json.dumps(result.summary, sort_keys=True, default=str)
    return {
        "requests": _frame_digest(result.requests),
        "steps": _frame_digest(result.steps),
        "transfers": _frame_digest(result.transfers),
        "windows": _frame_digest(result.windows),
        "summary": hashlib.sha256(summary.encode()).hexdigest()[:16],
    }


def all_digests(only: str | None = None) -> dict[str, dict[str, str]]:
    cases = {**shipped_cases(), **{f"extra/{k}": v for k, v in EXTRA.items()}}
    out = {}
    for name, scenario in cases.items():
        if only is not None and only not in name:
            continue
        print(f"  {name}", file=sys.stderr, flush=True)
        out[name] = digest(scenario)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", type=Path, help="record the digests into this JSON file")
    action.add_argument("--check", type=Path, help="compare against the digests in this JSON file")
    parser.add_argument("--only", help="only the cases whose name contains this")
    args = parser.parse_args(argv)
    digests = all_digests(args.only)
    if args.write is not None:
        args.write.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
        print(f"{len(digests)} cases written to {args.write}")
        return 0
    before = json.loads(args.check.read_text())
    changed = [
        f"{name}: {', '.join(k for k in d if before.get(name, {}).get(k) != d[k])}"
        for name, d in digests.items()
        if before.get(name) != d
    ]
    missing = [name for name in before if name not in digests and (args.only is None or args.only in name)]
    for line in changed:
        print(f"changed  {line}")
    for name in missing:
        print(f"missing  {name}")
    if changed or missing:
        return 1
    print(f"{len(digests)} cases identical to the bit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
