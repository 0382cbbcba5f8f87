"""Pipeline parallelism: an engine whose layers are split in ``pp`` stages of ``tp`` GPUs.

vLLM splits the layers as :func:`~des.catalog.memory.pp_layers` says; each step's batch
runs through the stages in turn, each stage sending its activations to the next
(``tokens × hidden`` bf16 values, point to point over the GPUs' link: ``latency +
bytes / bandwidth`` at NCCL's cost between two GPUs). vLLM V1's engine core keeps up to
``pp`` batches in flight (``EngineCore.batch_queue``, of size
``max_concurrent_batches = pipeline_parallel_size``, ``vllm/v1/engine/core.py:
step_with_batch_queue``), and a request is in at most one of them: the next batch is
formed from the requests whose previous step is done. So the engine's throughput is set by
its slowest stage and a step's latency by the sum of its stages and sends, with bubbles
when fewer than ``pp`` batches can be formed.

des models the in-flight batches as ``pp`` schedulers over the engine's one KV cache
(:class:`Pipelined`), each forming the batches of its own requests, one batch in flight at
a time: a request joins the one holding the fewest requests when it arrives and stays
there. Each holds ``max_num_seqs / pp`` sequences (vLLM's ``max_num_seqs`` caps the
running requests of all batches together) and the whole token budget per batch (vLLM's
budget is per scheduled batch). vLLM V1 re-forms its batches from all running requests
each time; des keeps the partition fixed, which matches it once every batch is full.

:class:`PipelineInstance` runs the stages: a batch formed at ``t`` starts stage 0 when that
stage is free, and each next stage when the previous stage's output has arrived and the
stage is free; the batch's requests progress (emit their tokens) when the last stage ends.
Each batch is one row of the steps table: ``start`` when stage 0 begins it, ``duration``
its slowest stage's time (the share of the pipeline it occupies); that row is what the
engine's busy time counts, as the batch is formed, and the step span the KV link reads of
the batch that releases requests (:meth:`~des.engine.instance.Instance.account`,
:meth:`~des.engine.instance.Instance.release`). The ``pp = 1`` engine is
:class:`~des.engine.instance.Instance`, untouched.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from simpy.events import Event

from des.catalog.memory import pp_layers
from des.cost.base import CostContext, CostKind
from des.cost.roofline import ACT_BYTES, Roofline
from des.engine.events import Barrier, ExactlyAt
from des.engine.instance import Instance, idle, sleep
from des.engine.itl import ItlLog
from des.engine.policy import Scheduler, Step
from des.engine.request import Request


def stage_costs(kind: CostKind, ctx: CostContext, pp: int) -> list[Roofline]:
    """The roofline of each of ``pp`` stages: the model's layers as vLLM splits them, the
    LM head and sampler on the last, the engine core's CPU time on the first."""
    stages = []
    for s, layers in enumerate(pp_layers(ctx.model.num_layers, pp)):
        part = ctx.model.model_copy(update={"num_layers": layers})
        built = kind.build(CostContext(ctx.gpu, part, ctx.precision, ctx.tp, ctx.frontend, ctx.multipliers))
        if not isinstance(built, Roofline):
            raise TypeError("pipeline stages need the roofline cost model")
        stages.append(built.stage(s == 0, s == pp - 1))
    return stages


def send_cost(ctx: CostContext) -> tuple[float, float]:
    """Seconds of one stage-to-stage send: ``(fixed, per token)``, ``tokens × hidden`` bf16
    values over the link at NCCL's cost between two GPUs."""
    cost = ctx.gpu.link.nccl_cost(2)
    return cost.latency, ctx.model.hidden_size * ACT_BYTES / cost.bus_bandwidth


class Pipelined:
    """``pp`` schedulers over one KV cache, one per batch in flight; to the rest of the
    engine (router, front-end, cluster) one scheduler."""

    def __init__(self, subs: list[Scheduler]):
        self.subs = subs
        self.load = [0] * len(subs)  # requests each holds and has not released
        self.owner: dict[int, int] = {}  # request id -> the scheduler holding it

    def rejection(self, req: Request) -> str | None:
        return self.subs[0].rejection(req)

    def add(self, req: Request, blocks: int = 0) -> None:
        """Give ``req`` to the scheduler holding the fewest requests (the first of equals)."""
        i = self.load.index(min(self.load))
        self.load[i] += 1
        self.owner[req.id] = i
        self.subs[i].add(req, blocks)

    def released(self, i: int, count: int) -> None:
        self.load[i] -= count

    def free(self, req_id: int) -> None:
        self.subs[self.owner.pop(req_id)].free(req_id)

    def num_waiting(self) -> int:
        return sum(sub.num_waiting() for sub in self.subs)

    def wakeup_time(self) -> float | None:
        times = [t for sub in self.subs if (t := sub.wakeup_time()) is not None]
        return min(times) if times else None

    def sync(self) -> None:
        for sub in self.subs:
            sub.sync()

    def gap_logs(self) -> list[ItlLog]:
        return [log for sub in self.subs for log in sub.gap_logs()]


class PipelineInstance(Instance):
    """An engine of ``len(stages)`` pipeline stages with step times ``stages`` and sends of
    ``send_fixed + send_per_token × tokens`` seconds between them; ``scheduler`` is the
    :class:`Pipelined` holding one scheduler per batch in flight."""

    def __init__(
        self,
        *args: Any,
        stages: list[Roofline],
        send: tuple[float, float],
        **kwargs: Any,
    ):
        self.stages = stages
        self.send_fixed, self.send_per_token = send
        super().__init__(*args, **kwargs)

    def _run(self) -> Generator[Event, Any, None]:
        env, kv, record, account = self.env, self.kv, self.record, self.account
        pipe = self.scheduler
        assert isinstance(pipe, Pipelined)
        subs, stages = pipe.subs, self.stages
        pp = len(stages)
        free_at = [0.0] * pp  # when each stage finishes the batches given to it
        flight: dict[int, tuple[float, Step[Any], float, float, int, int]] = {}  # scheduler -> its batch
        turn = 0  # the scheduler asked first, in turn, so that none starves
        while True:
            if env.peek() == env.now:
                yield Barrier(env)  # let every arrival due now join the batches formed now
            now = env.now
            for k in range(pp):
                i = (turn + k) % pp
                if i in flight:
                    continue
                step = subs[i].schedule(now)
                if step is None:
                    continue
                shape = step.shape
                send = self.send_fixed + self.send_per_token * shape.new_tokens
                t, slowest = max(now, free_at[0]), 0.0
                start = t
                for s, stage in enumerate(stages):
                    if s:
                        t = max(t + send, free_at[s])
                    d = stage.step_time(shape)
                    t += d
                    free_at[s] = t
                    slowest = d if d > slowest else slowest
                flight[i] = (t, step, start, slowest, kv.used, pipe.num_waiting())
                account(start, slowest)
                turn = (i + 1) % pp
            if not flight:
                yield from idle((self,))
                continue
            i, (end, step, start, slowest, kv_used, waiting) = min(flight.items(), key=lambda kv_: kv_[1][0])
            yield from sleep((self,), ExactlyAt(env, end))  # a request for a free scheduler, or the batch done
            if env.now < end:
                continue
            del flight[i]
            released = subs[i].finish_step(step, end)
            record(start, slowest, step, kv_used, waiting)
            pipe.released(i, len(released))
            self.release(start, slowest, released)
