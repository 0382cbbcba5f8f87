"""Every catalog GPU's efficiency factors from the fitted architectures.

Four architectures have kernel profiles (:data:`PROFILED`): Ada (an RTX 4090, vLLM 0.19
kernels, every op group), Blackwell with GDDR7 (an RTX PRO 6000 Server Edition, vLLM 0.19
kernels of three models at TP 1 and 2, every op group), Ampere (an A100 and an A40) and
Hopper (an H100), the last two from Vidur's profiles, which hold the GEMMs and
element-wise kernels but no attention, LM head or sampler. A catalog GPU gets its factors
by these rules:

- **fitted**: the GPU, or another GPU of its architecture with its memory type, was
  profiled: its factors are that fit's (:func:`des.tools.calibrate.fit_profile` /
  :func:`~des.tools.calibrate.fit_vidur` / :func:`~des.tools.calibrate.fit_tree`). The memory
  type matters: the B200 (Blackwell, HBM3e) does not take the PRO 6000's GDDR7 factors,
  whose element-wise kernels reach 2.9 × the DRAM bandwidth (activations in L2), where HBM
  parts' reach 0.85 ×, but the transfer rule for HBM;
- **GEMMs fitted inside vLLM** (GPUs of :data:`GEMM_PROFILED`: the A100 for Ampere, the H100
  for Hopper): the GEMM factors (``weight_bandwidth``, ``gemm_compute``, ``gemm_knee``,
  ``gemm_fixed``) are fitted to the bf16 GEMM kernel times NVIDIA's aiconfigurator measured
  inside vLLM (:mod:`des.tools.gemm_profile`), not to Vidur's 2024 fp16 PyTorch timings; the
  element-wise factors stay Vidur's. The A40 has no such table and keeps Vidur's GEMM fit
  (with no fixed GEMM time: Vidur's per-operator timing cannot separate one);
- **carried over** (the groups a Vidur profile lacks, :func:`carry_over`): Ada's fitted
  attention, LM-head and sampler factors, each bandwidth fraction scaled by the
  architecture's fitted ``weight_bandwidth`` over Ada's and each compute fraction by its
  ``gemm_compute`` over Ada's (a kernel streaming KV reaches the share of DRAM bandwidth
  a GEMM streaming weights does on that memory system, FlashAttention the share of the
  tensor peak cuBLAS does); the fixed and per-sequence times and the sampler are Ada's
  as they are;
- **attention fitted** (GPUs of :data:`ATTENTION_PROFILED`: the H100 for Hopper, the A100
  for Ampere, from attention kernel times NVIDIA's aiconfigurator measured inside vLLM's
  FlashAttention backend, :mod:`des.tools.attention_profile`): the prefill and decode
  attention factors are that fit's; the mixed-batch ones, which no profile holds, are
  Ada's scaled by the fitted decode factor they pair with over Ada's
  (:data:`MIXED_BY_DECODE`, :func:`with_attention`); LM head and sampler are carried over.
  The A40 has no attention profile and keeps the carry-over rule;
- **transferred** (no profile of the architecture with that memory: the B200, CDNA3, :func:`transfer`):
  each factor every profile fits (GEMM and element-wise) is the geometric mean over the
  profiled GPUs with the same memory type: GDDR (RTX 4090 of Ada, A40 of Ampere) or HBM
  (A100 of Ampere, H100 of Hopper), so each class spans two architectures and the rule
  uses all three; attention and the rest are carried over from Ada by the rule above,
  applied to the transferred factors. The split by memory is what the data support: the
  element-wise kernels reach 2.7-3.1 × the DRAM bandwidth on both GDDR cards (their
  activations stay in L2, which is fast next to slow DRAM) and 0.85 × on both HBM parts,
  and the spread of the element-wise factors within a memory type is a fraction of that
  across all profiled GPUs (0.22 against 0.54, :func:`spreads` with ``by_memory=False``).
  The GEMM factors do not tell the classes apart (0.088 within against 0.078 across, since
  the A100's and H100's come from vLLM's GEMM kernels): they are averaged by class all the
  same, one rule for every group. ``gemm_fixed`` is transferred only where both members of
  the class have one (the HBM class: A100 and H100; the GDDR class keeps 0).

Mixture-of-experts factors (``moe_*``, :mod:`des.tools.moe_fit`): one profile of vLLM's
fused-MoE block exists (:data:`MOE_PROFILED`: Qwen3-30B-A3B on an RTX PRO 6000, GB202,
GDDR7). Its factors go to the catalog GPUs of the same architecture and memory type (the
same chip family, sm_120, running the same Triton kernel with the same configs); every
other GPU keeps its experts inside the dense GEMMs' roofline. No transfer by a ratio rule:
the block's fixed time per layer (``moe_fixed``, its six small kernels) and its shares of
the peaks on sm_120's Triton configs are one GPU's measurements, with nothing to tell how
they move to another memory system or to the MoE kernels vLLM runs elsewhere (CUTLASS and
FlashInfer on sm_100, the MXFP4 ``matmul_ogs`` kernels on Hopper).

Uncertainty (sd of ln(true time / predicted time) per group of work): a fitted group's
is the fit's residual (:func:`des.tools.calibrate.residual_sd`); a carried-over or
transferred group adds the rule's spread in quadrature: the sd of ln(factor) of the
factors the rule moves among the profiled GPUs of a memory type (:func:`spreads`), once
per rule applied (attention of a transferred GPU: twice, carried over and transferred;
attention of an attention-fitted GPU: the attention fit's residual and the rule's spread
once, for the mixed-batch factors).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from des import catalog
from des.catalog.efficiency import Efficiency, UncertaintyGroup
from des.tools import moe_fit
from des.tools.attention_profile import FITTED as ATTENTION_FITTED
from des.tools.attention_profile import AttentionFit, fit_attention, read_attention_profile
from des.tools.calibrate import Fit, fit_folder, round_sig
from des.tools.gemm_profile import FITTED as GEMM_FITTED
from des.tools.gemm_profile import GemmFit, fit_gemm, read_gemm_profile

#: Ada's factors a Vidur-profiled architecture takes over, scaled by its weight-streaming
#: fraction (bandwidths) or its GEMM compute fraction (compute), or as they are (times, tile, sampler).
SCALED_BY_BANDWIDTH = ("lm_head_bandwidth", "kv_bandwidth", "kv_stream", "mixed_kv_bandwidth")
SCALED_BY_COMPUTE = ("attention_compute",)
AS_IS = (
    "attention_tile", "attention_fixed", "prefill_attention_fixed", "attention_per_seq", "mixed_per_seq",
    "sampler_fixed", "sampler_bandwidth", "sampler_spill", "sampler_l2", "step_overhead", "seq_overhead",
)  # fmt: skip
#: Factors every profile fits, which the transfer rule averages, by uncertainty group.
FITTED_BY_ALL: dict[UncertaintyGroup, tuple[str, ...]] = {
    "gemm": ("weight_bandwidth", "gemm_compute", "gemm_knee", "gemm_fixed"),
    "elementwise": ("elementwise_kernel", "elementwise_bandwidth", "elementwise_spill", "elementwise_l2"),
}
#: The factors whose spread across architectures sets each rule's uncertainty (the ones a
#: group's time is inversely proportional to in its usual regime).
SPREAD_OF = {
    "gemm": ("weight_bandwidth", "gemm_compute"),
    "elementwise": ("elementwise_kernel", "elementwise_bandwidth"),
}
GROUPS = ("gemm", "attention", "elementwise")


@dataclass(frozen=True)
class Profiled:
    """A kernel profile behind an architecture's factors: ``folder`` under the data folder,
    measured on catalog GPU ``gpu`` (``model``: the catalog model an LLMServingSim profile measured)."""

    architecture: str
    gpu: str
    folder: str
    model: str | None = None


PROFILED = (
    Profiled("ada", "rtx4090", "rtx4090-vllm-kernel-profile", "llama-3.1-8b"),
    Profiled("ampere", "a100-80gb", "vidur-kernel-profiles/compute/a100"),
    Profiled("ampere", "a40", "vidur-kernel-profiles/compute/a40"),
    Profiled("hopper", "h100-80gb", "vidur-kernel-profiles/compute/h100"),
    # LLMServingSim's profiles of Llama-3.1-8B, Qwen3-32B and Qwen3-30B-A3B at TP 1 and 2, all
    # fitted at once, on the RTX PRO 6000 Blackwell *Server* Edition (1597.6 GB/s, 2430 MHz as its
    # driver reports; the Workstation Edition, rtx-pro-6000, has 1792 GB/s and 2617 MHz)
    Profiled("blackwell", "rtx-pro-6000-server", "rtxpro6000-vllm-kernel-profile"),
)
#: Architectures of the catalog without a profile, which take the transfer rule.
TRANSFERRED = ("cdna3",)
#: The profile of vLLM's fused-MoE block (``moe.csv``) and the GPU it was measured on.
MOE_PROFILED = Profiled(
    "blackwell",
    "rtx-pro-6000-server",
    "rtxpro6000-vllm-kernel-profile/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16/tp1",
    "qwen3-30b-a3b",
)
#: The repository's data folder (the profiles of :data:`PROFILED`, :data:`MOE_PROFILED` and
#: :data:`ATTENTION_PROFILED`).
DATA = Path(__file__).resolve().parents[2] / "data"


def moe_factors(data: Path = DATA) -> dict[str, float]:
    """The fused-MoE factors of :data:`MOE_PROFILED`'s GPU, fitted to its ``moe.csv``."""
    p = MOE_PROFILED
    gpu = catalog.gpu(p.gpu)
    assert p.model is not None
    return moe_fit.fit_folder(data / p.folder, gpu, catalog.model(p.model), gpu.efficiency).factors


