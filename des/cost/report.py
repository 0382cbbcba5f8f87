"""What the roofline says about one GPU and model: tables and a figure for ``des costmodel``.

Decode step time and tokens/s against batch size and context, prefill time against
prompt length, the ridge point (tokens per step at which the GEMMs' compute time equals
their weight streaming) and the KV capacity, under vLLM V1's engine defaults (CUDA
graphs, async scheduling). Plotting imports matplotlib lazily.
"""

from __future__ import annotations

from dataclasses import dataclass

from des.catalog.memory import Precision, plan_memory, weight_bytes
from des.catalog.specs import GPUSpec, ModelSpec
from des.cost.base import BatchShape
from des.cost.roofline import Engine, Roofline, build_roofline

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
CONTEXTS = (512, 2048, 8192)
PROMPTS = (128, 512, 1024, 2048, 4096, 8192)


def decode_shape(batch: int, context: int) -> BatchShape:
    """``batch`` sequences decoding one token each with ``context`` tokens of KV before it."""
    return BatchShape.decodes(batch, batch * context)


def prefill_shape(prompt: int) -> BatchShape:
    """One whole prompt of ``prompt`` tokens in one step (no chunking)."""
    shape = BatchShape()
    shape.add_chunk(0, prompt, True)
    return shape


@dataclass
class CostReport:
    gpu: GPUSpec
    model: ModelSpec
    precision: Precision
    tp: int
    roofline: Roofline

    @classmethod
    def build(
        cls,
        gpu: GPUSpec,
        model: ModelSpec,
        precision: Precision | None = None,
        tp: int = 1,
        engine: Engine | None = None,
    ) -> CostReport:
        precision = precision or Precision()
        return cls(gpu, model, precision, tp, build_roofline(gpu, model, precision, tp, engine=engine))

    def decode_table(self, batches=BATCHES, contexts=CONTEXTS) -> list[dict]:
        rows = []
        for b in batches:
            row = {"batch": b}
            for c in contexts:
                t = self.roofline.step_time(decode_shape(b, c))
                row[f"ms@{c}"] = t * 1e3
                row[f"tok/s@{c}"] = b / t
            rows.append(row)
        return rows

    def prefill_table(self, prompts=PROMPTS) -> list[dict]:
        rows = []
        for p in prompts:
            t = self.roofline.step_time(prefill_shape(p))
            rows.append({"prompt": p, "ms": t * 1e3, "tok/s": p / t})
        return rows

    def kv_capacity(self, utilization: float, block_size: int = 16) -> int:
        return plan_memory(
            self.gpu,
            self.model,
            precision=self.precision,
            gpu_memory_utilization=utilization,
            block_size=block_size,
            tp=self.tp,
        ).kv_capacity_tokens

    def facts(self) -> dict:
        r = self.roofline
        return {
            "params": self.model.num_params,
            "weight_bytes": weight_bytes(self.model, self.precision),
            "kv_bytes_per_token": self.model.kv_bytes_per_token(self.precision.kv_bytes),
            "ridge_tokens": r.ridge_tokens,
            "decode_batch1_tok_s": 1 / r.step_time(decode_shape(1, 512)),
            "prefill_2048_s": r.step_time(prefill_shape(2048)),
            "decode_64x1024_s": r.step_time(decode_shape(64, 1024)),
            "kv_tokens_0.90": self.kv_capacity(0.90),
            "kv_tokens_0.92": self.kv_capacity(0.92),
        }

    def plot(self, path, context: int = 1024) -> None:
        """Step time against batch size on log axes, with the two roofs and the ridge."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
        import seaborn as sns

        sns.set_theme(style="whitegrid", context="notebook")
        r = self.roofline
        b = np.unique(np.round(np.logspace(0, np.log10(1024), 80)).astype(int))
        step = np.array([r.step_time(decode_shape(int(x), context)) for x in b]) * 1e3
        memory_roof = np.full(b.shape, (r.gemm_weight_s + r.head_weight_s) * 1e3)
        compute_roof = (r.gemm_s_per_decode_token * b + r.head_s_per_row * b) * 1e3
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
            title=f"{self.model.name} on {self.tp} x {self.gpu.name} ({self.precision.weights})",
        )
        ax.legend(fontsize=9)
        ax2.plot(b, b / step * 1e3, lw=2.5)
        ax2.axvline(r.ridge_tokens, color="grey", lw=1)
        ax2.set(xscale="log", xlabel="decode batch size", ylabel="output tokens / s", title="decode throughput")
        fig.tight_layout()
        fig.savefig(path, dpi=130)
        plt.close(fig)
