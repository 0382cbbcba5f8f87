"""Issue #31, item 7: is the Ampere (and Hopper) GEMM compute factor pulled below what the
large GEMMs reach by the many small rows of Vidur's profiles? It is not: the factor fitted
to the compute-bound rows alone is the whole fit's, and the large rows are reproduced
without bias within the bounds below (des/tools/gemm_shapes.py)."""

from __future__ import annotations

import numpy as np
import pytest

from des import catalog
from des.tools.calibrate import Fit, fit_vidur
from des.tools.gemm_shapes import LARGE_TOKENS, compute_bound_factor, gemm_terms, regime_errors
from des.tools.vidur import GEMM_OPS, read_vidur
from tests.helpers import ROOT

VIDUR = ROOT / "data" / "vidur-kernel-profiles" / "compute"
GPUS = {"a100-80gb": "a100", "a40": "a40", "h100-80gb": "h100"}
#: Per GPU, bounds on the large rows' (>= 2048 tokens) relative error, in %: |median|,
#: median of |error|, 95th percentile of |error| (measured when written: A100 -0.5, 2.1,
#: 5.6; A40 -1.2, 2.7, 7.0; H100 +1.7, 3.2, 10.5).
LARGE_BOUNDS = {"a100-80gb": (1.5, 3.0, 7.0), "a40": (2.0, 3.5, 8.5), "h100-80gb": (2.5, 4.0, 12.0)}


@pytest.fixture(scope="module")
def fits() -> dict[str, Fit]:
    out = {}
    for name, folder in GPUS.items():
        gpu = catalog.gpu(name)
        out[name] = fit_vidur(read_vidur(VIDUR / folder), gpu, gpu.efficiency)
    return out


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_compute_factor_is_what_the_compute_bound_rows_alone_give(fits, gpu):
    fit = fits[gpu]
    alone = compute_bound_factor(fit, min_ratio=10.0)
    assert alone == pytest.approx(fit.efficiency.gemm_compute, rel=0.02), (gpu, alone, fit.efficiency.gemm_compute)
    # the catalog ships that fit's factor where Vidur is the GEMM source (the A40); the A100's
    # and H100's are fitted to vLLM's own GEMM kernels (tests/test_gemm_profile.py), higher
    shipped = catalog.gpu(gpu).efficiency.gemm_compute
    if gpu == "a40":
        assert shipped == pytest.approx(fit.efficiency.gemm_compute, rel=1e-3)
    else:
        assert shipped > 1.05 * fit.efficiency.gemm_compute and fit.efficiency.gemm_fixed == 0.0


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_large_gemms_are_reproduced_without_bias(fits, gpu):
    large = next(r for r in regime_errors(fits[gpu]) if r["regime"].startswith("large"))
    bias, typical, worst = LARGE_BOUNDS[gpu]
    assert large["points"] > 1000
    assert abs(large["median_pct"]) < bias, large
    assert large["median_abs_pct"] < typical, large
    assert large["p95_abs_pct"] < worst, large


def test_regimes_split_the_rows_by_compute_over_weight_time(fits):
    fit = fits["a100-80gb"]
    pts = gemm_terms(fit)
    rows = regime_errors(fit)
    assert sum(r["points"] for r in rows if not r["regime"].startswith("large")) == len(pts)
    # Llama-3-8B at tp 1: 1 token streams weights (x << 1), 16384 tokens are compute-bound
    l3 = pts[(pts.model == "meta-llama/Meta-Llama-3-8B") & (pts.tp == 1)].set_index("tokens")
    assert l3.loc[1, "x"] < 0.01 < 10 < l3.loc[16384, "x"]
    assert l3.loc[16384, "weight_s"] == pytest.approx(l3.loc[1, "weight_s"])  # one set of weights


def test_vidurs_a100_gemms_reach_three_quarters_of_the_peak():
    """What Vidur measured on the A100 (2·params·tokens/tp FLOPs of the layer's four GEMMs
    over their time): the large shapes run at 70-77 % of the 312 TFLOP/s fp16 peak, which
    is where des's fitted factor puts them, not at 79 %."""
    p = read_vidur(VIDUR / "a100")
    big = p.rows[p.rows.tokens >= LARGE_TOKENS]
    params = np.array([p.models[m].layer_linear_params for m in big.model])
    share = 2 * params * big.tokens.to_numpy() / big.tp.to_numpy() / big[list(GEMM_OPS)].sum(axis=1).to_numpy()
    share = share / catalog.gpu("a100-80gb").sustained_flops("fp16")
    assert 0.70 < float(np.median(share)) < 0.77
    assert float(np.quantile(share, 0.95)) < 0.79
