"""The serving front-end: the CPU time vLLM spends around the GPU's steps, and where it sits.

A scenario's ``serving`` section says how requests reach vLLM's engine core and how
their tokens leave it; ``serving.frontend`` is one of :data:`FRONTENDS`:

- ``api_server`` (the default: ``vllm serve``, the OpenAI-compatible server most users
  run): the engine core runs in a process of its own (``vllm/v1/engine/core.py``:
  ``EngineCoreProc.run_busy_loop``); every step its output thread msgpack-encodes one
  ``EngineCoreOutput`` per sequence with a new token and pushes them over ZMQ
  (``process_output_sockets``). In the API server process one asyncio loop
  (``vllm/v1/engine/async_llm.py``: ``output_handler``) decodes them and runs
  ``OutputProcessor.process_outputs`` (``output_processor.py``: stats, incremental
  detokenization of each new token by ``detokenizer.py``'s ``FastIncrementalDetokenizer``,
  a ``RequestOutput`` per sequence pushed to its request's collector); then each
  request's ``generate()`` task wakes and ``serving_completion.py`` / ``serving_chat.py``
  turn the delta into a pydantic chunk, ``model_dump_json`` and an SSE event that
  uvicorn writes. New requests are parsed, validated and tokenized in the same process
  before the engine core sees them. ``stream_interval`` (vLLM's ``--stream-interval``)
  sends one SSE event per that many tokens; ``api_server_count`` (``--api-server-count``)
  spreads the requests, and so their outputs, over that many API server processes.
- ``engine`` (the ``LLM`` class with the engine core in-process, ``InprocClient``): the
  same engine core, the output processing of each step in the same thread with
  ``RequestOutputKind.FINAL_ONLY`` (each token still detokenized, no per-token
  ``RequestOutput``), no IPC, no HTTP. (With ``VLLM_ENABLE_V1_MULTIPROCESSING=1``, vLLM's
  default, ``LLM`` runs the engine core in a child process and this output processing,
  ~5 µs a token, moves off the engine's thread: a difference far below the uncertainty.)

What each part costs and where its time goes (seconds; ``n``: sequences in the step,
``e``: those emitting a token, ``p``: a request's prompt tokens). The engine core's own
scheduling and input preparation is the GPU entry's ``efficiency.step_overhead +
seq_overhead × n`` (``des/tools/calibrate.py``: ``ENGINE_CPU``), the same for both
front-ends; the front-end's terms come on top of it:

=============================  ==========================================================
term                           where its time goes
=============================  ==========================================================
``core_step_s + core_seq_s·e`` the engine core's thread (the ZMQ output thread shares its
                               GIL; ``engine`` runs output processing in that very thread):
                               added to the engine core's CPU time, which overlaps the GPU
                               under async scheduling (the step takes the longer of the
                               two) and adds to it otherwise
``stage_step_s +               the API server's own process: a pipeline stage after the
stage_seq_s·e``                engine. When longer than the engine's step it sets the pace
                               at which tokens reach clients: a step is never shorter than
                               the stage
ingress (below)                the request's way in, before the scheduler sees it: in its
                               TTFT
egress (below)                 each token's way out after its step: in TTFT and e2e alike
``turnaround``                 a closed-loop client's gap between its last token and its
                               next request, lognormal
=============================  ==========================================================

**The first-token path.** A lone request's TTFT is the sum of these stages (seconds; ``p``
prompt tokens; the ``api_server`` defaults in brackets), each costed from the vLLM V1 code
that runs it, per Python-level operation at CPython's costs:

======================  ========================  =============================================
stage                   seconds                   where in vLLM (``vllm/``)
======================  ========================  =============================================
1 HTTP in               ``http_s`` [0.3 ms]       ``entrypoints/openai/api_server.py``:
                                                  ``create_chat_completion`` (uvicorn's
                                                  httptools, FastAPI routing, the pydantic
                                                  ``ChatCompletionRequest``);
                                                  ``serving_chat.py``:
                                                  ``OpenAIServingChat.create_chat_completion``
                                                  (``_check_model``, ``_maybe_get_adapters``)
2 chat template         ``template_s`` [0.2 ms],  ``entrypoints/chat_utils.py``:
                        ``chat`` only             ``parse_chat_messages_futures``,
                                                  ``apply_hf_chat_template`` (jinja2, no
                                                  tokenizing), from ``serving_engine.py``:
                                                  ``_preprocess_chat``
3 tokenizer window      ``tokenize_wait_s``       ``utils/async_utils.py``:
                        [2 ms], not on the loop   ``AsyncMicrobatchTokenizer._batch_encode_loop``
                                                  waits ``batch_wait_timeout_s`` (0.002) after a
                                                  batch's first prompt for more (up to 32)
4 tokenizing            ``tokenize_s_per_token``  the same class's one-thread executor (HF
                        ·p [1.25 µs]              fast tokenizer, Rust BPE)
5 input processing      ``process_s`` [0.3 ms]    ``v1/engine/async_llm.py``:
  and hand-over                                   ``AsyncLLM.add_request``;
                                                  ``v1/engine/input_processor.py``:
                                                  ``InputProcessor.process_inputs``;
                                                  ``v1/engine/output_processor.py``:
                                                  ``OutputProcessor.add_request`` (its
                                                  detokenizer primed); ``v1/engine/core_client.py``:
                                                  ``AsyncMPClient.add_request_async`` (msgpack,
                                                  ZMQ send)
6 engine core intake    ``intake_s`` [0.1 ms] +   ``v1/engine/core.py``:
                        ``hash_s_per_token·p``    ``EngineCoreProc.process_input_sockets``
                        [0.25 µs]                 (msgpack decode, ``preprocess_add_request``:
                                                  the ``Request`` and its block hashes,
                                                  ``v1/core/kv_cache_utils.py``:
                                                  ``hash_block_tokens``); ``run_busy_loop`` →
                                                  ``_process_input_queue``, blocked in
                                                  ``input_queue.get()``, woken;
                                                  ``Scheduler.add_request``
7 scheduling and        the cost model's step,    ``core.py``: ``step_with_batch_queue``
  prefill               CPU then GPU              (``Scheduler.schedule``; the worker's
                                                  ``gpu_model_runner.py``: ``_prepare_inputs``,
                                                  the forward, the sampler). Under async
                                                  scheduling a busy engine prepares a step
                                                  while the GPU runs the one before; an idle
                                                  engine has none to hide under, so this
                                                  step's CPU time (the GPU entry's
                                                  ``step_overhead + seq_overhead·n`` plus
                                                  ``core_step_s + core_seq_s·e``) adds to its
                                                  GPU time (:meth:`Roofline.serial
                                                  <des.cost.roofline.Roofline.serial>`); the
                                                  GPU time pads steps up to the largest
                                                  captured CUDA graph, above it runs eager
                                                  (the launches' CPU time: left out, below)
8 async scheduling's    0 for a lone request      ``step_with_batch_queue`` schedules and
  lag                                             launches step N+1 before it blocks on step
                                                  N's output; N+1's CPU time (~0.5 ms) hides
                                                  under N's GPU time, which a prefill exceeds
9 way out               ``egress`` [0.4 ms]:      ``core.py``: ``update_from_output``,
                        ``core_step_s             ``process_output_sockets`` (msgpack, ZMQ);
                        + core_seq_s +            ``async_llm.py``: ``output_handler`` →
                        stage_step_s +            ``OutputProcessor.process_outputs``
                        output_seq_s +            (``detokenizer.py``:
                        first_events ·            ``FastIncrementalDetokenizer``), the stat
                        stream_seq_s``            loggers; ``serving_chat.py``:
                                                  ``chat_completion_stream_generator`` sends a
                                                  role chunk, then the first content chunk,
                                                  each ``model_dump_json`` and an SSE event
                                                  uvicorn writes (``first_events`` 2;
                                                  ``serving_completion.py``: 1)
======================  ========================  =============================================

So behind ``vllm serve`` a lone chat request of ``p`` tokens takes 2.9 ms + 1.5 µs·p to reach
the scheduler, its prefill step plus the engine core's ~0.56 ms of CPU time, and 0.4 ms on
the way out. Stages 1, 2, 4 and 5 hold the API server process's event loop (``ingress_busy``:
one loop per process, first come, first served, :class:`des.engine.instance.Lanes`; in a
burst the requests queue there in the order sent); stage 3 holds nothing; stage 6 holds the
engine core's input thread, one per engine, first come, first served too (3 and 6:
``ingress_after``). The ``engine`` front-end (``LLM``) keeps its own, shorter path:
``llm.py``: ``LLM._validate_and_add_requests`` → ``LLMEngine.add_request``
(``InputProcessor.process_inputs`` tokenizes in line, no window) → ``InprocClient`` →
``EngineCore.add_request``; no HTTP, template or SSE, and no way out (a token is dated in the
engine core's outputs). It adds all of a ``generate()`` call's prompts before ``_run_engine``
steps the engine, in the same thread: requests that arrive together reach the scheduler
together, once the last is added (``caller_steps``).

The numbers are estimates from reading that code, per Python-level operation at CPython's
costs, and from one CPU-only profile of vLLM's engine loop (openfabric-systems/simllm PR
#204, vLLM 0.27.1: front-end output processing 11.6 % of 540.9 µs per step at ~16 tokens a
step, about 4 µs a token for ``LLM``'s ``FINAL_ONLY`` outputs; its authors do not certify
absolute numbers, run-to-run drift 30 %); the tokenizer window is vLLM's own constant.
Nothing is fitted to a served run. The RTX 4090
kernel profile (``data/rtx4090-vllm-kernel-profile/per_sequence.csv``) bounds what is
*not* CPU time: its LM head and sampler rows (25 µs + ~1.1 µs per sequence for the
sampler) are GPU kernels already in the roofline, so no per-sequence term here counts
sampling again. That per-token streaming is what an API server spends most on is
vLLM's own finding (``--stream-interval``, vllm-project/vllm PR #27869: fewer SSE events
relieve the output queue at 1024 concurrent requests).

``uncertainty``: the standard deviation of ln(true / predicted) of this CPU time:
per-operation costs read off code rather than timed, on host CPUs that differ by tens of
percent.

What des leaves out: the client's own time (its HTTP connection and parsing); the kernel
launches' CPU time of a step that runs without a CUDA graph (above the largest captured
size, or ``enforce_eager``: ~10 launches a layer from Inductor's wrapper and the attention
backend at ~8 µs each, ~2.6 ms for 32 layers) or piecewise (a step with prefill up to that
size under ``FULL_AND_PIECEWISE``: a graph piece replayed and ``unified_attention``
launched between pieces, ~40 µs a layer, ~1.3 ms for 32 layers). The GPU runs alongside
the launches, so they bind only where they outlast its work: not for an 8B model's
prefill on an H100 (8 ms at 100 tokens, 15 ms and more above 512), nor for Qwen2.5-0.5B's
(1.4 ms at 300 tokens against ~1 ms of launches), but for a small model's decode steps
under ``enforce_eager``; the
tokenizer window's timer granularity (uvloop's timers count milliseconds); in a burst,
the window shared by the prompts that queue within it (each request here waits a whole
window after its own turn on the loop, and the tokenizer thread's work counts as the
loop's); GIL contention between the API server's threads. A stage longer than the step is
modelled as a floor on the step (vLLM's engine in fact runs ahead while the API server
merges deltas, so des overstates the engine's busy time there, not the pace clients see).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from pydantic import Field, PositiveInt, model_validator

from des.config import Strict

FrontendName = Literal["api_server", "engine"]
#: What ``serving.frontend`` is when a scenario does not say: what most users run.
DEFAULT_FRONTEND: FrontendName = "api_server"


@dataclass(frozen=True, slots=True)
class FrontendSpec:
    """CPU time of one serving front-end around vLLM's engine core. Seconds, tokens.

    ``core_step_s``, ``core_seq_s`` (per emitting sequence): added to the engine core's CPU
    time per step. ``stage_step_s`` and, per emitting sequence, ``output_seq_s`` (output
    processing, every token) and ``stream_seq_s`` (one streamed event): a separate
    process's time per step, a floor on the step; :attr:`stage_seq_s` is their sum per
    token after ``stream_interval`` and ``api_servers``.

    A request's way in (:meth:`ingress_busy`, :meth:`ingress_after`): ``http_s`` (HTTP,
    validation), ``template_s`` (a chat template rendered, when ``chat``), ``process_s``
    (input processing and the hand-over to the engine core) and ``tokenize_s_per_token``
    per prompt token keep one API server process busy; ``tokenize_wait_s`` (the
    micro-batching tokenizer's window), ``intake_s`` (the engine core taking it in) and
    ``hash_s_per_token`` (its prefix-cache block hashes) follow without holding it. Its
    first token's way out, :attr:`egress`: ``first_events`` streamed events (a chat
    stream's role chunk, then the content) after the engine core's and the API server's
    per-step terms. ``caller_steps``: the thread that adds requests also steps the engine
    (the ``LLM`` class): the requests that arrive together are one ``generate()`` call, all
    added before its first step. ``uncertainty``: sd of ln(true / predicted) of the CPU time.
    ``source``: where the numbers come from. (A closed-loop client's own gap between
    requests is the load generator's: :mod:`des.workload.client`.)
    """

    name: str
    core_step_s: float
    core_seq_s: float
    stage_step_s: float
    output_seq_s: float
    stream_seq_s: float
    http_s: float
    template_s: float
    process_s: float
    tokenize_s_per_token: float
    tokenize_wait_s: float
    intake_s: float
    hash_s_per_token: float
    first_events: int
    uncertainty: float
    source: str
    stream_interval: int = 1
    api_servers: int = 1
    chat: bool = True
    caller_steps: bool = False

    @property
    def stage_seq_s(self) -> float:
        """Seconds of the front-end process per emitting sequence and step: output
        processing of every token, one streamed event per ``stream_interval`` tokens, over
        ``api_servers`` processes sharing the requests."""
        return (self.output_seq_s + self.stream_seq_s / self.stream_interval) / self.api_servers

    def ingress_busy(self, prompt_tokens: int) -> float:
        """Seconds a request of ``prompt_tokens`` keeps its API server process (one asyncio
        event loop, first come first served) busy on its way in: HTTP and validation, the
        chat template where rendered, tokenizing, input processing and the send to the
        engine core."""
        template = self.template_s if self.chat else 0.0
        return self.http_s + template + self.process_s + self.tokenize_s_per_token * prompt_tokens

    def ingress_after(self, prompt_tokens: int) -> float:
        """Seconds of a request's way in that do not hold its API server process: the
        micro-batching tokenizer's window, and the engine core's intake (its input thread,
        the block hashes of ``prompt_tokens``, the busy loop woken)."""
        return self.tokenize_wait_s + self.intake_s + self.hash_s_per_token * prompt_tokens

    def ingress(self, prompt_tokens: int) -> float:
        """Seconds from a lone request's arrival at the server to the scheduler's queue (one
        that finds its API server process free: :meth:`ingress_busy` + :meth:`ingress_after`)."""
        return self.ingress_busy(prompt_tokens) + self.ingress_after(prompt_tokens)

    @property
    def egress(self) -> float:
        """Seconds from the end of the step that emits a token to the client's receiving it
        (every token alike, so a lone request's TTFT and e2e, not its TPOT): the engine core
        sends the step's outputs (``core_step_s + core_seq_s``), the API server processes
        them (``stage_step_s + output_seq_s``) and streams ``first_events`` SSE events
        (``stream_seq_s`` each). 0 without streaming (``first_events`` 0: the ``LLM`` class
        dates a token in the engine core's outputs)."""
        if not self.first_events:
            return 0.0
        return (
            self.core_step_s
            + self.core_seq_s
            + self.stage_step_s
            + self.output_seq_s
            + self.first_events * self.stream_seq_s
        )


#: Tokenizing a prompt, per token: HF fast tokenizers encode ~0.5-1 M tokens/s on one core
#: (1-1.5 µs a token: Rust BPE after pre-tokenization).
TOKENIZE_S_PER_TOKEN = 1.25e-6
#: Hashing a prompt for prefix caching, per token: the engine core hashes every full
#: 16-token block (``vllm/v1/core/kv_cache_utils.py``: ``hash_block_tokens``, sha256 of the
#: serialized tokens: ~4 µs a block, 0.25 µs a token).
HASH_S_PER_TOKEN = 2.5e-7
#: ``AsyncMicrobatchTokenizer``'s ``batch_wait_timeout_s`` (``vllm/utils/async_utils.py``):
#: the batcher that tokenizes the API server's prompts waits this long after the first
#: prompt of a batch for more (up to ``max_batch_size`` 32) before it encodes them.
MICROBATCH_WAIT_S = 0.002

FRONTENDS: dict[str, FrontendSpec] = {
    "api_server": FrontendSpec(
        name="api_server",
        # engine core (vllm/v1/engine/core.py): SchedulerStats built for the API server's
        # loggers each step, and the output thread's msgpack encode + ZMQ send (~50 µs);
        # ~2 µs per EngineCoreOutput encoded (a request id and one token id); under the GIL
        # the busy loop needs too
        core_step_s=5e-5,
        core_seq_s=2e-6,
        # API server, per step: ZMQ recv + msgpack decode (~30 µs), IterationStats and the
        # Prometheus and log loggers (vllm/v1/metrics/loggers.py, ~10 metrics: ~100 µs),
        # output_handler's loop and chunking (~50 µs)
        stage_step_s=2e-4,
        # per token: OutputProcessor.process_outputs as profiled for FINAL_ONLY (~4 µs,
        # simllm PR #204) plus the per-token RequestOutput + CompletionOutput (~8 µs) and
        # the collector put (~3 µs)
        output_seq_s=1.5e-5,
        # per SSE event: the request's generate() task woken and its async-generator hops
        # (~25 µs), CompletionStreamResponse built and model_dump_json (~25 µs), uvicorn's
        # send and the socket write (~15 µs)
        stream_seq_s=6.5e-5,
        # uvicorn's httptools parse and ASGI scope (~50 µs), FastAPI routing and the request
        # model's pydantic validation (~150 µs: ChatCompletionRequest has ~80 fields with
        # validators), create_chat_completion's checks (_check_model, _maybe_get_adapters,
        # the tokenizer fetched: ~100 µs)
        http_s=3e-4,
        # parse_chat_messages_futures and apply_hf_chat_template (tokenize=False): the
        # model's compiled jinja2 template rendered over the messages (~200 µs)
        template_s=2e-4,
        # to_sampling_params (~50 µs), AsyncLLM.add_request: InputProcessor.process_inputs
        # (~100 µs), OutputProcessor.add_request with its FastIncrementalDetokenizer primed on
        # the prompt's tail (~50 µs), the tokenizer thread's result handed back to the loop
        # (run_in_executor + call_soon_threadsafe, ~50 µs), core_client's msgpack encode and
        # ZMQ send (~50 µs)
        process_s=3e-4,
        tokenize_s_per_token=TOKENIZE_S_PER_TOKEN,
        tokenize_wait_s=MICROBATCH_WAIT_S,
        # the engine core's input thread (process_input_sockets): ZMQ recv + msgpack decode
        # (~30 µs), preprocess_add_request's Request (~20 µs); the busy loop, blocked in
        # _process_input_queue's input_queue.get(), woken and handed the GIL (~40 µs);
        # Scheduler.add_request (~10 µs)
        intake_s=1e-4,
        hash_s_per_token=HASH_S_PER_TOKEN,
        # serving_chat.py's chat_completion_stream_generator sends a role chunk before the
        # first content chunk (serving_completion.py: the content chunk alone)
        first_events=2,
        # per-operation costs read off code, one uncertified profile: within a factor ~2.5
        uncertainty=0.5,
        source=(
            "vLLM V1 source (vllm/v1/engine/core.py, async_llm.py, output_processor.py, detokenizer.py, "
            "utils/async_utils.py, entrypoints/openai/serving_chat.py, serving_completion.py) and "
            "openfabric-systems/simllm PR #204's CPU-only profile: per-operation estimates, not fitted "
            "(des/cost/frontend.py)"
        ),
    ),
    "engine": FrontendSpec(
        name="engine",
        # LLMEngine.step's output processing in the engine core's thread (InprocClient),
        # stats off (LLM's default): ~20 µs a step
        core_step_s=2e-5,
        # FINAL_ONLY: each token detokenized and its state updated, ~4 µs as profiled
        # (simllm PR #204), ~5 µs
        core_seq_s=5e-6,
        stage_step_s=0.0,
        output_seq_s=0.0,
        stream_seq_s=0.0,
        http_s=0.0,
        template_s=0.0,
        # LLM._add_request in the caller's thread: InputProcessor.process_inputs, which
        # tokenizes in line (no micro-batching), OutputProcessor.add_request (~170 µs)
        process_s=1.7e-4,
        tokenize_s_per_token=TOKENIZE_S_PER_TOKEN,
        tokenize_wait_s=0.0,
        # InprocClient.add_request: EngineCore.preprocess_add_request and the scheduler's
        # add_request, no IPC (~30 µs)
        intake_s=3e-5,
        hash_s_per_token=HASH_S_PER_TOKEN,
        first_events=0,
        # LLM.generate adds every prompt of the call (_validate_and_add_requests) before
        # _run_engine steps the engine, in the same thread
        caller_steps=True,
        uncertainty=0.4,
        source=(
            "vLLM V1 source (vllm/v1/engine/llm_engine.py, output_processor.py, detokenizer.py) and "
            "openfabric-systems/simllm PR #204's CPU-only profile: per-operation estimates, not fitted "
            "(des/cost/frontend.py)"
        ),
    ),
}


class Serving(Strict):
    """How requests reach the engine (:mod:`des.cost.frontend`): ``frontend`` is
    ``api_server`` (``vllm serve``, the default) or ``engine`` (the ``LLM`` class,
    in-process); an API server serves ``endpoint`` (``chat``, the default:
    ``/v1/chat/completions``, a chat template rendered and a role chunk streamed before the
    first token; ``completions``: ``/v1/completions``), sends one SSE event per
    ``stream_interval`` tokens and may run as ``api_server_count`` processes. ``uncertainty``:
    sd of ln(true / predicted) of the front-end's CPU time for model-uncertainty draws
    (None: the front-end's stated one; a user who measured their own stack may state a
    tighter one)."""

    frontend: FrontendName = DEFAULT_FRONTEND
    endpoint: Literal["chat", "completions"] | None = None
    stream_interval: PositiveInt = Field(1, le=1 << 20)
    api_server_count: PositiveInt = Field(1, le=1024)
    uncertainty: float | None = Field(None, ge=0, le=5.0)

    @model_validator(mode="after")
    def _api_server_settings(self) -> Serving:
        if self.frontend != "api_server":
            for key, default in (("endpoint", None), ("stream_interval", 1), ("api_server_count", 1)):
                if getattr(self, key) != default:
                    raise ValueError(f"{key}: only an api_server front-end serves HTTP (frontend is {self.frontend!r})")
        return self

    @property
    def spec(self) -> FrontendSpec:
        """The front-end's CPU time with these settings."""
        base = FRONTENDS[self.frontend]
        chat = self.frontend == "api_server" and self.endpoint != "completions"
        return replace(
            base,
            stream_interval=self.stream_interval,
            api_servers=self.api_server_count,
            uncertainty=base.uncertainty if self.uncertainty is None else self.uncertainty,
            chat=chat,
            first_events=base.first_events - (1 if base.first_events and not chat else 0),
        )
