"""Fit the fused-MoE block's efficiency factors to a kernel profile: ``moe.csv``.

LLMServingSim's profiler times vLLM's whole sparse MLP block of one layer (``tokens,
activated_experts,time_us``; for Qwen3-MoE the ``Qwen3MoeSparseMoeBlock``: the router's
GEMM, the top-k softmax, ``moe_align_block_size``, the two grouped GEMMs of the Triton
``fused_moe_kernel`` with SiLU-and-mul between them, and the weighted sum), forcing the
routing so that exactly ``activated_experts`` distinct experts receive the ``tokens ×
top_k`` rows, evenly (``profiler/core/hooks/moe_hook.py``: expert ``(token · k + j) mod A``).

The roofline costs the block per sparse layer as (:class:`~des.catalog.efficiency.Efficiency`)

    ``moe_fixed + max(W, C) + moe_knee · min(W, C)``  (seconds)

with ``W = A · expert_bytes / (B · moe_bandwidth)`` (the activated experts' weights
streamed once) and ``C = T · k · 2 · expert_params / (F · moe_compute)`` (the routed rows'
FLOPs), ``B`` the spec sheet's bandwidth and ``F`` the sustained dense peak of the
weights' compute type, all as :func:`des.cost.roofline.build_roofline` derives them for
a one-layer model: what is fitted is what the simulator computes. The four factors are
fitted by least squares in log time, as :mod:`des.tools.calibrate` fits its groups.

Two things the data decide:

- **no padding term**: ``moe_align_block_size`` pads each expert's rows to the kernel's
  ``BLOCK_SIZE_M`` (16 while ``tokens ≤ E``, else 64 in vLLM's default config), so the
  GEMMs compute ``A · ceil(T k / A / BLOCK_M) · BLOCK_M`` rows rather than ``T k``. Fitted
  with the padded rows (either block size), or with a free number of padded rows per
  activated expert, the residuals grow or the extra rows fit to 0: at these shapes the
  padded rows cost nothing measurable (a padded tile still streams its expert's weights
  once, which ``W`` counts), so the compute term counts ``T · k`` rows.
- **rows whose experts fit in L2 are left out** (:func:`l2_resident`): the profile runs a
  one-layer model, so a step's expert weights that fit in the L2 cache are still there at
  the next of its iterations; in a served model dozens of layers' experts pass through L2
  between one layer's steps and never are. On the RTX PRO 6000 (128 MiB of L2) that is
  the 8-expert rows (75 MB; 16 experts are 151 MB): up to 128 tokens, where their weights
  dominate, they take 0.63-0.88 of the time the curve fitted to the other rows gives (a
  step between 8 and 16 experts no smooth term in ``A`` reproduces: fitted with them, the
  log-residual sd is 8 % and the maximum error 23 %); compute-bound, from 256 tokens, they
  are within 8 % of it. They are reported, not fitted.

The router's GEMM (``hidden × E`` weights) is also in the dense GEMMs' weights of the
simulator (:attr:`~des.catalog.specs.ModelSpec.moe_layer_fixed_params`); its 0.5 MB per
layer are a fraction of a microsecond there, and its kernel time is in ``moe_fixed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from des.catalog.efficiency import Efficiency
from des.catalog.specs import GPUSpec, ModelSpec
from des.cost.roofline import Engine, Roofline, build_roofline
from des.errors import ScenarioError
from des.tools.profile_csv import MAX_KERNEL_S, read_csv
from des.workload.formats.checks import has_columns, show

ARG = "PROFILE_DIR"
FILE = "moe.csv"
COLUMNS = ("tokens", "activated_experts", "time_us")
#: The factors fitted, their start, bounds and scale (``x × scale`` is the factor).
FACTORS = ("moe_fixed", "moe_bandwidth", "moe_compute", "moe_knee")
X0 = [20.0, 0.8, 0.6, 0.5]
LOWER = [0.0, 0.05, 0.05, 0.0]
UPPER = [500.0, 1.5, 1.0, 1.0]
SCALE = (1e-6, 1.0, 1.0, 1.0)


def _problem(msg: str) -> ScenarioError:
    return ScenarioError((ARG, msg))


def read_moe(path: Path) -> pd.DataFrame:
    """``moe.csv`` at ``path`` with a ``time`` column in seconds; every problem a
    ScenarioError naming ``PROFILE_DIR``."""
    name = str(path)
    frame = read_csv(path, _problem)
    if tuple(frame.columns) != COLUMNS:
        raise _problem(f"{name!r}: columns must be {','.join(COLUMNS)} ({has_columns(frame.columns)})")
    if len(frame) < len(FACTORS) + 4:
        raise _problem(f"{name!r}: needs at least {len(FACTORS) + 4} rows (has {len(frame)})")
    for col in COLUMNS:
        values = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=float)
        if col == "time_us":
            bad = ~np.isfinite(values) | (values <= 0) | (values > MAX_KERNEL_S * 1e6)
            what = f"a kernel time in microseconds, > 0 and at most {MAX_KERNEL_S * 1e6:g}"
        else:
            bad = ~np.isfinite(values) | (values < 1) | (values != np.round(values)) | (values > 1e9)
            what = "an integer >= 1"
        if bad.any():
            i = int(np.argmax(bad))
            raise _problem(f"{name!r} row {i + 1}: {col} {show(frame[col].iloc[i])} is not {what}")
        frame[col] = values if col == "time_us" else values.astype(np.int64)
    frame["time"] = frame["time_us"] * 1e-6
    return frame


def layer_model(model: ModelSpec) -> ModelSpec:
    """``model`` cut to one sparse layer (what the profiler runs)."""
    if not model.is_moe:
        raise ScenarioError(("--model", f"{model.name} is dense: {FILE} needs a mixture of experts"))
    one = model.model_copy(update={"num_layers": 1, "mlp_only_layers": [], "decoder_sparse_step": 1})
    assert one.num_moe_layers == 1
    return one


def check_rows(frame: pd.DataFrame, model: ModelSpec, path: Path) -> None:
    """Each row routes ``tokens × top_k`` rows to ``activated_experts`` experts of the model's."""
    k, e = model.num_experts_per_tok or 0, model.num_experts or 0
    a, t = frame["activated_experts"], frame["tokens"]
    bad = (a < k) | (a > e) | (a > t * k)
    if bad.any():
        i = int(np.argmax(bad.to_numpy()))
        raise _problem(
            f"{str(path)!r} row {i + 1}: {a.iloc[i]} activated experts is not possible for {t.iloc[i]} tokens "
            f"of {model.name} (top {k} of {e})"
        )


