"""Fit the roofline's efficiency factors to a kernel profile: ``des calibrate``.

A profile is a folder in the format of ``data/rtx4090-vllm-kernel-profile/`` (measured
by LLMServingSim's profiler inside vLLM): ``dense.csv`` (``layer,tokens,time_us`` for
the per-layer GEMMs and element-wise kernels), ``per_sequence.csv``
(``layer,sequences,time_us`` for the LM head and the sampler), ``attention.csv``
(``prefill_chunk,kv_prefill,n_decode,kv_decode,time_us``, one layer's attention) and an
optional ``meta.yaml``. Times are GPU-side kernel times of one decoder layer.

Each op group's factors are fitted by least squares in log time (relative errors
weigh alike at 1 and 2048 tokens), in an order where later groups use earlier factors:

=====================  ============================================================
group                  factors
=====================  ============================================================
``gemm``               weight_bandwidth, gemm_compute, gemm_knee (per-layer sum of qkv,
                       o, gate_up and down projections)
``lm_head``            lm_head_bandwidth (with the GEMMs' compute factor and knee)
``elementwise``        elementwise_kernel, _bandwidth, _spill, _l2 (per-layer sum of
                       2 × layernorm + act_fn + rotary_emb; per-step embedding +
                       final_layernorm)
``sampler``            sampler_fixed, _bandwidth, _spill, _l2
``attention_prefill``  prefill_attention_fixed, attention_compute, attention_tile,
                       kv_stream (rows without decodes)
``attention_decode``   attention_fixed, attention_per_seq, kv_bandwidth (decode-only rows)
``attention_mixed``    mixed_per_seq, mixed_kv_bandwidth (rows with both)
=====================  ============================================================

A folder of Vidur's profiles (``<org>/<model>/mlp.csv`` under one GPU's folder, read by
:mod:`des.tools.vidur`; the format is told by the files) fits the ``gemm`` and
``elementwise`` groups only (:func:`fit_vidur`), over all its models and tensor-parallel
degrees at once, each (model, tp) predicted by its own roofline; the GPU's other factors
are kept. Compute factors are bounded by 1: shares of the peak at the GPU's sustained
clock (:meth:`~des.catalog.specs.GPUSpec.sustained_flops`). Each fit also sets the
efficiency's ``uncertainty`` per group of work from its residuals (:func:`residual_sd`).

Every prediction is made from the coefficients :func:`des.cost.roofline.build_roofline`
derives for a one-layer model, so what is fitted is what the simulator computes
(``tests/test_calibrate.py`` and ``tests/test_architectures.py`` check it point by
point). The CPU time per step and per sequence is not in a kernel profile: it comes from
:data:`ENGINE_CPU`, derived from the engine's source, and is written into the
calibration file as such. The whole fit of all four shipped profiles takes about a
second, so no rows are subsampled.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from pydantic import ValidationError
from scipy.optimize import least_squares

from des.catalog.calibration import CalibrationFile, GroupFit, parse_calibration
from des.catalog.efficiency import Efficiency
from des.catalog.specs import GPUSpec, ModelSpec
from des.config import load_yaml
from des.cost.roofline import (
    KERNELS_PER_LAYER,
    KERNELS_PER_STEP,
    Engine,
    Roofline,
    activation_bytes,
    build_roofline,
)
from des.errors import ScenarioError, reword, validation_errors
from des.tools.profile_csv import MAX_KERNEL_S, read_csv
from des.tools.vidur import ELEMENTWISE_OPS as VIDUR_ELEMENTWISE
from des.tools.vidur import GEMM_OPS as VIDUR_GEMM
from des.tools.vidur import VidurProfile, profile_files, read_vidur
from des.workload.formats.checks import has_columns, show

ARG = "PROFILE_DIR"
GEMMS = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
ELEMENTWISE_LAYER = {"layernorm": 2, "act_fn": 1, "rotary_emb": 1}  # kernels per layer
ELEMENTWISE_STEP = ("embedding", "final_layernorm")
PER_SEQUENCE = ("lm_head", "sampler")
FILES = {
    "dense.csv": ("layer", "tokens", "time_us"),
    "per_sequence.csv": ("layer", "sequences", "time_us"),
    "attention.csv": ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us"),
}
ELEMENTWISE_FACTORS = ("elementwise_kernel", "elementwise_bandwidth", "elementwise_spill", "elementwise_l2")
#: The groups a Vidur profile fits (no attention, LM head or sampler in it).
VIDUR_GROUPS = ("gemm", "elementwise")
GROUPS = (
    "gemm",
    "lm_head",
    "elementwise",
    "sampler",
    "attention_prefill",
    "attention_decode",
    "attention_mixed",
)
#: The longest ``time_us`` a profile may state (:data:`~des.tools.profile_csv.MAX_KERNEL_S`).
MAX_KERNEL_US = MAX_KERNEL_S * 1e6
#: Keys of ``meta.yaml`` naming the GPU the profile was measured on (LLMServingSim's profiler:
#: ``hardware: RTX4090``, ``gpu: NVIDIA GeForce RTX 4090``), in the order they are read.
META_GPU = ("hardware", "gpu")
#: Shape fields of the profile's model that ``meta.yaml`` may state (``hf_overrides``).
META_SHAPE = {
    "hidden_size": "hidden_size",
    "intermediate_size": "intermediate_size",
    "num_attention_heads": "num_attention_heads",
    "num_key_value_heads": "num_key_value_heads",
    "vocab_size": "vocab_size",
    "head_dim": "head_dim",
}

#: CPU time of the engine, which no kernel profile holds. vLLM V1's engine step, from its
#: source: ``Scheduler.schedule`` walks the running requests (token budgets, KV block
#: allocation) and ``update_from_output`` appends each sampled token and checks stop
#: conditions, both Python loops over the scheduled requests; the model runner's
#: ``_prepare_inputs`` is vectorised over the persistent batch; the decoded text is
#: produced in the separate API-server process. So: a fixed part per step plus a part per
#: scheduled sequence. The values are estimates of that work (0.5 ms per step, 12 µs per
#: sequence), the per-sequence one of the order of a CPU-only profile of vLLM's engine
#: loop (openfabric-systems/simllm PR #204: 12.7 µs per running request in the scheduler,
#: which its authors do not certify in absolute terms). With async scheduling, on by
#: default since vLLM 0.11 (``vllm/config/vllm.py``: ``async_scheduling`` None → True),
#: this CPU time overlaps the GPU's and only matters when it is the longer of the two.
ENGINE_CPU = {"step_overhead": 5.0e-4, "seq_overhead": 1.2e-5}
CPU_SOURCE = (
    "CPU: not in a kernel profile; 0.5 ms per step + 12 us per scheduled sequence, estimated from vLLM V1's "
    "engine loop (see des/tools/calibrate.py: ENGINE_CPU); hidden under GPU time by async scheduling."
)


# -- reading a profile -------------------------------------------------------------------


@dataclass
class Profile:
    """A kernel profile's tables (times in seconds) and its ``meta.yaml``."""

    path: Path
    dense: pd.DataFrame
    per_sequence: pd.DataFrame
    attention: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, str]:
        """Provenance recorded in a calibration file."""
        m = self.meta
        out = {"path": str(self.path)}
        for key in ("gpu", "model", "vllm_version", "variant", "profiled_at", "profiler_version"):
            if key in m:
                out[key] = str(m[key])
        eng = m.get("engine_effective")
        if isinstance(eng, dict) and "enforce_eager" in eng:
            out["enforce_eager"] = str(eng["enforce_eager"])
        return out


