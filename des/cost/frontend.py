"""The serving front-end: the CPU time vLLM spends around the GPU's steps, and where it sits.

A scenario's ``serving.frontend`` names how requests reach vLLM's engine core and how
their tokens leave it (:data:`FRONTENDS`):

- ``api_server`` (the default: ``vllm serve``, the OpenAI-compatible server most users
  run): the engine core runs in a process of its own (``vllm/v1/engine/core.py``:
  ``EngineCoreProc.run_busy_loop``); every step its output thread msgpack-encodes one
  ``EngineCoreOutput`` per sequence with a new token and pushes them over ZMQ
  (``process_output_sockets``). In the API server process one asyncio loop
  (``vllm/v1/engine/async_llm.py``: ``output_handler``) decodes them, runs
  ``OutputProcessor.process_outputs`` (``output_processor.py``: stats, incremental
  detokenization of each new token by ``detokenizer.py``'s ``FastIncrementalDetokenizer``,
  a ``RequestOutput`` per sequence pushed to its request's collector), and then each
  request's ``generate()`` task wakes and ``serving_completion.py`` /
  ``serving_chat.py`` turn the delta into a pydantic chunk, ``model_dump_json`` and an
  SSE event written by uvicorn. New requests are parsed, validated and tokenized in the
  same process before the engine core sees them.
- ``engine`` (the ``LLM`` class with the engine core in-process: ``InprocClient``): the
  same engine core, and the output processing of each step in the same thread, with
  ``RequestOutputKind.FINAL_ONLY`` (each token still detokenized, no per-token
  ``RequestOutput``), no IPC and no HTTP.

What each part costs, and where it goes (seconds; ``n``: sequences in the step, ``e``:
those that emit a token; the engine core's own scheduling and input preparation is the
GPU entry's ``efficiency.step_overhead + seq_overhead × n``, the same for both):

==============  =========================  ==================================================
front-end       part                       where its time goes
==============  =========================  ==================================================
both            engine core (Efficiency)   overlaps the GPU under async scheduling (the step
                                           takes the longer), adds to it otherwise
both            ``core_step_s + core_seq_s  the engine core's thread (the output thread shares
                × e``                      its GIL): added to the engine core's CPU time
api_server      ``stage_step_s + stage_seq_ the API server's own process and core: a pipeline
                s × e``                    stage after the engine. It delays every token on
                                           its way to the client by about its length and, when
                                           longer than the engine's step, sets the pace at
                                           which tokens reach clients: a step is never
                                           shorter than the stage
both            ``ingress_s +              on the request's path before the scheduler sees it
                ingress_s_per_token × p``  (HTTP, validation, tokenizing ``p`` prompt tokens,
                                           IPC, block hashes for prefix caching): in its TTFT
both            ``turnaround``             a closed-loop client's gap between the last token
                                           and its next request (lognormal draws)
==============  =========================  ==================================================

The numbers are estimates from reading that code, per Python-level operation, with
CPython's costs (a pydantic v2 model built and dumped: ~10-20 µs; an asyncio task
wake-up and the generator hops of a streamed response: ~20-30 µs; one ``DecodeStream``
step of HF tokenizers plus the detokenizer's Python: ~5-10 µs; a socket write: ~10 µs;
HF fast tokenizers encode ~0.5-1 M tokens/s on one core): nothing here is fitted to a
served run. The RTX 4090 kernel profile (``data/rtx4090-vllm-kernel-profile/
per_sequence.csv``) bounds what is *not* CPU time: its LM head and sampler rows are GPU
kernels of 25 µs + ~1.1 µs per sequence (sampler) already in the roofline, so none of the
per-sequence CPU time here counts sampling again. ``uncertainty`` is the standard
deviation of ln(true / predicted) of this CPU time: per-operation costs read off code,
not timed, and hosts' CPUs that differ by tens of percent.

What des leaves out: the front-end's delay of each token on its way out (about
``stage_step_s + stage_seq_s × e``) moves a request's first and last token alike, so it
shifts TTFT and e2e by well under a millisecond at moderate batch and leaves TPOT alone;
a stage longer than the step is modelled as a floor on the step (the engine in fact runs
ahead and the API server merges deltas, so the engine's busy time is overstated there,
the client-side pace is not).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from des.config import Strict

FrontendName = Literal["api_server", "engine"]
#: What ``serving.frontend`` is when a scenario does not say: what most users run.
DEFAULT_FRONTEND: FrontendName = "api_server"


@dataclass(frozen=True, slots=True)
class FrontendSpec:
    """CPU time of one serving front-end around vLLM's engine core. Seconds, tokens.

    ``core_step_s``, ``core_seq_s`` (per emitting sequence): added to the engine core's CPU
    time per step. ``stage_step_s``, ``stage_seq_s`` (per emitting sequence): a separate
    process's time per step, a floor on the step. ``ingress_s``, ``ingress_s_per_token``
    (per prompt token): a request's way in. ``turnaround_median``, ``turnaround_sigma``:
    a closed-loop client's gap before its next request, lognormal (median seconds, sigma of
    its log). ``uncertainty``: sd of ln(true / predicted) of the CPU time. ``source``:
    where each number comes from.
    """

    name: str
    core_step_s: float
    core_seq_s: float
    stage_step_s: float
    stage_seq_s: float
    ingress_s: float
    ingress_s_per_token: float
    turnaround_median: float
    turnaround_sigma: float
    uncertainty: float
    source: str

    def ingress(self, prompt_tokens: int) -> float:
        """Seconds from a request's arrival at the server to the scheduler's queue."""
        return self.ingress_s + self.ingress_s_per_token * prompt_tokens

    @property
    def turnaround_mu(self) -> float:
        """Mean of the log of a closed-loop client's gap (ln seconds)."""
        return math.log(self.turnaround_median)


