"""Per-step records, kept as growing typed columns (one row per GPU step).

A step is recorded by name from the instance that ran it and the :class:`Step` the
scheduler formed (``record``), or a span of steady decode steps at once
(``record_span``); either way every column gets exactly one value per step, O(1)
per step. ``role`` is stored as an index into :data:`ROLES` and becomes text in the
table; ``flops`` and ``hbm_bytes`` are the work the step did (:mod:`des.cost.work`).
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Any

from des.engine.schedulers.base import ROLES, Step

if TYPE_CHECKING:
    from des.engine.instance import Instance

STEP_COLUMNS = (
    "instance",
    "role",
    "start",
    "duration",
    "batch_size",
    "batch_width",
    "prefill_tokens",
    "decode_tokens",
    "tokens_emitted",
    "kv_blocks",
    "num_waiting",
    "preempted",
    "cached_tokens",
    "flops",
    "hbm_bytes",
)
_TYPES = {"start": "d", "duration": "d", "role": "b", "flops": "d", "hbm_bytes": "d"}
ROLE_CODE = {role: i for i, role in enumerate(ROLES)}


class StepLog:
    """Columns of step records: typed arrays, appended to in O(1) per step."""

    def __init__(self) -> None:
        self.columns: dict[str, array[Any]] = {name: array(_TYPES.get(name, "q")) for name in STEP_COLUMNS}
        c = self.columns
        self._instance, self._role = c["instance"].append, c["role"].append
        self._start, self._duration = c["start"].append, c["duration"].append
        self._batch_size, self._batch_width = c["batch_size"].append, c["batch_width"].append
        self._prefill, self._decode = c["prefill_tokens"].append, c["decode_tokens"].append
        self._emitted, self._kv = c["tokens_emitted"].append, c["kv_blocks"].append
        self._waiting, self._preempted = c["num_waiting"].append, c["preempted"].append
        self._flops, self._bytes = c["flops"].append, c["hbm_bytes"].append
        self._cached = c["cached_tokens"].append

    def record(
        self, inst: Instance, start: float, duration: float, step: Step[Any], kv_blocks: int, num_waiting: int
    ) -> None:
        """Append the step ``inst`` ran from ``start`` for ``duration`` seconds, with
        ``kv_blocks`` in use and ``num_waiting`` requests queued when it started."""
        shape = step.shape
        self._instance(inst.index)
        self._role(inst.role_code)
        self._start(start)
        self._duration(duration)
        self._batch_size(step.batch_size)
        self._batch_width(step.width)
        self._prefill(shape.prefill_tokens)
        self._decode(shape.decode_tokens)
        self._emitted(step.emitted)
        self._kv(kv_blocks)
        self._waiting(num_waiting)
        self._preempted(step.preempted)
        self._cached(step.cached_tokens)
        work = inst.work
        self._flops(work.flops(shape))
        self._bytes(work.hbm_bytes(shape))

    def record_span(
        self,
        inst: Instance,
        starts: list[float],
        durations: list[float],
        step: Step[Any],
        kv_blocks: list[int],
        num_waiting: int,
        flops: list[float],
        hbm_bytes: list[float],
    ) -> None:
        """Append ``len(starts)`` steady decode steps like ``step`` (no prefill, no
        preemption) at once, with their own start, duration, KV blocks in use and work."""
        j = len(starts)
        c = self.columns
        c["instance"].extend([inst.index] * j)
        c["role"].extend([inst.role_code] * j)
        c["start"].extend(starts)
        c["duration"].extend(durations)
        c["batch_size"].extend([step.batch_size] * j)
        c["batch_width"].extend([step.width] * j)
        c["prefill_tokens"].extend([0] * j)
        c["decode_tokens"].extend([step.shape.decode_tokens] * j)
        c["tokens_emitted"].extend([step.emitted] * j)
        c["kv_blocks"].extend(kv_blocks)
        c["num_waiting"].extend([num_waiting] * j)
        c["preempted"].extend([0] * j)
        c["cached_tokens"].extend([0] * j)
        c["flops"].extend(flops)
        c["hbm_bytes"].extend(hbm_bytes)

    def __len__(self) -> int:
        return len(self.columns["start"])
