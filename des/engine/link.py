"""The KV link out of a prefill instance: transfers of prompts' KV caches to decode instances.

A :class:`KVLink` is a stage of the topology (it ``admit``\\ s requests). When a
prompt completes, the link asks the decode pool's router for an instance at once and
that instance reserves the blocks of the prompt's KV (:meth:`Instance.reserve`; the
decode scheduler grants reservations at its step boundaries, as a vLLM scheduler
allocates slots for requests whose KV is remote). Reservations of the prompts queued on
a link wait side by side, not one behind another; the wire moves one transfer at a
time, first come first served in the order their blocks were granted, each holding it
for ``bytes / bandwidth + latency`` seconds (bytes: the prompt's KV but for a prefix the
decode instance finds in its own prefix cache). Then the prompt's blocks on the prefill
instance are freed and the request, with its reserved blocks, goes to the decode
instance. With ``first_token_from: decode`` (vLLM's P/D proxy: the prefill instance's
token is dropped) the decode instance recomputes the prompt's last token, whose KV it
already holds, and its first step emits the client's first token, as vLLM's scheduler
recomputes the last token of a request whose whole prompt arrived as remote KV to get
its logits. Every transfer is recorded in a :class:`TransferLog` with when it was queued,
when its blocks were granted (the wait before is the decode pool's), when it started
(the wait before is the wire's) and ended.
"""

from __future__ import annotations

import math
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
        #: transfers whose blocks are granted, waiting for the wire: (request, decode
        #: instance, blocks, tokens cached there, queued at, granted at)
        self.queue: deque[tuple[Request, Instance, int, int, float, float]] = deque()
        self._wake: Event | None = None
        self.process = env.process(self._run())

    def admit(self, req: Request) -> None:
        """``req``'s prompt is done on ``source``: pick its decode instance and reserve its
        blocks there; the transfer joins the wire's queue once they are granted."""
        enqueued = self.env.now
        dest = self.pick()
        granted = dest.reserve(req, req.prompt_tokens)
        granted.callbacks.append(lambda event: self._granted(req, dest, enqueued, event.value))

    def _granted(self, req: Request, dest: Instance, enqueued: float, value: tuple[int, int]) -> None:
        blocks, cached = value
        self.queue.append((req, dest, blocks, cached, enqueued, self.env.now))
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
            req, dest, blocks, cached, enqueued, reserved = queue.popleft()
            start = env.now
            nbytes = (req.prompt_tokens - cached) * self.kv_bytes_per_token  # a cached prefix stays put
            yield env.timeout(nbytes / self.bandwidth + self.latency)
            req.transfer_start, req.transfer_end = start, env.now
            if self.first_token_from == "decode":  # the client's first token comes from the decode instance
                req.generated, req.computed, req.first_token_time = 0, req.computed - 1, math.nan
            self.source.free(req.id)
            self.log.record(req, self.source.index, dest.index, enqueued, reserved, start, env.now, nbytes)
            dest.submit(req, blocks, routed=True)