#: Tokenizing and hashing a prompt: HF fast tokenizers encode ~0.5-1 M tokens/s on one
#: core (1-2 µs a token, Rust BPE with pre-tokenization), and the engine core hashes
#: every full 16-token block for prefix caching (``vllm/v1/core/kv_cache_utils.py``:
#: ``hash_block_tokens``, sha256 of the pickled tokens: ~4 µs a block, 0.25 µs a token).
PROMPT_TOKEN_S = 1.5e-6

FRONTENDS: dict[str, FrontendSpec] = {
    "api_server": FrontendSpec(
        name="api_server",
        # engine core side (vllm/v1/engine/core.py): SchedulerStats built for logging each
        # step and the output thread's msgpack encode + ZMQ send (~50 µs), ~2 µs per
        # EngineCoreOutput encoded (a request id string and one token id), under the GIL
        # the busy loop also needs
        core_step_s=5e-5,
        core_seq_s=2e-6,
        # API server process, per step: ZMQ recv + msgpack decode (~30 µs), IterationStats
        # and the Prometheus loggers (vllm/v1/metrics/loggers.py: ~10 metrics, ~100 µs),
        # output_handler's loop and chunking (~50 µs) -> ~0.2 ms
        stage_step_s=2e-4,
        # per emitting sequence: OutputProcessor.process_outputs (stats ~5 µs, detokenizer
        # update ~8 µs, RequestOutput + CompletionOutput ~10 µs, collector put ~3 µs, loop
        # ~4 µs: ~30 µs) and the SSE chunk (generate() wake-up and generator hops ~25 µs,
        # CompletionStreamResponse built and dumped ~25 µs, uvicorn send ~15 µs: ~65 µs)
        # -> ~0.1 ms
        stage_seq_s=1e-4,
        # HTTP parse + FastAPI routing + request model validation (~0.3 ms), sampling
        # params and InputProcessor.process_inputs (~0.2 ms), msgpack + ZMQ to the engine
        # core and its add_request (~0.1 ms), chat template rendering where used (~0.2 ms)
        ingress_s=8e-4,
        ingress_s_per_token=PROMPT_TOKEN_S,
        # the client's side of a closed loop (vllm bench serve's aiohttp, an OpenAI SDK):
        # end of the SSE stream, its bookkeeping, building and sending the next request over
        # a kept-alive connection, loopback RTT ~50 µs: ~1 ms, right-skewed (lognormal:
        # the usual law of software latencies, scheduler and GC pauses in its tail)
        turnaround_median=1e-3,
        turnaround_sigma=0.5,
        # per-operation costs read off code, not timed: within a factor ~2.5 at 95 %
        uncertainty=0.5,
        source=(
            "vLLM V1 source (vllm/v1/engine/core.py, async_llm.py, output_processor.py, detokenizer.py, "
            "entrypoints/openai/serving_completion.py): per-operation CPU estimates, not measured "
            "(des/cost/frontend.py)"
        ),
    ),
    "engine": FrontendSpec(
        name="engine",
        # LLMEngine.step in the caller's thread (InprocClient): output processing after the
        # engine core's step, stats off (LLM's default), ~20 µs a step
        core_step_s=2e-5,
        # FINAL_ONLY outputs: each new token still detokenized (~8 µs) and its state
        # updated (~4 µs), no RequestOutput until the request finishes
        core_seq_s=1.2e-5,
        stage_step_s=0.0,
        stage_seq_s=0.0,
        # InputProcessor.process_inputs and the engine core's add_request, no HTTP
        ingress_s=2e-4,
        ingress_s_per_token=PROMPT_TOKEN_S,
        # a caller's own loop handing in the next request: tens of µs
        turnaround_median=5e-5,
        turnaround_sigma=0.5,
        uncertainty=0.4,
        source=(
            "vLLM V1 source (vllm/v1/engine/llm_engine.py, output_processor.py, detokenizer.py): per-operation "
            "CPU estimates, not measured (des/cost/frontend.py)"
        ),
    ),
}


class Serving(Strict):
    """How requests reach the engine: ``frontend`` is ``api_server`` (``vllm serve``, the
    default) or ``engine`` (the ``LLM`` class, in-process); see :mod:`des.cost.frontend`."""

    frontend: FrontendName = DEFAULT_FRONTEND

    @property
    def spec(self) -> FrontendSpec:
        return FRONTENDS[self.frontend]
