"""Where a Vidur GEMM fit errs, by the regime of the shape (issue #31, item 7).

des's GEMM term of a layer is ``max(W, C) + k · min(W, C)`` (:mod:`des.cost.roofline`):
``W`` the time to stream the weights, ``C`` the time of the FLOPs at the fitted compute
factor, ``k`` the knee. :func:`des.tools.calibrate.fit_vidur` fits the three factors by
least squares in log time over every row of Vidur's profile, and the rows are mostly
small or mid-sized shapes; the worry is that they pull the compute factor below what
the large, compute-bound GEMMs reach. This module tells that apart:

- :func:`regime_errors`: the fit's relative error per regime of ``x = C / W`` (seconds
  over seconds, from the fit's own factors): ``latency`` (x < 0.3), ``ridge``
  (0.3 <= x < 3), ``compute`` (x >= 3), and ``large`` (every row of at least
  :data:`LARGE_TOKENS` tokens, whatever its x);
- :func:`compute_bound_factor`: the compute factor fitted to the compute-bound rows alone
  (x >= ``min_ratio``), the weight-bandwidth factor and knee held at the fit's. If the
  small rows pulled the compute factor down, this one would be higher.

They did not: the gap was the data source. vLLM's own bf16 GEMM kernels run faster than
Vidur's 2024 fp16 PyTorch ones, so the A100's and H100's GEMM factors are now fitted to
those (:mod:`des.tools.gemm_profile`); this module still reads the Vidur fits (the A40's
GEMM factors come from one).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from des.tools.calibrate import Fit, _Predictor
from des.tools.vidur import VidurProfile

#: Rows of at least this many tokens are the large (prefill-sized) GEMMs.
LARGE_TOKENS = 2048
#: Regimes of x = C / W (dimensionless): (name, lowest x included, highest x excluded).
REGIMES = (("latency", 0.0, 0.3), ("ridge", 0.3, 3.0), ("compute", 3.0, np.inf))


def gemm_terms(fit: Fit) -> pd.DataFrame:
    """The GEMM points of a Vidur fit with their weight time ``W`` and compute time ``C``
    (seconds, one layer on one of tp GPUs, at the fit's factors) and ``x = C / W``."""
    if not isinstance(fit.profile, VidurProfile):
        raise ValueError("gemm_terms reads a Vidur fit (fit_vidur)")
    pts = fit.groups["gemm"].points.copy()
    w = np.empty(len(pts))
    c = np.empty(len(pts))
    for (model, tp), part in pts.groupby(["model", "tp"], sort=True):
        r = _Predictor(fit.gpu, fit.profile.models[str(model)], int(tp)).build(fit.efficiency)
        idx = pts.index.get_indexer(part.index)
        w[idx] = r.gemm_weight_s
        c[idx] = r.gemm_s_per_prefill_token * part["tokens"].to_numpy(float)
    return pts.assign(weight_s=w, compute_s=c, x=c / w)


def _summary(name: str, err: np.ndarray) -> dict[str, Any]:
    return {
        "regime": name,
        "points": len(err),
        "median_pct": 100 * float(np.median(err)),
        "median_abs_pct": 100 * float(np.median(np.abs(err))),
        "p95_abs_pct": 100 * float(np.quantile(np.abs(err), 0.95)),
    }


def regime_errors(fit: Fit) -> list[dict[str, Any]]:
    """Per regime of :data:`REGIMES` and for the large rows: points, median signed relative
    error (predicted / measured - 1, %), median and 95th percentile of its absolute value (%)."""
    pts = gemm_terms(fit)
    err = (pts["predicted"] / pts["measured"] - 1.0).to_numpy()
    x = pts["x"].to_numpy()
    out = [_summary(name, err[(x >= lo) & (x < hi)]) for name, lo, hi in REGIMES if ((x >= lo) & (x < hi)).any()]
    large = (pts["tokens"] >= LARGE_TOKENS).to_numpy()
    out.append(_summary(f"large (>= {LARGE_TOKENS} tokens)", err[large]))
    return out


def compute_bound_factor(fit: Fit, min_ratio: float = 10.0) -> float:
    """The compute factor (share of the sustained tensor peak, dimensionless) that fits the
    rows with ``C >= min_ratio · W`` alone, by least squares in log time, the weight
    bandwidth and knee held at ``fit``'s."""
    pts = gemm_terms(fit)
    cb = pts[pts["x"] >= min_ratio]
    if cb.empty:
        raise ValueError(f"no row with C >= {min_ratio} W")
    g = fit.efficiency.gemm_compute
    w = cb["weight_s"].to_numpy()
    c1 = cb["compute_s"].to_numpy() * g  # the compute time at factor 1
    k = fit.efficiency.gemm_knee
    y = np.log(cb["measured"].to_numpy())

    def residual(v: np.ndarray) -> np.ndarray:
        c = c1 / v[0]
        return np.log(np.maximum(w, c) + k * np.minimum(w, c)) - y

    res = least_squares(residual, np.array([g]), bounds=([0.05], [1.0]), method="trf")
    return float(res.x[0])
