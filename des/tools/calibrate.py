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

A tree of such profiles as LLMServingSim's profiler writes them
(``<org>/<model>/<variant>/tp<N>/`` with a ``meta.yaml`` per model beside the ``tp<N>``
folders; each ``tp<N>`` operator the sharded one of one rank, profiled on one GPU with the
model's config divided by N) fits every group over all its models and TP degrees at once,
each (model, tp) predicted by the roofline at that tp (:func:`fit_tree`); the catalog model
comes from ``meta.yaml``'s ``model`` and must have the shapes its ``hf_overrides`` state. A
mixture of experts' fused-MoE block (``moe.csv``) is not fitted here.

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
from des.tools import moe_fit
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


def read_profile(path: Path, dense_layers: tuple[str, ...] | None = None) -> Profile:
    """The profile in folder ``path``; every problem as a ScenarioError naming ``PROFILE_DIR``.
    ``dense_layers``: the operators ``dense.csv`` must hold (default: a dense model's GEMMs
    and element-wise kernels)."""
    if not path.exists():
        raise _problem(f"{str(path)!r}: no such folder")
    if not path.is_dir():
        raise _problem(f"{str(path)!r} is not a folder")
    dense = _read_csv(path / "dense.csv", FILES["dense.csv"])
    per_seq = _read_csv(path / "per_sequence.csv", FILES["per_sequence.csv"])
    attention = _read_csv(path / "attention.csv", FILES["attention.csv"])
    meta = read_meta(path / "meta.yaml")
    need = {
        "dense.csv": (dense, dense_layers or (*GEMMS, *ELEMENTWISE_LAYER, *ELEMENTWISE_STEP)),
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


def read_meta(meta_path: Path) -> dict[str, Any]:
    """A profile's ``meta.yaml`` as a mapping ({} when there is none)."""
    if not meta_path.exists():
        return {}
    try:
        loaded = load_yaml(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise _problem(f"{str(meta_path)!r}: cannot read it ({str(exc).splitlines()[0]})") from None
    if loaded is not None and not isinstance(loaded, dict):
        raise _problem(f"{str(meta_path)!r} does not hold a mapping")
    return loaded or {}


def profile_format(path: Path) -> str:
    """The format of the profile in folder ``path``: ``llmservingsim`` (``dense.csv``,
    ``per_sequence.csv``, ``attention.csv``) or ``vidur`` (``mlp.csv`` files under it)."""
    if not path.exists():
        raise _problem(f"{str(path)!r}: no such folder")
    if not path.is_dir():
        raise _problem(f"{str(path)!r} is not a folder")
    if (path / "dense.csv").exists():
        return "llmservingsim"
    if tree_folders(path):
        return "llmservingsim-tree"
    if profile_files(path):
        return "vidur"
    raise _problem(
        f"{str(path)!r} is not a kernel profile: it needs {', '.join(FILES)} (LLMServingSim), "
        "<org>/<model>/<variant>/tp<N>/ folders of them (LLMServingSim, several models and TP degrees) or "
        "<org>/<model>/mlp.csv files under it (Vidur)"
    )


def fit_folder(path: Path, gpu: GPUSpec, model: ModelSpec | None) -> Fit:
    """Read the profile in ``path`` in whichever format it is and fit it: an LLMServingSim
    profile needs ``model`` (the shapes it measured); a Vidur profile brings its models and
    keeps ``gpu``'s own factors for the groups it cannot fit."""
    fmt = profile_format(path)
    if fmt == "vidur":
        if model is not None:
            raise ScenarioError(("--model", "a Vidur profile brings its models' shapes: leave --model out"))
        return fit_vidur(read_vidur(path), gpu, gpu.efficiency)
    if fmt == "llmservingsim-tree":
        if model is not None:
            raise ScenarioError(("--model", "this profile names its models in each meta.yaml: leave --model out"))
        return fit_tree(read_tree(path), gpu)
    if model is None:
        raise ScenarioError(("--model", "required for this profile: the catalog model whose shapes it measured"))
    return fit_profile(read_profile(path), gpu, model)


def _compact(text: str) -> str:
    """Lower case letters and digits only: ``NVIDIA GeForce RTX 4090`` -> ``nvidiageforcertx4090``."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _names(name: str, text: str) -> bool:
    """Whether ``text`` (compacted) holds the parts of catalog name ``name`` in order:
    ``rtx-pro-6000-server`` in ``NVIDIA RTX PRO 6000 Blackwell Server Edition``."""
    at = 0
    for part in filter(None, (_compact(p) for p in name.split("-"))):
        at = text.find(part, at)
        if at < 0:
            return False
        at += len(part)
    return True


def profiled_gpu(meta: dict[str, Any]) -> tuple[str, str] | None:
    """The GPU ``meta.yaml`` says the profile was measured on, as (what it states, the catalog
    GPU it names), or None when it names none the catalog has. Of the statements (``hardware``,
    ``gpu``), each names the catalog GPU the parts of whose name (letters and digits, between
    dashes) it holds in order, the longest such name; the longest over both wins: ``RTX4090``
    and ``NVIDIA GeForce RTX 4090`` name ``rtx4090``, ``NVIDIA H200`` names ``h200`` (not
    ``h20``), ``RTXPRO6000`` with ``NVIDIA RTX PRO 6000 Blackwell Server Edition`` names
    ``rtx-pro-6000-server``."""
    from des.catalog import gpu_names

    best: tuple[str, str] | None = None
    for key in META_GPU:
        stated = meta.get(key)
        if not isinstance(stated, str) or not stated.strip():
            continue
        text = _compact(stated)
        found = [name for name in gpu_names() if _names(name, text)]
        if found:
            name = max(found, key=lambda n: len(_compact(n)))
            if best is None or len(_compact(name)) > len(_compact(best[1])):
                best = (stated, name)
    return best


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
    profile: Profile | VidurProfile | TreeProfile
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
        assert isinstance(self.profile, VidurProfile | TreeProfile)
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


#: The attention groups' factors, start values, lower and upper bounds and scales
#: (:func:`fit_profile`; :mod:`des.tools.attention_profile` fits the same groups).
ATTENTION_SPECS: dict[str, tuple[tuple[str, ...], list[float], list[float], list[float], tuple[float, ...]]] = {
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
    specs = ATTENTION_SPECS
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
    if (profile.path / moe_fit.FILE).exists() and model.is_moe:  # the fused-MoE block: des/tools/moe_fit.py
        moe = moe_fit.fit_folder(profile.path, gpu, model, efficiency)
        efficiency = efficiency.model_copy(update=moe.factors)
        points = moe.points[moe.points["fitted"]].drop(columns="fitted").reset_index(drop=True)
        ordered["moe"] = GroupResult("moe", moe_fit.FACTORS, points)
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


# -- several models and TP degrees of LLMServingSim's profiler: <org>/<model>/<variant>/tp<N>/ --

#: Operators of ``dense.csv`` a mixture of experts runs inside its fused-MoE block, which
#: the profiler times as a whole in ``moe.csv`` (not fitted here: the MoE term is its own).
MOE_BLOCK_OPS = ("gate_up_proj", "down_proj", "act_fn")
#: Config fields LLMServingSim's profiler divides by the TP degree to emulate one rank on
#: one GPU (``profiler/core/engine.py: fuse_engine_kwargs``, ``tensor_parallel_size: 1``).
SHARDED = ("intermediate_size", "num_attention_heads", "num_key_value_heads", "vocab_size")
TP_FOLDER = re.compile(r"tp([1-9][0-9]*)")


def tree_folders(path: Path) -> list[Path]:
    """The ``tp<N>`` folders holding a ``dense.csv`` under ``path``: a model's variant folder
    (``<path>/tp1/``) or the profiler's root (``<path>/<org>/<model>/<variant>/tp1/``)."""
    found = [p.parent for p in sorted(path.glob("tp*/dense.csv"))]
    found += [p.parent for p in sorted(path.glob("*/*/*/tp*/dense.csv"))]
    return [p for p in found if TP_FOLDER.fullmatch(p.name)]


def catalog_model_of(meta: dict[str, Any], where: Path) -> ModelSpec:
    """The catalog model ``meta.yaml``'s ``model`` names: the one whose name (letters and
    digits) is the longest found in the repository name (``Qwen/Qwen3-30B-A3B-Instruct-2507``
    names ``qwen3-30b-a3b``, not ``qwen3-30b``)."""
    from des.catalog import model as catalog_model
    from des.catalog import model_names

    stated = meta.get("model")
    if not isinstance(stated, str) or not stated.strip():
        raise _problem(f"{str(where)!r}: needs model: (the Hugging Face repository profiled)")
    text = _compact(stated.rsplit("/", 1)[-1])
    found = [n for n in model_names() if _compact(n) in text]
    if not found:
        raise _problem(f"{str(where)!r}: model {stated!r} is none of the catalog's models")
    return catalog_model(max(found, key=lambda n: len(_compact(n))))


def check_tree_shapes(meta: dict[str, Any], model: ModelSpec, where: Path) -> None:
    """``meta.yaml``'s ``hf_overrides`` are those of the last TP degree profiled (the profiler
    writes ``engine_effective`` per degree, the last one stays): each sharded field must be
    the catalog model's divided by that degree, the others the catalog model's."""
    eng = meta.get("engine_effective")
    overrides = eng.get("hf_overrides") if isinstance(eng, dict) else None
    degrees = meta.get("tp_degrees")
    if not isinstance(overrides, dict):
        return
    if not isinstance(degrees, list) or not degrees or not all(isinstance(d, int) and d > 0 for d in degrees):
        raise _problem(f"{str(where)!r}: tp_degrees must list the TP degrees profiled (got {show(degrees)})")
    last = degrees[-1]
    for key, attr in META_SHAPE.items():
        if key not in overrides:
            continue
        full = getattr(model, attr)
        want = full // last if key in SHARDED else full
        if overrides[key] != want:
            raise _problem(
                f"{str(where)!r}: hf_overrides.{key} is {show(overrides[key])}, but {model.name} has {attr} {full}"
                + (f" ({want} per rank at tp {last}, the last degree profiled)" if key in SHARDED else "")
                + ": not the catalog model's shapes"
            )


def dense_ops(model: ModelSpec) -> tuple[str, ...]:
    """The operators a profile of ``model`` holds in ``dense.csv``."""
    ops = (*GEMMS, *ELEMENTWISE_LAYER, *ELEMENTWISE_STEP)
    return tuple(op for op in ops if not (model.is_moe and op in MOE_BLOCK_OPS))


@dataclass
class TreeProfile:
    """LLMServingSim profiles of several models and TP degrees of one GPU: ``parts`` by
    (catalog model name, tp), each the sharded operators of one rank."""

    path: Path
    parts: dict[tuple[str, int], Profile]
    models: dict[str, ModelSpec]
    metas: dict[str, dict[str, Any]]

    @property
    def label(self) -> str:
        return f"LLMServingSim profiles {self.path.name}"

    @property
    def degrees(self) -> list[int]:
        return sorted({tp for _, tp in self.parts})

    def describe(self) -> dict[str, str]:
        """Provenance recorded in a calibration file."""
        first = next(iter(self.metas.values()))
        versions = sorted({str(m.get("vllm_version", "?")) for m in self.metas.values()})
        return {
            "path": str(self.path),
            "format": "llmservingsim",
            "gpu": str(first.get("gpu", "?")),
            "models": ", ".join(self.models),
            "tp": ", ".join(map(str, self.degrees)),
            "vllm_version": ", ".join(versions),
        }


def read_tree(path: Path) -> TreeProfile:
    """Every ``<org>/<model>/<variant>/tp<N>/`` profile under ``path``, its model named by the
    ``meta.yaml`` beside the ``tp<N>`` folders and checked against the catalog's shapes."""
    folders = tree_folders(path)
    if not folders:
        raise _problem(f"{str(path)!r}: no <org>/<model>/<variant>/tp<N>/dense.csv under it")
    parts: dict[tuple[str, int], Profile] = {}
    models: dict[str, ModelSpec] = {}
    metas: dict[str, dict[str, Any]] = {}
    for folder in folders:
        meta_path = folder.parent / "meta.yaml"
        if not meta_path.is_file():
            raise _problem(f"{str(meta_path)!r}: no such file (it names the model of {str(folder)!r})")
        meta = read_meta(meta_path)
        model = catalog_model_of(meta, meta_path)
        check_tree_shapes(meta, model, meta_path)
        tp = int(TP_FOLDER.fullmatch(folder.name).group(1))  # type: ignore[union-attr]
        if (model.name, tp) in parts:
            raise _problem(f"{str(folder)!r}: {model.name} at tp {tp} is profiled twice under {str(path)!r}")
        part = read_profile(folder, dense_ops(model))
        part.meta = meta
        parts[model.name, tp] = part
        models[model.name], metas[model.name] = model, meta
    return TreeProfile(path, dict(sorted(parts.items())), models, metas)


def gemm_model(model: ModelSpec) -> tuple[ModelSpec, float]:
    """The model whose GEMM roofline predicts what ``dense.csv``'s projections sum to, and the
    share of its layer's linear weights they hold: the model itself and 1 for a dense one; for
    a mixture of experts (whose MLP is the fused-MoE block, not in ``dense.csv``) its dense
    twin and the attention projections' share of that twin's layer (the roofline's GEMM term
    is proportional to the weights at any token count, so the share scales it exactly)."""
    if not model.is_moe:
        return model, 1.0
    twin = model.model_copy(update={"num_experts": None, "num_experts_per_tok": None, "moe_intermediate_size": None})
    return twin, twin.attention_linear_params / twin.layer_linear_params


def fit_tree(tree: TreeProfile, gpu: GPUSpec) -> Fit:
    """Fit every group's factors to all models and TP degrees of ``tree`` at once, each (model,
    tp) predicted by the roofline of one layer on one of ``tp`` GPUs (:func:`fit_profile`'s
    groups and order). Per group what each part contributes: ``gemm`` the four projections of
    the dense models (a mixture of experts' q/k/v and o are checked, not fitted:
    :func:`moe_rows`, :func:`unfitted_gemm`);
    ``elementwise`` the per-step kernels of every part and the per-layer ones of the dense
    models (a mixture of experts runs its activation inside the fused-MoE block); ``sampler``
    the lowest TP degree's rows only (the profiler writes the same sampler rows at every
    degree: it runs on the gathered logits); Qwen3's ``qk_norm`` is left out (des has no
    such kernel). Not fitted: ``moe.csv``."""
    check_gpu(next(iter(tree.parts.values())), gpu)
    preds: dict[tuple[str, int], tuple[_Predictor, float]] = {}
    for name, tp in tree.parts:
        twin, share = gemm_model(tree.models[name])
        preds[name, tp] = (_Predictor(gpu, twin, tp), share)

    def frame_of(rows: list[pd.DataFrame]) -> pd.DataFrame:
        return pd.concat(rows, ignore_index=True)

    gemm_rows, head_rows, el_rows, samp_rows = [], [], [], []
    att_rows: dict[str, list[pd.DataFrame]] = {"attention_prefill": [], "attention_decode": [], "attention_mixed": []}
    low = min(tree.degrees)
    for (name, tp), part in tree.parts.items():
        key = {"model": name, "tp": tp}
        wide = part.dense.pivot(index="tokens", columns="layer", values="time")
        ops = [op for op in GEMMS if op in wide]
        gemm_rows.append(pd.DataFrame({**key, "tokens": wide.index, "measured": wide[ops].sum(axis=1, skipna=False)}))
        ps = part.per_sequence
        head = ps[ps.layer == "lm_head"]
        head_rows.append(pd.DataFrame({**key, "rows": head.sequences.to_numpy(), "measured": head.time.to_numpy()}))
        if tp == low:
            sm = ps[ps.layer == "sampler"]
            samp_rows.append(pd.DataFrame({**key, "rows": sm.sequences.to_numpy(), "measured": sm.time.to_numpy()}))
        step_sum = sum(wide[op] for op in ELEMENTWISE_STEP)
        el_rows.append(pd.DataFrame({**key, "kernels": "per step", "tokens": wide.index, "measured": step_sum}))
        if not tree.models[name].is_moe:
            layer_sum = sum(k * wide[op] for op, k in ELEMENTWISE_LAYER.items())
            el_rows.append(pd.DataFrame({**key, "kernels": "per layer", "tokens": wide.index, "measured": layer_sum}))
        a = part.attention
        cols = ["prefill_chunk", "kv_prefill", "n_decode", "kv_decode"]
        masks = {
            "attention_prefill": (a.prefill_chunk > 0) & (a.n_decode == 0),
            "attention_decode": a.prefill_chunk == 0,
            "attention_mixed": (a.prefill_chunk > 0) & (a.n_decode > 0),
        }
        for group, mask in masks.items():
            sub = a[mask]
            att_rows[group].append(sub[cols].assign(**key, measured=sub["time"].to_numpy()))

    def segmented(frame: pd.DataFrame, one: Callable[[_Predictor, float, Roofline, pd.DataFrame], np.ndarray]):
        frame = frame.dropna(subset=["measured"]).reset_index(drop=True)
        pieces = [
            (preds[k], idx, frame.iloc[idx].reset_index(drop=True))
            for k in preds
            if len(idx := np.flatnonzero(((frame["model"] == k[0]) & (frame["tp"] == k[1])).to_numpy()))
        ]

        def predict(params: dict[str, Any]) -> np.ndarray:
            eff = Efficiency.model_validate({**ENGINE_CPU, **params})
            out = np.empty(len(frame))
            for (pred, share), idx, part in pieces:
                out[idx] = one(pred, share, pred.build(eff), part)
            return out

        return frame, predict

    groups: dict[str, tuple[pd.DataFrame, Callable[[dict[str, Any]], np.ndarray]]] = {
        "gemm": segmented(
            frame_of([g for g in gemm_rows if not moe_rows(tree, g)]),
            lambda p, s, r, f: s * p.gemm(r, f["tokens"].to_numpy(float)),
        ),
        "lm_head": segmented(frame_of(head_rows), lambda p, s, r, f: p.lm_head(r, f["rows"].to_numpy(float))),
        "elementwise": segmented(
            frame_of(el_rows),
            lambda p, s, r, f: p.elementwise(r, f["tokens"].to_numpy(float), (f["kernels"] == "per layer").to_numpy()),
        ),
        "sampler": segmented(frame_of(samp_rows), lambda p, s, r, f: p.sampler(r, f["rows"].to_numpy(float))),
    }
    for group, rows in att_rows.items():
        groups[group] = segmented(frame_of(rows), lambda p, s, r, f: p.attention(r, f))
    fitter = _Fitter({"weight_bandwidth": 0.9, "gemm_compute": 0.9})
    specs: dict[str, tuple[tuple[str, ...], list[float], list[float], list[float], tuple[float, ...]]] = {
        "gemm": (("weight_bandwidth", "gemm_compute", "gemm_knee"), [0.9, 0.9, 0.3], [0.05, 0.05, 0.0],
                 [1.0, 1.0, 1.0], (1.0, 1.0, 1.0)),
        "lm_head": (("lm_head_bandwidth",), [0.9], [0.05], [1.5], (1.0,)),
        "elementwise": (ELEMENTWISE_FACTORS, [2.0, 2.0, 1.0, 0.5], [0.01, 0.05, 0.05, 0.0], [50.0, 10.0, 10.0, 5.0],
                        (1e-6, 1.0, 1.0, 1.0)),
        "sampler": (("sampler_fixed", "sampler_bandwidth", "sampler_spill", "sampler_l2"), [20.0, 2.0, 0.5, 0.5],
                    [0.1, 0.05, 0.05, 0.0], [500.0, 10.0, 10.0, 5.0], (1e-6, 1.0, 1.0, 1.0)),
        "attention_prefill": (("prefill_attention_fixed", "attention_compute", "attention_tile", "kv_stream"),
                              [8.0, 0.8, 100.0, 0.15], [0.0, 0.05, 0.0, 0.01], [500.0, 1.0, 1e4, 2.0],
                              (1e-6, 1.0, 1.0, 1.0)),
        "attention_decode": (("attention_fixed", "attention_per_seq", "kv_bandwidth"), [10.0, 0.3, 0.9],
                             [0.0, 0.0, 0.05], [500.0, 50.0, 2.0], (1e-6, 1e-6, 1.0)),
        "attention_mixed": (("mixed_per_seq", "mixed_kv_bandwidth"), [1.0, 0.5], [0.0, 0.02], [50.0, 2.0],
                            (1e-6, 1.0)),
    }  # fmt: skip
    for group in GROUPS:
        frame, predict = groups[group]
        names, x0, lo, hi, sc = specs[group]
        fitter.run(group, names, frame, predict, x0, lo, hi, sc)
    desc = tree.describe()
    basis = (
        f"{tree.label} (vLLM {desc['vllm_version']} kernels, {desc['models']} on {gpu.name}, "
        f"tp {' and '.join(desc['tp'].split(', '))})"
    )
    source = (
        f"Fitted by `des calibrate` to the {tree.label} ({desc['gpu']}; {desc['models']}; tp {desc['tp']}) with the "
        f"spec sheet of {gpu.name}, every model and TP degree at once, each predicted by its own roofline: least "
        f"squares in log time per op group. Not fitted: the fused-MoE block (moe.csv). {CPU_SOURCE}"
    )
    efficiency = Efficiency.model_validate(
        {**fitter.params, **ENGINE_CPU, "source": source, "provenance": "fitted", "basis": basis}
    )
    final = efficiency.model_dump(exclude={"source", "provenance", "basis", "uncertainty"})
    for group in GROUPS:
        fitter.groups[group].points["predicted"] = groups[group][1](final)
    ordered = {k: fitter.groups[k] for k in GROUPS}
    efficiency = with_uncertainty(efficiency, residual_sd(ordered))
    return Fit(gpu, None, tree, efficiency, ordered)


def moe_rows(tree: TreeProfile, rows: pd.DataFrame) -> bool:
    """Whether ``rows`` (one part's) are of a mixture of experts. Its attention projections
    (Qwen3-30B-A3B: 38 MB at TP 1, 19 MB at TP 2) stay in the RTX PRO 6000's 128 MB L2 between
    the profiler's repetitions of a one-layer model (2.2 TB/s at 1 token, above the DRAM's 1.6),
    which a 48-layer model streaming its experts never does: the GEMM factors are fitted to
    the dense models' layers (0.1-0.5 GB of weights), these rows only checked."""
    return bool(tree.models[str(rows["model"].iloc[0])].is_moe)


def unfitted_gemm(fit: Fit) -> pd.DataFrame:
    """The GEMM rows of a tree's mixtures of experts (q/k/v and o), measured against what the
    fitted factors predict (:func:`moe_rows`): ``model``, ``tp``, ``tokens``, ``measured``,
    ``predicted`` (seconds)."""
    tree = fit.profile
    assert isinstance(tree, TreeProfile)
    eff = fit.efficiency
    out = []
    for (name, tp), part in tree.parts.items():
        if not tree.models[name].is_moe:
            continue
        twin, share = gemm_model(tree.models[name])
        pred = _Predictor(fit.gpu, twin, tp)
        wide = part.dense.pivot(index="tokens", columns="layer", values="time")
        tokens = wide.index.to_numpy(float)
        predicted = share * pred.gemm(pred.build(eff), tokens)
        measured = wide[[op for op in GEMMS if op in wide]].sum(axis=1).to_numpy()
        out.append(
            pd.DataFrame({"model": name, "tp": tp, "tokens": tokens, "measured": measured, "predicted": predicted})
        )
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def model_tp_table(fit: Fit) -> list[dict[str, Any]]:
    """Per group, model and TP degree of a fit of several (model, tp): points, median and max
    absolute error (%); empty when the points name no TP degree."""
    out = []
    for name, g in fit.groups.items():
        if "tp" not in g.points:
            continue
        err = (g.points["predicted"] / g.points["measured"] - 1.0).abs()
        for (model, tp), e in err.groupby([g.points["model"], g.points["tp"]], sort=True):
            out.append(
                {
                    "group": name,
                    "model": str(model),
                    "tp": int(tp),
                    "points": len(e),
                    "median_abs_pct": 100 * float(e.median()),
                    "max_abs_pct": 100 * float(e.max()),
                }
            )
    return out


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
