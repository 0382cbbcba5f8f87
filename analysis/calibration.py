"""Refit every architecture's efficiency factors to its kernel profile and write reports/calibration.md.

Fits every profile of des/tools/architectures.py's ``PROFILED`` exactly as ``des calibrate``
does (data/rtx4090-vllm-kernel-profile/: Ada; Vidur's A100, A40 and H100 profiles in
data/vidur-kernel-profiles/: Ampere, Hopper; data/rtxpro6000-vllm-kernel-profile/: three
models at TP 1 and 2 on an RTX PRO 6000 Server Edition, Blackwell with GDDR7), that tree's
fused-MoE block (``moe.csv``, des/tools/moe_fit.py) and its PCIe 5.0 collectives
(``nccl_2gpu.csv``, des/tools/network.py); fails if any catalog GPU's factors drift from its
fit or from the carry-over and transfer rules, or a fitted link's costs from their fit; and
writes the report with its figures:

- reports/calibration_fit.png: predicted against measured kernel time per op group (RTX 4090);
- reports/calibration_vidur.png: the same for the A100, A40 and H100 (GEMMs, element-wise);
- reports/calibration_blackwell.png: the same for the RTX PRO 6000 Server, by model and TP degree;
- reports/calibration_moe.png: the fused-MoE block's time by tokens and activated experts;
- reports/calibration_pcie.png: the NCCL samples over PCIe 5.0 against their fits;
- reports/calibration_residuals.png: where the residuals sit (tokens, sequences, contexts);
- reports/calibration_roofline.png: step time against batch size for Qwen2.5-7B;
- reports/calibration_gpus.png: decode throughput and prefill time across the catalog.

The report is :func:`facts` (the fits' numbers, the composition, the catalog's provenance,
the predictions and the blind checks, one small function each) filled into ``analysis/templates/calibration.md``.

    python -m analysis.calibration [--out reports] [--data data]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.ticker import NullFormatter

from analysis.common import plain_log_axes
from analysis.markdown import render
from des import catalog
from des.catalog.specs import ModelSpec
from des.cost.roofline import DEFAULT_CAPTURE, Engine, build_roofline
from des.engine.defaults import VLLM_DEFAULTS, VLLM_RELEASE
from des.figures.tools import GROUP_TITLES, plot_fit, plot_roofline
from des.tools import architectures as arch
from des.tools import moe_fit, network, validation
from des.tools.attention_profile import AttentionFit
from des.tools.calibrate import (
    ENGINE_CPU,
    Fit,
    TreeProfile,
    fit_table,
    format_factor,
    model_table,
    model_tp_table,
    unfitted_gemm,
)
from des.tools.costmodel import CostReport, decode_shape, prefill_shape

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data"
#: Relative difference between a refitted factor and the catalog's above which the catalog has drifted
#: (the catalog holds 4 significant digits).
DRIFT = 1e-3

#: The profile README's step times derived from its kernels (32 layers, eager, no CPU), ms.
README_DECODE = {
    (1, 128): 16.76, (1, 1024): 16.80, (1, 4096): 17.12, (8, 512): 17.92, (8, 4096): 22.05,
    (16, 2048): 22.40, (32, 1024): 23.92, (64, 128): 20.79, (64, 1024): 29.30, (64, 4096): 56.55,
    (128, 512): 31.40, (128, 2048): 58.82, (256, 128): 31.87, (256, 1024): 63.77, (256, 4096): 171.66,
}  # fmt: skip
README_PREFILL = {64: 18.8, 256: 25.5, 512: 48.3, 1024: 95.5, 2048: 193.0}


def drift(fits: dict[str, Fit]) -> dict[str, dict[str, tuple[Any, Any]]]:
    """Per catalog GPU, the factors (and uncertainties) whose value differs from what its fit
    or rule gives (:func:`des.tools.architectures.catalog_efficiencies`): name → (fit, catalog)."""
    skip = {"source", "provenance", "basis", "uncertainty"}
    out: dict[str, dict[str, tuple[Any, Any]]] = {}
    for name, eff in arch.catalog_efficiencies(fits).items():
        shipped = catalog.gpu(name).efficiency
        ref = shipped.model_dump(exclude=skip)
        moved: dict[str, tuple[Any, Any]] = {}
        values = eff.model_dump(exclude=skip) | {f"uncertainty.{k}": v for k, v in eff.uncertainty.items()}
        ref |= {f"uncertainty.{k}": v for k, v in shipped.uncertainty.items()}
        for key, value in values.items():
            have = ref.get(key)
            if value is None or have is None:
                if value != have:
                    moved[key] = (value, have)
            elif abs(value - have) > DRIFT * abs(have):
                moved[key] = (value, have)
        if (eff.provenance, eff.basis) != (shipped.provenance, shipped.basis):
            moved["provenance"] = ((eff.provenance, eff.basis), (shipped.provenance, shipped.basis))
        if moved:
            out[name] = moved
    return out


def composition_facts(fit: Fit) -> dict[str, Any]:
    """The profile README's derived step times against the fitted model, as table rows, and
    the largest absolute error (%) up to batch 128."""
    quiet = fit.efficiency.model_copy(update={"step_overhead": 0.0, "seq_overhead": 0.0})
    r = build_roofline(fit.gpu, catalog.model("llama-3.1-8b"), efficiency=quiet, engine=Engine(True, 512, False))
    dec, pre, worst = [], [], 0.0
    for (b, k), ms in README_DECODE.items():
        got = r.step_time(decode_shape(b, k - 1)) * 1e3
        dec.append(f"| {b} | {k:,} | {ms:.2f} | {got:.2f} | {100 * (got / ms - 1):+.1f} % |")
        if b <= 128:
            worst = max(worst, abs(got / ms - 1))
    for t, ms in README_PREFILL.items():
        got = r.step_time(prefill_shape(t)) * 1e3
        pre.append(f"| {t:,} | {ms:.1f} | {got:.1f} | {100 * (got / ms - 1):+.1f} % |")
    return {"decode_table": "\n".join(dec), "prefill_table": "\n".join(pre), "worst_pct": 100 * worst}


def draw_residuals(fit: Fit, path: Path) -> None:
    """Relative error of each group against what drives it."""
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(2, 3, figsize=(17, 9.5))
    a = axes.flat
    g = fit.groups
    pct = {name: 100 * grp.errors for name, grp in g.items()}
    ax = next(a)
    ax.plot(g["gemm"].points["tokens"], pct["gemm"], ".-", lw=0.8, ms=4)
    ax.set(xscale="log", xlabel="tokens per step", ylabel="error (%)", title=GROUP_TITLES["gemm"])
    ax = next(a)
    ax.plot(g["lm_head"].points["rows"], pct["lm_head"], ".-", lw=0.8, ms=5, label="LM head")
    ax.plot(g["sampler"].points["rows"], pct["sampler"], ".-", lw=0.8, ms=5, label="sampler")
    ax.set(xscale="log", xlabel="sequences", ylabel="error (%)", title="LM head and sampler")
    ax.legend(fontsize=9)
    ax = next(a)
    el = g["elementwise"].points
    for kind, part in el.assign(err=pct["elementwise"]).groupby("kernels"):
        ax.plot(part["tokens"], part["err"], ".-", lw=0.8, ms=4, label=str(kind))
    ax.set(xscale="log", xlabel="tokens per step", ylabel="error (%)", title=GROUP_TITLES["elementwise"])
    ax.legend(fontsize=9)
    for name, rows, cols, title in (
        ("attention_prefill", "prefill_chunk", "kv_prefill", "prefill chunk × prior context"),
        ("attention_decode", "n_decode", "kv_decode", "decodes × context each"),
        ("attention_mixed", "n_decode", "kv_decode", "decodes × context, median over chunks"),
    ):
        ax = next(a)
        table = g[name].points.assign(err=pct[name]).groupby([rows, cols])["err"].median().unstack()
        values = table.to_numpy()
        im = ax.imshow(values, cmap="RdBu_r", vmin=-50, vmax=50, origin="lower", aspect="auto")
        for (i, j), v in np.ndenumerate(values):
            if np.isfinite(v):
                ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=6.5, color="white" if abs(v) > 30 else "k")
        ax.set_xticks(range(values.shape[1]), [f"{c:g}" for c in table.columns], rotation=90, fontsize=8)
        ax.set_yticks(range(values.shape[0]), [f"{r:g}" for r in table.index], fontsize=8)
        ax.grid(False)
        fig.colorbar(im, ax=ax, label="error (%)")
        ax.set_title(f"{GROUP_TITLES[name]}\n{title}", fontsize=10)
        ax.set_ylabel(rows.replace("_", " "))
        ax.set_xlabel(cols.replace("_", " "))
    fig.suptitle("Residuals of the fit: (predicted - measured) / measured", fontsize=13)
    plain_log_axes(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_gpus(path: Path) -> None:
    sns.set_theme(style="whitegrid", context="notebook")
    qwen = catalog.model("qwen2.5-7b")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(15, 5))
    batches = np.unique(np.round(np.logspace(0, np.log10(256), 40)).astype(int))
    prompts = np.array([128, 256, 512, 1024, 2048, 4096, 8192])
    names = catalog.gpu_names()
    palette = dict(zip(names, sns.color_palette("tab20", len(names)), strict=True))
    profiled = {p.gpu for p in arch.PROFILED}
    for name in names:
        gpu = catalog.gpu(name)
        r = build_roofline(gpu, qwen)
        ls = "-" if gpu.efficiency.provenance == "fitted" else "--"
        kw = {"c": palette[name], "lw": 2.6 if name in profiled else 1.4, "ls": ls}
        a1.plot(batches, [b / r.step_time(decode_shape(int(b), 1024)) for b in batches], label=name, **kw)
        a2.plot(
            prompts, [r.step_time(prefill_shape(int(p))) * 1e3 for p in prompts], marker="o", ms=3, label=name, **kw
        )
    a1.set(xscale="log", yscale="log", xlabel="decode batch size", ylabel="output tokens / s")
    a1.set_title("Qwen2.5-7B decode throughput (context 1024)")
    a2.set(xscale="log", yscale="log", xlabel="prompt tokens", ylabel="prefill time (ms)")
    a2.set_title("Qwen2.5-7B prefill of one prompt")
    key = "thick: profiled\nsolid: fitted (its architecture)\ndashed: transferred"
    a2.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), title=key, title_fontsize=8)
    plain_log_axes(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def network_drift(nets: dict[str, dict[str, network.DegreeFit]]) -> dict[str, dict[str, tuple[Any, Any]]]:
    """Per catalog GPU whose link cost is fitted to a collective profile, the costs the catalog
    holds that differ from the fit: ``nccl`` (the all-reduce) or ``all_gather`` → (fit, catalog)."""
    out: dict[str, dict[str, tuple[Any, Any]]] = {}
    for gpu, by_kind in nets.items():
        link = catalog.gpu(gpu).interconnect
        assert link is not None
        shipped = {"all_reduce": link.nccl.get(2), "all_gather": link.all_gather.get(2)}
        for kind, d in by_kind.items():
            have = shipped[kind]
            want = (d.cost.latency, d.cost.bus_bandwidth)
            got = None if have is None else (have.latency, have.bus_bandwidth)
            if got is None or any(abs(w - h) > DRIFT * abs(h) for w, h in zip(want, got, strict=True)):
                out.setdefault(gpu, {})["nccl" if kind == "all_reduce" else kind] = (want, got)
    return out


def check(fits: dict[str, Fit], nets: dict[str, dict[str, network.DegreeFit]] | None = None) -> None:
    """SystemExit when a catalog GPU's factors (or its fitted link costs) have drifted from its fit or rule."""
    moved = drift(fits) | ({} if nets is None else network_drift(nets))
    if moved:
        diff = "; ".join(
            f"{gpu}: " + ", ".join(f"{k}: fit {v[0]} vs catalog {v[1]}" for k, v in d.items())
            for gpu, d in moved.items()
        )
        raise SystemExit(f"the catalog's factors drifted from the fits: {diff}")


