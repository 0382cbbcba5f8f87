"""GEMM kernel times measured inside vLLM (aiconfigurator), and the fit of a GPU's GEMM
factors to them (issue #31, item 7).

NVIDIA's aiconfigurator (github.com/ai-dynamo/aiconfigurator, Apache-2.0) times vLLM's own
linear layer (``collector/vllm/collect_gemm.py``: six ``RowParallelLinear`` layers of one
shape run on one input as a CUDA graph, the mean of 6 replays after 3 warm-ups, over 6;
bf16 runs ``torch.nn.functional.linear``, i.e. cuBLAS) and ships one table per GPU and vLLM
version (``data/aiconfigurator-gemm-profiles/``, README there): ``m`` tokens by a ``k x n``
weight, ``latency`` in **milliseconds** (read here in seconds). Only ``bfloat16`` rows are
read; a point timed twice is the mean of the two.

Vidur's profiles (:func:`des.tools.calibrate.fit_vidur`) time each operator on its own in
PyTorch, fp16, on 2024 software; these tables are the kernels vLLM runs, inside the CUDA
graphs it runs them in, so the A100's and H100's GEMM factors are fitted here instead.

:func:`fit_gemm` keeps the ``(n, k)`` shapes some catalog model runs on one GPU at
tensor-parallel degree 1, 2, 4 or 8 (:func:`catalog_shapes`: the fused QKV, output, fused
gate-up and down projections of the dense models without MLA) and fits ``weight_bandwidth``, ``gemm_compute``,
``gemm_knee`` and ``gemm_fixed`` by least squares in log time, as
:mod:`des.tools.calibrate` does. A row is one GEMM kernel, predicted from the coefficients
:func:`des.cost.roofline.build_roofline` derives for one layer of the model whose shape it
is: that layer's GEMM term scaled to the kernel's share ``n k / P`` of the layer's
weights ``P`` on one GPU, plus one kernel's fixed time,
``gemm_fixed + max(W, C) + k · min(W, C)``. As ``C / W`` does not depend on the shape
(both scale with ``n k``), the layer's term is the sum of its four kernels' exactly, so
what is fitted is what the simulator computes (``tests/test_gemm_profile.py`` checks it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from des.catalog.efficiency import Efficiency
from des.catalog.specs import GPUSpec, ModelSpec
from des.cost.roofline import GEMMS_PER_LAYER
from des.errors import ScenarioError
from des.tools.calibrate import ENGINE_CPU, GroupResult, _Fitter, _Predictor, residual_sd, round_sig

ARG = "PROFILE_DIR"
TABLE = "gemm_perf.parquet"
DTYPE = "bfloat16"
KEY = ("m", "n", "k")
OPS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
TPS = (1, 2, 4, 8)
#: The factors :func:`fit_gemm` fits, with start, bounds and scale (``gemm_fixed`` in µs).
FITTED = ("weight_bandwidth", "gemm_compute", "gemm_knee", "gemm_fixed")
X0 = [0.8, 0.8, 0.3, 5.0]
LOWER = [0.05, 0.05, 0.0, 0.0]
UPPER = [1.5, 1.0, 1.0, 100.0]
SCALE = (1.0, 1.0, 1.0, 1e-6)
#: Regimes of ``x = C / W`` (dimensionless, at the factors predicted with): name, lowest x
#: included, highest excluded (as :data:`des.tools.gemm_shapes.REGIMES`).
REGIMES = (("latency", 0.0, 0.3), ("ridge", 0.3, 3.0), ("compute", 3.0, np.inf))


def _problem(msg: str) -> ScenarioError:
    return ScenarioError((ARG, msg))


@dataclass
class GemmProfile:
    """One GPU's GEMM table: ``rows`` (``m``, ``n``, ``k``, ``time`` in seconds), the device
    and vLLM version the collector recorded, and the folder it was read from."""

    path: Path
    device: str
    vllm_version: str
    rows: pd.DataFrame

    def describe(self) -> dict[str, str]:
        """Provenance recorded with a fit."""
        return {"path": str(self.path), "format": "aiconfigurator", "device": self.device,
                "vllm_version": self.vllm_version}  # fmt: skip

    @property
    def label(self) -> str:
        return f"aiconfigurator GEMM profile ({self.device}, vLLM {self.vllm_version} bf16)"


def read_gemm_profile(path: Path) -> GemmProfile:
    """The ``bfloat16`` rows of ``path/gemm_perf.parquet``; problems as a ScenarioError naming ``PROFILE_DIR``."""
    file = path / TABLE
    if not file.is_file():
        raise _problem(f"{str(file)!r}: no such file")
    try:
        raw = pd.read_parquet(file)
    except (OSError, ValueError) as exc:
        raise _problem(f"{str(file)!r}: cannot read it as parquet ({str(exc).splitlines()[0]})") from None
    need = [*KEY, "gemm_dtype", "latency", "device", "version"]
    missing = [c for c in need if c not in raw.columns]
    if missing:
        raise _problem(f"{str(file)!r}: no column {missing[0]!r}")
    rows = raw.loc[raw["gemm_dtype"] == DTYPE, [*KEY, "latency", "device", "version"]].copy()
    latency = pd.to_numeric(rows["latency"], errors="coerce").to_numpy(float)
    if rows.empty or not (np.isfinite(latency) & (latency > 0)).all():
        raise _problem(f"{str(file)!r}: needs {DTYPE} rows with latencies > 0 (milliseconds)")
    if rows["device"].nunique() != 1 or rows["version"].nunique() != 1:
        raise _problem(f"{str(file)!r}: the rows must come from one device and vLLM version")
    rows["time"] = latency * 1e-3
    out = rows.groupby(list(KEY), as_index=False, sort=True)["time"].mean()
    for col in KEY:
        out[col] = out[col].astype(np.int64)
    return GemmProfile(path, str(rows["device"].iloc[0]), str(rows["version"].iloc[0]), out)


def layer_shapes(model: ModelSpec, tp: int) -> dict[str, tuple[int, int]]:
    """The ``(n, k)`` (output, input features) of each GEMM of :data:`OPS` one of ``tp`` GPUs
    runs for one layer of dense ``model`` (KV heads fewer than ``tp`` replicated: one per GPU)."""
    h, q, inter = model.hidden_size, model.q_dim, model.intermediate_size
    kv = max(model.num_key_value_heads // tp, 1) * model.d_head
    return {
        "qkv_proj": (q // tp + 2 * kv, h),
        "o_proj": (h, q // tp),
        "gate_up_proj": ((model.mlp_matrices - 1) * inter // tp, h),
        "down_proj": (h, inter // tp),
    }


def catalog_shapes(tps: tuple[int, ...] = TPS) -> dict[tuple[int, int], list[tuple[str, int, str]]]:
    """Per ``(n, k)``, the (catalog model, tp, op) that run it on one GPU at a tensor-parallel
    degree of ``tps`` (dense models without MLA whose heads and MLP split evenly), sorted."""
    from des import catalog

    out: dict[tuple[int, int], list[tuple[str, int, str]]] = {}
    for name in catalog.model_names():
        m = catalog.model(name)
        if m.is_mla or m.is_moe:
            continue
        for tp in tps:
            if m.num_attention_heads % tp or m.intermediate_size % tp:
                continue
            for op, shape in layer_shapes(m, tp).items():
                out.setdefault(shape, []).append((name, tp, op))
    return {k: sorted(v) for k, v in sorted(out.items())}


def served(profile: GemmProfile, tps: tuple[int, ...] = TPS) -> pd.DataFrame:
    """The rows whose ``(n, k)`` a catalog model runs (:func:`catalog_shapes`), each with the
    first such ``model``, ``tp`` and ``op``."""
    shapes = catalog_shapes(tps)
    rows = profile.rows
    first = [shapes.get((int(n), int(k)), [None])[0] for n, k in zip(rows.n, rows.k, strict=True)]
    keep = np.array([f is not None for f in first], dtype=bool)
    picked = [f for f in first if f is not None]
    out = rows[keep].reset_index(drop=True)
    out.insert(0, "op", [f[2] for f in picked])
    out.insert(0, "tp", np.array([f[1] for f in picked], dtype=np.int64))
    out.insert(0, "model", [f[0] for f in picked])
    out.insert(3, "tokens", out["m"])  # the GEMM's rows: tokens per step, as a Vidur fit's points name them
    return out.rename(columns={"time": "measured"})


class _Rows:
    """Vectorised GEMM-kernel times of rows of :func:`served` from each (model, tp)'s roofline."""

    def __init__(self, gpu: GPUSpec, pts: pd.DataFrame):
        from des import catalog

        self.nk = (pts["n"] * pts["k"]).to_numpy(float)
        self.m = pts["m"].to_numpy(float)
        self.segments = []
        for (model, tp), part in pts.groupby(["model", "tp"], sort=True):
            spec = catalog.model(str(model))
            pred = _Predictor(gpu, spec, int(tp))
            # the weights the roofline's one-layer GEMM term streams on one of tp GPUs
            per_gpu = pred.model.active_linear_params / int(tp)
            self.segments.append((pred, per_gpu, pts.index.get_indexer(part.index)))

    def terms(self, eff: Efficiency) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per row: the fixed time, ``W`` and ``C`` (seconds) and the knee."""
        fixed, w, c, knee = (np.empty(len(self.m)) for _ in range(4))
        for pred, per_gpu, idx in self.segments:
            r = pred.build(eff)
            share = self.nk[idx] / per_gpu  # the kernel's share of the layer's weights
            fixed[idx] = r.gemm_fixed_s / GEMMS_PER_LAYER
            w[idx] = r.gemm_weight_s * share
            c[idx] = r.gemm_s_per_prefill_token * self.m[idx] * share
            knee[idx] = r.knee
        return fixed, w, c, knee

    def predict(self, eff: Efficiency) -> np.ndarray:
        fixed, w, c, knee = self.terms(eff)
        return fixed + np.maximum(w, c) + knee * np.minimum(w, c)


@dataclass
class GemmFit:
    """The fitted factors (``efficiency``: ``base`` with :data:`FITTED` replaced) and how well
    they reproduce the table's rows (``group``: the ``gemm`` group's points, one GEMM kernel
    each: ``model``, ``tp``, ``op``, ``tokens`` (= ``m``), ``m``, ``n``, ``k``, ``measured``,
    ``predicted`` in seconds)."""

    gpu: GPUSpec
    profile: GemmProfile
    efficiency: Efficiency
    group: GroupResult


def predicted(profile: GemmProfile, gpu: GPUSpec, eff: Efficiency) -> pd.DataFrame:
    """The served rows with what ``eff`` predicts (``predicted``, seconds) and ``x = C / W``."""
    pts = served(profile)
    rows = _Rows(gpu, pts)
    _, w, c, _ = rows.terms(eff)
    return pts.assign(predicted=rows.predict(eff), x=c / w)


def fit_gemm(profile: GemmProfile, gpu: GPUSpec, base: Efficiency) -> GemmFit:
    """Fit :data:`FITTED` of ``gpu`` to ``profile``'s served rows; every other factor is
    ``base``'s. The returned efficiency's ``gemm`` uncertainty is the fit's residual sd."""
    pts = served(profile)
    rows = _Rows(gpu, pts)
    keep = {"source", "provenance", "basis", "uncertainty"}
    fitter = _Fitter(base.model_dump(exclude=keep))

    def predict(params: dict[str, Any]) -> np.ndarray:
        return rows.predict(Efficiency.model_validate({**params, **ENGINE_CPU}))

    fitter.run("gemm", FITTED, pts, predict, X0, LOWER, UPPER, SCALE)
    efficiency = Efficiency.model_validate({**base.model_dump(), **{k: fitter.params[k] for k in FITTED}})
    group = fitter.groups["gemm"]
    group.points["predicted"] = rows.predict(efficiency)
    sd = residual_sd({"gemm": group})
    uncertainty = {**{str(k): v for k, v in base.uncertainty.items()}, "gemm": sd["gemm"]}
    efficiency = Efficiency.model_validate({**efficiency.model_dump(), "uncertainty": uncertainty})
    return GemmFit(gpu, profile, efficiency, group)


