"""The load generator's own time: a closed-loop client's gap between an answer and its next request.

A closed loop's user waits for each answer, thinks (``think_time``), and sends again; the
client program itself also takes time between the answer's last byte and the next request
on the wire. That time is the load generator's, not the server's, so it lives here, keyed
by the front-end the client talks to (:data:`CLIENTS`): an HTTP client of ``vllm serve``
(``vllm bench serve``'s aiohttp, an OpenAI SDK) or a caller's own loop around the
in-process ``LLM`` class (:mod:`des.cost.frontend`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from des.workload._buffer import Buffered


@dataclass(frozen=True, slots=True)
class ClientSpec:
    """A closed-loop client's gap before its next request, lognormal: ``turnaround_median``
    seconds, ``turnaround_sigma`` the sd of its log."""

    turnaround_median: float
    turnaround_sigma: float

    @property
    def turnaround_mu(self) -> float:
        """Mean of the log of the gap (ln seconds)."""
        return math.log(self.turnaround_median)

    def sampler(self, rng: np.random.Generator) -> Callable[[], float]:
        """Successive gaps (seconds), drawn from ``rng`` alone (the run's ``client`` stream)."""
        mu, sigma = self.turnaround_mu, self.turnaround_sigma
        return Buffered(lambda n: rng.lognormal(mu, sigma, n))


#: The client of each serving front-end (``serving.frontend``).
CLIENTS: dict[str, ClientSpec] = {
    # an HTTP client of vllm serve (vllm bench serve's aiohttp, an OpenAI SDK): the stream's
    # end, its bookkeeping, the next request built and sent over a kept-alive connection,
    # loopback RTT ~50 µs: ~1 ms; right-skewed (lognormal, the usual law of software
    # latencies: scheduler and GC pauses in its tail)
    "api_server": ClientSpec(turnaround_median=1e-3, turnaround_sigma=0.5),
    # a caller's own loop handing the in-process LLM class its next request: tens of µs
    "engine": ClientSpec(turnaround_median=5e-5, turnaround_sigma=0.5),
}
