"""Step times fitted per architecture: Vidur's profiles, clocks in the GPU spec, and every
catalog GPU's factors pinned to the fits and rules they come from.

Vidur's A100, H100 and A40 profiles (data/vidur-kernel-profiles/) must be read as Vidur's
source means them, reproduced within the errors stated per group, and refitting them must
give the factors the catalog ships (fitted, carried over or transferred), as
tests/test_calibrate.py does for the RTX 4090.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from des import catalog
from des.catalog.calibration import read_calibration
from des.catalog.efficiency import Efficiency
from des.catalog.specs import ClockSpec, GPUSpec
from des.cost.base import BatchShape
from des.cost.roofline import Engine, build_roofline
from des.tools import architectures as arch
from des.tools.calibrate import VIDUR_GROUPS, Fit, _Predictor, model_table, residual_sd
from des.tools.vidur import read_vidur
from tests.helpers import ROOT

DATA = ROOT / "data"
VIDUR = DATA / "vidur-kernel-profiles" / "compute"
PROVENANCE = {"source", "provenance", "basis", "uncertainty"}

#: The errors reports/calibration.md states per GPU and group: median and max absolute
#: error of predicted against measured kernel time (fractions). The A100's and H100's GEMMs
#: are fitted to vLLM's GEMM kernels (aiconfigurator, des/tools/gemm_profile.py: one kernel
#: per point, 7.6 % / 37 % and 5.6 % / 51 % when written), their element-wise kernels to Vidur's.
STATED = {
    "a100-80gb": {"gemm": (0.085, 0.42), "elementwise": (0.04, 0.65)},
    "a40": {"gemm": (0.045, 0.40), "elementwise": (0.03, 0.60)},
    "h100-80gb": {"gemm": (0.065, 0.56), "elementwise": (0.045, 0.65)},
}
#: The GPUs whose GEMM group is vLLM's GEMM table, not their Vidur profile.
GEMM_TABLE = {g.gpu for g in arch.GEMM_PROFILED}


@pytest.fixture(scope="module")
def fits() -> dict[str, Fit]:
    return arch.fit_all(DATA)


# -- reading Vidur's profiles as Vidur's source means them ----------------------------------


def test_vidur_profile_is_read_per_model_and_tp():
    p = read_vidur(VIDUR / "a100")
    assert p.gpu == "a100" and len(p.models) == 8
    assert sorted(p.rows["tp"].unique()) == [1, 2, 4, 8]
    assert not p.rows.duplicated(["model", "tp", "tokens"]).any()  # repeated points are averaged
    phi = p.models["microsoft/phi-2"]
    assert not phi.gated_mlp and sorted(p.rows.loc[p.rows.model == "microsoft/phi-2", "tp"].unique()) == [1]
    # phi-2 has no post-attention norm: its element-wise sum is not formed
    assert p.rows.loc[p.rows.model == "microsoft/phi-2", "post_attention_layernorm"].isna().all()
    # milliseconds in the file, seconds here: Llama-3-8B's gate+up projection at 32768 tokens, tp 1
    raw = pd.read_csv(VIDUR / "a100" / "meta-llama" / "Meta-Llama-3-8B" / "mlp.csv")
    rows = raw[(raw.num_tokens == 32768) & (raw.num_tensor_parallel_workers == 1)]
    assert len(rows) == 2  # profiled twice: read as the mean
    got = p.rows[(p.rows.model == "meta-llama/Meta-Llama-3-8B") & (p.rows.tp == 1) & (p.rows.tokens == 32768)]
    assert got["mlp_up_proj"].iloc[0] == pytest.approx(rows["time_stats.mlp_up_proj.median"].mean() * 1e-3)


def test_vidur_shapes_give_the_catalogs_gemm_weights():
    """attn_pre_proj is the fused QKV and mlp_up_proj gate and up together (Vidur's
    mlp_impl.py), so a layer's four GEMMs hold exactly the catalog model's linear weights."""
    llama3 = read_vidur(VIDUR / "a100").models["meta-llama/Meta-Llama-3-8B"]
    assert llama3.layer_linear_params == catalog.model("llama-3.1-8b").layer_linear_params
    # the four GEMMs' FLOPs at 1 token scale with those weights: measured time at 4096 tokens
    # (compute-bound) per weight is alike across models within 20 %
    p = read_vidur(VIDUR / "a100")
    big = p.rows[(p.rows.tokens == 4096) & (p.rows.tp == 1)].set_index("model")
    per_param = {
        m: big.loc[m, ["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"]].sum()
        / p.models[m].layer_linear_params
        for m in big.index
        if p.models[m].hidden_size >= 4096
    }
    values = np.array(list(per_param.values()))
    assert values.max() / values.min() < 1.2


def test_ungated_mlp_has_two_matrices():
    base = catalog.model("llama-3.1-8b")
    ungated = base.model_copy(update={"gated_mlp": False})
    h, i = base.hidden_size, base.intermediate_size
    assert base.layer_linear_params - ungated.layer_linear_params == h * i


# -- the fits -------------------------------------------------------------------------------


@pytest.mark.parametrize("gpu", sorted(STATED))
def test_vidur_fit_reproduces_the_profile_within_the_stated_errors(fits, gpu):
    fit = fits[gpu]
    assert tuple(fit.groups) == VIDUR_GROUPS
    for group, (median, worst) in STATED[gpu].items():
        g = fit.groups[group]
        assert g.median_abs_error < median, (gpu, group, g.median_abs_error)
        assert g.max_abs_error < worst, (gpu, group, g.max_abs_error)
    # every model is fitted, none much worse than the rest
    rows = pd.DataFrame(model_table(fit))
    gemm_models = set(rows.loc[rows.group == "gemm", "model"])
    if gpu in GEMM_TABLE:  # vLLM's GEMM table: the shapes of catalog models
        assert len(gemm_models) >= 5 and gemm_models <= set(catalog.model_names())
    else:
        assert gemm_models == set(fit.profile.models)
    assert rows["median_abs_pct"].max() < 10


def test_what_a_vidur_fit_predicts_is_what_the_simulator_computes(fits):
    """A GEMM point of model m at tp t is the roofline's GEMM term of one layer on one of t GPUs
    (the A40's: the H100's GEMMs are fitted to vLLM's table, tests/test_gemm_profile.py)."""
    a40 = fits["a40"]
    for _, row in a40.groups["gemm"].points.iloc[::97].iterrows():
        model = a40.profile.models[row.model].model_copy(update={"num_layers": 1})
        r = build_roofline(a40.gpu, model, tp=int(row.tp), efficiency=a40.efficiency, engine=Engine(True))
        got = r.breakdown(BatchShape(num_seqs=1, prefill_tokens=int(row.tokens), num_emitting=0))["gemm"]
        assert got == pytest.approx(row.predicted, rel=1e-12)
    fit = fits["h100-80gb"]
    el = fit.groups["elementwise"].points
    for _, row in el.iloc[::89].iterrows():
        model = fit.profile.models[row.model].model_copy(update={"num_layers": 1})
        r = build_roofline(fit.gpu, model, tp=int(row.tp), efficiency=fit.efficiency, engine=Engine(True))
        # the per-layer part of the simulator's element-wise term (the rest is the per-step kernels')
        whole = r.breakdown(BatchShape(num_seqs=1, prefill_tokens=int(row.tokens), num_emitting=0))["elementwise"]
        per_step = _Predictor(fit.gpu, model, int(row.tp)).elementwise(r, np.array([row.tokens]), np.array([False]))
        assert whole == pytest.approx(row.predicted + per_step[0], rel=1e-12)


def test_uncertainty_is_the_rms_of_the_log_residuals(fits):
    fit = fits["a100-80gb"]
    sd = residual_sd(fit.groups)
    ln = np.log(fit.groups["gemm"].points["measured"] / fit.groups["gemm"].points["predicted"])
    assert sd["gemm"] == pytest.approx(math.sqrt(float(np.mean(ln**2))), rel=1e-3)
    assert fit.efficiency.uncertainty["gemm"] == sd["gemm"]


# -- drift: the catalog holds what the fits and rules give -----------------------------------


def _same(a: Efficiency, b: Efficiency, where: str) -> None:
    da, db = a.model_dump(exclude=PROVENANCE), b.model_dump(exclude=PROVENANCE)
    for key, value in da.items():
        if value is None or db[key] is None:
            assert value == db[key], (where, key)
        else:
            # the catalog holds 4 significant digits: a refit on another platform may differ in the last
            assert value == pytest.approx(db[key], rel=1e-3), (where, key, value, db[key])
    assert a.uncertainty.keys() == b.uncertainty.keys(), where
    for key, value in a.uncertainty.items():
        assert value == pytest.approx(b.uncertainty[key], rel=1e-3), (where, key)
    assert (a.provenance, a.basis) == (b.provenance, b.basis), where


def test_every_catalog_gpu_carries_the_factors_its_rule_gives(fits):
    derived = arch.catalog_efficiencies(fits)
    assert set(derived) == set(catalog.gpu_names())
    for name, eff in derived.items():
        _same(eff, catalog.gpu(name).efficiency, name)


def test_provenance_follows_the_architecture_and_memory():
    """A GPU is fitted when a GPU of its architecture with its memory type was profiled: the
    B200 (Blackwell, HBM) is not, though the RTX PRO 6000 (Blackwell, GDDR7) is."""
    fitted = {(p.architecture, catalog.gpu(p.gpu).memory_type) for p in arch.PROFILED}
    assert ("blackwell", "gddr") in fitted and ("blackwell", "hbm") not in fitted
    for name in catalog.gpu_names():
        gpu = catalog.gpu(name)
        e = gpu.efficiency
        assert e.provenance == ("fitted" if (gpu.architecture, gpu.memory_type) in fitted else "transferred"), name
        assert set(e.uncertainty) == {"gemm", "attention", "elementwise"}, name
        assert e.basis and e.source, name
        # compute factors are shares of the peak at the sustained clock: never above it
        assert e.gemm_compute <= 1 and (e.attention_compute or 0) <= 1, name


def test_transfer_is_the_geometric_mean_of_the_profiled_gpus_of_a_memory_type(fits):
    # no catalog GPU takes the GDDR class since Blackwell's GDDR7 cards are fitted: the rule itself
    b200, pro = catalog.gpu("b200").efficiency, arch.transfer(fits, "gddr")
    a100, h100 = fits["a100-80gb"].efficiency, fits["h100-80gb"].efficiency
    ada, a40 = fits["rtx4090"].efficiency, fits["a40"].efficiency
    for factor in ("weight_bandwidth", "gemm_compute", "gemm_knee", "gemm_fixed", "elementwise_bandwidth"):
        hbm = math.sqrt(getattr(a100, factor) * getattr(h100, factor))
        gddr = math.sqrt(getattr(ada, factor) * getattr(a40, factor))
        assert getattr(b200, factor) == pytest.approx(hbm, rel=1e-3), factor
        assert getattr(pro, factor) == pytest.approx(gddr, rel=1e-3), factor
    # carried over: a KV-streaming fraction moves with the weight-streaming one
    assert b200.kv_bandwidth / ada.kv_bandwidth == pytest.approx(b200.weight_bandwidth / ada.weight_bandwidth, rel=2e-3)

    # the spread pools the two memory classes, a pair each (n - 1 = 1 degree of freedom per pair)
    def pair_var(a: Efficiency, b: Efficiency, factor: str) -> float:
        return math.log(getattr(a, factor) / getattr(b, factor)) ** 2 / 2

    var = [(pair_var(ada, a40, f) + pair_var(a100, h100, f)) / 2 for f in ("weight_bandwidth", "gemm_compute")]
    assert arch.spreads(fits)["gemm"] == pytest.approx(math.sqrt(sum(var) / 2), rel=1e-3)
    # the split by memory type is what the element-wise data support: under half the spread of
    # one class; the GEMM factors (the HBM pair's from vLLM's kernels) do not separate the classes
    within, across = arch.spreads(fits), arch.spreads(fits, by_memory=False)
    assert within["elementwise"] < 0.5 * across["elementwise"]
    assert within["gemm"] == pytest.approx(across["gemm"], rel=0.2)
    # a transferred group is less certain than the fits it comes from
    assert b200.uncertainty["gemm"] > max(a100.uncertainty["gemm"], h100.uncertainty["gemm"])
    # B200's attention is Ada's carried over and transferred: less certain than Ada's fit
    assert b200.uncertainty["attention"] > catalog.gpu("rtx4090").efficiency.uncertainty["attention"]


# -- clocks ---------------------------------------------------------------------------------


def test_the_4090s_effective_peaks_are_unchanged_by_its_sustained_clock():
    """Before clocks were in the spec, the 4090 carried gemm_compute 1.002 and attention_compute
    0.8117 of the spec-sheet 165.2 TFLOP/s; the products stay the same to 4 significant digits."""
    g = catalog.gpu("rtx4090")
    assert g.clocks is not None and g.clocks.sustained_ratio == pytest.approx(2730 / 2520)
    peak = g.sustained_flops("bf16")
    e = g.efficiency
    assert f"{e.gemm_compute * peak:.4g}" == f"{1.002 * 165.2e12:.4g}"
    assert f"{(e.attention_compute or 0) * peak:.4g}" == f"{0.8117 * 165.2e12:.4g}"
    assert g.peak_flops("bf16") == 165.2e12  # the spec sheet's figure stays as printed


def test_clocks_scale_only_the_compute_peak():
    g = catalog.gpu("a100-80gb")
    fast = g.model_copy(update={"clocks": ClockSpec(boost_mhz=1410, sustained_mhz=1410 * 1.1)})
    m = catalog.model("llama-3.1-8b")
    r, rf = build_roofline(g, m), build_roofline(fast, m)
    assert rf.gemm_s_per_prefill_token == pytest.approx(r.gemm_s_per_prefill_token / 1.1)
    assert rf.gemm_weight_s == r.gemm_weight_s and rf.dec_s_per_context == r.dec_s_per_context


def test_clock_spec_is_validated():
    with pytest.raises(ValueError, match="base_mhz"):
        ClockSpec(base_mhz=3000, boost_mhz=2520)
    spec = catalog.gpu("rtx4090").model_dump()
    spec["clocks"] = {"boost_mhz": 2520, "turbo": 1}
    with pytest.raises(ValueError, match="turbo"):
        GPUSpec.model_validate(spec)


# -- des calibrate on a Vidur folder ---------------------------------------------------------


def test_calibrate_command_fits_a_vidur_folder(tmp_path):
    out = tmp_path / "a40.yaml"
    cmd = [sys.executable, "-m", "des.cli", "calibrate", str(VIDUR / "a40"), "--gpu", "a40", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for word in ("gemm", "elementwise", "per model", "meta-llama/Llama-2-70b-hf", "median |err|", "uncertainty"):
        assert word in done.stdout, word
    cal = read_calibration(out)
    shipped = catalog.gpu("a40").efficiency
    for key in ("weight_bandwidth", "gemm_compute", "gemm_knee", "elementwise_bandwidth"):
        assert getattr(cal.efficiency, key) == pytest.approx(getattr(shipped, key), rel=1e-3), key
    # the factors the profile cannot fit are the catalog's own
    assert cal.efficiency.kv_bandwidth == shipped.kv_bandwidth
    assert set(cal.fit) == set(VIDUR_GROUPS) and cal.profile["format"] == "vidur"
    assert out.with_suffix(".png").stat().st_size > 30_000


def test_readme_states_the_fits_as_they_are(fits):
    """The README's table of fitted GPUs quotes each fit's median GEMM and element-wise error
    and the transferred GPUs' uncertainty as the fits and the catalog give them."""
    text = (ROOT / "README.md").read_text()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines() if " | fitted | " in line}
    stated = {"a100-80gb": "a100-80gb, a100-40gb", "a40": "a40", "h100-80gb": "h100-80gb, h200, h20"}
    for gpu, key in stated.items():
        row = next(v for k, v in rows.items() if k.startswith(key))
        g = fits[gpu].groups
        assert f"GEMMs {100 * g['gemm'].median_abs_error:.1f} %" in row, row
        assert f"element-wise {100 * g['elementwise'].median_abs_error:.1f} %" in row, row
    ada = next(v for k, v in rows.items() if k.startswith("rtx4090"))
    assert f"GEMMs {100 * fits['rtx4090'].groups['gemm'].median_abs_error:.1f} %" in ada
    pro = next(v for k, v in rows.items() if k.startswith("rtx-pro-6000-server"))
    g = fits["rtx-pro-6000-server"].groups
    assert f"GEMMs {100 * g['gemm'].median_abs_error:.1f} %" in pro, pro
    assert f"element-wise {100 * g['elementwise'].median_abs_error:.1f} %" in pro, pro
    for gpu in ("b200",):
        u = catalog.gpu(gpu).efficiency.uncertainty
        row = next(line for line in text.splitlines() if line.startswith(f"| {gpu}") and "transferred" in line)
        assert f"sd {u['gemm']:.2f} (GEMMs), {u['attention']:.2f} (attention)" in row, row
