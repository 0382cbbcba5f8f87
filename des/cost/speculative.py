"""Step time of speculative decoding: the target's verification step plus the proposer's passes.

With ``k`` speculative tokens (vLLM's ``speculative_config``), a decoding sequence's step
feeds the target ``q = 1 + k`` query tokens (its last token and the ``k`` proposed ones;
fewer when the token budget or the context limit cuts them), as vLLM's scheduler counts
them in ``num_scheduled_tokens`` (``vllm/v1/core/sched/scheduler.py``). A step of shape
``s`` (:class:`~des.cost.base.BatchShape`: ``decode_tokens`` counts every verified row,
``spec_tokens`` the proposed ones among them, ``n = decode_tokens − spec_tokens``
sequences decode) costs, on the target's :class:`~des.cost.roofline.Roofline` built with
``query_len = k + 1``:

- **GEMMs, element-wise kernels, KV writes, all-reduces** over all ``T = prefill +
  decode_tokens`` rows (CUDA-graph padded as any step: vLLM captures uniform decode
  batches of ``1 + k`` tokens per request);
- **attention**: each decode reads its context and its ``q`` new tokens' KV once
  (``decode_context``) and computes ``q`` query rows against it (the ``query_len``
  factor of the per-context FLOPs); the per-sequence terms count the ``n`` sequences;
- **LM head and sampler** on every verified row, ``num_emitting + spec_tokens``: vLLM's
  ``RejectionSampler`` (``vllm/v1/sample/rejection_sampler.py``) takes the target's
  logits at every draft position and the bonus one;
- the engine's CPU time per sequence and per emitting sequence as in any step;
- the **proposer's passes** on the same GPU, before the next step (vLLM's
  ``propose_draft_token_ids`` runs after the target's forward in ``execute_model``):
  none for n-gram lookup (a CPU search, neglected); for a draft model, an EAGLE head or
  MTP layers (:class:`~des.engine.speculative.Proposer`), a first pass over the step's
  tokens (the prompt chunks and each decode's ``q`` rows, so that its KV follows the
  target's) and ``k − 1`` passes of one token per sequence that emits, each costed on
  the proposer's own roofline (GPU time only: :func:`gpu_only`).

Everything is built once (:func:`build_verification`); a step costs the target's
few dozen float operations plus two of the proposer's step times.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from des.cost.base import BatchShape, CostContext
from des.cost.roofline import Roofline, RooflineConfig


def gpu_only(roofline: Roofline) -> Roofline:
    """``roofline`` with its CPU and front-end times removed: its step time is GPU time alone."""
    return replace(
        roofline, cpu_step_s=0.0, cpu_seq_s=0.0, cpu_emit_s=0.0, stage_step_s=0.0, stage_seq_s=0.0, overlap_cpu=True
    )


@dataclass(frozen=True, slots=True)
class Verification:
    """Step times of speculative decoding with ``k`` tokens proposed per sequence: the
    ``target`` (its decode attention for ``k + 1`` query tokens) verifying them, and the
    ``draft`` proposer's passes (None: n-gram lookup, no GPU work). Seconds."""

    target: Roofline
    draft: Roofline | None
    k: int

    def draft_time(self, s: BatchShape) -> float:
        """Seconds of the proposer's ``k`` passes after a step of shape ``s``."""
        draft = self.draft
        if draft is None:
            return 0.0
        first = draft.step_time(replace(s, spec_tokens=0) if s.spec_tokens else s)  # its LM head: emitting rows
        e = s.num_emitting
        if e == 0 or self.k == 1:
            return first
        return first + (self.k - 1) * draft.step_time(BatchShape.decodes(e, s.decode_context - s.decode_tokens))

    def serial(self) -> Verification:
        """These step times as a step formed on an idle engine runs them (:meth:`Roofline.serial`)."""
        return replace(self, target=self.target.serial())

    def step_time(self, shape: BatchShape) -> float:
        """The target's verification step (:meth:`Roofline.step_time` counts a shape's
        proposed rows) with the proposer's passes as more GPU work."""
        return self.target.step_time(shape, self.draft_time(shape))


def build_verification(kind: RooflineConfig, ctx: CostContext, k: int, draft: CostContext | None) -> Verification:
    """The step times of ``ctx`` verifying ``k`` proposed tokens per sequence under the
    roofline settings ``kind``, with the proposer built from ``draft`` (None: no GPU work)."""
    target = kind.build(replace(ctx, query_len=k + 1))
    proposer = gpu_only(kind.build(draft)) if draft is not None else None
    return Verification(target, proposer, k)