def draw_vidur(fits: dict[str, Fit], path: Path) -> None:
    """Predicted against measured time of the Vidur-profiled GPUs: a row per GPU, a column per group."""
    sns.set_theme(style="whitegrid", context="notebook")
    vidur = [p.gpu for p in arch.PROFILED if p.folder.startswith("vidur-kernel-profiles")]
    fig, axes = plt.subplots(len(vidur), 2, figsize=(12, 4.6 * len(vidur)), squeeze=False)
    for row, gpu in zip(axes, vidur, strict=True):
        fit = fits[gpu]
        for ax, (name, g) in zip(row, fit.groups.items(), strict=True):
            pts = g.points
            meas, pred = pts["measured"].to_numpy() * 1e6, pts["predicted"].to_numpy() * 1e6
            sc = ax.scatter(meas, pred, c=np.log2(pts["tp"].to_numpy(float)), s=5, cmap="viridis", alpha=0.6, lw=0)
            lo, hi = min(meas.min(), pred.min()) * 0.8, max(meas.max(), pred.max()) * 1.25
            ax.plot([lo, hi], [lo, hi], color="black", lw=1)
            ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.2, lw=0)
            ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured (µs)")
            ax.set_ylabel("predicted (µs)")
            if name != "gemm":
                what = "element-wise (2 norms, rope, act, add; Vidur)"
            elif name in fit.labels:  # vLLM's GEMM table: one kernel a point
                what = "GEMM kernels, one a point (vLLM's, aiconfigurator)"
            else:
                what = "GEMMs (qkv + o + up + down; Vidur)"
            ax.set_title(
                f"{gpu} ({fit.gpu.architecture}): {what}\nmedian |err| {100 * g.median_abs_error:.1f} %, "
                f"max {100 * g.max_abs_error:.0f} %, {len(pts):,} points",
                fontsize=10,
            )
            cb = fig.colorbar(sc, ax=ax, pad=0.01, ticks=[0, 1, 2, 3])
            cb.ax.set_yticklabels(["1", "2", "4", "8"])
            cb.set_label("tensor-parallel degree", fontsize=9)
    fig.suptitle("Ampere and Hopper: predicted against measured kernel time (grey band ±10 %)")
    plain_log_axes(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def draw(
    fits: dict[str, Fit],
    rep: CostReport,
    out: Path,
    moe: moe_fit.MoeFit | None = None,
    nets: dict[str, dict[str, network.DegreeFit]] | None = None,
    data: Path = DATA,
) -> None:
    """The report's figures (the MoE and the PCIe ones when their fits are given)."""
    fit = fits["rtx4090"]
    plot_fit(fit, out / "calibration_fit.png")
    draw_residuals(fit, out / "calibration_residuals.png")
    draw_vidur(fits, out / "calibration_vidur.png")
    draw_blackwell(fits[BLACKWELL.gpu], out / "calibration_blackwell.png")
    if moe is not None:
        draw_moe(moe, out / "calibration_moe.png")
    if nets is not None:
        draw_network(nets, data, out / "calibration_pcie.png")
    plot_roofline(rep, out / "calibration_roofline.png")
    draw_gpus(out / "calibration_gpus.png")


def _span(fit: Fit, group: str) -> str:
    e = 100 * fit.groups[group].errors
    return f"{e.min():+.0f} to {e.max():+.0f} %"


def _within(fit: Fit, group: str, bound: float) -> float:
    return float(np.mean(np.abs(fit.groups[group].errors) <= bound))


def fit_facts(fit: Fit) -> dict[str, Any]:
    """The fit, group by group: its table, and what the residuals and the factors show."""
    e = fit.efficiency
    assert e.mixed_kv_bandwidth is not None and e.kv_bandwidth is not None
    gemm = fit.groups["gemm"].points.set_index("tokens")["measured"]
    table = [
        f"| {row['group']} | {row['points']:,} | {row['median_abs_pct']:.1f} % | {row['max_abs_pct']:.0f} % | "
        f"{row['factors']} |"
        for row in fit_table(fit)
    ]
    return {
        "factor_table": "\n".join(table),
        "gemm_rise": gemm[128] / gemm[1] - 1,  # the measured GEMMs, 128 tokens against 1
        "gemm_knee": e.gemm_knee,
        "gemm_span": _span(fit, "gemm"),
        "mixed_slower": e.kv_bandwidth / e.mixed_kv_bandwidth,  # a decode's KV in a mixed step against alone
        "mixed_median_pct": 100 * fit.groups["attention_mixed"].median_abs_error,
        "decode_within": _within(fit, "attention_decode", 0.15),
    }


def prediction_facts(rep: CostReport) -> dict[str, Any]:
    """The model on the fitted GPU: its size, and a batch-1 decode step and its parts (ms)."""
    f, bd = rep.facts(), rep.roofline.breakdown(decode_shape(1, 512))
    return {
        "params_b": f["params"] / 1e9,
        "weights_gib": f["weight_bytes"] / 2**30,
        "decode_ms": 1e3 / f["decode_batch1_tok_s"],
        "gemm_ms": bd["gemm"] * 1e3,
        "lm_head_ms": bd["lm_head"] * 1e3,
        "attention_ms": (bd["attention_decode"] + bd["attention_prefill"]) * 1e3,
        "elementwise_ms": bd["elementwise"] * 1e3,
        "sampler_ms": bd["sampler"] * 1e3,
        "ridge_tokens": f["ridge_tokens"],
    }


def catalog_facts(model: ModelSpec) -> dict[str, Any]:
    """The model on every catalog GPU, a table row each; its KV tokens at the engine's default
    ``gpu_memory_utilization`` (des's, as vLLM's)."""
    table = []
    vllm = VLLM_DEFAULTS[VLLM_RELEASE]
    utilization = vllm.gpu_memory_utilization
    for name in catalog.gpu_names():
        rep = CostReport.build(catalog.gpu(name), model)
        f = rep.facts()
        origin = catalog.gpu(name).efficiency.provenance
        table.append(
            f"| {name} | {origin} | {f['decode_batch1_tok_s']:.1f} | {f['prefill_2048_s'] * 1e3:.0f} | "
            f"{f['decode_64x1024_s'] * 1e3:.1f} | {rep.kv_capacity(utilization):,} | none found |"
        )
    large, small = vllm.large, vllm.small
    settings = (
        f"`vllm serve`'s batching defaults of vLLM {vllm.release} for each GPU: max_num_seqs "
        f"{large.max_num_seqs['api_server']:,} and max_num_batched_tokens "
        f"{large.max_num_batched_tokens['api_server']:,} "
        f"on GPUs of {vllm.large_memory / 2**30:g} GiB or more (but {', '.join(n.upper() for n in vllm.small_names)}), "
        f"{small.max_num_seqs['api_server']:,} and {small.max_num_batched_tokens['api_server']:,} on the others"
    )
    return {"gpu_table": "\n".join(table), "utilization": utilization, "memory_settings": settings}


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def architecture_facts(fits: dict[str, Fit]) -> dict[str, Any]:
    """The Vidur fits (per GPU and group, per model), every catalog GPU's provenance and
    uncertainty, the transfer rule's spreads and the RTX 4090's clocks."""
    vidur = [p.gpu for p in arch.PROFILED if p.folder.startswith("vidur-kernel-profiles")]
    fit_rows = []
    for gpu in vidur:
        fit = fits[gpu]
        for row in fit_table(fit):
            fit_rows.append(
                f"| {gpu} ({fit.gpu.architecture}) | {fit.labels.get(row['group'], fit.profile.label)} | "  # type: ignore[union-attr]
                f"{row['group']} | {row['points']:,} | "
                f"{row['median_abs_pct']:.1f} % | {row['max_abs_pct']:.0f} % | {row['factors']} |"
            )
    per_model: dict[str, dict[tuple[str, str], float]] = {}
    for gpu in vidur:
        for row in model_table(fits[gpu]):
            per_model.setdefault(row["model"], {})[(gpu, row["group"])] = row["median_abs_pct"]
    cols = [(g, grp) for grp in ("gemm", "elementwise") for g in vidur]
    model_rows = [
        f"| {m} | " + " | ".join(f"{v[c]:.1f} %" if c in v else "-" for c in cols) + " |"
        for m, v in sorted(per_model.items())
    ]
    model_header = "| model | " + " | ".join(f"{grp} {g}" for g, grp in cols) + " |"
    gpus = []
    for name in catalog.gpu_names():
        g = catalog.gpu(name)
        e, c = g.efficiency, g.clocks
        clock = "-" if c is None else f"{c.boost_mhz:g}" + (f" → {c.sustained_mhz:g}" if c.sustained_mhz else "")
        u = e.uncertainty
        gpus.append(
            f"| {name} | {g.architecture} | {g.memory_type} | {clock} | {e.provenance} | {e.basis} | "
            f"{u['gemm']:.3f} | {u['attention']:.3f} | {u['elementwise']:.3f} |"
        )
    by_mem, by_all = arch.spreads(fits), arch.spreads(fits, by_memory=False)
    classes = arch.classes(fits)
    ada = fits["rtx4090"]
    clocks = ada.gpu.clocks
    assert clocks is not None and clocks.sustained_mhz is not None
    ea = {g: fits[g].efficiency for g in fits}
    w = [e.weight_bandwidth for e in ea.values()]
    return {
        "vidur_table": "\n".join(fit_rows),
        "rule_classes": "; ".join(
            f"{memory.upper()}: " + ", ".join(f"{g} ({catalog.gpu(g).architecture})" for g in members)
            for memory, members in sorted(classes.items())
        ),
        "rule_architectures": ", ".join(arch.RULE_ARCHITECTURES),
        "n_profiled": len(fits),
        "vidur_model_header": model_header,
        "vidur_model_rule": "|---" * (len(cols) + 1) + "|",
        "vidur_model_table": "\n".join(model_rows),
        "provenance_table": "\n".join(gpus),
        "spread_gemm": by_mem["gemm"],
        "spread_el": by_mem["elementwise"],
        "spread_gemm_all": by_all["gemm"],
        "spread_el_all": by_all["elementwise"],
        "boost_4090": clocks.boost_mhz,
        "sustained_4090": clocks.sustained_mhz,
        "gemm_4090": ada.efficiency.gemm_compute,
        "gemm_4090_spec": ada.efficiency.gemm_compute * clocks.sustained_ratio,
        "el_gddr": f"{ea['rtx4090'].elementwise_bandwidth:.2f} and {ea['a40'].elementwise_bandwidth:.2f}",
        "el_hbm": f"{ea['a100-80gb'].elementwise_bandwidth:.2f} and {ea['h100-80gb'].elementwise_bandwidth:.2f}",
        "a100_gemm": _pct(fits["a100-80gb"].groups["gemm"].median_abs_error),
        "h100_gemm": _pct(fits["h100-80gb"].groups["gemm"].median_abs_error),
        "a40_gemm": _pct(fits["a40"].groups["gemm"].median_abs_error),
        "w_range": f"{min(w):.2f}-{max(w):.2f}",
        "gemm_within": ", ".join(
            f"{100 * float(np.mean(np.abs(fits[g].groups['gemm'].errors) <= 0.1)):.0f} % ({g})" for g in vidur
        ),
    }


# -- Blackwell (the RTX PRO 6000 Server Edition's tree), the fused-MoE block, PCIe collectives --

#: The Blackwell profile (LLMServingSim's tree of several models and TP degrees).
BLACKWELL = next(p for p in arch.PROFILED if p.architecture == "blackwell")
#: The tree fit's groups, in the order of its per-(model, tp) table.
TREE_COLS = ("gemm", "lm_head", "elementwise", "sampler", "attention_prefill", "attention_decode", "attention_mixed")


def _tree(fit: Fit) -> TreeProfile:
    tree = fit.profile
    assert isinstance(tree, TreeProfile)
    return tree


def _carriers(fit: Fit) -> list[str]:
    """The catalog GPUs other than the profiled one whose factors are ``fit``'s (same basis)."""
    basis = fit.efficiency.basis
    return [n for n in catalog.gpu_names() if n != fit.gpu.name and catalog.gpu(n).efficiency.basis == basis]


def _heads_ratio(fit: Fit, min_chunk: int = 512) -> tuple[float, float]:
    """Median over the shared prefill shapes (chunks of ``min_chunk`` tokens or more) of the
    measured and the predicted attention time of Qwen3-32B at TP 1 (64 query heads per rank)
    over Llama-3.1-8B at TP 1 (32): the attention per rank against its heads."""
    p = fit.groups["attention_prefill"].points
    key = ["prefill_chunk", "kv_prefill"]
    p = p[p["prefill_chunk"] >= min_chunk]
    many = p[(p["model"] == "qwen3-32b") & (p["tp"] == 1)].set_index(key)
    few = p[(p["model"] == "llama-3.1-8b") & (p["tp"] == 1)].set_index(key)
    return (
        float((many["measured"] / few["measured"]).dropna().median()),
        float((many["predicted"] / few["predicted"]).dropna().median()),
    )


def _prefill_split(fit: Fit, min_chunk: int = 512) -> tuple[str, str]:
    """Signed median error of each (model, tp) of the prefill attention group: over chunks of
    ``min_chunk`` tokens or more (compute-bound), as a range; over shorter chunks with prior
    context (streaming the context's KV), per part with its KV heads per rank."""
    p = fit.groups["attention_prefill"].points
    p = p.assign(err=100 * (p["predicted"] / p["measured"] - 1))
    big = p[p["prefill_chunk"] >= min_chunk].groupby(["model", "tp"])["err"].median()
    small = p[(p["prefill_chunk"] < min_chunk) & (p["kv_prefill"] > 0)].groupby(["model", "tp"])["err"].median()
    parts = sorted(small.items(), key=lambda kv: -kv[1])
    text = "; ".join(
        f"{m} at tp {tp} ({max(1, catalog.model(m).num_key_value_heads // tp)} KV heads per rank): {e:+.0f} %"
        for (m, tp), e in parts
    )
    return f"{big.min():+.0f} to {big.max():+.0f} %", text


def blackwell_facts(fits: dict[str, Fit]) -> dict[str, Any]:
    """The Blackwell tree fit: what it holds, its table per group and per (model, tp), the
    mixture of experts' checked GEMMs, the attention's heads, and the Server against the
    Workstation Edition (spec sheets and a Qwen2.5-7B decode)."""
    fit = fits[BLACKWELL.gpu]
    tree = _tree(fit)
    desc = tree.describe()
    table = [
        f"| {row['group']} | {row['points']:,} | {row['median_abs_pct']:.1f} % | {row['max_abs_pct']:.0f} % | "
        f"{row['factors']} |"
        for row in fit_table(fit)
    ]
    cells: dict[tuple[str, int], dict[str, str]] = {}
    for row in model_tp_table(fit):
        cells.setdefault((row["model"], row["tp"]), {})[row["group"]] = f"{row['median_abs_pct']:.1f} %"
    parts = [
        f"| {m} | {tp} | {catalog.model(m).num_attention_heads // tp} | "
        f"{max(1, catalog.model(m).num_key_value_heads // tp)} | "
        + " | ".join(cells[m, tp].get(g, "-") for g in TREE_COLS)
        + " |"
        for m, tp in tree.parts
    ]
    checked = unfitted_gemm(fit)
    checked_err = checked["predicted"] / checked["measured"] - 1.0
    by_tp = {int(tp): 100 * float(e.median()) for tp, e in checked_err.groupby(checked["tp"])}
    moe_models = sorted(checked["model"].unique())
    moe_model = catalog.model(moe_models[0])
    measured, predicted = _heads_ratio(fit)
    big, small = _prefill_split(fit)
    server = fit.gpu
    ws = catalog.gpu("rtx-pro-6000")
    assert server.clocks is not None and ws.clocks is not None
    qwen = catalog.model("qwen2.5-7b")
    tok_s = {g.name: CostReport.build(g, qwen).facts()["decode_batch1_tok_s"] for g in (server, ws)}
    return {
        "bw_gpu": server.name,
        "bw_folder": BLACKWELL.folder,
        "bw_models": ", ".join(tree.models),
        "bw_degrees": " and ".join(map(str, tree.degrees)),
        "bw_vllm": desc["vllm_version"],
        "bw_parts": len(tree.parts),
        "bw_attention_points": len(next(iter(tree.parts.values())).attention),
        "bw_table": "\n".join(table),
        "bw_part_header": "| model | tp | query heads per rank | KV heads per rank | " + " | ".join(TREE_COLS) + " |",
        "bw_part_rule": "|---" * (len(TREE_COLS) + 4) + "|",
        "bw_part_table": "\n".join(parts),
        "bw_moe_models": ", ".join(moe_models),
        "bw_moe_attention_mb": 2 * moe_model.attention_linear_params / 1e6,
        "bw_moe_layers": moe_model.num_layers,
        "bw_l2_mib": server.l2_bytes / 2**20,
        "bw_checked": ", ".join(f"{v:+.0f} % at tp {tp}" for tp, v in sorted(by_tp.items())),
        "bw_heads_measured": measured,
        "bw_heads_predicted": predicted,
        "bw_prefill_big": big,
        "bw_prefill_small": small,
        "bw_carriers": ", ".join(_carriers(fit)),
        "server_bw": server.memory_bandwidth / 1e9,
        "server_mhz": server.clocks.boost_mhz,
        "ws_bw": ws.memory_bandwidth / 1e9,
        "ws_mhz": ws.clocks.boost_mhz,
        "ws_bw_ratio": ws.memory_bandwidth / server.memory_bandwidth,
        "ws_clock_ratio": ws.clocks.boost_mhz / server.clocks.boost_mhz,
        "server_tok_s": tok_s[server.name],
        "ws_tok_s": tok_s[ws.name],
    }


def draw_blackwell(fit: Fit, path: Path) -> None:
    """Predicted against measured time of the Blackwell tree, a panel per group, a colour per (model, tp)."""
    sns.set_theme(style="whitegrid", context="notebook")
    parts = list(_tree(fit).parts)
    palette = dict(zip(parts, sns.color_palette("tab10", len(parts)), strict=True))
    fig, axes = plt.subplots(2, 4, figsize=(19, 9.5))
    flat = list(axes.flat)
    for ax, (name, g) in zip(flat, fit.groups.items(), strict=False):
        pts = g.points
        meas, pred = pts["measured"].to_numpy() * 1e6, pts["predicted"].to_numpy() * 1e6
        size = 3 if len(pts) > 5000 else 8
        for (model, tp), part in pts.groupby(["model", "tp"], sort=True):
            ax.scatter(
                part["measured"] * 1e6, part["predicted"] * 1e6, s=size, lw=0, alpha=0.5,
                color=palette[str(model), int(tp)], rasterized=True,
            )  # fmt: skip
        lo, hi = min(meas.min(), pred.min()) * 0.8, max(meas.max(), pred.max()) * 1.25
        ax.plot([lo, hi], [lo, hi], color="black", lw=1)
        ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.2, lw=0)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi), xlabel="measured (µs)")
        ax.set_ylabel("predicted (µs)")
        ax.set_title(
            f"{GROUP_TITLES[name]}\nmedian |err| {100 * g.median_abs_error:.1f} %, "
            f"max {100 * g.max_abs_error:.0f} %, {len(pts):,} points",
            fontsize=10,
        )
    last = flat[-1]
    last.axis("off")
    for (model, tp), colour in palette.items():
        last.scatter([], [], color=colour, s=40, label=f"{model}, tp {tp}")
    last.legend(loc="center", fontsize=11, title="model, TP degree (one rank's operators)", title_fontsize=10)
    fig.suptitle(
        f"{fit.gpu.name}: predicted against measured kernel time of one layer, every model and TP degree "
        "fitted at once (grey band ±10 %)"
    )
    plain_log_axes(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def moe_fit_of(data: Path) -> moe_fit.MoeFit:
    """The fused-MoE fit of :data:`des.tools.architectures.MOE_PROFILED`'s ``moe.csv``."""
    p = arch.MOE_PROFILED
    gpu = catalog.gpu(p.gpu)
    assert p.model is not None
    return moe_fit.fit_folder(data / p.folder, gpu, catalog.model(p.model), gpu.efficiency)


def moe_facts(fit: moe_fit.MoeFit) -> dict[str, Any]:
    """The fused-MoE fit: its factors, errors over the fitted rows, the L2-resident rows left
    out (their share of the fitted curve), and which catalog GPUs carry it."""
    p = arch.MOE_PROFILED
    gpu, model = catalog.gpu(p.gpu), catalog.model(p.model or "")
    pts = fit.points
    out = pts[~pts["fitted"]]
    share = out["measured"] / out["predicted"]
    low, high = out["tokens"] <= 128, out["tokens"] > 128
    left = sorted(out["activated_experts"].unique())
    fitted_counts = sorted(pts.loc[pts["fitted"], "activated_experts"].unique())
    expert_mb = 2 * model.expert_params / 1e6
    factors = ", ".join(f"{k}={format_factor(k, v)}" for k, v in fit.factors.items())
    return {
        "moe_gpu": gpu.name,
        "moe_model": model.name,
        "moe_folder": p.folder,
        "moe_rows": len(pts),
        "moe_fitted": int(pts["fitted"].sum()),
        "moe_left": len(out),
        "moe_tokens": f"{pts['tokens'].min():,}-{pts['tokens'].max():,}",
        "moe_counts": ", ".join(map(str, sorted(pts["activated_experts"].unique()))),
        "moe_left_counts": ", ".join(map(str, left)),
        "moe_fitted_min": fitted_counts[0],
        "moe_experts": f"top {model.num_experts_per_tok} of {model.num_experts}",
        "moe_expert_mb": expert_mb,
        "moe_left_mb": expert_mb * max(left),
        "moe_next_mb": expert_mb * fitted_counts[0],
        "moe_l2_mib": gpu.l2_bytes / 2**20,
        "moe_table": f"| {len(fit.errors)} | {100 * fit.median_abs_error:.1f} % | {100 * fit.max_abs_error:.1f} % | "
        f"{100 * fit.residual_sd:.1f} % | {factors} |",
        "moe_median_pct": 100 * fit.median_abs_error,
        "moe_max_pct": 100 * fit.max_abs_error,
        "moe_sd_pct": 100 * fit.residual_sd,
        "moe_share_low": f"{share[low].min():.2f}-{share[low].max():.2f}",
        "moe_share_high_pct": 100 * float(np.max(np.abs(share[high] - 1))),
        "moe_carriers": ", ".join(n for n in catalog.gpu_names() if arch.takes_moe(n)),
        "moe_architecture": f"{gpu.architecture} with {(gpu.memory_type or '').upper()}",
    }


def draw_moe(fit: moe_fit.MoeFit, path: Path) -> None:
    """The fused-MoE block's time against tokens, a colour per activated-experts count: measured
    (filled: fitted; open: left out, L2-resident) and the fitted curve; its errors beside."""
    sns.set_theme(style="whitegrid", context="notebook")
    p = arch.MOE_PROFILED
    gpu = catalog.gpu(p.gpu)
    one = moe_fit.layer_model(catalog.model(p.model or ""))
    r = moe_fit.build(gpu, one, gpu.efficiency.model_copy(update=fit.factors))
    pts = fit.points
    counts = sorted(pts["activated_experts"].unique())
    palette = dict(zip(counts, sns.color_palette("viridis", len(counts)), strict=True))
    grid = np.logspace(0, np.log10(pts["tokens"].max()), 200)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(15, 5.6))
    for a in counts:
        part = pts[pts["activated_experts"] == a]
        c = palette[a]
        fitted = part[part["fitted"]]
        out = part[~part["fitted"]]
        ok = grid * one.num_experts_per_tok >= a  # a tokens × top_k rows reach a experts at least
        curve = moe_fit.predict(r, grid[ok], np.full(ok.sum(), float(a))) * 1e6
        a1.plot(grid[ok], curve, color=c, lw=1.4, ls="-" if len(fitted) else "--")
        label = f"{a} experts" + ("" if len(fitted) else " (left out: in L2)")
        a1.scatter(fitted["tokens"], fitted["measured"] * 1e6, color=c, s=30, label=label if len(fitted) else None)
        a1.scatter(out["tokens"], out["measured"] * 1e6, facecolors="none", edgecolors=c, s=40, lw=1.4,
                   label=label if len(out) else None)  # fmt: skip
        err = 100 * (part["predicted"] / part["measured"] - 1)
        a2.plot(part["tokens"], err, color=c, lw=0.8, alpha=0.6)
        a2.scatter(part["tokens"][part["fitted"]], err[part["fitted"]], color=c, s=30)
        a2.scatter(part["tokens"][~part["fitted"]], err[~part["fitted"]], facecolors="none", edgecolors=c, s=40, lw=1.4)
    a1.set(xscale="log", yscale="log", xlabel="tokens in the step", ylabel="fused-MoE block of one layer (µs)")
    a1.set_title(f"{one.name} on {gpu.name}: measured (dots; open: left out) and fitted (lines)", fontsize=11)
    a1.legend(fontsize=9, title="activated experts", title_fontsize=9)
    a2.axhline(0, color="black", lw=1)
    a2.axhspan(-5, 5, color="grey", alpha=0.2, lw=0)
    a2.set(xscale="log", xlabel="tokens in the step", ylabel="(predicted - measured) / measured (%)")
    a2.set_title(
        f"errors: fitted rows median {100 * fit.median_abs_error:.1f} %, max {100 * fit.max_abs_error:.1f} %"
        "\n(open: left out, experts in L2; grey band ±5 %)",
        fontsize=11,
    )
    plain_log_axes(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def collectives_of(data: Path) -> dict[str, dict[str, network.DegreeFit]]:
    """Each catalog GPU's two-GPU collective profile fitted (:data:`des.tools.network.CATALOG_COLLECTIVES`)."""
    return {gpu: network.fit_collectives(data / file) for gpu, file in network.CATALOG_COLLECTIVES.items()}


def network_facts(fits: dict[str, dict[str, network.DegreeFit]]) -> dict[str, Any]:
    """The PCIe collectives: per profiled GPU and collective the fit and its errors; the
    catalog GPUs whose link cost comes from it; what TP 2 costs Qwen3-32B per step."""
    rows, carriers = [], []
    for gpu, by_kind in fits.items():
        link = catalog.gpu(gpu).interconnect
        assert link is not None
        for kind, d in sorted(by_kind.items()):
            share = f"{d.cost.bus_bandwidth / link.link_bandwidth:.2f}" if link.link_bandwidth else "-"
            rows.append(
                f"| {gpu} | {kind.replace('_', '-')} | {d.points} | {d.cost.latency * 1e6:.1f} µs | "
                f"{d.cost.bus_bandwidth / 1e9:.1f} GB/s | {share} | {100 * d.median_abs_error:.1f} % | "
                f"{100 * d.max_abs_error:.1f} % | {100 * d.log_sd:.1f} % |"
            )
        file = Path(network.CATALOG_COLLECTIVES[gpu]).name
        for name in catalog.gpu_names():
            ic = catalog.gpu(name).interconnect
            if ic is not None and file in ic.basis:
                ar, ag = ic.nccl_cost(2), ic.gather_cost(2)
                custom = (
                    f"{ic.custom_latency * 1e6:g} µs below {ic.custom_limit(2) / 2**20:g} MiB"
                    if ic.custom_limit(2) and ic.custom_latency is not None
                    else "-"
                )
                carriers.append(
                    f"| {name} | {ic.kind} | {ic.provenance} | {ar.latency * 1e6:.1f} µs, {ar.bus_bandwidth / 1e9:.1f} "
                    f"GB/s | {ag.latency * 1e6:.1f} µs, {ag.bus_bandwidth / 1e9:.1f} GB/s | {custom} | {ic.basis} |"
                )
    gpu = next(iter(fits))
    model = catalog.model("qwen3-32b")
    r = build_roofline(catalog.gpu(gpu), model, tp=2)
    steps = []
    for label, shape in (("decode, 1 × 1,024", decode_shape(1, 1024)), ("decode, 64 × 1,024", decode_shape(64, 1024)),
                         ("prefill, 2,048 tokens", prefill_shape(2048))):  # fmt: skip
        bd = r.breakdown(shape)
        total = r.step_time(shape)
        comm = bd["allreduce"] + bd["logits_gather"]
        steps.append(
            f"| {label} | {total * 1e3:.2f} | {bd['allreduce'] * 1e3:.3f} | {bd['logits_gather'] * 1e3:.3f} | "
            f"{100 * comm / total:.0f} % |"
        )
    return {
        "net_table": "\n".join(rows),
        "net_carriers": "\n".join(carriers),
        "net_gpu": gpu,
        "net_file": network.CATALOG_COLLECTIVES[gpu],
        "net_layers": model.num_layers,
        "net_allreduces": 2 * model.num_layers + 1,
        "net_steps": "\n".join(steps),
    }


def draw_network(fits: dict[str, dict[str, network.DegreeFit]], data: Path, path: Path) -> None:
    """Each collective's NCCL samples against its fitted curve, and what des charges for an
    all-reduce at TP 2 (vLLM's own below its limit) on the profiled GPU."""
    sns.set_theme(style="whitegrid", context="notebook")
    gpu, by_kind = next(iter(fits.items()))
    rows = network.read_collectives(data / network.CATALOG_COLLECTIVES[gpu])
    link = catalog.gpu(gpu).interconnect
    assert link is not None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(15, 5.4))
    grid = np.logspace(np.log10(rows["bytes"].min() / 1.5), np.log10(rows["bytes"].max() * 1.5), 200)
    colours = dict(zip(sorted(by_kind), sns.color_palette("deep", len(by_kind)), strict=True))
    for kind, d in sorted(by_kind.items()):
        part = rows[rows["collective"] == kind]
        ring = network.COLLECTIVE_RING[kind]
        c = colours[kind]
        cost = d.cost
        label = f"{kind.replace('_', '-')}: {cost.latency * 1e6:.1f} µs + bytes / {cost.bus_bandwidth / 1e9:.1f} GB/s"
        a1.plot(grid, (cost.latency + ring * grid / cost.bus_bandwidth) * 1e6, color=c, lw=1.5, label=label)
        a1.scatter(part["bytes"], part["time"] * 1e6, color=c, s=28, zorder=3)
        fitted = cost.latency + ring * part["bytes"].to_numpy() / cost.bus_bandwidth
        err = 100 * (fitted / part["time"].to_numpy() - 1)
        a2.plot(part["bytes"], err, "o-", color=c, ms=5, lw=0.8, label=kind.replace("_", "-"))
    charged = [link.seconds(b, 2) * 1e6 for b in grid]
    a1.plot(grid, charged, color="black", lw=1.2, ls="--",
            label="des's all-reduce at TP 2 (vLLM's own below "
            f"{link.custom_limit(2) / 2**20:g} MiB, {(link.custom_latency or 0) * 1e6:g} µs stated)")  # fmt: skip
    a1.set(xscale="log", yscale="log", xlabel="bytes per GPU (all-reduce input, all-gather local input)")
    a1.set_ylabel("time (µs)")
    a1.set_title(f"NCCL between two {gpu} over PCIe 5.0 x16: samples (dots) and fits", fontsize=11)
    a1.legend(fontsize=8.5, loc="upper left")
    a2.axhline(0, color="black", lw=1)
    a2.axhspan(-5, 5, color="grey", alpha=0.2, lw=0)
    a2.set(xscale="log", xlabel="bytes per GPU", ylabel="(fitted - measured) / measured (%)")
    a2.set_title("residuals of the fits (grey band ±5 %)", fontsize=11)
    a2.legend(fontsize=9)
    plain_log_axes(fig)
    ticks = [2.0**k for k in range(12, 26, 2)]  # 4 KiB to 16 MiB
    names = [f"{t / 2**20:g} MiB" if t >= 2**20 else f"{t / 2**10:g} KiB" for t in ticks]
    for ax in (a1, a2):
        ax.set_xticks(ticks, names)
        ax.xaxis.set_minor_formatter(NullFormatter())
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def vllm_tables_facts(fits: dict[str, Fit], attention: dict[str, AttentionFit] | None = None) -> dict[str, Any]:
    """The GPUs whose GEMMs or attention are fitted to kernel tables measured inside vLLM
    (aiconfigurator's): the tables, the attention fits per GPU and group, the GEMM fixed times,
    knees and the GEMM points beyond ±20 %; ``attention``: :func:`des.tools.architectures.fit_attention_all`
    (None: fitted here)."""
    attention = arch.fit_attention_all(DATA, fits) if attention is None else attention
    rows = []
    for gpu, att in attention.items():
        for name, g in att.groups.items():
            factors = ", ".join(f"{f}={format_factor(f, getattr(att.efficiency, f))}" for f in g.factors)
            rows.append(
                f"| {gpu} ({att.gpu.architecture}) | {att.profile.label} | {name} | {len(g.points):,} | "
                f"{100 * g.median_abs_error:.1f} % | {100 * g.max_abs_error:.0f} % | {factors} |"
            )
    gemm = {gpu: fit for gpu, fit in fits.items() if "gemm" in fit.labels}
    beyond = []
    for gpu, fit in gemm.items():
        pts = fit.groups["gemm"].points
        far = np.abs(pts["predicted"] / pts["measured"] - 1) > 0.2
        beyond.append(f"{int(far.sum())} of {len(pts):,} ({gpu})")
    tables = sorted({f.labels["gemm"] for f in gemm.values()} | {a.profile.label for a in attention.values()})
    vidur = [g for g, f in fits.items() if str(getattr(f.profile, "label", "")).startswith("Vidur") and g not in gemm]
    return {
        "vllm_tables": "; ".join(tables),
        "vllm_gemm_gpus": ", ".join(gemm),
        "vllm_attention_gpus": ", ".join(attention),
        "attention_table": "\n".join(rows),
        "gemm_fixed": ", ".join(f"{fits[g].efficiency.gemm_fixed * 1e6:.2f} µs ({g})" for g in gemm),
        "gemm_beyond": ", ".join(beyond),
        "knees": ", ".join(f"{fit.efficiency.gemm_knee:.2f} ({g})" for g, fit in fits.items()),
        "vidur_gemm_gpus": ", ".join(vidur),
    }