def _summary(name: str, err: np.ndarray) -> dict[str, Any]:
    return {
        "regime": name,
        "points": len(err),
        "median_pct": 100 * float(np.median(err)) if len(err) else float("nan"),
        "median_abs_pct": 100 * float(np.median(np.abs(err))) if len(err) else float("nan"),
        "p95_abs_pct": 100 * float(np.quantile(np.abs(err), 0.95)) if len(err) else float("nan"),
        "rms_log": float(np.sqrt(np.mean(np.log1p(err) ** 2))) if len(err) else float("nan"),
    }


def regime_errors(pts: pd.DataFrame, large_tokens: int = 2048) -> list[dict[str, Any]]:
    """For rows of :func:`predicted`: per regime of :data:`REGIMES`, for the rows of at least
    ``large_tokens`` tokens and for all: points, median signed relative error (predicted /
    measured - 1, %), median and 95th percentile of its absolute value (%), rms of ln(predicted
    / measured)."""
    err = (pts["predicted"] / pts["measured"] - 1.0).to_numpy()
    x = pts["x"].to_numpy()
    out = [_summary(name, err[(x >= lo) & (x < hi)]) for name, lo, hi in REGIMES]
    out.append(_summary(f"large (>= {large_tokens} tokens)", err[(pts["m"] >= large_tokens).to_numpy()]))
    out.append(_summary("all", err))
    return out


def factors_text(eff: Efficiency) -> str:
    """The fitted factors, 4 significant digits (``gemm_fixed`` in µs)."""
    return ", ".join(
        f"{k}={round_sig(getattr(eff, k) * (1e6 if k == 'gemm_fixed' else 1))}{' us' if k == 'gemm_fixed' else ''}"
        for k in FITTED
    )