def _problem(msg: str) -> ScenarioError:
    return ScenarioError((ARG, msg))


def _read_csv(path: Path, columns: tuple[str, ...]) -> pd.DataFrame:
    name = str(path)
    if not path.is_file():
        raise _problem(f"{name!r}: no such file (a profile needs {', '.join(FILES)})")
    frame = read_csv(path, _problem)
    if tuple(frame.columns) != columns:
        raise _problem(f"{name!r}: columns must be {','.join(columns)} ({has_columns(frame.columns)})")
    if frame.empty:
        raise _problem(f"{name!r} has no rows")
    for col in columns:
        if col == "layer":
            continue
        values = pd.to_numeric(frame[col], errors="coerce").to_numpy(dtype=float)
        if col == "time_us":
            bad = ~np.isfinite(values) | (values <= 0) | (values > MAX_KERNEL_US)
            what = f"a kernel time in microseconds, > 0 and at most {MAX_KERNEL_US:g} ({MAX_KERNEL_S:g} s)"
        else:
            low = 1 if col in ("tokens", "sequences") else 0
            bad = ~np.isfinite(values) | (values < low) | (values != np.round(values)) | (values > 1e9)
            what = f"an integer >= {low}"
        if bad.any():
            i = int(np.argmax(bad))
            raise _problem(f"{name!r} row {i + 1}: {col} {show(frame[col].iloc[i])} is not {what}")
        frame[col] = values if col == "time_us" else values.astype(np.int64)
    frame["time"] = frame["time_us"] * 1e-6
    return frame


