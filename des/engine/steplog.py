"""Per-step records, kept as growing typed columns (one row per GPU step).

A step is recorded from the instance that ran it and the :class:`Step` the scheduler
formed (``record``): every column gets exactly one value per step, O(1) per step.
``role`` is stored as an index into :data:`ROLES` and becomes text in the table;
``flops`` and ``hbm_bytes`` are the work the step did (:mod:`des.cost.work`).
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

    def __len__(self) -> int:
        return len(self.columns["start"])
