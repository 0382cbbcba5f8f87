"""The fused-MoE block's factors (des/tools/moe_fit.py): the fit reproduces the RTX PRO 6000's
moe.csv within its own residual scatter, what it predicts is what the simulator computes point
by point, the catalog carries the fit, GPUs without MoE data are costed as before, and
``des calibrate`` fits moe.csv when a profile folder has one."""

from __future__ import annotations

import shutil
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from des import catalog
from des.catalog.efficiency import Efficiency
from des.cost.roofline import Engine, build_roofline
from des.tools import architectures as arch
from des.tools import moe_fit
from des.tools.calibrate import fit_profile, read_profile
from des.tools.costmodel import prefill_shape
from tests.helpers import ROOT
from tests.test_roofline import _shape as des_shape

FOLDER = ROOT / "data" / arch.MOE_PROFILED.folder
GPU = catalog.gpu(arch.MOE_PROFILED.gpu)
MODEL = catalog.model("qwen3-30b-a3b")


@pytest.fixture(scope="module")
def fit() -> moe_fit.MoeFit:
    return moe_fit.fit_folder(FOLDER, GPU, MODEL, GPU.efficiency)


def test_the_fit_reproduces_the_profile_within_its_scatter(fit):
    """Every fitted row lies within 3 residual sds (in log time) of the curve; the scatter is
    smaller than the GEMM uncertainty the GPU's dense factors carry, so the MoE term adds no
    error beyond what the run already draws for its GEMM group."""
    p = fit.points[fit.points["fitted"]]
    ln = np.log(p["measured"] / p["predicted"]).to_numpy()
    sd = fit.residual_sd
    assert len(p) == 38
    assert np.all(np.abs(ln) <= 3 * sd)
    assert abs(ln.mean()) < sd / 2  # no bias left
    assert sd < GPU.efficiency.uncertainty["gemm"]
    assert fit.median_abs_error <= sd and fit.max_abs_error <= 2 * sd


def test_l2_resident_rows_are_the_eight_expert_ones_and_run_faster_than_dram_allows(fit):
    """The rows left out are those whose experts' bf16 weights fit in the 128 MiB L2 (8 experts,
    75 MB; 16 are 151 MB): while their weights dominate (up to 128 tokens) they take 0.6-0.9 of
    the time the DRAM-streaming curve gives."""
    out = fit.points[~fit.points["fitted"]]
    assert set(out["activated_experts"]) == {8}
    assert 8 * 2 * MODEL.expert_params <= GPU.l2_bytes < 16 * 2 * MODEL.expert_params
    small = out[out["tokens"] <= 128]
    ratio = (small["measured"] / small["predicted"]).to_numpy()
    assert np.all(ratio < 0.9)


def test_the_catalog_carries_the_fit():
    """rtx-pro-6000 (profiled) and rtx5090 (same chip family and memory) carry the factors
    the fit gives, to the catalog's 4 digits; no other GPU has MoE factors of its own."""
    factors = arch.moe_factors()
    for name in catalog.gpu_names():
        e = catalog.gpu(name).efficiency
        if arch.takes_moe(name):
            for key, value in factors.items():
                assert getattr(e, key) == pytest.approx(value, rel=1e-3), (name, key)
        else:
            assert not e.moe_own and e.moe_fixed == 0.0, name
    assert {n for n in catalog.gpu_names() if arch.takes_moe(n)} == {"rtx-pro-6000-server", "rtx-pro-6000", "rtx5090"}


def test_what_the_fit_predicts_is_what_the_simulator_computes(fit):
    """Each row's prediction equals the ``moe`` term of the one-layer roofline's breakdown for a
    step of that many tokens whose routing touches that many experts (a routing table with the
    row's count at its token count), eager so no graph padding."""
    one = moe_fit.layer_model(MODEL)
    r = build_roofline(GPU, one, engine=Engine(enforce_eager=True))
    assert r.moe_split and r.moe_fixed_s == GPU.efficiency.moe_fixed
    for row in fit.points.itertuples():
        t, a = int(row.tokens), float(row.activated_experts)
        table = tuple([0.0] * t + [a])
        got = replace(r, moe_distinct=table).breakdown(prefill_shape(t))["moe"]
        assert got == pytest.approx(row.predicted, rel=1e-12), (t, a)