def read_profile(path: Path) -> Profile:
    """The profile in folder ``path``; every problem as a ScenarioError naming ``PROFILE_DIR``."""
    if not path.exists():
        raise _problem(f"{str(path)!r}: no such folder")
    if not path.is_dir():
        raise _problem(f"{str(path)!r} is not a folder")
    dense = _read_csv(path / "dense.csv", FILES["dense.csv"])
    per_seq = _read_csv(path / "per_sequence.csv", FILES["per_sequence.csv"])
    attention = _read_csv(path / "attention.csv", FILES["attention.csv"])
    meta: dict[str, Any] = {}
    meta_path = path / "meta.yaml"
    if meta_path.exists():
        try:
            loaded = load_yaml(meta_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise _problem(f"{str(meta_path)!r}: cannot read it ({str(exc).splitlines()[0]})") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise _problem(f"{str(meta_path)!r} does not hold a mapping")
        meta = loaded or {}
    need = {
        "dense.csv": (dense, (*GEMMS, *ELEMENTWISE_LAYER, *ELEMENTWISE_STEP)),
        "per_sequence.csv": (per_seq, PER_SEQUENCE),
    }
    for name, (frame, layers) in need.items():
        for layer in layers:
            n = int((frame["layer"] == layer).sum())
            if n < 8:
                raise _problem(f"{str(path / name)!r}: needs at least 8 rows of layer {layer!r} (has {n})")
    if (dense.groupby("layer")["tokens"].nunique() < dense.groupby("layer").size()).any():
        raise _problem(f"{str(path / 'dense.csv')!r}: a layer has the same token count twice")
    a = attention
    empty = (a.prefill_chunk == 0) & (a.n_decode == 0)
    orphan = ((a.prefill_chunk == 0) & (a.kv_prefill > 0)) | ((a.n_decode == 0) & (a.kv_decode > 0))
    nokv = (a.n_decode > 0) & (a.kv_decode == 0)
    for bad, what in ((empty, "has neither a prefill chunk nor decodes"), (orphan, "gives a context to nothing"),
                      (nokv, "has decodes without context")):  # fmt: skip
        if bad.any():
            i = int(np.argmax(bad.to_numpy()))
            raise _problem(f"{str(path / 'attention.csv')!r} row {i + 1} {what}")
    kinds = {"prefill-only": (a.prefill_chunk > 0) & (a.n_decode == 0), "decode-only": a.prefill_chunk == 0}
    kinds["mixed"] = (a.prefill_chunk > 0) & (a.n_decode > 0)
    for kind, mask in kinds.items():
        if int(mask.sum()) < 8:
            raise _problem(f"{str(path / 'attention.csv')!r}: needs at least 8 {kind} rows (has {int(mask.sum())})")
    return Profile(path, dense, per_seq, attention, meta)


def profile_format(path: Path) -> str:
    """The format of the profile in folder ``path``: ``llmservingsim`` (``dense.csv``,
    ``per_sequence.csv``, ``attention.csv``) or ``vidur`` (``mlp.csv`` files under it)."""
    if not path.exists():
        raise _problem(f"{str(path)!r}: no such folder")
    if not path.is_dir():
        raise _problem(f"{str(path)!r} is not a folder")
    if (path / "dense.csv").exists():
        return "llmservingsim"
    if profile_files(path):
        return "vidur"
    raise _problem(
        f"{str(path)!r} is not a kernel profile: it needs {', '.join(FILES)} (LLMServingSim) or "
        "<org>/<model>/mlp.csv files under it (Vidur)"
    )


def fit_folder(path: Path, gpu: GPUSpec, model: ModelSpec | None) -> Fit:
    """Read the profile in ``path`` in whichever format it is and fit it: an LLMServingSim
    profile needs ``model`` (the shapes it measured); a Vidur profile brings its models and
    keeps ``gpu``'s own factors for the groups it cannot fit."""
    if profile_format(path) == "vidur":
        if model is not None:
            raise ScenarioError(("--model", "a Vidur profile brings its models' shapes: leave --model out"))
        return fit_vidur(read_vidur(path), gpu, gpu.efficiency)
    if model is None:
        raise ScenarioError(("--model", "required for this profile: the catalog model whose shapes it measured"))
    return fit_profile(read_profile(path), gpu, model)


def _compact(text: str) -> str:
    """Lower case letters and digits only: ``NVIDIA GeForce RTX 4090`` -> ``nvidiageforcertx4090``."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def profiled_gpu(meta: dict[str, Any]) -> tuple[str, str] | None:
    """The GPU ``meta.yaml`` says the profile was measured on, as (what it states, the catalog
    GPU it names), or None when it names none the catalog has. A statement names the catalog
    GPU whose name (letters and digits) is the longest found in it: ``RTX4090`` and ``NVIDIA
    GeForce RTX 4090`` name ``rtx4090``, ``NVIDIA H200`` names ``h200`` (not ``h20``)."""
    from des.catalog import gpu_names

    names = {_compact(name): name for name in gpu_names()}
    for key in META_GPU:
        stated = meta.get(key)
        if not isinstance(stated, str) or not stated.strip():
            continue
        text = _compact(stated)
        found = [c for c in names if c in text]
        if found:
            return stated, names[max(found, key=len)]
    return None


def check_gpu(profile: Profile, gpu: GPUSpec) -> None:
    """The GPU calibrated must be the one the profile was measured on, when ``meta.yaml`` names one."""
    found = profiled_gpu(profile.meta)
    if found is None or found[1] == gpu.name:
        return
    stated, name = found
    raise ScenarioError(
        (
            "--gpu",
            f"the profile was measured on {stated} ({str(profile.path / 'meta.yaml')!r}), not on {gpu.name}: "
            f"its kernel times fit {name} (--gpu {name})",
        )
    )


def check_model(profile: Profile, model: ModelSpec) -> None:
    """The model's shapes must be those the profile was measured with (``meta.yaml``)."""
    eng = profile.meta.get("engine_effective")
    overrides = eng.get("hf_overrides") if isinstance(eng, dict) else None
    if not isinstance(overrides, dict):
        return
    for key, attr in META_SHAPE.items():
        if key in overrides and overrides[key] != getattr(model, attr):
            raise ScenarioError(
                (
                    "--model",
                    f"{model.name} has {attr} {getattr(model, attr)}, but the profile was measured with "
                    f"{overrides[key]} ({str(profile.path / 'meta.yaml')!r}); choose the model it profiled",
                )
            )


# -- the fit -----------------------------------------------------------------------------


@dataclass
class GroupResult:
    """One op group: its fitted factors, and measured and predicted times (seconds) per point."""

    name: str
    factors: tuple[str, ...]
    points: pd.DataFrame  # descriptive columns, ``measured`` and ``predicted``

    @property
    def errors(self) -> np.ndarray:
        """Relative errors, predicted / measured - 1."""
        return (self.points["predicted"] / self.points["measured"] - 1.0).to_numpy()

    @property
    def median_abs_error(self) -> float:
        return float(np.median(np.abs(self.errors)))

    @property
    def max_abs_error(self) -> float:
        return float(np.max(np.abs(self.errors)))


@dataclass
class Fit:
    """The fitted efficiency factors of ``gpu`` and how well they reproduce ``profile``
    (``model``: the one model an LLMServingSim profile measured; None for a Vidur profile,
    whose models come with it)."""

    gpu: GPUSpec
    model: ModelSpec | None
    profile: Profile | VidurProfile
    efficiency: Efficiency
    groups: dict[str, GroupResult]
    #: The data a group was fitted to when not ``profile`` (group → label; the A100's and
    #: H100's GEMMs: vLLM's GEMM tables, des.tools.architectures.with_gemm).
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def models(self) -> str:
        """The model(s) whose shapes were fitted."""
        if self.model is not None:
            return self.model.name
        assert isinstance(self.profile, VidurProfile)
        return ", ".join(self.profile.models)

    def calibration_text(self) -> str:
        """The calibration file to write (YAML), read back first as a scenario would read it: a
        ScenarioError naming ``PROFILE_DIR`` rather than a file ``des run`` refuses."""
        text = self.calibration_file().to_yaml()
        try:
            parse_calibration(text, "the fitted calibration")
        except ValueError as exc:
            raise _problem(f"{exc}; nothing was written") from None
        return text

    def calibration_file(self) -> CalibrationFile:
        return CalibrationFile(
            gpu=self.gpu.name,
            model=self.models,
            profile=self.profile.describe(),
            efficiency=self.efficiency,
            fit={
                name: GroupFit(
                    points=len(g.points),
                    median_abs_error=round(g.median_abs_error, 6),
                    max_abs_error=round(g.max_abs_error, 6),
                    factors=list(g.factors),
                )
                for name, g in self.groups.items()
            },
        )


def round_sig(x: float, digits: int = 4) -> float:
    """``x`` rounded to ``digits`` significant digits (what a catalog entry stores)."""
    if x == 0 or not math.isfinite(x):
        return x
    return float(f"{x:.{digits - 1}e}")


class _Predictor:
    """Vectorised step-time groups of one layer on one of ``tp`` GPUs from a Roofline's coefficients."""

    def __init__(self, gpu: GPUSpec, model: ModelSpec, tp: int = 1):
        self.gpu = gpu
        self.tp = tp
        self.model = model.model_copy(update={"num_layers": 1})
        self.layer_bytes, self.step_bytes = activation_bytes(self.model, tp)

    def roofline(self, params: dict[str, Any]) -> Roofline:
        return self.build(Efficiency.model_validate({**params, **ENGINE_CPU}))

    def build(self, eff: Efficiency) -> Roofline:
        return build_roofline(self.gpu, self.model, tp=self.tp, efficiency=eff, engine=Engine(enforce_eager=True))

    @staticmethod
    def roof(r: Roofline, memory: np.ndarray | float, compute: np.ndarray) -> np.ndarray:
        return np.maximum(memory, compute) + r.knee * np.minimum(memory, compute)

    def gemm(self, r: Roofline, tokens: np.ndarray) -> np.ndarray:
        """The layer's GEMMs at ``tokens`` tokens."""
        return r.gemm_fixed_s + self.roof(r, r.gemm_weight_s, r.gemm_s_per_prefill_token * tokens)

    def lm_head(self, r: Roofline, rows: np.ndarray) -> np.ndarray:
        return r.head_fixed_s + self.roof(r, r.head_weight_s, r.head_s_per_row * rows)

    def elementwise(self, r: Roofline, tokens: np.ndarray, per_layer: np.ndarray) -> np.ndarray:
        """Per-layer kernels (``per_layer`` true) or per-step ones, at ``tokens`` tokens."""
        nbytes = np.where(per_layer, self.layer_bytes, self.step_bytes)
        kernels = np.where(per_layer, KERNELS_PER_LAYER, KERNELS_PER_STEP)
        fixed = r.el_fixed_s / (KERNELS_PER_LAYER + KERNELS_PER_STEP)
        per_byte = r.el_s_per_token / (self.layer_bytes + self.step_bytes)
        spill = np.maximum(tokens * nbytes - r.el_threshold, 0.0) if r.el_layer_bytes else 0.0
        return kernels * fixed + tokens * nbytes * per_byte + r.el_spill_s_per_byte * spill

    def sampler(self, r: Roofline, rows: np.ndarray) -> np.ndarray:
        spill = np.maximum(rows * r.samp_row_bytes - r.samp_threshold, 0.0)
        return r.samp_fixed_s + r.samp_s_per_row * rows + r.samp_spill_s_per_byte * spill

    @staticmethod
    def attention(r: Roofline, a: pd.DataFrame) -> np.ndarray:
        """One layer's attention for profile rows (any mix of prefill and decodes)."""
        c = a["prefill_chunk"].to_numpy(float)
        p = a["kv_prefill"].to_numpy(float)
        n = a["n_decode"].to_numpy(float)
        d = n * a["kv_decode"].to_numpy(float)
        pairs, ctx = c * (p + (c + 1) / 2), p + c
        pre = r.pre_fixed_s + np.maximum.reduce(
            [
                r.pre_s_per_pair * (pairs + r.pre_tile_pairs * c),
                r.stream_s_per_context * ctx,
                r.mixed_s_per_context * ctx,
            ]
        )
        safe_n = np.maximum(n, 1)
        mixed_dec = np.maximum.reduce(
            [
                r.mixed_compute_s_per_context * d,
                r.mixed_s_per_seq * n + r.mixed_s_per_context * d,
                r.stream_s_per_context * d / safe_n,
            ]
        )
        dec_only = r.dec_fixed_s + r.dec_s_per_seq * n + r.dec_s_per_context * d
        return np.where(c > 0, pre + np.where(n > 0, mixed_dec, 0.0), dec_only)


class _Fitter:
    """Fits op groups one after another: each group's factors by least squares in log time,
    rounded to 4 significant digits before the next group uses them."""

    def __init__(self, params: dict[str, Any]):
        self.params = params
        self.groups: dict[str, GroupResult] = {}

    def run(
        self,
        name: str,
        names: tuple[str, ...],
        frame: pd.DataFrame,
        predict: Callable[[dict[str, Any]], np.ndarray],
        x0: list[float],
        lower: list[float],
        upper: list[float],
        scale: tuple[float, ...],
    ) -> None:
        """Fit factors ``names`` (``x × scale``) so that ``predict(params)`` matches ``frame.measured``."""
        y = np.log(frame["measured"].to_numpy())

        def fitted(x: np.ndarray) -> dict[str, float]:
            return {k: float(v) * s for k, v, s in zip(names, x, scale, strict=True)}

        def residual(x: np.ndarray) -> np.ndarray:
            return np.log(predict({**self.params, **fitted(x)})) - y

        x = _least_squares(residual, x0, lower, upper)
        self.params.update({k: round_sig(v) for k, v in fitted(x).items()})
        self.groups[name] = GroupResult(name, names, frame)


def _least_squares(
    residual: Callable[[np.ndarray], np.ndarray], x0: list[float], lower: list[float], upper: list[float]
) -> np.ndarray:
    res = least_squares(residual, np.array(x0), bounds=(lower, upper), method="trf", x_scale="jac", max_nfev=2000)
    return np.asarray(res.x)


def fit_profile(profile: Profile, gpu: GPUSpec, model: ModelSpec) -> Fit:
    """Fit every group's factors to ``profile`` (``model``'s shapes, ``gpu``'s spec sheet)."""
    check_gpu(profile, gpu)
    check_model(profile, model)
    pred = _Predictor(gpu, model)
    fitter = _Fitter({"weight_bandwidth": 0.9, "gemm_compute": 0.9})
    run = fitter.run
    dense, per_seq, att = profile.dense, profile.per_sequence, profile.attention

    # GEMMs: the layer's four projections summed as a layer runs them
    wide = dense.pivot(index="tokens", columns="layer", values="time")
    gemm = pd.DataFrame({"tokens": wide.index, "measured": wide[list(GEMMS)].sum(axis=1, skipna=False).to_numpy()})
    gemm = gemm.dropna().reset_index(drop=True)
    tokens = gemm["tokens"].to_numpy(float)
    run(
        "gemm",
        ("weight_bandwidth", "gemm_compute", "gemm_knee"),
        gemm,
        lambda p: pred.gemm(pred.roofline(p), tokens),
        [0.9, 0.9, 0.3],
        [0.05, 0.05, 0.0],
        [1.0, 1.0, 1.0],
        (1.0, 1.0, 1.0),
    )
    head = per_seq[per_seq.layer == "lm_head"]
    head_frame = pd.DataFrame({"rows": head.sequences, "measured": head.time})
    rows = head_frame["rows"].to_numpy(float)
    run(
        "lm_head",
        ("lm_head_bandwidth",),
        head_frame,
        lambda p: pred.lm_head(pred.roofline(p), rows),
        [0.9],
        [0.05],
        [1.5],
        (1.0,),
    )

    # element-wise: the per-layer kernels summed as a layer runs them, and the per-step ones
    layer_sum = sum(k * wide[op] for op, k in ELEMENTWISE_LAYER.items())
    step_sum = sum(wide[op] for op in ELEMENTWISE_STEP)
    el = pd.concat(
        [
            pd.DataFrame({"kernels": "per layer", "tokens": wide.index, "measured": layer_sum.to_numpy()}),
            pd.DataFrame({"kernels": "per step", "tokens": wide.index, "measured": step_sum.to_numpy()}),
        ],
        ignore_index=True,
    ).dropna()
    el_tokens = el["tokens"].to_numpy(float)
    el_layer = (el["kernels"] == "per layer").to_numpy()
    run(
        "elementwise",
        ELEMENTWISE_FACTORS,
        el,
        lambda p: pred.elementwise(pred.roofline(p), el_tokens, el_layer),
        [2.0, 2.0, 1.0, 0.5],
        [0.01, 0.05, 0.05, 0.0],
        [50.0, 10.0, 10.0, 5.0],
        (1e-6, 1.0, 1.0, 1.0),
    )
    sm = per_seq[per_seq.layer == "sampler"]
    samp = pd.DataFrame({"rows": sm.sequences, "measured": sm.time})
    s_rows = samp["rows"].to_numpy(float)
    run(
        "sampler",
        ("sampler_fixed", "sampler_bandwidth", "sampler_spill", "sampler_l2"),
        samp,
        lambda p: pred.sampler(pred.roofline(p), s_rows),
        [20.0, 2.0, 0.5, 0.5],
        [0.1, 0.05, 0.05, 0.0],
        [500.0, 10.0, 10.0, 5.0],
        (1e-6, 1.0, 1.0, 1.0),
    )

    # attention: prefill-only rows, then decode-only rows, then the mixed rows
    cols = ["prefill_chunk", "kv_prefill", "n_decode", "kv_decode"]
    frames = {
        "attention_prefill": att[(att.prefill_chunk > 0) & (att.n_decode == 0)],
        "attention_decode": att[att.prefill_chunk == 0],
        "attention_mixed": att[(att.prefill_chunk > 0) & (att.n_decode > 0)],
    }
    specs: dict[str, tuple[tuple[str, ...], list[float], list[float], list[float], tuple[float, ...]]] = {
        "attention_prefill": (
            ("prefill_attention_fixed", "attention_compute", "attention_tile", "kv_stream"),
            [8.0, 0.8, 100.0, 0.15],
            [0.0, 0.05, 0.0, 0.01],
            [500.0, 1.0, 1e4, 2.0],
            (1e-6, 1.0, 1.0, 1.0),
        ),
        "attention_decode": (
            ("attention_fixed", "attention_per_seq", "kv_bandwidth"),
            [10.0, 0.3, 0.9],
            [0.0, 0.0, 0.05],
            [500.0, 50.0, 2.0],
            (1e-6, 1e-6, 1.0),
        ),
        "attention_mixed": (
            ("mixed_per_seq", "mixed_kv_bandwidth"),
            [1.0, 0.5],
            [0.0, 0.02],
            [50.0, 2.0],
            (1e-6, 1.0),
        ),
    }
    for name, frame in frames.items():
        rows_frame = frame[cols].assign(measured=frame["time"].to_numpy()).reset_index(drop=True)
        names, x0, lo, hi, sc = specs[name]
        run(name, names, rows_frame, _attention_of(pred, rows_frame), x0, lo, hi, sc)

    groups = fitter.groups
    params = {**fitter.params, **ENGINE_CPU}
    source = source_text(profile, gpu, model)
    m = profile.meta
    basis = (
        f"LLMServingSim profile {profile.path.name} (vLLM {m.get('vllm_version', '?')} kernels, "
        f"{m.get('model', model.name)} on {gpu.name}, tp 1)"
    )
    efficiency = Efficiency.model_validate({**params, "source": source, "provenance": "fitted", "basis": basis})
    # the reported predictions come from the final factors, every term included
    final = pred.build(efficiency)
    predictions = {
        "gemm": pred.gemm(final, tokens),
        "lm_head": pred.lm_head(final, rows),
        "elementwise": pred.elementwise(final, el_tokens, el_layer),
        "sampler": pred.sampler(final, s_rows),
    }
    for name in frames:
        predictions[name] = pred.attention(final, groups[name].points)
    for name, values in predictions.items():
        groups[name].points["predicted"] = values
    ordered = {k: groups[k] for k in GROUPS}
    efficiency = with_uncertainty(efficiency, residual_sd(ordered))
    return Fit(gpu, model, profile, efficiency, ordered)


def fit_vidur(profile: VidurProfile, gpu: GPUSpec, base: Efficiency) -> Fit:
    """Fit the GEMM and element-wise factors of ``gpu`` to a Vidur profile of its architecture.

    Every (model, tp) of the profile is predicted by its own roofline (one layer on one of
    ``tp`` GPUs): the GEMM group is the sum of the layer's four projections per row
    (``weight_bandwidth``, ``gemm_compute``, ``gemm_knee``); the element-wise group the sum
    of the per-layer kernels of the Llama-style models (2 RMSNorms, rotary, SiLU-and-mul,
    the residual add), predicted as des's per-layer element-wise term (phi-2's layer, one
    LayerNorm and GELU, is left out of that group). Factors the profile cannot fit
    (attention, LM head, sampler, CPU) are ``base``'s.
    """
    rows = profile.rows
    keep = {"source", "provenance", "basis", "uncertainty"}
    # Vidur times each operator on its own in PyTorch (no CUDA graph): its per-op overhead is not
    # the kernel's fixed time inside vLLM's graphs, so no fixed GEMM time is fitted or kept here
    fitter = _Fitter({**base.model_dump(exclude=keep), "gemm_fixed": 0.0})
    segments = [
        (_Predictor(gpu, profile.models[str(m)], int(tp)), part.index.to_numpy())
        for (m, tp), part in rows.groupby(["model", "tp"], sort=True)
    ]
    gemm = rows[["model", "tp", "tokens"]].assign(measured=rows[list(VIDUR_GEMM)].sum(axis=1, skipna=False))
    llama = rows[list(VIDUR_ELEMENTWISE)].notna().all(axis=1).to_numpy()
    el_sum = rows.loc[llama, list(VIDUR_ELEMENTWISE)].sum(axis=1)
    el = rows.loc[llama, ["model", "tp", "tokens"]].assign(measured=el_sum)
    tokens = rows["tokens"].to_numpy(float)

    def gemm_of(params: dict[str, Any]) -> np.ndarray:
        eff = Efficiency.model_validate(params)
        out = np.empty(len(rows))
        for pred, idx in segments:
            out[idx] = pred.gemm(pred.build(eff), tokens[idx])
        return out

    def elementwise_of(params: dict[str, Any]) -> np.ndarray:
        eff = Efficiency.model_validate(params)
        out = np.empty(len(rows))
        for pred, idx in segments:
            out[idx] = pred.elementwise(pred.build(eff), tokens[idx], np.ones(len(idx), dtype=bool))
        return out[llama]

    fitter.run(
        "gemm", ("weight_bandwidth", "gemm_compute", "gemm_knee"), gemm.reset_index(drop=True), gemm_of,
        [0.8, 0.8, 0.3], [0.05, 0.05, 0.0], [1.0, 1.0, 1.0], (1.0, 1.0, 1.0),
    )  # fmt: skip
    fitter.run(
        "elementwise", ELEMENTWISE_FACTORS, el.reset_index(drop=True), elementwise_of,
        [2.0, 1.0, 0.5, 0.5], [0.01, 0.05, 0.05, 0.0], [50.0, 10.0, 10.0, 5.0], (1e-6, 1.0, 1.0, 1.0),
    )  # fmt: skip
    basis = profile.label
    source = (
        f"GEMM and element-wise factors fitted by `des calibrate` to the {basis} (Vidur, MIT: per-operator "
        f"fp16 times of the non-attention half of a layer) with the spec sheet of {gpu.name}: least squares in "
        f"log time per op group. Not in the profile, taken from the catalog: attention, LM head, sampler, CPU."
    )
    efficiency = Efficiency.model_validate(
        {**fitter.params, "source": source, "provenance": "fitted", "basis": basis, "uncertainty": base.uncertainty}
    )
    fitter.groups["gemm"].points["predicted"] = gemm_of(efficiency.model_dump(exclude=keep))
    fitter.groups["elementwise"].points["predicted"] = elementwise_of(efficiency.model_dump(exclude=keep))
    sd = residual_sd(fitter.groups)
    efficiency = with_uncertainty(efficiency, {str(k): v for k, v in base.uncertainty.items()} | sd)
    return Fit(gpu, None, profile, efficiency, fitter.groups)


def with_uncertainty(efficiency: Efficiency, uncertainty: Mapping[str, float]) -> Efficiency:
    """``efficiency`` with the fit's ``uncertainty``, validated by the model a scenario reads a
    calibration file with: a residual sd beyond what des accepts (the profile's times are far
    from anything the roofline reproduces) is a ScenarioError naming ``PROFILE_DIR``, so that
    no calibration des would refuse is written."""
    try:
        return Efficiency.model_validate({**efficiency.model_dump(), "uncertainty": uncertainty})
    except ValidationError as exc:
        err = validation_errors(exc)[0]
        where = ".".join(map(str, err["loc"]))
        raise _problem(
            f"the fit cannot be used: its efficiency.{where} would be {show(err.get('input'))}, which "
            f"des refuses ({reword(err['msg'])}); are the profile's times kernel times of one layer, in "
            "microseconds, measured with the model given?"
        ) from None


#: Which op groups of a fit inform which uncertainty group of the efficiency.
UNCERTAINTY_OF = {
    "gemm": "gemm",
    "lm_head": "gemm",
    "elementwise": "elementwise",
    "sampler": "elementwise",
    "attention_prefill": "attention",
    "attention_decode": "attention",
    "attention_mixed": "attention",
}


def residual_sd(groups: dict[str, GroupResult]) -> dict[str, float]:
    """Per uncertainty group, the root mean square of ln(measured / predicted) over the fitted
    points of its op groups (:data:`UNCERTAINTY_OF`): the sd of the true time about the
    prediction, bias included; 4 significant digits."""
    pooled: dict[str, list[np.ndarray]] = {}
    for name, g in groups.items():
        ln = np.log(g.points["measured"].to_numpy() / g.points["predicted"].to_numpy())
        pooled.setdefault(UNCERTAINTY_OF[name], []).append(ln)
    return {k: round_sig(float(np.sqrt(np.mean(np.concatenate(v) ** 2)))) for k, v in pooled.items()}


def _attention_of(pred: _Predictor, rows: pd.DataFrame) -> Callable[[dict[str, Any]], np.ndarray]:
    return lambda p: pred.attention(pred.roofline(p), rows)


def source_text(profile: Profile, gpu: GPUSpec, model: ModelSpec) -> str:
    m = profile.meta
    what = ", ".join(str(m[k]) for k in ("gpu", "model", "vllm_version") if k in m) or str(profile.path)
    return (
        f"Fitted by `des calibrate` to the kernel profile {profile.path.name} ({what}) with the spec sheet of "
        f"{gpu.name} and the shapes of {model.name}: least squares in log time per op group. {CPU_SOURCE}"
    )


# -- the fit per group, as rows ----------------------------------------------------------


def fit_table(fit: Fit) -> list[dict[str, Any]]:
    """Per group: points, median and max absolute error (%), and the fitted factors."""
    eff = fit.efficiency
    out = []
    for name, g in fit.groups.items():
        out.append(
            {
                "group": name,
                "points": len(g.points),
                "median_abs_pct": 100 * g.median_abs_error,
                "max_abs_pct": 100 * g.max_abs_error,
                "factors": ", ".join(f"{f}={format_factor(f, getattr(eff, f))}" for f in g.factors),
            }
        )
    return out


def model_table(fit: Fit) -> list[dict[str, Any]]:
    """Per group and model of a Vidur fit: points, median and max absolute error (%); empty
    for a one-model profile."""
    out = []
    for name, g in fit.groups.items():
        if "model" not in g.points:
            continue
        err = (g.points["predicted"] / g.points["measured"] - 1.0).abs()
        for model, e in err.groupby(g.points["model"], sort=True):
            out.append(
                {
                    "group": name,
                    "model": str(model),
                    "points": len(e),
                    "median_abs_pct": 100 * float(e.median()),
                    "max_abs_pct": 100 * float(e.max()),
                }
            )
    return out


def format_factor(name: str, value: float | None) -> str:
    if value is None:
        return "-"
    if name.endswith(("_fixed", "_kernel", "_per_seq", "overhead")):
        return f"{value * 1e6:.3g} us"
    return f"{value:.4g}"