def takes_moe(name: str) -> bool:
    """Whether catalog GPU ``name`` carries the MoE profile's factors: same architecture and memory type."""
    gpu, ref = catalog.gpu(name), catalog.gpu(MOE_PROFILED.gpu)
    return (gpu.architecture, gpu.memory_type) == (ref.architecture, ref.memory_type)


@dataclass(frozen=True)
class GemmProfiled:
    """A GEMM kernel table (aiconfigurator's, :mod:`des.tools.gemm_profile`) behind catalog GPU
    ``gpu``'s GEMM factors: ``folder`` under the data folder."""

    architecture: str
    gpu: str
    folder: str


GEMM_PROFILED = (
    GemmProfiled("hopper", "h100-80gb", "aiconfigurator-gemm-profiles/h100_sxm/vllm-0.19.0"),
    GemmProfiled("ampere", "a100-80gb", "aiconfigurator-gemm-profiles/a100_sxm/vllm-0.14.0"),
)


def fit_all(data: Path) -> dict[str, Fit]:
    """Every profile of :data:`PROFILED` fitted (catalog GPU name → fit), the GEMMs of the GPUs
    of :data:`GEMM_PROFILED` refitted to their GEMM tables (:func:`with_gemm`); ``data``: the data folder."""
    fits = {}
    for p in PROFILED:
        model = catalog.model(p.model) if p.model else None
        fits[p.gpu] = fit_folder(data / p.folder, catalog.gpu(p.gpu), model)
    for g in GEMM_PROFILED:
        fit = fits[g.gpu]
        fits[g.gpu] = with_gemm(fit, fit_gemm(read_gemm_profile(data / g.folder), fit.gpu, fit.efficiency))
    return fits