def provenance_facts() -> dict[str, Any]:
    """Which catalog GPUs are fitted, carried over or transferred, and from what: one bullet
    per basis the catalog states (its GPUs listed), as the catalog has it."""
    by_basis: dict[tuple[str, str], list[str]] = {}
    for name in catalog.gpu_names():
        e = catalog.gpu(name).efficiency
        by_basis.setdefault((e.provenance, e.basis), []).append(name)
    order = {"fitted": 0, "transferred": 1}
    bullets = [
        f"- **{prov}**: {', '.join(f'{n} ({catalog.gpu(n).architecture})' for n in names)}: {basis}."
        for (prov, basis), names in sorted(by_basis.items(), key=lambda kv: (order.get(kv[0][0], 2), kv[1][0]))
    ]
    effs = {n: catalog.gpu(n).efficiency for n in catalog.gpu_names()}
    # a fitted GPU whose attention is the RTX 4090's by the carry-over rule (its basis says so)
    carried = [n for n, e in effs.items() if e.provenance == "fitted" and "attention, LM head and sampler" in e.basis]
    moved = [n for n in catalog.gpu_names() if catalog.gpu(n).efficiency.provenance == "transferred"]
    return {
        "provenance_bullets": "\n".join(bullets),
        "carried_gpus": ", ".join(carried) or "none",
        "transferred_gpus": ", ".join(
            f"{n} ({catalog.gpu(n).architecture}, {(catalog.gpu(n).memory_type or '').upper()})" for n in moved
        )
        or "none",
        "profiled_list": "; ".join(
            [f"{p.architecture}: {p.gpu} ({p.folder.split('/')[0]})" for p in arch.PROFILED]
            + [f"{p.architecture}'s GEMMs: {p.gpu} ({p.folder.split('/')[0]})" for p in arch.GEMM_PROFILED]
            + [f"{p.architecture}'s attention: {p.gpu} ({p.folder.split('/')[0]})" for p in arch.ATTENTION_PROFILED]
        ),
        "h20_basis": catalog.gpu("h20").efficiency.basis,
    }


