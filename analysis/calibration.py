"""Refit the RTX 4090's efficiency factors to the measured kernel profile and write reports/calibration.md.

Fits data/rtx4090-vllm-kernel-profile/ (vLLM 0.19 kernels of one Llama-3.1-8B layer on
an RTX 4090) exactly as ``des calibrate`` does, fails if the catalog's rtx4090 factors
drift from the fit, and writes the report with its figures:

- reports/calibration_fit.png: predicted against measured kernel time per op group;
- reports/calibration_residuals.png: where the residuals sit (tokens, sequences, contexts);
- reports/calibration_roofline.png: step time against batch size for Qwen2.5-7B;
- reports/calibration_gpus.png: decode throughput and prefill time across the catalog.

    python -m analysis.calibration [--out reports] [--profile data/rtx4090-vllm-kernel-profile]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from des import catalog
from des.calibrate import ENGINE_CPU, GROUP_TITLES, Fit, fit_profile, fit_table, plot_fit, read_profile
from des.catalog.specs import ModelSpec
from des.cost.roofline import DEFAULT_CAPTURE, Engine, Roofline, build_roofline
from des.costmodel import CostReport, decode_shape, prefill_shape

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "data" / "rtx4090-vllm-kernel-profile"
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

#: Public single-request decode measurements (never used in the fit): (label, gpu, model,
#: prompt tokens, generated tokens, measured tok/s, how the rate is counted, source).
PUBLIC = [
    (
        "vLLM, one request, 300 tokens",
        "rtx4090",
        "qwen3-8b",
        0,
        300,
        58.7,
        "generated tokens / wall time",
        "llmfit community benchmark, github.com/AlexsJones/llmfit PR #1046 (2026)",
    ),
    (
        "SGLang 0.4.6, batch 1, input 1, 2048 generated",
        "h20",
        "qwen3-8b",
        1,
        2048,
        81.73,
        "(prompt + generated) tokens / time",
        "Qwen speed benchmark, github.com/QwenLM/Qwen2.5 docs/source/getting_started/speed_benchmark.md",
    ),
    (
        "SGLang 0.4.6, batch 1, input 1, 2048 generated",
        "h20",
        "qwen3-32b",
        1,
        2048,
        20.72,
        "(prompt + generated) tokens / time",
        "Qwen speed benchmark, github.com/QwenLM/Qwen2.5 docs/source/getting_started/speed_benchmark.md",
    ),
]


def drift(fit: Fit) -> dict[str, tuple[float | None, float | None]]:
    """Factors whose refitted value differs from the catalog's rtx4090 entry."""
    shipped = catalog.gpu("rtx4090").efficiency.model_dump(exclude={"source"})
    out = {}
    for key, value in fit.efficiency.model_dump(exclude={"source"}).items():
        ref = shipped[key]
        if value is None or ref is None:
            if value != ref:
                out[key] = (value, ref)
        elif abs(value - ref) > DRIFT * abs(ref):
            out[key] = (value, ref)
    return out


def single_request_tok_s(r: Roofline, prompt: int, generated: int, count_prompt: bool) -> float:
    """Tokens per second of one request alone: its prefill, then one decode step per further token."""
    t = r.step_time(prefill_shape(max(prompt, 1)))
    t += sum(r.step_time(decode_shape(1, max(prompt, 1) + i)) for i in range(1, generated))
    return (generated + (prompt if count_prompt else 0)) / t