def with_gemm(fit: Fit, gemm: GemmFit) -> Fit:
    """A Vidur ``fit`` with its GEMM factors, ``gemm`` group and GEMM uncertainty those of
    ``gemm`` (the fit to vLLM's GEMM kernels); its element-wise group stays."""
    uncertainty = {**fit.efficiency.uncertainty, "gemm": gemm.efficiency.uncertainty["gemm"]}
    basis = f"{gemm.profile.label} for the GEMMs, element-wise kernels likewise from the {fit.efficiency.basis}"
    update: dict[str, object] = {k: getattr(gemm.efficiency, k) for k in GEMM_FITTED}
    eff = fit.efficiency.model_copy(update={**update, "uncertainty": uncertainty, "basis": basis})
    groups = {"gemm": gemm.group, **{k: v for k, v in fit.groups.items() if k != "gemm"}}
    return Fit(fit.gpu, fit.model, fit.profile, eff, groups, {**fit.labels, "gemm": gemm.profile.label})


def _geometric_mean(values: list[float]) -> float:
    """The geometric mean of ``values``, 4 significant digits; 0 if one is 0 (a fixed time
    only some members of a class have, such as ``gemm_fixed``, is not transferred)."""
    if min(values) <= 0:
        return 0.0
    return round_sig(float(np.exp(np.mean(np.log(values)))))