shapes = st.builds(
    des_shape,
    st.lists(st.tuples(st.integers(0, 8000), st.integers(1, 4096)), max_size=3),
    st.lists(st.integers(1, 16000), max_size=64),
).filter(lambda s: s.prefill_tokens + s.decode_tokens > 0)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(shape=shapes, tp=st.sampled_from([1, 2]), weights=st.sampled_from(["bf16", "fp16", "int4-awq", "fp8"]))
def test_step_time_is_the_breakdown_with_the_moe_term(shape, tp, weights):
    """The hot path (step_time) and the breakdown agree, for 16-bit experts at their own factors
    and for quantised experts, which run other kernels than the one profiled and stay in the
    GEMMs' roofline."""
    from des.catalog.precision import Precision

    r = build_roofline(GPU, MODEL, Precision(weights=weights), tp)
    b = r.breakdown(shape)
    if weights in ("bf16", "fp16"):
        assert r.moe_split and b["moe"] > r.moe_fixed_s
    else:
        assert not r.moe_split and "moe" not in b
    assert r.step_time(shape) == pytest.approx(r._combine(b["gpu"], b["cpu"], b["frontend"]), rel=1e-12)


def test_unset_moe_factors_keep_the_experts_in_the_gemm_roofline():
    """An efficiency without MoE factors builds the roofline des had before them: no MoE term,
    the experts' FLOPs in the GEMM coefficients; one with them moves those FLOPs out."""
    dense_only = Efficiency.model_validate(
        GPU.efficiency.model_dump(exclude={"moe_fixed", "moe_bandwidth", "moe_compute", "moe_knee"})
    )
    old = build_roofline(GPU, MODEL, efficiency=dense_only)
    new = build_roofline(GPU, MODEL)
    assert not old.moe_split and old.moe_s_per_token == old.moe_fixed_s == 0.0
    assert "moe" not in old.breakdown(prefill_shape(64))
    p_exp = MODEL.active_linear_params - MODEL.always_linear_params
    peak = GPU.sustained_flops("bf16")
    assert old.gemm_s_per_prefill_token - new.gemm_s_per_prefill_token == pytest.approx(
        2 * p_exp / (peak * GPU.efficiency.gemm_compute), rel=1e-9
    )
    assert GPU.efficiency.moe_compute is not None
    assert new.moe_s_per_token == pytest.approx(2 * p_exp / (peak * GPU.efficiency.moe_compute), rel=1e-12)
    assert new.moe_fixed_s == pytest.approx(MODEL.num_moe_layers * GPU.efficiency.moe_fixed)


def test_calibrate_fits_moe_csv_when_the_folder_has_one(tmp_path):
    """A profile folder with moe.csv gets a ``moe`` group whose factors are moe_fit's, and the
    groups fitted from the other files are those of the folder without it."""
    src = ROOT / "data" / "rtx4090-vllm-kernel-profile"
    for name in ("dense.csv", "per_sequence.csv", "attention.csv"):
        shutil.copy(src / name, tmp_path / name)
    without = fit_profile(read_profile(tmp_path), GPU, MODEL)
    shutil.copy(FOLDER / "moe.csv", tmp_path / "moe.csv")
    got = fit_profile(read_profile(tmp_path), GPU, MODEL)
    want = moe_fit.fit_folder(tmp_path, GPU, MODEL, without.efficiency)
    assert "moe" not in without.groups and len(got.groups["moe"].points) == 38
    for key, value in want.factors.items():
        assert getattr(got.efficiency, key) == value
    assert got.efficiency.model_dump(exclude=set(moe_fit.FACTORS)) == without.efficiency.model_dump(
        exclude=set(moe_fit.FACTORS)
    )
