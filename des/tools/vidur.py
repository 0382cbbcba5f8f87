"""Vidur's kernel profiles, read for ``des calibrate``.

Vidur (github.com/microsoft/vidur, MIT) profiles the non-attention half of a decoder
layer with its own copy of the layer (``vidur/profiling/mlp/mlp_impl.py``, Sarathi's
kernels, fp16, 2 warm-up and 20 timed runs per point) and writes one
``compute/<gpu>/<org>/<model>/mlp.csv`` per GPU and model: per-operator CUDA times in
milliseconds (``time_stats.<op>.{min,max,mean,median,std}``), one row per token count
(``num_tokens``) and tensor-parallel degree (``num_tensor_parallel_workers``), the
model's shapes in the trailing columns. What each operator is, from that source:

===========================  =========================================================
``attn_pre_proj``            the QKV projection, ``h → (n_head + 2 n_kv_head) · d / tp``
                             (``ColumnParallelLinear``)
``attn_post_proj``           the output projection, ``n_head · d / tp → h`` (row-parallel)
``mlp_up_proj``              gate and up fused, ``h → 2 I / tp`` when ``use_gated_mlp``
                             (SiLU-and-mul follows), else ``h → I / tp`` (GELU)
``mlp_down_proj``            ``I / tp → h`` (row-parallel)
``input_layernorm``,         RMSNorm (LayerNorm when ungated, as phi-2); the second only
``post_attention_layernorm`` in models with a post-attention norm
``attn_rope``                rotary embedding of q and k
``mlp_act``                  SiLU-and-mul (gated) or GELU
``add``                      one residual add per layer (phi-2: attention + MLP + residual)
``emb``                      the vocabulary-parallel embedding lookup
===========================  =========================================================

Vidur's GPUs (``vidur/config/device_sku_config.py``): ``a100`` has 80 GB and 312 TFLOP/s
fp16 (the catalog's ``a100-80gb``), ``h100`` 80 GB and 1,000 TFLOP/s (``h100-80gb``,
SXM), ``a40`` 150 TFLOP/s (``a40``).

Rows with ``num_tensor_parallel_workers = tp`` hold one GPU's share: ``1/tp`` of the
GEMMs, the activation and rotary; the norms and adds are whole. No attention kernel,
LM head or sampler is in these files. Times are read from the median column, in seconds;
a point profiled twice (some files repeat 2048 and 4096 tokens) is read as the mean of the two.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from des.catalog.specs import ModelSpec
from des.errors import ScenarioError
from des.tools.profile_csv import MAX_KERNEL_S, read_csv
from des.workload.formats.checks import show

ARG = "PROFILE_DIR"
GEMM_OPS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
#: The per-layer element-wise kernels of a pre-norm (Llama-style) layer: 2 RMSNorms, the
#: rotary embedding, SiLU-and-mul and the residual add Vidur times.
ELEMENTWISE_OPS = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
SHAPE = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp")
GRID = ("num_tokens", "num_tensor_parallel_workers")


def _problem(msg: str) -> ScenarioError:
    return ScenarioError((ARG, msg))


def profile_files(path: Path) -> list[Path]:
    """Vidur's ``mlp.csv`` files under ``path``, in a fixed order (empty: not this format)."""
    return sorted(path.rglob("mlp.csv")) if path.is_dir() else []


@dataclass
class VidurProfile:
    """One GPU's Vidur profiles: a row per (model, tp, tokens) with each operator's time (s)."""

    path: Path
    gpu: str  # Vidur's name of the GPU: its folder (a100, h100, a40)
    rows: pd.DataFrame  # model, tp, tokens, one column per operator (seconds; NaN where not timed)
    models: dict[str, ModelSpec]
    meta: dict[str, str] = field(default_factory=dict)

    def describe(self) -> dict[str, str]:
        """Provenance recorded in a calibration file."""
        tps = sorted(int(t) for t in self.rows["tp"].unique())
        return {
            "path": str(self.path),
            "format": "vidur",
            "gpu": self.gpu,
            "models": ", ".join(self.models),
            "tp": ", ".join(map(str, tps)),
            "source": "Vidur (github.com/microsoft/vidur, MIT) data/profiling/compute, commit 7d47513",
        }

    @property
    def label(self) -> str:
        """A short description: ``Vidur a100 profile, 8 models, tp 1-8``."""
        tps = sorted(int(t) for t in self.rows["tp"].unique())
        span = f"tp {tps[0]}-{tps[-1]}" if len(tps) > 1 else f"tp {tps[0]}"
        return f"Vidur {self.gpu} profile, {len(self.models)} models, {span}"