def _quadrature(*terms: float) -> float:
    return round_sig(math.sqrt(sum(t * t for t in terms)))


def _memory(gpu: str) -> str:
    memory = catalog.gpu(gpu).memory_type
    if memory is None:
        raise ValueError(f"{gpu}: memory_type not set in the catalog")
    return memory


def fitted_factors(fits: dict[str, Fit]) -> dict[str, dict[str, float]]:
    """Per profiled GPU, the factors every profile fits (:data:`FITTED_BY_ALL`)."""
    names = [n for group in FITTED_BY_ALL.values() for n in group]
    return {gpu: {n: float(getattr(fit.efficiency, n)) for n in names} for gpu, fit in fits.items()}


#: The architectures whose fits the carry-over and transfer rules (and their spreads) are
#: defined over. Blackwell's fit is not among them yet: adding it moves every transferred
#: and carried-over GPU's uncertainty (Ampere's, Hopper's, CDNA 3's), a change to make in one
#: step with those entries, not beside them.
RULE_ARCHITECTURES = ("ada", "ampere", "hopper")


def _ruled(fits: dict[str, Fit]) -> list[str]:
    return [gpu for gpu in fits if catalog.gpu(gpu).architecture in RULE_ARCHITECTURES]


def classes(fits: dict[str, Fit]) -> dict[str, list[str]]:
    """The profiled GPUs of :data:`RULE_ARCHITECTURES` by memory type (``gddr``, ``hbm``):
    the transfer rule's classes."""
    out: dict[str, list[str]] = {}
    for gpu in _ruled(fits):
        out.setdefault(_memory(gpu), []).append(gpu)
    return out


def spreads(fits: dict[str, Fit], by_memory: bool = True) -> dict[str, float]:
    """Per group, the rule's spread: the sd of ln(factor) among the profiled GPUs of a memory
    type (pooled over the types: each contributes its deviations from its own mean and
    n - 1 degrees of freedom), root mean square over the group's factors of :data:`SPREAD_OF`.
    ``by_memory=False``: the sd across all profiled GPUs as one class (what the memory split
    is measured against)."""
    factors = fitted_factors(fits)
    members = classes(fits) if by_memory else {"all": _ruled(fits)}
    out = {}
    for group, names in SPREAD_OF.items():
        variances = []
        for n in names:
            sq, dof = 0.0, 0
            for gpus in members.values():
                ln = np.log([factors[g][n] for g in gpus])
                sq += float(np.sum((ln - ln.mean()) ** 2))
                dof += len(gpus) - 1
            variances.append(sq / dof)
        out[group] = round_sig(float(np.sqrt(np.mean(variances))))
    return out


