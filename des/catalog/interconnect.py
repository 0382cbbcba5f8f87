"""How the GPUs of a tensor-parallel group all-reduce their activations: the link, and
what vLLM runs on it at each message size.

With tensor parallelism each decoder layer ends its attention and its MLP with an
all-reduce of the ``tokens × hidden`` activations (bf16). One all-reduce of ``S`` bytes
among ``n`` GPUs costs, in NCCL's bus-bandwidth convention (``nccl-tests``:
``busbw = algbw × 2 (n - 1) / n``),

    ``t(S) = latency + 2 (n - 1) / n × S / bus_bandwidth``  (seconds)

where ``latency`` is the per-call time (kernel, synchronisation between the GPUs) and
``bus_bandwidth`` (bytes/s) what the algorithm reaches of the link. vLLM does not always
call NCCL (``vllm/distributed/device_communicators/cuda_communicator.py: all_reduce``):

- **its own all-reduce** (``custom_all_reduce.py``: one- or two-stage kernels reading
  the peers' buffers directly; on Hopper and Blackwell also PyTorch symmetric memory,
  ``symm_mem.py``, on by default through ``VLLM_ALLREDUCE_USE_SYMM_MEM``) runs when every
  pair of GPUs can reach each other's memory: over NVLink or Infinity Fabric at 2, 4, 6 or
  8 GPUs, and over PCIe peer-to-peer at 2 GPUs only (``should_custom_ar``), for messages
  below a size per TP degree (8 MiB by default; on Hopper and Blackwell the larger
  symmetric-memory limits of ``all_reduce_utils.py: SYMM_MEM_ALL_REDUCE_MAX_SIZES``).
  It moves the same bytes over the same links as NCCL with a shorter per-call time:
  ``custom_latency`` here, ``custom_max_bytes`` the size limits;
- **NCCL** (``pynccl.py``) runs everything else. On GeForce cards the driver forbids
  peer-to-peer over PCIe (vLLM's P2P check fails, so its own all-reduce is off) and NCCL
  moves the data through host memory with its SHM transport.

The NCCL cost is fitted per TP degree where a profile exists (``des calibrate --network``
against Vidur's NCCL profiles, :mod:`des.tools.network`), else transferred from a fitted
link or derived from the bus by a stated rule: ``provenance`` and ``basis`` say which,
``uncertainty`` is the standard deviation of ln(true / predicted) all-reduce time that
implies (from the fit's residuals where fitted, wider where transferred or derived).

The older shorthand of two numbers per GPU, ``interconnect_bandwidth`` (bytes/s) and
``interconnect_latency`` (seconds), is still accepted: it means NCCL at that bus
bandwidth and latency for every TP degree, and nothing else (:meth:`InterconnectSpec.legacy`).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from des.catalog.efficiency import Provenance
from des.config import Strict

InterconnectKind = Literal["nvlink", "infinity_fabric", "pcie_p2p", "pcie_host"]
#: Links over which every pair of GPUs in a group reaches the others' memory directly.
FULLY_CONNECTED: tuple[InterconnectKind, ...] = ("nvlink", "infinity_fabric")
#: TP degrees at which vLLM's own all-reduce runs on a fully connected link
#: (``CustomAllreduce._SUPPORTED_WORLD_SIZES``); over PCIe peer-to-peer only 2.
CUSTOM_WORLD_SIZES = (2, 4, 6, 8)
#: The legacy spec's defaults (a GPU given without any interconnect: PCIe through host memory).
DEFAULT_BANDWIDTH = 25.0e9
DEFAULT_LATENCY = 20e-6


def ring_factor(tp: int) -> float:
    """Bytes each GPU sends per byte all-reduced: ``2 (tp - 1) / tp`` (ring, or reduce-scatter + all-gather)."""
    return 2 * (tp - 1) / tp


class AllReduceCost(Strict):
    """NCCL's all-reduce on one TP degree: ``latency`` seconds per call, ``bus_bandwidth`` bytes/s."""

    latency: float = Field(ge=0, le=1.0)
    bus_bandwidth: PositiveFloat

    def seconds(self, nbytes: float, tp: int) -> float:
        """Time of one all-reduce of ``nbytes`` among ``tp`` GPUs."""
        return self.latency + ring_factor(tp) * nbytes / self.bus_bandwidth