def build(gpu: GPUSpec, one_layer: ModelSpec, eff: Efficiency) -> Roofline:
    """The one-layer roofline the profile's rows are predicted from (eager, as profiled)."""
    return build_roofline(gpu, one_layer, efficiency=eff, engine=Engine(enforce_eager=True))


def predict(r: Roofline, tokens: np.ndarray, activated: np.ndarray) -> np.ndarray:
    """Seconds of the fused-MoE block of ``r`` (one sparse layer) for ``tokens`` tokens
    routed to ``activated`` distinct experts: the MoE term of :meth:`Roofline.step_time`
    with the profile's activated experts in place of the expected count."""
    w = r.moe_expert_weight_s * activated
    c = r.moe_s_per_token * tokens
    return r.moe_fixed_s + np.maximum(w, c) + r.moe_knee * np.minimum(w, c)


def l2_resident(frame: pd.DataFrame, gpu: GPUSpec, model: ModelSpec) -> np.ndarray:
    """Rows whose activated experts' weights (bf16, the profile's) fit in the GPU's L2: a
    one-layer profile finds them there again, a served model never (module docstring)."""
    expert_bytes = 2 * model.expert_params
    return (frame["activated_experts"].to_numpy() * expert_bytes <= gpu.l2_bytes) & (gpu.l2_bytes > 0)


