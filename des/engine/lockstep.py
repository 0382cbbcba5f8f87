"""Data-parallel ranks of a mixture of experts, stepping together through its MoE layers.

With ``data_parallel_size > 1`` every rank is an engine of its own (its scheduler, its KV
cache, its share of the requests), but the MoE layers of a step gather the tokens of all
ranks (:meth:`~des.cost.roofline.Roofline.group_step_time`), so the ranks step in
lockstep: a step of the group starts when every rank has formed its batch, and lasts as
long as the slowest rank's. A rank with no work while another has some runs a dummy step
(vLLM: ``DPEngineCoreProc.run_busy_loop`` calls ``execute_dummy_batch`` when its scheduler
has nothing to run but the group is still in a wave, ``vllm/v1/engine/core.py``), padded,
like every rank's batch, to the group's largest (``coordinate_batch_across_dp``,
``vllm/v1/worker/dp_utils.py``) while every rank's step fits a CUDA graph: idle ranks then
cost as much GPU time as busy ones. A larger step runs eager on every rank, unpadded: each
rank its own tokens (a dummy step one), the MoE layers the group's sum
(:meth:`~des.cost.roofline.Roofline.group_step_time`). When no
rank has work the wave goes on until vLLM next checks for it: the ranks all-reduce whether
any has unfinished requests only every :data:`WAVE_CHECK` steps of a wave
(``DPEngineCoreProc._has_global_unfinished_reqs``), and run dummy steps (one token each,
within the CUDA graphs, so padded to nothing more) until that step; then the wave ends and
the group sleeps until a request reaches one of its ranks. A request arriving during the
tail is scheduled at its next step.

The group is one SimPy process driving its ranks (:class:`~des.engine.instance.Instance`
built with ``standalone=False``); every rank records its own step, dummy steps included
(zero tokens, the group's duration), and counts it as its busy time
(:meth:`~des.engine.instance.Instance.account`); a rank's released requests leave
through :meth:`~des.engine.instance.Instance.release`, and the group sleeps on its ranks'
wake events (:func:`~des.engine.instance.idle`). Steps are run one SimPy event each: the
fast-forward of a lone instance is not applied to groups.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import simpy
from simpy.events import Event

from des.cost.base import BatchShape, CostModel
from des.engine.events import Barrier
from des.engine.instance import Instance, idle
from des.engine.policy import Step
from des.engine.request import Request

#: Steps of a wave between vLLM's checks whether any rank has work (``step_counter % 32``).
WAVE_CHECK = 32


def dummy_step() -> Step[None]:
    """The step a rank with no work runs while the group steps (no sequences, no tokens)."""
    return Step(BatchShape(), None)


class LockstepGroup:
    """The ranks ``ranks`` of one data-parallel server, stepped together with step times from
    ``cost`` (a rank's time given the group's largest batch: ``group_step_time(shape,
    tokens)`` where the cost model has one, else its plain ``step_time``)."""

    def __init__(self, env: simpy.Environment, ranks: list[Instance], cost: CostModel, ahead: bool):
        self.env = env
        self.ranks = ranks
        self.cost = cost
        self.ahead = ahead  # the next batch is formed as a step starts (async scheduling)
        self.process = env.process(self._run())

    def rank_time(self, shape: BatchShape, tokens: int, total: int | None = None) -> float:
        """Seconds a rank with batch ``shape`` takes when the group's largest batch has
        ``tokens`` new tokens and all of them ``total`` (None: every rank ``tokens``)."""
        group = getattr(self.cost, "group_step_time", None)
        return group(shape, tokens, total) if group is not None else self.cost.step_time(shape)

    def _run(self) -> Generator[Event, Any, None]:
        env, ranks = self.env, self.ranks
        seen: float | None = None
        wave = 0  # steps of the current wave
        while True:
            if env.peek() == env.now:
                yield Barrier(env)  # let every arrival due now join this step
            steps = [rank.scheduler.schedule(env.now, seen) for rank in ranks]
            if all(step is None for step in steps) and wave % WAVE_CHECK == 0:
                yield from idle(ranks)  # until some rank gets work (or a scheduler's own wake-up time)
                seen = None
                wave = 0
                continue
            wave += 1  # an all-dummy step when no rank has work: the wave's tail
            t = env.now
            tokens = max((step.shape.new_tokens for step in steps if step is not None), default=1)
            # a dummy step runs one token (vLLM's execute_dummy_batch: _dummy_run(1)) when not padded
            total = sum(step.shape.new_tokens if step is not None else 1 for step in steps)
            run = [step if step is not None else dummy_step() for step in steps]
            duration = max(self.rank_time(step.shape, tokens, total) for step in run)
            before = [(rank.kv.used, rank.scheduler.num_waiting()) for rank in ranks]
            for rank in ranks:
                rank.account(t, duration)  # every rank's GPUs run the step, a dummy one included
            if self.ahead:
                seen = t
            yield env.timeout(duration)
            leaving: list[tuple[Instance, list[Request]]] = []
            for rank, step, real, (kv_used, waiting) in zip(ranks, run, steps, before, strict=True):
                released = rank.scheduler.finish_step(step, env.now) if real is not None else []
                rank.record(t, duration, step, kv_used, waiting)
                leaving.append((rank, released))
            for rank, released in leaving:
                rank.release(t, duration, released)
