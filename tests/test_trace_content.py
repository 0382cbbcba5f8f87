"""What a replayed trace's rows share: block hashes, prefix groups and conversations become
the content identities prefix caching reuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import des
from tests.helpers import des_cli


def replay(path: Path, fmt: str, **extra) -> des.Result:
    arrival = {"process": "trace", "path": str(path), "format": fmt}
    return des.simulate(des.load_scenario({"name": "t", "workload": {"arrival": arrival, **extra}}))


def test_mooncake_rows_sharing_hash_ids_share_their_blocks(tmp_path):
    rows = [  # 10 s apart: each request is done before the next arrives
        {"timestamp": 0, "input_length": 1500, "output_length": 4, "hash_ids": [1, 2, 3]},
        {"timestamp": 10_000, "input_length": 1200, "output_length": 4, "hash_ids": [1, 2, 9]},
        {"timestamp": 20_000, "input_length": 700, "output_length": 4, "hash_ids": [5, 6]},
        {"timestamp": 30_000, "input_length": 1500, "output_length": 4, "hash_ids": [1, 2, 3]},
    ]
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = replay(path, "mooncake")
    # the first two share blocks 1 and 2 (1024 tokens); the last repeats the first, whose
    # 1500 tokens hold 93 full blocks of 16 but the hit stops at 1499 tokens (93 blocks)
    assert r.requests["cached_tokens"].tolist() == [0, 1024, 0, 16 * (1499 // 16)]


def test_a_chat_turn_reuses_its_history_and_a_group_its_prefix(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text(
        "arrival_time,prompt_tokens,output_tokens,conversation_id,prefix_group,prefix_tokens\n"
        "0,400,100,7,0,256\n"  # turn 1 of chat 7: prefix 0, then 144 of its own
        "10,600,50,7,0,256\n"  # turn 2: the 500 tokens of turn 1 and its answer, then 100 new
        "20,300,20,,0,256\n"  # another request behind prefix 0
        "30,450,20,7,0,256\n"  # turn 3 cut short: 450 < 650 of history, shares its head
    )
    r = replay(path, "csv")
    req = r.requests
    assert req["turn"].tolist() == [1, 2, 0, 3] and req["conversation_id"].tolist() == [7, 7, -1, 7]
    assert (req["prefix_group"] == 0).all()
    assert req["cached_tokens"].tolist() == [0, 16 * (499 // 16), 256, 16 * (449 // 16)]


def test_a_prefix_group_needs_a_prefix_length(tmp_path):
    path = tmp_path / "g.csv"
    path.write_text("arrival_time,prompt_tokens,output_tokens,prefix_group\n0,100,5,0\n1,100,5,0\n")
    with pytest.raises(des.ScenarioError) as err:
        replay(path, "csv")
    assert err.value.problems[0][0] == "workload.shared_prefix"
    r = replay(path, "csv", shared_prefix={"tokens": 64})
    assert r.requests["cached_tokens"].tolist() == [0, 64]


def test_a_shared_prefix_applies_to_a_trace_only_through_its_groups(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("arrival_time,prompt_tokens,output_tokens\n0,100,5\n")
    with pytest.raises(des.ScenarioError) as err:
        replay(path, "csv", shared_prefix={"tokens": 64})
    path_, message = err.value.problems[0]
    assert path_ == "workload.shared_prefix" and "prefix_group" in message


def test_the_run_summary_reports_the_hits_of_a_mooncake_replay(tmp_path):
    sample = Path(__file__).parent.parent / "scenarios" / "traces" / "mooncake-sample.jsonl"
    arrival = f"workload.arrival={{process: trace, path: {sample}, format: mooncake}}"
    run = des_cli(
        "run", "--set", arrival, "--set", "horizon.duration=null", "--set", "warmup=0", "--out", str(tmp_path / "o")
    )
    assert run.returncode == 0, run.stderr
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert 0 < s["prefix_cache_hit_tokens"] == s["prompt_tokens_requested"] - s["prompt_tokens_computed"]
    line = next(x for x in run.stdout.splitlines() if x.startswith("prefix cache"))
    assert f"{s['prompt_tokens_computed']:,} computed of {s['prompt_tokens_requested']:,} requested" in line
