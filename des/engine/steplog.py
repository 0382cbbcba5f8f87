"""Per-step records, kept as growing typed columns (one row per GPU step).

Each instance records its steps through its own :meth:`~StepLog.recorder` (which
knows the instance's index, role and work model), from the :class:`Step` the
scheduler formed: every column gets exactly one value per step, O(1) per step.
``role`` is stored as an index into :data:`ROLES` and becomes text in the table;
``flops`` and ``hbm_bytes`` are the work the step did (:mod:`des.cost.work`).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

from des.cost.work import StepWork
from des.engine.policy import ROLES, Role, Step

#: ``record(start, duration, step, kv_blocks, num_waiting)``: one instance's step.
Record = Callable[[float, float, Step[Any], int, int], None]

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

    def recorder(self, index: int, role: Role, work: StepWork) -> Record:
        """How instance ``index``, playing ``role`` with step work ``work``, records a step:
        ``record(start, duration, step, kv_blocks, num_waiting)`` appends the step it ran
        from ``start`` for ``duration`` seconds, with ``kv_blocks`` in use and
        ``num_waiting`` requests queued when it started."""
        code = ROLE_CODE[role]
        flops, hbm_bytes = work.flops, work.hbm_bytes
        instance, role_, start_, duration_, batch_size, batch_width, prefill, decode, emitted, kv, waiting, \
            preempted, cached, flops_, bytes_ = (self.columns[name].append for name in STEP_COLUMNS)  # fmt: skip

        def record(start: float, duration: float, step: Step[Any], kv_blocks: int, num_waiting: int) -> None:
            shape = step.shape
            instance(index)
            role_(code)
            start_(start)
            duration_(duration)
            batch_size(step.batch_size)
            batch_width(step.width)
            prefill(shape.prefill_tokens)
            decode(shape.decode_tokens)
            emitted(step.emitted)
            kv(kv_blocks)
            waiting(num_waiting)
            preempted(step.preempted)
            cached(step.cached_tokens)
            flops_(flops(shape))
            bytes_(hbm_bytes(shape))

        return record

    def __len__(self) -> int:
        return len(self.columns["start"])