def carry_over(own: Efficiency, ada: Efficiency, spread: float) -> Efficiency:
    """``own`` (GEMM and element-wise factors fitted) completed with Ada's other factors by
    the carry-over rule; its attention uncertainty is Ada's fitted one with ``spread`` added
    in quadrature."""
    bw = own.weight_bandwidth / ada.weight_bandwidth
    cp = own.gemm_compute / ada.gemm_compute
    update: dict[str, object] = {k: round_sig(getattr(ada, k) * bw) for k in SCALED_BY_BANDWIDTH}
    update |= {k: round_sig(getattr(ada, k) * cp) for k in SCALED_BY_COMPUTE}
    update |= {k: getattr(ada, k) for k in AS_IS}
    uncertainty = {**own.uncertainty, "attention": _quadrature(ada.uncertainty["attention"], spread)}
    basis = f"{own.basis}; attention, LM head and sampler carried over from ada (rtx4090)"
    return own.model_copy(update={**update, "uncertainty": uncertainty, "basis": basis})


def transfer(fits: dict[str, Fit], memory: str) -> Efficiency:
    """The transfer rule's factors for an architecture without a profile whose GPU has
    ``memory`` (``gddr`` or ``hbm``): the geometric mean of each fitted factor over the
    profiled GPUs with that memory, the rest carried over from Ada (module docstring)."""
    members = classes(fits)[memory]
    factors = fitted_factors(fits)
    ada = fits["rtx4090"].efficiency
    mean = {k: _geometric_mean([factors[g][k] for g in members]) for k in factors[members[0]]}
    spread = spreads(fits)
    fitted_sd = {
        g: float(np.sqrt(np.mean([fits[m].efficiency.uncertainty[g] ** 2 for m in members]))) for g in FITTED_BY_ALL
    }
    out = carry_over(ada.model_copy(update=mean), ada, spread["gemm"])
    uncertainty = {
        "gemm": _quadrature(fitted_sd["gemm"], spread["gemm"]),
        "attention": _quadrature(ada.uncertainty["attention"], spread["gemm"], spread["gemm"]),
        "elementwise": _quadrature(fitted_sd["elementwise"], spread["elementwise"]),
    }
    archs = sorted({p.architecture for p in PROFILED if p.gpu in members})
    basis = (
        f"transferred from {' and '.join(archs)} ({', '.join(members)}: the profiled GPUs with {memory.upper()} "
        "memory) by the geometric mean of each fitted factor; attention, LM head and sampler carried over from ada"
    )
    return out.model_copy(update={"provenance": "transferred", "basis": basis, "uncertainty": uncertainty})


# -- attention measured inside vLLM (issue #31): Hopper and Ampere ---------------------------


@dataclass(frozen=True)
class AttentionProfiled:
    """An attention kernel profile (aiconfigurator's tables, :mod:`des.tools.attention_profile`)
    behind catalog GPU ``gpu``'s prefill and decode attention factors: ``folder`` under the data folder."""

    architecture: str
    gpu: str
    folder: str


ATTENTION_PROFILED = (
    AttentionProfiled("hopper", "h100-80gb", "aiconfigurator-attention-profiles/h100_sxm/vllm-0.19.0"),
    AttentionProfiled("ampere", "a100-80gb", "aiconfigurator-attention-profiles/a100_sxm/vllm-0.14.0"),
)
#: Ada's mixed-batch factors a GPU with an attention profile takes (no profile holds mixed
#: batches), each moved by its decode counterpart's ratio, this GPU's fitted over Ada's: a
#: mixed batch's decodes reach the share of the decode kernel's rate they reach on Ada.
MIXED_BY_DECODE = {"mixed_kv_bandwidth": "kv_bandwidth", "mixed_per_seq": "attention_per_seq"}


def fit_attention_all(data: Path, fits: dict[str, Fit]) -> dict[str, AttentionFit]:
    """Every profile of :data:`ATTENTION_PROFILED` fitted (catalog GPU name → fit), each from
    its GPU's factors by the carry-over rule (what the fit does not touch stays that)."""
    ada = fits["rtx4090"].efficiency
    spread = spreads(fits)["gemm"]
    out = {}
    for p in ATTENTION_PROFILED:
        base = carry_over(fits[p.gpu].efficiency, ada, spread)
        profile = read_attention_profile(data / p.folder)
        out[p.gpu] = fit_attention(profile, catalog.gpu(p.gpu), base, lambda f: mixed_by_decode(f, ada))
    return out