def public_facts(rows: Sequence[validation.Row] | None = None) -> dict[str, Any]:
    """des against the public single-request rates of ``data/validation/single-stream.yaml``
    (never used in the fit; the README's validation table shows them with the prefill
    times), each predicted as a des run of that one request
    (:func:`des.tools.validation.predict`): a table row each, and the ratio of des to the
    measurement on the RTX 4090 (its first check) and on the H20."""
    rates = [
        r
        for r in (validation.rows() if rows is None else rows)
        if validation.METRICS[r.measurement.metric][1] == "tok/s"
    ]
    table: list[str] = []
    ratios: dict[str, list[float]] = {}
    for r in rates:
        m = r.measurement
        ratios.setdefault(r.gpu, []).append(r.predicted / m.value)
        how = validation.METRICS[m.metric][0]
        table.append(
            f"| {m.engine}, {m.prompt_tokens:,} → {m.output_tokens:,} tokens; {how} | {r.gpu} | {r.model} | "
            f"{m.value:g} | {r.predicted:.1f} | {r.predicted / m.value:.2f} | [{m.source}]({m.url}) |"
        )
    own, h20 = ratios["rtx4090"][0], ratios["h20"]
    return {
        "public_table": "\n".join(table),
        "own_off_pct": 100 * abs(own - 1),
        "h20_low": min(h20),
        "h20_high": max(h20),
        "h20_weight_bandwidth": catalog.gpu("h20").efficiency.weight_bandwidth,
        "h20_reach_pct": 100 / np.mean(h20),  # of the speed des's H20 factors allow
    }


