"""Inter-token latency (des/engine/itl.py, des/metrics/itl.py): every gap between tokens,
counted exactly, for every scheduler.

The gaps of a request partition the time from its first token to its last, one gap per
step it emits in after the first: so over a drained run the gaps' weighted sum is the sum
of ``finish - first_token`` over the completed requests, exactly, whatever preemption,
starvation, speculation or a KV transfer did, and without speculation there is one gap
per token after the first.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import des
from des.engine.itl import ItlLog
from des.metrics.itl import itl_metrics, weighted_percentiles
from des.metrics.result import build_result, gap_logs
from des.simulation import build, run_until, stop_event
from tests.test_disaggregated import scenario as pd_scenario

POISSON = {
    "name": "itl",
    "seed": 3,
    "horizon": {"num_requests": 300, "drain": True},
    "workload": {
        "arrival": {"process": "poisson", "rate": 12.0},
        "prompt_tokens": {"dist": "lognormal", "mean": 400, "sigma": 0.6},
        "output_tokens": {"dist": "geometric", "mean": 60},
    },
}
PRESSURE = {"scheduler": {"kind": "continuous", "num_gpu_blocks_override": 300, "max_num_batched_tokens": 512}}
SPEC = {"scheduler": {"speculative": {"method": "ngram", "num_speculative_tokens": 3, "acceptance_rate": 0.6}}}
STATIC = {"scheduler": {"kind": "static", "max_batch_size": 8, "max_wait": 0.02, "release_on": "finish"}}
SPLIT = {"scheduler": {"kind": "disaggregated"}}


def run(changes: dict) -> tuple[pd.DataFrame, list[ItlLog], dict]:
    scn = des.load_scenario({**POISSON, **changes})
    env, cluster, procs = build(scn)
    run_until(env, stop_event(scn, env, cluster, procs))
    result = build_result(scn, cluster, env.now)
    return result.requests, gap_logs(cluster), result.summary


def totals(logs: list[ItlLog]) -> tuple[float, int]:
    """The weighted sum of every gap, and their count: the steps' shared gaps and the rest."""
    span, count = 0.0, 0
    for g in logs:
        _, gap, weight = g.ordinary()
        assert not g.weight or g.weight[0] == 0  # nobody emits twice before a scheduler's first step
        span += float((gap * weight).sum()) + sum(g.gap)
        count += int(weight.sum()) + len(g.gap)
    return span, count


@pytest.mark.parametrize(
    "changes", [{}, PRESSURE, SPEC, STATIC, SPLIT], ids=["plain", "pressure", "spec", "static", "split"]
)
def test_the_gaps_partition_every_request_from_its_first_token_to_its_last(changes):
    req, logs, summary = run(changes)
    done = req[req["status"] == "completed"]
    assert len(done) == len(req) == 300
    span, count = totals(logs)
    assert span == pytest.approx(float((done["finish_time"] - done["first_token_time"]).sum()), rel=1e-9)
    many = done[done["output_tokens"] > 1]
    if changes is SPEC:  # several tokens a step: fewer gaps than tokens
        assert len(many) <= count < int((many["output_tokens"] - 1).sum())
    else:
        assert count == int((many["output_tokens"] - 1).sum())
    if changes is PRESSURE:
        assert summary["preemptions"] > 0
    # the second token: every request with one has it, after its first, before or at its last
    second = many["second_token_time"]
    assert second.notna().all() and done.loc[done["output_tokens"] == 1, "second_token_time"].isna().all()
    assert (second > many["first_token_time"]).all() and (second <= many["finish_time"]).all()
    assert summary["second_token_mean"] == pytest.approx(float((second - many["first_token_time"]).mean()))


def test_without_speculation_the_mean_gap_is_the_token_weighted_tpot():
    req, _, summary = run(PRESSURE)
    many = req[(req["status"] == "completed") & (req["output_tokens"] > 1)]
    w = many["output_tokens"] - 1
    assert summary["itl_mean"] == pytest.approx(float((many["tpot"] * w).sum() / w.sum()), rel=1e-9)


def test_a_split_requests_second_token_waits_for_its_transfer(tmp_path):
    # one 4-token prompt, 3 tokens out, constant 1 s steps, a 1.5 s transfer: token 1 at 1,
    # the KV on the decode instance at 2.5, token 2 at 3.5, token 3 at 4.5
    sc = pd_scenario(tmp_path, [(0, 4, 3)])
    env, cluster, procs = build(sc)
    run_until(env, stop_event(sc, env, cluster, procs))
    result = build_result(sc, cluster, env.now)
    (log,) = [g for g in gap_logs(cluster) if len(g.time)]  # the decode instance's
    assert list(log.time) == [3.5] and list(log.gap) == [2.5]  # the second token's gap, on its own
    end, gap, weight = log.ordinary()
    assert list(end) == [4.5] and list(gap) == [1.0] and list(weight) == [1]  # the third's, shared
    assert result.requests.loc[0, "second_token_time"] == 3.5
    assert result.summary["second_token_p50"] == 2.5 and result.summary["itl_p99"] == 2.5


def test_weighted_percentiles_and_the_window():
    v, w = np.array([3.0, 1.0, 2.0]), np.array([1.0, 8.0, 1.0])
    assert weighted_percentiles(v, w, (50, 80, 90, 99)) == [1.0, 1.0, 2.0, 3.0]
    log = ItlLog()
    for end, weight in ((0.0, 0), (0.5, 5), (1.5, 3)):  # steps: 5 gaps of 0.5 end before the warm-up
        log.end.append(end)
        log.weight.append(weight)
    log.add(3.0, 2.0)  # one gap on its own
    out = itl_metrics([log], warmup=1.0, end=10.0)
    assert out["itl_mean"] == pytest.approx((3 * 1.0 + 2.0) / 4) and out["itl_p50"] == 1.0 and out["itl_p99"] == 2.0
    assert set(itl_metrics([ItlLog()], 0.0, 1.0).values()) == {None}
