"""What the roofline says about one GPU and model: the numbers ``des costmodel`` shows.

Decode step time and tokens/s against batch size and context, prefill time against
prompt length, the ridge point (tokens per step at which the GEMMs' compute time equals
their weight streaming), the KV capacity, and the share of a step the tensor-parallel
all-reduces take per TP degree, under vLLM V1's engine defaults (CUDA graphs, async
scheduling). :mod:`des.render` prints them and :func:`des.figures.plot_roofline`
draws them.
"""

from __future__ import annotations

from dataclasses import dataclass

from des.catalog.memory import GraphCapture, MemoryPlan, plan_memory, weight_bytes
from des.catalog.precision import Precision
from des.catalog.specs import GPUSpec, ModelSpec
from des.cost.base import BatchShape
from des.cost.roofline import ACT_BYTES, Engine, Roofline, build_roofline, graph_size
from des.engine.defaults import engine_defaults

BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: TP degrees, decode step and prefill of the communication table.
COMM_TPS = (1, 2, 4, 8)
COMM_DECODE = (32, 2048)  # sequences, context tokens each
COMM_PREFILL = 2048  # prompt tokens
CONTEXTS = (512, 2048, 8192)
PROMPTS = (128, 512, 1024, 2048, 4096, 8192)


def decode_shape(batch: int, context: int, window: int = 0) -> BatchShape:
    """``batch`` sequences decoding one token each with ``context`` tokens of KV before it
    (``window``: tokens the model's windowed layers attend over, 0 for none)."""
    if window:
        return BatchShape.decodes(batch, batch * context, window, batch * min(context, window - 1))
    return BatchShape.decodes(batch, batch * context)


def prefill_shape(prompt: int, window: int = 0) -> BatchShape:
    """One whole prompt of ``prompt`` tokens in one step (no chunking)."""
    shape = BatchShape(window=window)
    shape.add_chunk(0, prompt, True)
    return shape


@dataclass
class CostReport:
    gpu: GPUSpec
    model: ModelSpec
    precision: Precision
    tp: int
    roofline: Roofline
    engine: Engine | None = None

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
        return cls(gpu, model, precision, tp, build_roofline(gpu, model, precision, tp, engine=engine), engine)

    def comm_table(self, tps: tuple[int, ...] = COMM_TPS) -> list[dict]:
        """Per TP degree, a decode step (:data:`COMM_DECODE`) and a prefill step
        (:data:`COMM_PREFILL`): step time, all-reduce time (ms), the all-reduces' share of
        the step and which all-reduce vLLM runs (``vllm``: its own, ``nccl``, ``none``)."""
        link, h, w = self.gpu.link, self.model.hidden_size, self.model.window or 0
        shapes = {"decode": decode_shape(*COMM_DECODE, w), "prefill": prefill_shape(COMM_PREFILL, w)}
        rows = []
        for tp in tps:
            r = build_roofline(self.gpu, self.model, self.precision, tp, engine=self.engine)
            row: dict = {"tp": tp}
            for name, shape in shapes.items():
                t = shape.prefill_tokens + shape.decode_tokens
                tg = graph_size(t) if t <= r.graph_max else t
                step, comm = r.step_time(shape), r.allreduce(tg)
                row[f"{name}_ms"] = step * 1e3
                row[f"{name}_comm_ms"] = comm * 1e3
                row[f"{name}_share"] = comm / step
                row[f"{name}_runs"] = link.algorithm(tg * h * ACT_BYTES, tp)
            rows.append(row)
        return rows

    def decode_table(self, batches=BATCHES, contexts=CONTEXTS) -> list[dict]:
        rows, w = [], self.model.window or 0
        for b in batches:
            row = {"batch": b}
            for c in contexts:
                t = self.roofline.step_time(decode_shape(b, c, w))
                row[f"ms@{c}"] = t * 1e3
                row[f"tok/s@{c}"] = b / t
            rows.append(row)
        return rows

    def prefill_table(self, prompts=PROMPTS) -> list[dict]:
        rows, w = [], self.model.window or 0
        for p in prompts:
            t = self.roofline.step_time(prefill_shape(p, w))
            rows.append({"prompt": p, "ms": t * 1e3, "tok/s": p / t})
        return rows

    def batching(self) -> tuple[int, int]:
        """``(max_num_batched_tokens, max_num_seqs)`` that ``vllm serve`` runs on this GPU
        (:func:`des.engine.defaults.engine_defaults`, contexts of the model's ``max_model_len``)."""
        filled = engine_defaults({}, self.gpu, "api_server", self.model.max_model_len).values
        return int(filled["max_num_batched_tokens"]), int(filled["max_num_seqs"])

    def memory_plan(self, utilization: float, block_size: int = 16) -> MemoryPlan:
        """The memory of one instance under ``vllm serve``'s batching defaults for this GPU
        (:meth:`memory_settings`) and this report's CUDA graphs."""
        tokens, seqs = self.batching()
        return plan_memory(
            self.gpu,
            self.model,
            precision=self.precision,
            gpu_memory_utilization=utilization,
            block_size=block_size,
            max_num_batched_tokens=tokens,
            max_num_seqs=seqs,
            tp=self.tp,
            graphs=GraphCapture(self.roofline.graph_max),
        )

    def memory_settings(self) -> str:
        tokens, seqs = self.batching()
        return f"max_num_batched_tokens {tokens:,}, max_num_seqs {seqs}: vllm serve's defaults on this GPU"

    def kv_capacity(self, utilization: float, block_size: int = 16) -> int:
        return self.memory_plan(utilization, block_size).kv_capacity_tokens

    def facts(self) -> dict:
        r, w = self.roofline, self.model.window or 0
        return {
            "params": self.model.num_params,
            "active_params": self.model.active_params,
            "weight_bytes": weight_bytes(self.model, self.precision),
            "kv_bytes_per_token": self.model.kv_bytes_per_token(self.precision.kv_bytes),
            "ridge_tokens": r.ridge_tokens,
            "decode_batch1_tok_s": 1 / r.step_time(decode_shape(1, 512, w)),
            "prefill_2048_s": r.step_time(prefill_shape(2048, w)),
            "decode_64x1024_s": r.step_time(decode_shape(64, 1024, w)),
            "kv_tokens_0.90": self.kv_capacity(0.90),
            "kv_tokens_0.92": self.kv_capacity(0.92),
        }
