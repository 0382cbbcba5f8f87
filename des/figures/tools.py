"""The figures of the tools: the fit of ``des calibrate`` (:func:`plot_fit`), the CDFs of
``des compare`` (:func:`plot_cdfs`) and the roofline of ``des costmodel``
(:func:`plot_roofline`). The first two are drawn on the Agg backend in matplotlib's default
style, whatever style the caller set (:func:`~des.figures.style.in_default_style`), so that
the same inputs give the same image. matplotlib is imported only when a figure is drawn.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from des.figures.style import in_default_style

if TYPE_CHECKING:
    import pandas as pd

    from des.tools.calibrate import Fit
    from des.tools.compare import Comparison
    from des.tools.costmodel import CostReport


# -- des calibrate -------------------------------------------------------------------------

#: Descriptive label of each group's points for the figure.
GROUP_TITLES = {
    "gemm": "GEMMs of a layer (qkv + o + gate_up + down)",
    "elementwise_vidur": "element-wise kernels of a layer (2 norms, rope, act, add)",
    "lm_head": "LM head",
    "elementwise": "element-wise kernels (per layer, per step)",
    "sampler": "sampler",
    "attention_prefill": "attention: prefill chunks",
    "attention_decode": "attention: decode-only steps",
    "attention_mixed": "attention: prefill + decodes",
}


@in_default_style
def plot_fit(fit: Fit, path: Path, fmt: str = "png") -> None:
    """Predicted against measured time per op group (log-log), with the ±10 % band.
    Drawn on Agg in matplotlib's default style (:func:`in_default_style`)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    from des.tools.calibrate import fit_table

    plain = FuncFormatter(lambda v, _: f"{v:g}")

    names = list(fit.groups)
    cols = min(4, len(names) + 1)
    rows = -(-(len(names) + 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.25 * cols, 4.1 * rows + 0.4), squeeze=False)
    flat = list(axes.flat)
    for ax in flat[len(names) : -1]:
        ax.axis("off")
    for ax, name in zip(flat, names, strict=False):
        g = fit.groups[name]
        meas = g.points["measured"].to_numpy() * 1e6
        pred = g.points["predicted"].to_numpy() * 1e6
        colour = _colour_key(name, g.points)
        sc = ax.scatter(meas, pred, c=colour, s=9, cmap="viridis", alpha=0.75, linewidths=0)
        lo, hi = min(meas.min(), pred.min()) * 0.8, max(meas.max(), pred.max()) * 1.25
        ax.plot([lo, hi], [lo, hi], color="black", lw=1)
        ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="grey", alpha=0.2, lw=0)
        ax.set(xscale="log", yscale="log", xlim=(lo, hi), ylim=(lo, hi))
        subs = (1.0,) if hi / lo > 300 else (1.0, 2.0, 5.0)
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(LogLocator(base=10, subs=subs))
            axis.set_major_formatter(plain)
            axis.set_minor_formatter(NullFormatter())
        title = GROUP_TITLES.get(name + "_vidur" if "model" in g.points else name, GROUP_TITLES[name])
        ax.set_title(
            f"{title}\nmedian |err| {100 * g.median_abs_error:.1f} %, max {100 * g.max_abs_error:.0f} %"
            f", {len(g.points)} points",
            fontsize=9.5,
        )
        ax.set_xlabel("measured (µs)", fontsize=9)
        ax.set_ylabel("predicted (µs)", fontsize=9)
        ax.tick_params(labelsize=8)
        cb = fig.colorbar(sc, ax=ax, pad=0.01)
        cb.set_label(_colour_label(name), fontsize=8)
        cb.ax.tick_params(labelsize=7)
    last = flat[-1]
    last.axis("off")
    text = "\n".join(f"{row['group']}: {row['factors']}".replace(", ", "\n    ", 8) for row in fit_table(fit))
    last.text(0.0, 1.0, "fitted factors\n" + text, va="top", ha="left", fontsize=7.2, family="monospace")
    what = getattr(fit.profile, "label", None) or fit.profile.path.name
    fig.suptitle(
        f"{fit.gpu.name}: predicted against measured kernel times of {what} (one layer; grey band ±10 %)",
        fontsize=12,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110, format=fmt)
    plt.close(fig)


def _colour_key(name: str, points: pd.DataFrame) -> np.ndarray:
    if name in ("gemm", "elementwise"):
        return np.log2(points["tokens"].to_numpy(float))
    if name in ("lm_head", "sampler"):
        return np.log2(points["rows"].to_numpy(float))
    if name == "attention_prefill":
        return np.log2(points["prefill_chunk"].to_numpy(float))
    return np.log2(points["n_decode"].to_numpy(float))