@dataclass
class MoeFit:
    """The fitted factors (``factors``: name → value, 4 significant digits) and the points:
    ``tokens``, ``activated_experts``, ``measured`` and ``predicted`` seconds, and
    ``fitted`` (False: an L2-resident row, reported only)."""

    factors: dict[str, float]
    points: pd.DataFrame

    @property
    def errors(self) -> np.ndarray:
        """predicted / measured - 1 of the fitted rows."""
        p = self.points[self.points["fitted"]]
        return (p["predicted"] / p["measured"] - 1.0).to_numpy()

    @property
    def residual_sd(self) -> float:
        """Root mean square of ln(measured / predicted) over the fitted rows."""
        p = self.points[self.points["fitted"]]
        return float(np.sqrt(np.mean(np.log(p["measured"] / p["predicted"]) ** 2)))

    @property
    def median_abs_error(self) -> float:
        return float(np.median(np.abs(self.errors)))

    @property
    def max_abs_error(self) -> float:
        return float(np.max(np.abs(self.errors)))


def round_sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits - 1}e}") if x else 0.0


def fit_moe(frame: pd.DataFrame, gpu: GPUSpec, model: ModelSpec, base: Efficiency) -> MoeFit:
    """Fit :data:`FACTORS` to ``frame`` (:func:`read_moe`) with ``gpu``'s spec sheet and
    ``model``'s expert shapes; ``base`` supplies every other factor (unused by the MoE term)."""
    one = layer_model(model)
    keep = base.model_dump(exclude={"source", "provenance", "basis", "uncertainty"})
    tokens = frame["tokens"].to_numpy(float)
    activated = frame["activated_experts"].to_numpy(float)
    fitted = ~l2_resident(frame, gpu, model)
    if int(fitted.sum()) < len(FACTORS) + 4:
        raise _problem(f"{FILE}: too few rows whose experts do not fit in {gpu.name}'s L2 ({int(fitted.sum())})")
    y = np.log(frame["time"].to_numpy()[fitted])

    def factors(x: np.ndarray) -> dict[str, float]:
        return {k: float(v) * s for k, v, s in zip(FACTORS, x, SCALE, strict=True)}

    def curve(values: dict[str, Any]) -> np.ndarray:
        return predict(build(gpu, one, Efficiency.model_validate({**keep, **values})), tokens, activated)

    def residual(x: np.ndarray) -> np.ndarray:
        return np.log(curve(factors(x))[fitted]) - y

    res = least_squares(residual, np.array(X0), bounds=(LOWER, UPPER), method="trf", x_scale="jac", max_nfev=2000)
    best = {k: round_sig(v) for k, v in factors(np.asarray(res.x)).items()}
    points = pd.DataFrame(
        {
            "tokens": frame["tokens"].to_numpy(),
            "activated_experts": frame["activated_experts"].to_numpy(),
            "measured": frame["time"].to_numpy(),
            "predicted": curve(best),
            "fitted": fitted,
        }
    )
    return MoeFit(best, points)


def fit_folder(path: Path, gpu: GPUSpec, model: ModelSpec, base: Efficiency) -> MoeFit:
    """Read ``path / moe.csv`` and fit it."""
    frame = read_moe(path / FILE)
    check_rows(frame, model, path / FILE)
    return fit_moe(frame, gpu, model, base)


def table(fit: MoeFit) -> list[dict[str, Any]]:
    """Per row: tokens, activated experts, measured and predicted µs, error (%), fitted."""
    return [
        {
            "tokens": int(r.tokens),
            "activated_experts": int(r.activated_experts),
            "measured_us": 1e6 * r.measured,
            "predicted_us": 1e6 * r.predicted,
            "error_pct": 100 * (r.predicted / r.measured - 1),
            "fitted": bool(r.fitted),
        }
        for r in fit.points.itertuples()
    ]