def composition(fit: Fit) -> tuple[list[str], list[str], float]:
    """The profile README's derived step times against the fitted model, as table rows, and
    the largest absolute error up to batch 128."""
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
    return dec, pre, worst


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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def draw_gpus(path: Path) -> None:
    sns.set_theme(style="whitegrid", context="notebook")
    qwen = catalog.model("qwen2.5-7b")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 5))
    batches = np.unique(np.round(np.logspace(0, np.log10(256), 40)).astype(int))
    prompts = np.array([128, 256, 512, 1024, 2048, 4096, 8192])
    others = [n for n in catalog.gpu_names() if n != "rtx4090"]
    palette = dict(zip(others, sns.color_palette("tab10", len(others)), strict=True))
    for name in ["rtx4090", *others]:
        r = build_roofline(catalog.gpu(name), qwen)
        fitted = name == "rtx4090"
        kw = {"c": "black", "lw": 3.0, "ls": "-"} if fitted else {"c": palette[name], "lw": 1.8, "ls": "--"}
        a1.plot(batches, [b / r.step_time(decode_shape(int(b), 1024)) for b in batches], label=name, **kw)
        a2.plot(prompts, [r.step_time(prefill_shape(int(p))) * 1e3 for p in prompts], marker="o", label=name, **kw)
    a1.set(xscale="log", yscale="log", xlabel="decode batch size", ylabel="output tokens / s")
    a1.set_title("Qwen2.5-7B decode throughput (context 1024)")
    a2.set(xscale="log", yscale="log", xlabel="prompt tokens", ylabel="prefill time (ms)")
    a2.set_title("Qwen2.5-7B prefill of one prompt")
    a2.legend(fontsize=8, ncol=2, title="solid: fitted; dashed: carried over", title_fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def factor_lines(fit: Fit) -> list[str]:
    return [
        f"| {row['group']} | {row['points']:,} | {row['median_abs_pct']:.1f} % | {row['max_abs_pct']:.0f} % | "
        f"{row['factors']} |"
        for row in fit_table(fit)
    ]


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("reports"))
    ap.add_argument("--profile", type=Path, default=PROFILE)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    gpu = catalog.gpu("rtx4090")
    fit = fit_profile(read_profile(args.profile), gpu, catalog.model("llama-3.1-8b"))
    moved = drift(fit)
    if moved:
        diff = ", ".join(f"{k}: fit {v[0]} vs catalog {v[1]}" for k, v in moved.items())
        raise SystemExit(f"the catalog's rtx4090 factors drifted from the fit: {diff}")

    plot_fit(fit, args.out / "calibration_fit.png")
    draw_residuals(fit, args.out / "calibration_residuals.png")
    qwen = catalog.model("qwen2.5-7b")
    rep = CostReport.build(gpu, qwen)
    rep.plot(args.out / "calibration_roofline.png")
    draw_gpus(args.out / "calibration_gpus.png")
    dec_rows, pre_rows, worst = composition(fit)
    e = fit.efficiency
    bd = rep.roofline.breakdown(decode_shape(1, 512))
    facts = rep.facts()
    mixed = fit.groups["attention_mixed"]
    assert e.mixed_kv_bandwidth is not None and e.kv_bandwidth is not None
    slower = e.kv_bandwidth / e.mixed_kv_bandwidth
    gemm = fit.groups["gemm"].points.set_index("tokens")["measured"]
    rise = gemm[128] / gemm[1] - 1
    lines = [
        "# Calibration: step times from measured vLLM kernels",
        "",
        "Generated by `python analysis/calibration.py` (also run by `make run`). It refits the efficiency factors",
        "to the RTX 4090 kernel profile exactly as `des calibrate` does and **fails if the catalog's `rtx4090`",
        f"factors drift from the fit** (by more than {DRIFT:.1%} relative: the catalog holds 4 significant digits).",
        "",
        "Blind fidelity: the factors come only from kernel-level measurements, spec sheets and the engine's",
        "source. No whole-run result (throughput, TTFT, TPOT of a served workload) of any GPU is used; the",
        "public measurements at the end are checks, never inputs.",
        "",
        "## What was measured",
        "",
        "`data/rtx4090-vllm-kernel-profile/` (MIT; a verbatim copy of LLMServingSim's profile, see its README):",
        "vLLM 0.19.0 kernel times on one RTX 4090, GPU-side, one operation at a time, 3 repeats per point, of",
        "Llama-3.1-8B in bf16 with **one** decoder layer and `enforce_eager` (no CUDA graphs):",
        "",
        "- `dense.csv`: the layer's GEMMs (qkv, o, gate_up, down) and element-wise kernels (RMSNorm, SiLU-and-mul,",
        "  rotary, embedding, final norm) at 152 token counts from 1 to 2048;",
        "- `per_sequence.csv`: LM head and sampler at 40 sequence counts from 1 to 256;",
        "- `attention.csv`: one layer's attention over prefill chunk (16-2048), its prior context (0-16384),",
        "  decoding sequences (1-256) and their context each (16-16384): 8,643 points.",
        "",
        "## The model, group by group",
        "",
        "Everything is derived from FLOPs and bytes of the model's shapes and the GPU's spec sheet, so the",
        "factors carry to other models and GPUs (des/cost/roofline.py has the formulas):",
        "",
        "- **GEMMs** of a step of T tokens: weights streamed once (W, at `weight_bandwidth` × bandwidth) and",
        "  2 FLOPs per parameter and token (C, at `gemm_compute` × peak); time `max(W, C) + gemm_knee × min(W, C)`.",
        f"  The sharp roofline (`gemm_knee` = 0) is flat up to the ridge; the profile's GEMMs take {rise:.0%} longer"
        f" at 128 tokens than at 1, and the knee of {e.gemm_knee:.2f} reproduces that: the share of the compute roof",
        "  reached rises continuously with the tokens per step.",
        "- **LM head** of the sequences that emit: the same softened roofline, its weights at `lm_head_bandwidth`.",
        "- **Attention**, per layer: decode-only steps read the decodes' KV at",
        "  `kv_bandwidth` plus `attention_fixed` and `attention_per_seq`; steps with prefill run one varlen kernel",
        "  whose chunks cost `4 × q_dim` FLOPs per query-key pair plus `attention_tile` pairs per token (the causal",
        "  diagonal's tiles) at `attention_compute` × peak, but no faster than one sequence streams its KV",
        "  (`kv_stream`, a latency floor); the decodes riding in such a step read their KV at `mixed_kv_bandwidth`",
        f"  with `mixed_per_seq` each: in the profile they are {slower:.1f}× slower"
        " per byte than in a decode-only step, which a single decode factor cannot show.",
        "- **Element-wise kernels**: `elementwise_kernel` seconds per kernel (4 per layer, 2 per step) plus their",
        "  bytes per token at `elementwise_bandwidth` × bandwidth while a layer's activations fit in",
        "  `elementwise_l2` × L2, and at `elementwise_spill` more beyond (the profile shows the L2 knee).",
        "- **Sampler**: `sampler_fixed` plus 4 bytes of logits per vocabulary entry and emitting sequence, with the",
        "  same L2 knee (it grows with the batch, from 25 µs at 1 sequence to 311 µs at 256).",
        "",
        "## The fit",
        "",
        "Least squares in log time per op group, in this order (later groups use earlier factors). Each",
        "group's observable is what a step runs: the GEMM group is the sum of the layer's four projections at",
        "each token count, the element-wise group the per-layer sum (2 × RMSNorm + SiLU-and-mul + rotary) and",
        "the per-step sum (embedding + final norm). Errors are (predicted − measured) / measured.",
        "",
        "| group | points | median abs error | max abs error | fitted factors |",
        "|---|---|---|---|---|",
        *factor_lines(fit),
        "",
        "![predicted against measured](calibration_fit.png)",
        "",
        "![residuals](calibration_residuals.png)",
        "",
        "What the residuals show:",
        "",
        f"- **GEMMs**: a sawtooth of {_span(fit, 'gemm')} with a period of 64-128 tokens from tile and wave",
        "  quantisation (gate_up_proj runs at 0.96 of the spec-sheet peak at 256 tokens, at 0.64 at 272); the",
        "  model goes through its middle, which is what steps of varying size need.",
        f"- **Attention, decode-only**: {_within(fit, 'attention_decode', 0.15):.0%} of the points within ±15 %.",
        "  One sequence is over-predicted by up to 51 %: at short contexts its kernel is faster than the fixed cost",
        "  the others share, and at 16k tokens its 67 MB of KV stay in the 72 MB L2 over the profiler's repeats",
        "  (it measures 1.2 TB/s, above the DRAM's 1.0). 64-256 sequences at 64 tokens of context are over-",
        "  predicted by 19-32 %.",
        f"- **Attention, prefill + decodes**: median {100 * mixed.median_abs_error:.0f} %, the group the aggregate",
        "  model fits worst. 8-64 decodes at 2k-16k tokens of context each run up to 27 % faster than predicted,",
        "  and 128 such decodes take 2.8-3.9× as long as 64 (a cliff of the varlen kernel the profile shows but",
        "  does not explain), which the model under-predicts by 40 %. Steps with a prefill chunk and more than",
        "  64 long-context decodes are where des is least reliable.",
        "- **Element-wise**: the per-layer sum is over-predicted by up to 34 % between 30 and 200 tokens (the",
        "  model's L2 knee is sharper than the kernels'), the per-step kernels (embedding, final norm) under-",
        "  predicted by up to 36 % at 8-16 tokens: a few µs in steps of milliseconds.",
        "",
        "## Composition: the profile's own step times",
        "",
        "The profile's README sums its kernels into 32-layer step times (eager, no CPU time; derived, not",
        "measured as a whole). The fitted groups, summed the same way:",
        "",
        "| decode batch | context | profile ms | des ms | error |",
        "|---|---|---|---|---|",
        *dec_rows,
        "",
        "| prefill tokens | profile ms | des ms | error |",
        "|---|---|---|---|",
        *pre_rows,
        "",
        f"Within {100 * worst:.1f} % from batch 1 to 128; the larger errors sit on 256 tokens, a GEMM tile boundary"
        " at which the measured kernels are unusually fast (see the sawtooth above).",
        "",
        "## Not in a kernel profile: from the engine's source",
        "",
        f"- **CUDA graphs** (`vllm/config/vllm.py: _set_cudagraph_sizes`, `vllm/v1/cudagraph_dispatcher.py`): steps"
        f" of up to `max_cudagraph_capture_size` tokens (default min(2 × max_num_seqs, 512); des: {DEFAULT_CAPTURE})"
        " are padded to the captured sizes 1, 2, 4, then multiples of 8 below 256, then of 16: decode-only",
        "  batches as full graphs, mixed batches as piecewise ones. The GEMMs and element-wise kernels compute",
        "  the padded rows; attention, the LM head and the sampler only real ones. `cost_model.enforce_eager: true`",
        "  turns it off.",
        "- **Async scheduling** (on by default since vLLM 0.11: `vllm/config/vllm.py`, `async_scheduling` None →",
        "  True): the CPU prepares step n+1 while the GPU runs step n, so a step takes the longer of the two.",
        f"- **CPU time**: {ENGINE_CPU['step_overhead'] * 1e3:g} ms per step + {ENGINE_CPU['seq_overhead'] * 1e6:g} µs"
        " per scheduled sequence: an estimate from vLLM V1's engine loop (the scheduler and output update walk the",
        "  scheduled requests in Python; input preparation is vectorised), not a measurement; it hides under the",
        "  GPU time of a 7B model on an RTX 4090 at every batch size and matters only for small models on fast",
        "  GPUs.",
        "",
        "## Shipped factors",
        "",
        "`rtx4090` holds the fitted factors above. No other catalog GPU has a kernel profile yet, so each carries",
        "the RTX 4090's factors over (Ada, the only profiled architecture) and its `source` says so. That is",
        "optimistic for GPUs that run under tighter power limits (L4, L40S) or different kernels (MI300X's ROCm)",
        "and for HBM parts whose achieved share of bandwidth differs from GDDR6X's: run `des calibrate` on a",
        "profile of the GPU itself to replace them.",
        "",
        "## Predictions: Qwen2.5-7B (bf16), one GPU, vLLM V1 defaults",
        "",
        f"One RTX 4090: {facts['params'] / 1e9:.2f} B parameters, {facts['weight_bytes'] / 2**30:.2f} GiB of weights;"
        f" a batch-1 decode step at context 512 takes {1e3 / facts['decode_batch1_tok_s']:.1f} ms"
        f" (GEMMs {bd['gemm'] * 1e3:.1f}, LM head {bd['lm_head'] * 1e3:.2f}, attention"
        f" {(bd['attention_decode'] + bd['attention_prefill']) * 1e3:.2f}, element-wise {bd['elementwise'] * 1e3:.2f},"
        f" sampler {bd['sampler'] * 1e3:.3f} ms); ridge at {facts['ridge_tokens']:.0f} tokens per step.",
        "",
        "| GPU | factors | batch-1 decode tok/s (context 512) | 2048-token prefill ms | decode step ms, 64 × 1024 "
        "| KV tokens at 0.92 | public measurement |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in catalog.gpu_names():
        g = catalog.gpu(name)
        cr = CostReport.build(g, qwen)
        f = cr.facts()
        origin = "fitted" if name == "rtx4090" else "carried over"
        lines.append(
            f"| {name} | {origin} | {f['decode_batch1_tok_s']:.1f} | {f['prefill_2048_s'] * 1e3:.0f} | "
            f"{f['decode_64x1024_s'] * 1e3:.1f} | {f['kv_tokens_0.92']:,} | none found |"
        )
    lines += [
        "",
        "No public measurement of Qwen2.5-7B matching these definitions (vLLM, one GPU, bf16) was found to cite;",
        "the checks below use the nearest ones.",
        "",
        "## Blind checks against public measurements (not used in the fit)",
        "",
        "Single-request decode rates, predicted by des as one prefill followed by one decode step per token",
        "(context growing), counted the way each source counts them.",
        "",
        "| setting | GPU | model | measured tok/s | des tok/s | des / measured | source |",
        "|---|---|---|---|---|---|---|",
    ]
    ratios: dict[str, list[float]] = {}
    for label, gname, mname, prompt, generated, measured, how, source in PUBLIC:
        r = build_roofline(catalog.gpu(gname), _model(mname))
        pred = single_request_tok_s(r, prompt, generated, count_prompt=how.startswith("(prompt"))
        ratios.setdefault(gname, []).append(pred / measured)
        lines.append(
            f"| {label}; {how} | {gname} | {mname} | {measured:g} | {pred:.1f} | {pred / measured:.2f} | {source} |"
        )
    own, h20 = ratios["rtx4090"][0], ratios["h20"]
    lines += [
        "",
        f"The RTX 4090 check (the profiled GPU, vLLM) is off by {100 * abs(own - 1):.0f} %, within what the",
        "measurement's unstated prompt length and client overhead leave open. The H20 checks (SGLang 0.4.6,",
        f"factors carried over from the RTX 4090) predict {min(h20):.1f}-{max(h20):.1f}× the measured rate: des",
        f"assumes the weights stream at {catalog.gpu('h20').efficiency.weight_bandwidth:.2f} of the H20's 4 TB/s; the"
        f" measured runs reach about {100 / np.mean(h20):.0f} % of what that allows. Either that engine runs single",
        "requests far below bandwidth on the H20 (per-step overhead, no CUDA graphs) or the carried-over factors do",
        "not hold on it; a kernel profile of the H20 would tell which. Until then, plans on carried-over GPUs are",
        "upper bounds on speed.",
        "",
        "![step time on the roofline](calibration_roofline.png)",
        "",
        "![decode and prefill across the catalog](calibration_gpus.png)",
        "",
    ]
    (args.out / "calibration.md").write_text("\n".join(lines))
    return args.out / "calibration.md"


def _model(name: str) -> ModelSpec:
    return catalog.model(name)


def _span(fit: Fit, group: str) -> str:
    e = 100 * fit.groups[group].errors
    return f"{e.min():+.0f} to {e.max():+.0f} %"


def _within(fit: Fit, group: str, bound: float) -> float:
    return float(np.mean(np.abs(fit.groups[group].errors) <= bound))


if __name__ == "__main__":
    print(main())