class InterconnectSpec(Strict):
    """The link between the GPUs of a tensor-parallel group and the all-reduce cost on it.

    ``kind``: ``nvlink``, ``infinity_fabric`` (both fully connected), ``pcie_p2p`` (PCIe,
    peer-to-peer allowed) or ``pcie_host`` (PCIe, staged through host memory).
    ``link_bandwidth``: spec-sheet bytes/s per direction per GPU (for the record and
    the transfer rules). ``nccl``: NCCL's cost per TP degree; a degree not listed takes
    the largest listed below it (else the smallest listed). ``custom_latency``: seconds
    per call of vLLM's own all-reduce, which runs at the TP degrees of
    ``custom_max_bytes`` for messages below that many bytes, at NCCL's bus bandwidth.
    ``all_gather``: NCCL's all-gather per TP degree where measured (gathering ``S`` bytes
    from each GPU takes ``latency + (tp - 1) × S / bus_bandwidth``); a degree without one
    takes NCCL's all-reduce cost (:meth:`gather_cost`).
    """

    kind: InterconnectKind
    link_bandwidth: PositiveFloat | None = None
    nccl: dict[PositiveInt, AllReduceCost]
    custom_latency: float | None = Field(None, ge=0, le=1.0)
    custom_max_bytes: dict[PositiveInt, PositiveInt] = Field(default_factory=dict)
    all_gather: dict[PositiveInt, AllReduceCost] = Field(default_factory=dict)
    provenance: Provenance = "spec"
    basis: str = ""
    uncertainty: float = Field(0.5, ge=0, le=5.0)
    source: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> InterconnectSpec:
        if not self.nccl:
            raise ValueError("nccl: needs the cost at one TP degree at least ({2: {latency: s, bus_bandwidth: B/s}})")
        if self.custom_max_bytes and self.custom_latency is None:
            raise ValueError("custom_latency: required with custom_max_bytes (seconds per call of vLLM's all-reduce)")
        if self.custom_max_bytes and self.kind == "pcie_host":
            raise ValueError(
                "custom_max_bytes: vLLM's own all-reduce needs peer-to-peer access, which kind pcie_host has not"
            )
        allowed = CUSTOM_WORLD_SIZES if self.kind in FULLY_CONNECTED else (2,)
        bad = sorted(set(self.custom_max_bytes) - set(allowed))
        if bad:
            raise ValueError(
                f"custom_max_bytes: vLLM runs its own all-reduce over {self.kind} only at TP "
                f"{', '.join(map(str, allowed))} (got {', '.join(map(str, bad))})"
            )
        return self

    @classmethod
    def legacy(cls, bandwidth: float = DEFAULT_BANDWIDTH, latency: float = DEFAULT_LATENCY) -> InterconnectSpec:
        """The two-number shorthand: NCCL at bus ``bandwidth`` (bytes/s) and ``latency``
        (seconds) per call at every TP degree, nothing else (the model of des before issue 18)."""
        return cls(
            kind="pcie_host",
            nccl={2: AllReduceCost(latency=latency, bus_bandwidth=bandwidth)},
            basis="interconnect_bandwidth and interconnect_latency, as given",
            uncertainty=0.5,
        )

    def nccl_cost(self, tp: int) -> AllReduceCost:
        """NCCL's cost at ``tp`` GPUs: its own entry, else the largest listed degree below it, else the smallest."""
        if tp in self.nccl:
            return self.nccl[tp]
        below = [d for d in self.nccl if d < tp]
        return self.nccl[max(below) if below else min(self.nccl)]

    def gather_cost(self, n: int) -> AllReduceCost:
        """NCCL's all-gather (and reduce-scatter) at ``n`` GPUs: its own entry, else the largest
        listed degree below it, else the smallest; without any, the all-reduce's (:meth:`nccl_cost`)."""
        table = self.all_gather
        if not table:
            return self.nccl_cost(n)
        if n in table:
            return table[n]
        below = [d for d in table if d < n]
        return table[max(below) if below else min(table)]

    def custom_limit(self, tp: int) -> int:
        """Messages below this many bytes run vLLM's own all-reduce at ``tp`` GPUs (0: never)."""
        return self.custom_max_bytes.get(tp, 0)

    def seconds(self, nbytes: float, tp: int) -> float:
        """Time of the all-reduce vLLM runs for ``nbytes`` among ``tp`` GPUs (0 at one GPU)."""
        if tp <= 1:
            return 0.0
        cost = self.nccl_cost(tp)
        if nbytes < self.custom_limit(tp):
            assert self.custom_latency is not None
            return self.custom_latency + ring_factor(tp) * nbytes / cost.bus_bandwidth
        return cost.seconds(nbytes, tp)

    def algorithm(self, nbytes: float, tp: int) -> str:
        """Which all-reduce vLLM runs: ``vllm`` (its own), ``nccl``, or ``none`` at one GPU."""
        if tp <= 1:
            return "none"
        return "vllm" if nbytes < self.custom_limit(tp) else "nccl"


def moe_exchange_bytes(backend: str, tokens: int, ranks: int, hidden: int, top_k: int, act_bytes: int = 2) -> float:
    """Bytes one rank receives in one direction (dispatch, or combine) of one MoE layer when
    each of ``ranks`` data-parallel ranks brings ``tokens`` tokens of ``hidden`` activations.

    - ``allgather_reducescatter`` (vLLM's default ``all2all_backend``,
      ``vllm/config/parallel.py``; ``AgRsAll2AllManager`` in
      ``vllm/distributed/device_communicators/all2all.py``): dispatch all-gathers every
      rank's tokens, combine reduce-scatters the outputs: ``tokens × hidden × bytes ×
      (ranks − 1)`` each way, whatever ``top_k``;
    - ``all_to_all`` (DeepEP / pplx kernels): each token goes to the ranks holding its
      ``top_k`` experts, of which ``(ranks − 1) / ranks`` are elsewhere under uniform
      routing: ``tokens × hidden × top_k × bytes × (ranks − 1) / ranks`` each way.

    In NCCL's bus-bandwidth convention either takes ``bytes / bus_bandwidth`` plus a latency.
    """
    if ranks <= 1:
        return 0.0
    if backend == "allgather_reducescatter":
        return float(tokens * hidden * act_bytes * (ranks - 1))
    if backend == "all_to_all":
        return tokens * hidden * top_k * act_bytes * (ranks - 1) / ranks
    raise ValueError(f"unknown all2all backend {backend!r}")


def log_sd(*parts: float) -> float:
    """Independent sources of log-error combined: ``sqrt(Σ sd²)``."""
    return math.sqrt(sum(p * p for p in parts))