def mixed_by_decode(fitted: Mapping[str, Any], ada: Efficiency) -> dict[str, float]:
    """The mixed-batch factors of :data:`MIXED_BY_DECODE` from the decode factors ``fitted``:
    Ada's, each times its decode counterpart's fitted value over Ada's."""
    return {m: round_sig(getattr(ada, m) * float(fitted[d]) / getattr(ada, d)) for m, d in MIXED_BY_DECODE.items()}


def with_attention(own: Efficiency, fit: AttentionFit, ada: Efficiency, spread: float) -> Efficiency:
    """``own`` (a Vidur fit: GEMM and element-wise factors) with the prefill and decode
    attention factors of ``fit``, the mixed-batch ones by :data:`MIXED_BY_DECODE` and the LM
    head and sampler carried over from Ada (:func:`carry_over`); its attention uncertainty is
    the attention fit's residual sd with ``spread`` (the carry-over rule's) added in quadrature."""
    carried = carry_over(own, ada, spread)
    att = fit.efficiency
    update: dict[str, object] = {k: getattr(att, k) for k in (*ATTENTION_FITTED, *MIXED_BY_DECODE)}
    uncertainty = {**carried.uncertainty, "attention": _quadrature(att.uncertainty["attention"], spread)}
    basis = (
        f"{own.basis}; prefill and decode attention likewise from the {fit.profile.label}; mixed-batch attention "
        "scaled from ada (rtx4090) by the decode fit, LM head and sampler carried over from ada"
    )
    return carried.model_copy(update={**update, "uncertainty": uncertainty, "basis": basis})


def catalog_efficiencies(
    fits: dict[str, Fit],
    attention: Mapping[str, AttentionFit] | None = None,
    moe: dict[str, float] | None = None,
) -> dict[str, Efficiency]:
    """The factors each catalog GPU should carry, by the rules of this module, without
    ``source`` (the catalog's own words): catalog GPU name → Efficiency. ``attention``: the
    attention fits of :data:`ATTENTION_PROFILED` (:func:`fit_attention_all`; None: fitted here
    from the repository's data folder); ``moe``: the MoE profile's factors (None: fitted
    here, :func:`moe_factors`)."""
    by_arch: dict[tuple[str, str], Efficiency] = {}
    own: dict[str, Efficiency] = {}
    ada = fits["rtx4090"].efficiency
    spread = spreads(fits)
    if attention is None:
        attention = fit_attention_all(DATA, fits)
    for p in PROFILED:
        eff = fits[p.gpu].efficiency
        if p.gpu in attention:
            eff = with_attention(eff, attention[p.gpu], ada, spread["gemm"])
        elif "attention_decode" not in fits[p.gpu].groups:  # a Vidur profile: no attention, LM head, sampler
            eff = carry_over(eff, ada, spread["gemm"])
        own[p.gpu] = eff
        # the first profiled GPU speaks for its architecture's GPUs with its memory type
        by_arch.setdefault((p.architecture, _memory(p.gpu)), eff)
    moved = {memory: transfer(fits, memory) for memory in classes(fits)}
    out = {}
    for name in catalog.gpu_names():
        key = (catalog.gpu(name).architecture, _memory(name))
        if name in own:
            out[name] = own[name]
        elif key in by_arch:
            out[name] = by_arch[key]
        else:  # no profile of its architecture with its memory (B200: Blackwell with HBM)
            out[name] = moved[_memory(name)]
    moe = moe_factors() if moe is None else moe
    out = {k: v.model_copy(update=moe) if takes_moe(k) else v for k, v in out.items()}
    return {k: v.model_copy(update={"source": ""}) for k, v in out.items()}
