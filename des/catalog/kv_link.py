"""Where a prompt's KV cache crosses from a prefill GPU to a decode GPU, and how fast.

Each GPU of the catalog names the link between two of its kind in one server
(``kv_link``: NVLink or Infinity Fabric on HGX-class boards, PCIe peer-to-peer on
datacenter and professional PCIe cards, PCIe through host memory on GeForce cards, whose
drivers disable peer-to-peer). GPUs of different types do not share a board, nor an
NVLink domain: they sit in different servers, joined by a network, so a split between
unlike GPUs defaults to :data:`RDMA`. ``scheduler.kv_transfer.path`` names the path
outright (``nvlink | xgmi | pcie | host | rdma``); ``bandwidth`` and ``latency`` there
override the path's figures.

Figures are per pair of GPUs, as a KV connector moves paged blocks. A tensor-parallel
instance holds its KV in shards, one per rank, and each rank sends its own over its own
link (an NVLink port, a PCIe slot, the NIC of its rail), so a transfer between a TP-``p``
prefill instance and a TP-``d`` decode instance moves ``min(p, d)`` shards at once:
``bytes / (min(p, d) × bandwidth) + latency`` (:func:`transfer_bandwidth`). Links of
different instances sharing a host's PCIe root or a NIC are taken as independent.
"""

from __future__ import annotations

from des.catalog.specs import GPUSpec, KVLinkSpec, KVPath

#: Between servers: one RDMA NIC per GPU (the rail-optimised layout of HGX servers and
#: Splitwise's and Mooncake's clusters). InfiniBand HDR moves 200 Gb/s (25 GB/s) per NIC,
#: NDR 400 Gb/s (50 GB/s, the ceiling); KV connectors moving paged blocks reach about the
#: former (NIXLBench VRAM-to-VRAM between two A3 nodes: 23 GB/s at 64 MiB blocks,
#: ai-dynamo/nixl#2276), with ~1 ms per transfer of connector software (handshake,
#: descriptor posting).
RDMA = KVLinkSpec(
    path="rdma",
    bandwidth=25e9,
    latency=1e-3,
    ceiling=50e9,
    source=(
        "one RDMA NIC per GPU: 25 GB/s as KV connectors move paged blocks between nodes (InfiniBand HDR line "
        "rate; NIXLBench VRAM-to-VRAM between two nodes: 23 GB/s, ai-dynamo/nixl#2276), 50 GB/s the NDR ceiling; "
        "~1 ms per transfer"
    ),
)
#: PCIe 4.0 x16 between two GPUs of one server where their own entries do not say:
#: peer-to-peer (one copy, ~22 GB/s of 32 raw) or staged through host memory (two copies,
#: ~12 GB/s), as the catalog's L40S and RTX 4090.
GENERIC: dict[KVPath, KVLinkSpec] = {
    "pcie": KVLinkSpec(path="pcie", bandwidth=22e9, latency=1e-3, ceiling=32e9, source="PCIe 4.0 x16 peer-to-peer"),
    "host": KVLinkSpec(path="host", bandwidth=12e9, latency=2e-3, ceiling=25e9, source="PCIe 4.0 x16 through host"),
}
#: Scale-up fabrics: only GPUs of one kind on one board share them.
FABRICS: tuple[KVPath, ...] = ("nvlink", "xgmi")


def default_link(prefill: GPUSpec, decode: GPUSpec, path: KVPath | None = None) -> KVLinkSpec:
    """The link between a ``prefill`` and a ``decode`` GPU over ``path`` (None: the GPUs'
    own link when they are of one type, else RDMA). Raises ValueError, saying why, for a
    path the two cannot have: a scale-up fabric between unlike GPUs or GPUs without it,
    peer-to-peer PCIe from a GeForce card, or a path of GPUs whose catalog entry has no
    ``kv_link`` (give ``bandwidth``)."""
    same = prefill.name == decode.name
    own = prefill.kv_link if same else None
    if path is None:
        if not same:
            return RDMA
        if own is None:
            raise ValueError(f"GPU {prefill.name!r} has no kv_link in the catalog: give bandwidth and latency")
        return own
    if path == "rdma":
        return RDMA
    if own is not None and own.path == path:
        return own
    if path in FABRICS:
        if not same:
            raise ValueError(
                f"{path} joins GPUs of one type on one board, not {prefill.name} and {decode.name} "
                "(they sit in different servers: rdma)"
            )
        have = own.path if own is not None else "no kv_link in the catalog"
        raise ValueError(f"{prefill.name} has no {path} (its KV link: {have})")
    for gpu in (prefill, decode):
        if path == "pcie" and gpu.kv_link is not None and gpu.kv_link.path == "host":
            raise ValueError(f"{gpu.name} cannot send peer-to-peer over PCIe (GeForce drivers disable it): use host")
    return GENERIC[path]


def transfer_bandwidth(link: KVLinkSpec | float, prefill_tp: int, decode_tp: int) -> float:
    """Bytes/s of one transfer from a TP-``prefill_tp`` instance to a TP-``decode_tp`` one:
    ``min(prefill_tp, decode_tp)`` ranks each send their shard over their own link."""
    per_pair = link.bandwidth if isinstance(link, KVLinkSpec) else link
    return per_pair * min(prefill_tp, decode_tp)