def facts(
    fits: dict[str, Fit],
    rep: CostReport,
    moe: moe_fit.MoeFit | None = None,
    nets: dict[str, dict[str, network.DegreeFit]] | None = None,
) -> dict[str, Any]:
    """Every number and table of analysis/templates/calibration.md: the RTX 4090's fit and its
    composition, the other architectures' fits (Blackwell's per model and TP degree), the
    fused-MoE fit ``moe`` and the collectives ``nets`` (None: fitted from the data folder),
    every GPU's provenance, the engine's constants, the predictions for ``rep``'s model and
    the blind checks."""
    fit = fits["rtx4090"]
    engine = {
        "drift": DRIFT,
        "capture": DEFAULT_CAPTURE,
        "cpu_step_ms": ENGINE_CPU["step_overhead"] * 1e3,
        "cpu_seq_us": ENGINE_CPU["seq_overhead"] * 1e6,
    }
    return (
        fit_facts(fit)
        | composition_facts(fit)
        | architecture_facts(fits)
        | vllm_tables_facts(fits)
        | blackwell_facts(fits)
        | moe_facts(moe_fit_of(DATA) if moe is None else moe)
        | network_facts(collectives_of(DATA) if nets is None else nets)
        | provenance_facts()
        | engine
        | prediction_facts(rep)
        | catalog_facts(rep.model)
        | public_facts()
    )


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("reports"))
    ap.add_argument("--data", type=Path, default=DATA, help="folder holding the profiles (des/tools/architectures.py)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    fits = arch.fit_all(args.data)
    moe, nets = moe_fit_of(args.data), collectives_of(args.data)
    check(fits, nets)
    rep = CostReport.build(catalog.gpu("rtx4090"), catalog.model("qwen2.5-7b"))
    draw(fits, rep, args.out, moe, nets, args.data)
    path = args.out / "calibration.md"
    path.write_text(render("calibration", facts(fits, rep, moe, nets)))
    return path


if __name__ == "__main__":
    print(main())
