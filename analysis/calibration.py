"""Refit every architecture's efficiency factors to its kernel profile and write reports/calibration.md.

Fits data/rtx4090-vllm-kernel-profile/ (vLLM 0.19 kernels of one Llama-3.1-8B layer on
an RTX 4090: Ada) and Vidur's A100, A40 and H100 profiles in data/vidur-kernel-profiles/
(Ampere, Hopper) exactly as ``des calibrate`` does, fails if any catalog GPU's factors
drift from its fit or from the carry-over and transfer rules of
des/tools/architectures.py, and writes the report with its figures:

- reports/calibration_fit.png: predicted against measured kernel time per op group (RTX 4090);
- reports/calibration_vidur.png: the same for the A100, A40 and H100 (GEMMs, element-wise);
- reports/calibration_residuals.png: where the residuals sit (tokens, sequences, contexts);
- reports/calibration_roofline.png: step time against batch size for Qwen2.5-7B;
- reports/calibration_gpus.png: decode throughput and prefill time across the catalog.

The report is :func:`facts` (the fit's numbers, the composition, the predictions and the
blind checks, one small function each) filled into ``analysis/templates/calibration.md``.

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

from analysis.common import plain_log_axes
from analysis.markdown import render
from des import catalog
from des.catalog.specs import ModelSpec
from des.cost.roofline import DEFAULT_CAPTURE, Engine, build_roofline
from des.figures.tools import GROUP_TITLES, plot_fit, plot_roofline
from des.tools import architectures as arch
from des.tools import validation
from des.tools.calibrate import ENGINE_CPU, Fit, fit_table, model_table
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


def check(fits: dict[str, Fit]) -> None:
    """SystemExit when a catalog GPU's factors have drifted from its fit or rule."""
    moved = drift(fits)
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
            what = "GEMMs (qkv + o + up + down)" if name == "gemm" else "element-wise (2 norms, rope, act, add)"
            ax.set_title(
                f"{gpu} ({fit.gpu.architecture}): {what}\nmedian |err| {100 * g.median_abs_error:.1f} %, "
                f"max {100 * g.max_abs_error:.0f} %, {len(pts):,} points",
                fontsize=10,
            )
            cb = fig.colorbar(sc, ax=ax, pad=0.01, ticks=[0, 1, 2, 3])
            cb.ax.set_yticklabels(["1", "2", "4", "8"])
            cb.set_label("tensor-parallel degree", fontsize=9)
    fig.suptitle("Vidur's profiles: predicted against measured kernel time of one layer (grey band ±10 %)")
    plain_log_axes(fig)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def draw(fits: dict[str, Fit], rep: CostReport, out: Path) -> None:
    """The report's five figures."""
    fit = fits["rtx4090"]
    plot_fit(fit, out / "calibration_fit.png")
    draw_residuals(fit, out / "calibration_residuals.png")
    draw_vidur(fits, out / "calibration_vidur.png")
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
    """The model on every catalog GPU, a table row each."""
    table = []
    for name in catalog.gpu_names():
        f = CostReport.build(catalog.gpu(name), model).facts()
        origin = catalog.gpu(name).efficiency.provenance
        table.append(
            f"| {name} | {origin} | {f['decode_batch1_tok_s']:.1f} | {f['prefill_2048_s'] * 1e3:.0f} | "
            f"{f['decode_64x1024_s'] * 1e3:.1f} | {f['kv_tokens_0.92']:,} | none found |"
        )
    return {"gpu_table": "\n".join(table)}


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
    ada = fits["rtx4090"]
    clocks = ada.gpu.clocks
    assert clocks is not None and clocks.sustained_mhz is not None
    ea = {g: fits[g].efficiency for g in fits}
    w = [e.weight_bandwidth for e in ea.values()]
    return {
        "vidur_table": "\n".join(fit_rows),
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
        "h100_knee": ea["h100-80gb"].gemm_knee,
        "gemm_within": ", ".join(
            f"{100 * float(np.mean(np.abs(fits[g].groups['gemm'].errors) <= 0.1)):.0f} % ({g})" for g in vidur
        ),
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


def facts(fits: dict[str, Fit], rep: CostReport) -> dict[str, Any]:
    """Every number and table of analysis/templates/calibration.md: the RTX 4090's fit and its
    composition, the other architectures' fits and every GPU's provenance, the engine's
    constants, the predictions for ``rep``'s model and the blind checks."""
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
    check(fits)
    rep = CostReport.build(catalog.gpu("rtx4090"), catalog.model("qwen2.5-7b"))
    draw(fits, rep, args.out)
    path = args.out / "calibration.md"
    path.write_text(render("calibration", facts(fits, rep)))
    return path


if __name__ == "__main__":
    print(main())
