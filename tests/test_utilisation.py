"""Utilisation a planner can use: the work of each step, its share of the roofline, token
budget, batch slots and KV cache, checked by hand and against load."""

from __future__ import annotations

import numpy as np
import pytest

import des
from des import catalog
from des.catalog.precision import Precision
from des.cost.base import BatchShape
from des.cost.work import step_work
from des.metrics.utilisation import weighted_quantile

MODEL = catalog.model("qwen2.5-7b")
GPU = catalog.gpu("rtx4090")


def test_step_work_counts_flops_and_bytes_from_the_architecture():
    w = step_work(GPU, MODEL, Precision(), tp=2)
    L, h, q = MODEL.num_layers, MODEL.hidden_size, MODEL.q_dim
    layer = h * q + 2 * h * MODEL.kv_dim + q * h + 3 * h * MODEL.intermediate_size
    shape = BatchShape()
    shape.add_chunk(100, 50, True)  # 50 new tokens after 100
    shape.add_decode(300)
    t = 51
    flops = 2 * L * layer * t + 4 * L * q * (50 * (100 + 51 / 2) + 301) + 2 * h * MODEL.vocab_size * 2
    kv = MODEL.kv_bytes_per_token(2)
    nbytes = L * layer * 2 + h * MODEL.vocab_size * 2 + kv * (150 + 301 + t)
    assert w.flops(shape) == pytest.approx(flops, rel=1e-12)
    assert w.hbm_bytes(shape) == pytest.approx(nbytes, rel=1e-12)
    assert w.peak_flops == 2 * GPU.peak_flops("bf16") and w.peak_bandwidth == 2 * GPU.memory_bandwidth


def test_steps_carry_their_work_and_the_summary_averages_it_over_busy_time(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_time,prompt_tokens,output_tokens\n0,64,3\n0,32,2\n")
    sc = des.load_scenario(
        {
            "workload": {"arrival": {"process": "trace", "path": str(path)}},
            "cost_model": {"kind": "constant", "step_time": 1.0},
            "scheduler": {"kind": "continuous", "max_num_seqs": 4, "max_num_batched_tokens": 128, "block_size": 16},
        }
    )
    r = des.simulate(sc)
    w = step_work(GPU, MODEL, Precision())
    first = BatchShape()
    first.add_chunk(0, 64, True)
    first.add_chunk(0, 32, True)
    assert r.steps.loc[0, "flops"] == w.flops(first) and r.steps.loc[0, "hbm_bytes"] == w.hbm_bytes(first)
    s, steps = r.summary, r.steps
    compute = steps["flops"] / w.peak_flops  # 1 s steps
    bandwidth = steps["hbm_bytes"] / w.peak_bandwidth
    assert s["compute_utilization"] == pytest.approx(compute.mean())
    assert s["bandwidth_utilization"] == pytest.approx(bandwidth.mean())
    assert s["roofline_share"] == pytest.approx(np.maximum(compute, bandwidth).mean())
    # steps of 96, 2 and 1 tokens against a budget of 128; 2, 2, 1 sequences of 4
    assert steps["prefill_tokens"].tolist() == [96, 0, 0] and steps["decode_tokens"].tolist() == [0, 2, 1]
    assert s["token_budget_use"] == pytest.approx((96 + 2 + 1) / 3 / 128)
    assert s["batch_occupancy"] == pytest.approx((2 + 2 + 1) / 3 / 4) == s["slot_utilization"]
    blocks = sc.memory_plan().num_blocks
    # blocks of 16 once each step's tokens are placed: 64 + 32; 65 + 33; 66
    assert steps["kv_blocks"].tolist() == [6, 8, 5]
    assert s["kv_use_mean"] == pytest.approx(19 / 3 / blocks)
    assert s["kv_use_peak"] == pytest.approx(8 / blocks) and s["kv_use_p99"] == pytest.approx(8 / blocks)


def test_static_batches_have_no_token_budget():
    sc = des.load_scenario("scenarios/qwen7b-4090-static.yaml", ["horizon.duration=60", "warmup=10"])
    s = des.simulate(sc).summary
    assert s["token_budget_use"] is None and 0 < s["batch_occupancy"] <= 1


def test_utilisation_grows_with_load_where_gpu_busy_saturates_early():
    def at(rate: float) -> dict:
        # 128 sequences: at 12 req/s they fill more than half their slots (vllm serve's 256 would not)
        sets = ["horizon.duration=120", "warmup=20", f"workload.arrival.rate={rate}", "scheduler.max_num_seqs=128"]
        sc = des.load_scenario(None, sets)
        return des.simulate(sc).summary

    low, mid, high = at(1), at(6), at(12)
    assert low["gpu_busy_fraction"] > 0.9 and mid["gpu_busy_fraction"] > 0.99  # busy says little
    for key in ("compute_utilization", "batch_occupancy", "kv_use_mean", "token_budget_use"):
        assert low[key] < mid[key] < high[key], key
    assert low["batch_occupancy"] < 0.05 and high["batch_occupancy"] > 0.5


def test_weighted_quantile():
    v, w = np.array([3.0, 1.0, 2.0]), np.array([1.0, 1.0, 8.0])
    assert weighted_quantile(v, w, 0.5) == 2.0 and weighted_quantile(v, w, 0.99) == 3.0
    assert weighted_quantile(v, w, 0.05) == 1.0
