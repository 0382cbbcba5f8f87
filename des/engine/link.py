"""The KV link out of a prefill instance: transfers of prompts' KV caches to decode instances.

A :class:`KVLink` is a stage of the topology (it ``admit``\\ s requests). Its SimPy
process serves one transfer at a time, first come first served in the order requests
were admitted (the order their prompts completed). For the transfer at the head of
the line it asks the decode pool's router for an instance, waits until that instance
has reserved the blocks of the prompt's KV (:meth:`Instance.reserve`), holds the
link for ``bytes / bandwidth + latency`` seconds (bytes: the prompt's KV but for a
prefix the decode instance finds in its own prefix cache), then frees the prompt's blocks on
the prefill instance and hands the request, with its reserved blocks, to the decode
instance. Every transfer is recorded in a :class:`TransferLog`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator
from typing import Any, Literal

import simpy
from simpy.events import Event

from des.engine.instance import Instance
from des.engine.request import Request
from des.engine.transferlog import TransferLog


class KVLink:
    """The outbound link of prefill instance ``source``; ``pick()`` names the decode
    instance each transfer goes to (the decode pool's router)."""

    def __init__(
        self,
        env: simpy.Environment,
        source: Instance,
        pick: Callable[[], Instance],
        bandwidth: float,
        latency: float,
        kv_bytes_per_token: int,
        log: TransferLog,
        first_token_from: Literal["prefill", "decode"] = "prefill",
    ):
        self.env = env
        self.source = source
        self.pick = pick
        self.bandwidth = bandwidth
        self.latency = latency
        self.kv_bytes_per_token = kv_bytes_per_token
        self.log = log
        self.first_token_from = first_token_from
        self.queue: deque[tuple[Request, float]] = deque()
        self._wake: Event | None = None
        self.process = env.process(self._run())

    def admit(self, req: Request) -> None:
        """Queue ``req``'s transfer (its prompt is done on ``source``)."""
        self.queue.append((req, self.env.now))
        wake = self._wake
        if wake is not None and not wake.triggered:
            wake.succeed()

    def _run(self) -> Generator[Event, Any, None]:
        env, queue = self.env, self.queue
        while True:
            if not queue:
                self._wake = env.event()
                yield self._wake
                self._wake = None
            req, enqueued = queue.popleft()
            dest = self.pick()
            blocks, cached = yield dest.reserve(req, req.prompt_tokens)
            start = env.now
            nbytes = (req.prompt_tokens - cached) * self.kv_bytes_per_token  # a cached prefix stays put
            yield env.timeout(nbytes / self.bandwidth + self.latency)
            req.transfer_start, req.transfer_end = start, env.now
            if self.first_token_from == "decode":
                req.first_token_time = env.now
            self.source.free(req.id)
            self.log.record(req, self.source.index, dest.index, enqueued, start, env.now, nbytes)
            dest.submit(req, blocks)