def _colour_label(name: str) -> str:
    if name in ("gemm", "elementwise"):
        return "log2 tokens"
    if name in ("lm_head", "sampler"):
        return "log2 sequences"
    if name == "attention_prefill":
        return "log2 chunk tokens"
    return "log2 decodes"


# -- des compare ---------------------------------------------------------------------------


@in_default_style
def plot_cdfs(cmp: Comparison, path: Path, fmt: str = "png") -> None:
    """Measured (solid) and simulated (dashed) CDFs of TTFT, TPOT, end-to-end latency and ITL.
    Drawn on Agg in matplotlib's default style (:func:`in_default_style`)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    from des.tools.compare import LATENCIES, itls

    names = [n for n in LATENCIES if n != "itl" or cmp.measured.has_itl]
    cols = 2 if len(names) == 4 else len(names)
    rows_n = -(-len(names) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(6.2 * cols, 4.4 * rows_n), squeeze=False)
    labels = {"ttft": "time to first token", "tpot": "time per output token", "itl": "inter-token latency",
              "e2e": "end-to-end latency"}  # fmt: skip
    for ax, name in zip(axes.flat, names, strict=True):
        for rows, measured, style, label in (
            (cmp.measured.completed, True, "-", "measured"),
            (cmp.simulated, False, "--", "des"),
        ):
            values = itls(rows, measured) if name == "itl" else rows[name].to_numpy(float)
            values = np.sort(values[np.isfinite(values) & (values > 0)])
            if values.size:
                ax.step(values, np.arange(1, values.size + 1) / values.size, style, where="post", lw=2, label=label)
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set(xlabel=f"{labels[name]} (s)", ylabel="share of requests" if name != "itl" else "share of gaps")
        ax.set_ylim(0, 1.02)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_title(labels[name])
        ax.legend(loc="lower right")
    sc = cmp.scenario
    fig.suptitle(
        f"{cmp.measured.path.name}: measured (solid) against des (dashed), {len(cmp.measured.completed):,} requests\n"
        f"des: {sc.cluster.pools[0].instances} x {sc.cluster.pools[0].tp} x {sc.gpu.name}, {sc.model.name}, "
        f"{sc.scheduler.kind} batching"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120, format=fmt)
    plt.close(fig)


# -- des costmodel -------------------------------------------------------------------------


def plot_roofline(rep: CostReport, path: Path, context: int = 1024) -> None:
    """Step time against batch size on log axes, with the two roofs and the ridge (``des costmodel
    --plot``). Drawn on Agg in seaborn's whitegrid theme, which it sets for the process."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import seaborn as sns

    from des.tools.costmodel import decode_shape

    sns.set_theme(style="whitegrid", context="notebook")
    r = rep.roofline
    b = np.unique(np.round(np.logspace(0, np.log10(1024), 80)).astype(int))
    step = np.array([r.step_time(decode_shape(int(x), context)) for x in b]) * 1e3
    memory_roof = np.full(b.shape, (r.gemm_weight_s + r.head_weight_s) * 1e3)
    compute_roof = ((r.gemm_s_per_decode_token + r.moe_s_per_token) * b + r.head_s_per_row * b) * 1e3
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.8))
    ax.plot(b, step, lw=2.5, label=f"step time (every group of work; context {context})")
    ax.plot(b, memory_roof, "--", label="weights streamed once per step (memory roof)")
    ax.plot(b, compute_roof, ":", label="the tokens' GEMM FLOPs (compute roof)")
    ax.axvline(r.ridge_tokens, color="grey", lw=1)
    ax.annotate(
        f"ridge ≈ {r.ridge_tokens:.0f} tokens/step",
        (r.ridge_tokens, memory_roof[0]),
        xytext=(-40, -60),
        textcoords="offset points",
        ha="right",
        arrowprops={"arrowstyle": "->", "color": "grey"},
    )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="decode batch size (tokens per step)",
        ylabel="step time (ms)",
        title=f"{rep.model.name} on {rep.tp} x {rep.gpu.name} ({rep.precision.weights})",
    )
    ax.legend(fontsize=9)
    ax2.plot(b, b / step * 1e3, lw=2.5)
    ax2.axvline(r.ridge_tokens, color="grey", lw=1)
    ax2.set(xscale="log", xlabel="decode batch size", ylabel="output tokens / s", title="decode throughput")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
