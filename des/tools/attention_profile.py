"""Attention kernel profiles measured inside vLLM's attention backend (aiconfigurator), and
the fit of a GPU's prefill and decode attention factors to them.

NVIDIA's aiconfigurator (github.com/ai-dynamo/aiconfigurator, Apache-2.0) times vLLM's own
attention backend (``collector/vllm/collect_attn.py``: the backend vLLM selects, here
FlashAttention: its ``impl.forward``, bf16, as CUDA-graph replays, the mean of 6 after
3 warm-ups) and ships the times as two parquet tables per GPU and vLLM
version (``data/aiconfigurator-attention-profiles/``, README there):

- ``context_attention_perf.parquet``: ``batch_size`` sequences each prefilling ``isl``
  tokens with no prior context (causal);
- ``generation_attention_perf.parquet``: ``batch_size`` sequences each decoding one token
  over a context of ``step + 1`` tokens (the collector's ``seq_lens = input_len + 1``,
  ``step = input_len``);

both per ``num_heads`` query and ``num_key_value_heads`` KV heads of ``head_dim``, with
``latency`` in **milliseconds** (read here in seconds). Rows with an fp8 KV cache, a
sliding window or a head size other than 128 are left out; a point timed twice is read as
the mean of the two. No table holds a mixed batch (prefill chunks and decodes in one
kernel), so ``mixed_per_seq`` and ``mixed_kv_bandwidth`` are not fitted here
(:func:`des.tools.architectures.with_attention`).

:func:`fit_attention` fits, by least squares in log time as :mod:`des.tools.calibrate`
does for an LLMServingSim profile, the ``attention_decode`` group (generation rows:
``attention_fixed``, ``attention_per_seq``, ``kv_bandwidth``) and then the
``attention_prefill`` group (context rows: ``prefill_attention_fixed``,
``attention_compute``, ``attention_tile``, ``kv_stream``), after the factors the caller
derives from the decode fit (``after_decode``: the mixed-batch ones, which the prefill
term also reads) are set. Each head configuration is one layer of its own
model on one GPU, predicted from the coefficients :func:`des.cost.roofline.build_roofline`
derives, so what is fitted is what the simulator computes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from des.catalog.efficiency import Efficiency
from des.catalog.specs import GPUSpec, ModelSpec
from des.cost.roofline import Roofline
from des.errors import ScenarioError
from des.tools.calibrate import ATTENTION_SPECS, ENGINE_CPU, GroupResult, _Fitter, _Predictor, residual_sd

ARG = "PROFILE_DIR"
TABLES = {"context": "context_attention_perf.parquet", "generation": "generation_attention_perf.parquet"}
KEY = ("batch_size", "isl", "num_heads", "num_key_value_heads", "step")
HEAD_DIM = 128
#: The groups an attention profile fits, with their factors, start, bounds and scale (as
#: :func:`des.tools.calibrate.fit_profile` fits them).
SPECS: dict[str, tuple[tuple[str, ...], list[float], list[float], list[float], tuple[float, ...]]] = {
    "attention_decode": ATTENTION_SPECS["attention_decode"],
    "attention_prefill": (  # the RTX 4090 fit's, started at a lower compute share
        ("prefill_attention_fixed", "attention_compute", "attention_tile", "kv_stream"),
        [8.0, 0.6, 100.0, 0.15],
        [0.0, 0.05, 0.0, 0.01],
        [500.0, 1.0, 1e4, 2.0],
        (1e-6, 1.0, 1.0, 1.0),
    ),
}
#: The factors :func:`fit_attention` fits.
FITTED = tuple(name for spec in SPECS.values() for name in spec[0])


def _problem(msg: str) -> ScenarioError:
    return ScenarioError((ARG, msg))


@dataclass
class AttentionProfile:
    """One GPU's attention tables: ``context`` and ``generation`` rows (``batch_size``,
    ``isl``, ``step``, ``num_heads``, ``num_key_value_heads``, ``time`` in seconds), the
    device and vLLM version the collector recorded, and the folder they were read from."""

    path: Path
    device: str
    vllm_version: str
    context: pd.DataFrame
    generation: pd.DataFrame

    def describe(self) -> dict[str, str]:
        """Provenance recorded with a fit."""
        return {
            "path": str(self.path),
            "format": "aiconfigurator",
            "device": self.device,
            "vllm_version": self.vllm_version,
        }

    @property
    def label(self) -> str:
        return f"aiconfigurator attention profile ({self.device}, vLLM {self.vllm_version} FlashAttention)"


def _read_table(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise _problem(f"{str(path)!r}: no such file")
    try:
        raw = pd.read_parquet(path)
    except (OSError, ValueError) as exc:
        raise _problem(f"{str(path)!r}: cannot read it as parquet ({str(exc).splitlines()[0]})") from None
    need = [*KEY, "head_dim", "kv_cache_dtype", "latency", "device", "version"]
    missing = [c for c in need if c not in raw.columns]
    if missing:
        raise _problem(f"{str(path)!r}: no column {missing[0]!r}")
    keep = (raw["kv_cache_dtype"] == "bfloat16") & (raw["head_dim"] == HEAD_DIM)
    if "window_size" in raw.columns:
        keep &= raw["window_size"] == 0
    rows = raw.loc[keep, [*KEY, "latency", "device", "version"]].copy()
    latency = pd.to_numeric(rows["latency"], errors="coerce").to_numpy(float)
    if rows.empty or not (np.isfinite(latency) & (latency > 0)).all():
        raise _problem(f"{str(path)!r}: needs bf16 rows of head size {HEAD_DIM} with latencies > 0 (milliseconds)")
    rows["time"] = latency * 1e-3
    out = rows.groupby(list(KEY), as_index=False, sort=True).agg(
        time=("time", "mean"), device=("device", "first"), version=("version", "first")
    )
    for col in KEY:
        out[col] = out[col].astype(np.int64)
    return out


def read_attention_profile(path: Path) -> AttentionProfile:
    """The tables in folder ``path`` (:data:`TABLES`); problems as a ScenarioError naming ``PROFILE_DIR``."""
    if not path.is_dir():
        raise _problem(f"{str(path)!r}: no such folder")
    tables = {kind: _read_table(path / name) for kind, name in TABLES.items()}
    devices = {str(d) for t in tables.values() for d in t["device"].unique()}
    versions = {str(v) for t in tables.values() for v in t["version"].unique()}
    if len(devices) != 1 or len(versions) != 1:
        raise _problem(f"{str(path)!r}: the tables must come from one device and vLLM version")
    ctx, gen = tables["context"], tables["generation"]
    if (ctx["step"] != 0).any() or (gen["isl"] != 1).any():
        raise _problem(f"{str(path)!r}: context rows have step 0 and generation rows isl 1")
    return AttentionProfile(path, devices.pop(), versions.pop(), ctx.drop(columns=["device", "version"]),
                            gen.drop(columns=["device", "version"]))  # fmt: skip


def catalog_heads(tps: tuple[int, ...] = (1, 2, 4, 8)) -> set[tuple[int, int]]:
    """The (query, KV) head counts of :data:`HEAD_DIM` one GPU runs for some catalog model
    (grouped-query attention, not MLA) at a tensor-parallel degree of ``tps`` (KV heads
    fewer than ``tp`` are replicated: one per GPU)."""
    from des import catalog

    out = set()
    for name in catalog.model_names():
        m = catalog.model(name)
        if m.is_mla or m.d_head != HEAD_DIM:
            continue
        for tp in tps:
            if m.num_attention_heads % tp == 0:
                out.add((m.num_attention_heads // tp, max(m.num_key_value_heads // tp, 1)))
    return out


def head_model(num_heads: int, num_kv_heads: int) -> ModelSpec:
    """One layer whose attention has these heads of :data:`HEAD_DIM` (its other shapes do not
    enter attention's cost)."""
    return ModelSpec(
        name=f"attention-{num_heads}q-{num_kv_heads}kv",
        num_layers=1,
        hidden_size=num_heads * HEAD_DIM,
        intermediate_size=4 * num_heads * HEAD_DIM,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=HEAD_DIM,
        vocab_size=32000,
        description="one attention layer of an aiconfigurator profile's head configuration",
    )


def shapes(frame: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Rows as the simulator's batch aggregates (:class:`~des.cost.base.BatchShape`):
    ``seqs``, ``prefill_tokens``, ``pairs``, ``prefill_context`` (prefill rows, context
    ``kind``) or ``decode_tokens``, ``decode_context`` (generation rows), in tokens."""
    b = frame["batch_size"].to_numpy(float)
    if kind == "context":
        isl = frame["isl"].to_numpy(float)
        return pd.DataFrame({"seqs": b, "prefill_tokens": b * isl, "pairs": b * isl * (isl + 1) / 2,
                             "prefill_context": b * isl, "decode_tokens": 0.0, "decode_context": 0.0})  # fmt: skip
    ctx = frame["step"].to_numpy(float) + 1
    return pd.DataFrame({"seqs": b, "prefill_tokens": 0.0, "pairs": 0.0, "prefill_context": 0.0,
                         "decode_tokens": b, "decode_context": b * ctx})  # fmt: skip


def attention_time(r: Roofline, s: pd.DataFrame) -> np.ndarray:
    """One layer's attention (seconds) for rows of :func:`shapes`: the simulator's
    ``attention_prefill`` (prefill-only rows) or ``attention_decode`` (decode-only rows) term
    (:meth:`des.cost.roofline.Roofline.breakdown`), vectorised."""
    pt, pairs, x = s["prefill_tokens"].to_numpy(), s["pairs"].to_numpy(), s["prefill_context"].to_numpy()
    n, d = s["decode_tokens"].to_numpy(), s["decode_context"].to_numpy()
    chunks = np.maximum(s["seqs"].to_numpy() - n, 1)
    pre = r.pre_fixed_s + np.maximum.reduce(
        [r.pre_s_per_pair * (pairs + r.pre_tile_pairs * pt), r.stream_s_per_context * x / chunks,
         r.mixed_s_per_context * x]
    )  # fmt: skip
    dec = r.dec_fixed_s + r.dec_s_per_seq * n + r.dec_s_per_context * d
    return np.asarray(np.where(pt > 0, pre, dec))


@dataclass
class AttentionFit:
    """The fitted factors (``efficiency``: ``base`` with :data:`FITTED` replaced) and how well
    they reproduce the profile's rows, per group."""

    gpu: GPUSpec
    profile: AttentionProfile
    efficiency: Efficiency
    groups: dict[str, GroupResult]
    models: dict[tuple[int, int], ModelSpec]

    def roofline(self, heads: tuple[int, int]) -> Roofline:
        """The roofline of one layer with ``heads`` (query, KV) on this GPU under the fit."""
        return _Predictor(self.gpu, self.models[heads]).build(self.efficiency)


def fit_attention(
    profile: AttentionProfile,
    gpu: GPUSpec,
    base: Efficiency,
    after_decode: Callable[[dict[str, Any]], dict[str, float]] | None = None,
) -> AttentionFit:
    """Fit :data:`FITTED` of ``gpu`` to ``profile``; ``after_decode(factors)`` (optional) gives
    factors derived from the decode fit, set before the prefill group is fitted; every other
    factor is ``base``'s. The returned efficiency's ``attention`` uncertainty is the fit's
    residual sd."""
    wanted = catalog_heads()

    def served(f: pd.DataFrame) -> pd.DataFrame:
        pairs = zip(f.num_heads.astype(int), f.num_key_value_heads.astype(int), strict=True)
        return f[np.array([p in wanted for p in pairs], dtype=bool)]

    frames = {"attention_decode": served(profile.generation), "attention_prefill": served(profile.context)}
    kinds = {"attention_prefill": "context", "attention_decode": "generation"}
    heads = sorted(
        {(int(q), int(k)) for f in frames.values() for q, k in zip(f.num_heads, f.num_key_value_heads, strict=True)}
    )
    models = {h: head_model(*h) for h in heads}
    preds = {h: _Predictor(gpu, m) for h, m in models.items()}
    keep = {"source", "provenance", "basis", "uncertainty"}
    fitter = _Fitter(base.model_dump(exclude=keep))
    derived: dict[str, float] = {}
    predictors = {}
    for name, frame in frames.items():
        cols = ["num_heads", "num_key_value_heads", "batch_size", "isl", "step"]
        pts = pd.concat([frame[cols].reset_index(drop=True), shapes(frame, kinds[name]).reset_index(drop=True)],
                        axis=1).assign(measured=frame["time"].to_numpy())  # fmt: skip
        idx = {h: np.flatnonzero((pts.num_heads == h[0]).to_numpy() & (pts.num_key_value_heads == h[1]).to_numpy())
               for h in heads}  # fmt: skip

        def predict(params: dict[str, Any], pts: pd.DataFrame = pts, idx: dict = idx) -> np.ndarray:
            eff = Efficiency.model_validate({**params, **ENGINE_CPU})
            out = np.empty(len(pts))
            for h, i in idx.items():
                if len(i):
                    out[i] = attention_time(preds[h].build(eff), pts.iloc[i])
            return out

        names, x0, lo, hi, sc = SPECS[name]
        fitter.run(name, names, pts, predict, x0, lo, hi, sc)
        predictors[name] = predict
        if name == "attention_decode" and after_decode is not None:
            derived = after_decode(dict(fitter.params))
            fitter.params.update(derived)
    efficiency = Efficiency.model_validate({**base.model_dump(), **derived, **{k: fitter.params[k] for k in FITTED}})
    params = efficiency.model_dump(exclude=keep)
    for name, predict in predictors.items():
        fitter.groups[name].points["predicted"] = predict(params)
    sd = residual_sd(fitter.groups)
    uncertainty = {**{str(k): v for k, v in base.uncertainty.items()}, "attention": sd["attention"]}
    efficiency = Efficiency.model_validate({**efficiency.model_dump(), "uncertainty": uncertainty})
    groups = {k: fitter.groups[k] for k in ("attention_prefill", "attention_decode")}
    return AttentionFit(gpu, profile, efficiency, groups, models)