def _model(name: str, shape: pd.Series) -> ModelSpec:
    return ModelSpec(
        name=name,
        num_layers=1,
        hidden_size=int(shape["n_embd"]),
        intermediate_size=int(shape["n_expanded_embd"]),
        num_attention_heads=int(shape["n_head"]),
        num_key_value_heads=int(shape["n_kv_head"]),
        vocab_size=int(shape["vocab_size"]),
        gated_mlp=bool(shape["use_gated_mlp"]),
        description="one decoder layer, shapes from a Vidur profile",
    )


def _read_one(path: Path) -> tuple[pd.DataFrame, pd.Series]:
    name = str(path)
    frame = read_csv(path, _problem)
    need = [f"time_stats.{op}.median" for op in GEMM_OPS] + list(SHAPE) + list(GRID)
    missing = [c for c in need if c not in frame.columns]
    if missing:
        raise _problem(f"{name!r}: no column {missing[0]!r} (a Vidur mlp.csv has time_stats.<op>.median columns)")
    if frame.empty:
        raise _problem(f"{name!r} has no rows")
    shapes = frame[list(SHAPE)].drop_duplicates()
    if len(shapes) != 1:
        raise _problem(f"{name!r}: the model's shape columns change between rows")
    out = pd.DataFrame()
    for col, key in (("num_tokens", "tokens"), ("num_tensor_parallel_workers", "tp")):
        values = pd.to_numeric(frame[col], errors="coerce").to_numpy(float)
        bad = ~np.isfinite(values) | (values < 1) | (values != np.round(values))
        if bad.any():
            i = int(np.argmax(bad))
            raise _problem(f"{name!r} row {i + 2}: {col} {frame[col].iloc[i]!r} is not an integer >= 1")
        out[key] = values.astype(np.int64)
    for op in (*GEMM_OPS, *ELEMENTWISE_OPS, "emb"):
        col = f"time_stats.{op}.median"
        if col not in frame.columns:
            out[op] = np.nan
            continue
        ms = pd.to_numeric(frame[col], errors="coerce").to_numpy(float)
        bad = ~np.isfinite(ms) | (ms <= 0) | (ms > MAX_KERNEL_S * 1e3)
        if bad.any():
            i = int(np.argmax(bad))
            raise _problem(
                f"{name!r} row {i + 2}: {col} {show(frame[col].iloc[i])} is not a time > 0 (ms) "
                f"and at most {MAX_KERNEL_S * 1e3:g} ({MAX_KERNEL_S:g} s)"
            )
        out[op] = ms * 1e-3
    # a point profiled twice (some files repeat 2048 and 4096 tokens) counts once, at the mean
    out = out.groupby(["tp", "tokens"], as_index=False, sort=True).mean()
    return out, shapes.iloc[0]


def read_vidur(path: Path) -> VidurProfile:
    """The Vidur profiles under folder ``path``, all of one GPU; every problem as a ScenarioError."""
    files = profile_files(path)
    if not files:
        raise _problem(f"{str(path)!r} holds no Vidur mlp.csv")
    gpus = sorted({f.parts[-4] if len(f.parts) >= 4 else "?" for f in files})
    if len(gpus) > 1:
        raise _problem(
            f"{str(path)!r} holds profiles of several GPUs ({', '.join(gpus)}): name one GPU's folder, "
            f"e.g. {str(path / 'compute' / gpus[0]) if (path / 'compute').is_dir() else str(path / gpus[0])!r}"
        )
    frames, models = [], {}
    for f in files:
        name = "/".join(f.parts[-3:-1])
        rows, shape = _read_one(f)
        models[name] = _model(name, shape)
        frames.append(rows.assign(model=name))
    rows = pd.concat(frames, ignore_index=True)
    rows = rows[["model", "tp", "tokens", *GEMM_OPS, *ELEMENTWISE_OPS, "emb"]]
    return VidurProfile(path, gpus[0], rows.sort_values(["model", "tp", "tokens"], ignore_index=True), models)
