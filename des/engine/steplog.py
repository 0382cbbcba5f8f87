"""Per-step records, kept as growing columns (one row per GPU step)."""

from __future__ import annotations

from array import array

STEP_COLUMNS = (
    "instance",
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
)
_TYPES = {"start": "d", "duration": "d"}


class StepLog:
    """Columns of step records: typed arrays, appended to in O(1) per step."""

    def __init__(self) -> None:
        self.columns = {name: array(_TYPES.get(name, "q")) for name in STEP_COLUMNS}
        c = self.columns
        self._appends = tuple(c[name].append for name in STEP_COLUMNS)

    def record(self, *values) -> None:
        """Append one step; values in the order of :data:`STEP_COLUMNS`."""
        for append, v in zip(self._appends, values, strict=True):
            append(v)

    def record_span(
        self, instance, starts, durations, batch_size, width, decode_tokens, emitted, kv_blocks, waiting
    ) -> None:
        """Append ``len(starts)`` steady decode steps (no prefill, no preemption) at once."""
        j = len(starts)
        c = self.columns
        c["instance"].extend([instance] * j)
        c["start"].extend(starts)
        c["duration"].extend(durations)
        c["batch_size"].extend([batch_size] * j)
        c["batch_width"].extend([width] * j)
        c["prefill_tokens"].extend([0] * j)
        c["decode_tokens"].extend([decode_tokens] * j)
        c["tokens_emitted"].extend([emitted] * j)
        c["kv_blocks"].extend(kv_blocks)
        c["num_waiting"].extend([waiting] * j)
        c["preempted"].extend([0] * j)

    def __len__(self) -> int:
        return len(self.columns["start"])
