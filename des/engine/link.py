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
from dataclasses import dataclass
from typing import Any, Literal

import simpy
from simpy.events import Event

from des.engine.instance import Instance
from des.engine.request import Request
from des.engine.transferlog import TransferLog


#: A transfer waiting for its decode blocks, its prompt, or the wire.
@dataclass(slots=True)
class Transfer:
    """One request's KV on its way: its decode instance, when its blocks were asked for and
    granted (``blocks`` held there, ``cached`` tokens found there), when its prompt was
    done (``enqueued``), and the span of the step that finished it (seconds)."""

    req: Request
    dest: Instance
    enqueued: float = math.nan
    reserved: float = math.nan
    blocks: int = 0
    cached: int = 0
    step_start: float = math.nan
    step_duration: float = 0.0


class KVLink:
    """The outbound link of prefill instance ``source``; ``pick()`` names the decode
    instance each transfer goes to (the decode pool's router). ``reserve_at``: ``end``
    (pull: the decode blocks are asked for when the prompt is done, as vLLM's NIXL
    connector does) or ``start`` (push: when the prefill first schedules the request,
    as SGLang's and Dynamo's decode workers pre-allocate); ``overlap``: ``layerwise``
    lets a prompt's KV leave layer by layer while the step that finishes it runs
    (``layers`` of them), ``none`` sends it after."""

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
        reserve_at: Literal["start", "end"] = "end",
        overlap: Literal["none", "layerwise"] = "none",
        layers: int = 1,
    ):
        self.env = env
        self.source = source
        self.pick = pick
        self.bandwidth = bandwidth
        self.latency = latency
        self.kv_bytes_per_token = kv_bytes_per_token
        self.log = log
        self.first_token_from = first_token_from
        self.layerwise = overlap == "layerwise"
        self.layers = layers
        self.early: dict[int, Transfer] = {}  # push: request id -> its transfer, blocks asked for
        self.queue: deque[Transfer] = deque()  # blocks granted and prompt done: waiting for the wire
        self.free_at = 0.0  # when the wire finished its last transfer
        self._wake: Event | None = None
        self.process = env.process(self._run())
        if reserve_at == "start":  # the prefill's scheduler tells of each request's first admission
            if not hasattr(source.scheduler, "on_first_schedule"):
                raise TypeError("a pushing link needs a scheduler that tells of first admissions")
            source.scheduler.on_first_schedule = self.reserve

    def reserve(self, req: Request) -> None:
        """Push: ask ``req``'s decode instance for its blocks now, as its prefill starts (a
        request of one output token is done on the prefill instance and asks for none)."""
        if req.output_tokens > 1:
            t = self.early[req.id] = Transfer(req, self.pick())
            self._ask(t)

    def _ask(self, t: Transfer) -> None:
        t.dest.reserve(t.req, t.req.prompt_tokens).callbacks.append(lambda event: self._granted(t, event.value))

    def admit(self, req: Request) -> None:
        """``req``'s prompt is done on ``source``: its transfer joins the wire's queue once
        its decode blocks are granted (pull: asked for now)."""
        t = self.early.pop(req.id, None)
        step_start, step_duration = self.source.step_span
        if t is None:
            t = Transfer(req, self.pick())
            self._ask(t)
        t.enqueued, t.step_start, t.step_duration = self.env.now, step_start, step_duration
        if t.reserved == t.reserved:  # granted already (push)
            self._ready(t)

    def _granted(self, t: Transfer, value: tuple[int, int]) -> None:
        t.blocks, t.cached = value
        t.reserved = self.env.now
        if t.enqueued == t.enqueued:  # the prompt is done
            self._ready(t)

    def _ready(self, t: Transfer) -> None:
        self.queue.append(t)
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
            t = queue.popleft()
            req = t.req
            nbytes = (req.prompt_tokens - t.cached) * self.kv_bytes_per_token  # a cached prefix stays put
            wire = nbytes / self.bandwidth
            start = env.now
            end = start + wire + self.latency
            if self.layerwise:  # layer l leaves once the finishing step has computed it
                layer = t.step_duration / self.layers
                start = max(self.free_at, t.reserved, t.step_start + layer)
                end = max(start + wire, t.enqueued + wire / self.layers) + self.latency
            yield env.timeout(end - env.now)
            self.free_at = env.now
            req.transfer_start, req.transfer_end = start, env.now
            if self.first_token_from == "decode":  # the client's first token comes from the decode instance
                req.generated, req.computed, req.first_token_time = 0, req.computed - 1, math.nan
            self.source.free(req.id)
            self.log.record(req, self.source.index, t.dest.index, t.enqueued, t.reserved, start, env.now, nbytes)
            t.dest.submit(req, t.blocks, routed=True)
