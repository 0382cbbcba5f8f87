"""Where a run's step-time factors come from, how uncertain they are, and a draw of their error.

Every GPU type of a run has one :class:`FactorSource`: the provenance of its efficiency
factors (``fitted`` to a kernel profile, ``transferred`` from fitted architectures by a
rule, or ``spec`` only: :data:`~des.catalog.efficiency.PROVENANCE_ORDER`), what they
were fitted to or transferred from (``basis``), and per group of work of
:data:`~des.catalog.efficiency.UNCERTAINTY_GROUPS` the standard deviation ``sd`` of
``ln(true time / predicted time)`` that their error implies. A run is as fitted as its
least-fitted GPU (:func:`run_provenance`, the summary's ``factor_provenance``).

**Model uncertainty** (``model_uncertainty: true``): each run draws, for each GPU type
and group, a multiplier ``exp(sd · z)`` with ``z ~ N(0, 1)`` (median 1: the fitted model
is the median prediction), from its own random stream (``model`` in
:data:`des.simulation.STREAMS`, so the workload's draws stay those of the same seed
without it). Every instance of a GPU type shares its draw: a model's error is
systematic, the same on every card of a kind, not noise between instances. The
multipliers scale the roofline's precomputed coefficients of each group
(:meth:`des.cost.roofline.Roofline.scaled`) at build time. The normals are drawn for
every group, zero sds included, so that giving one group an sd does not shift the
others' draws; a zero sd gives a multiplier of exactly 1.

**Where the sds come from: :data:`SD_SOURCES`, the one place to plug a new one in.**
Each entry is a function ``(gpu, efficiency, run or None) -> {group: sd}`` (``run``: the
:class:`RunHardware` of the run the GPU serves in; ``des costmodel`` has none); later entries
override earlier ones for the groups they name, and a group no entry names has sd 0.
The entries: ``Efficiency.uncertainty`` (the catalog's fitted or transfer residuals, or a
calibration file's: gemm, attention, elementwise), the GPU's interconnect spec
(communication: the NCCL fit's residuals or its transfer rule's band) and the serving
front-end (cpu: its CPU time's sd, in quadrature with the engine core's).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from des.catalog.efficiency import PROVENANCE_ORDER, UNCERTAINTY_GROUPS, Efficiency, Provenance, UncertaintyGroup
from des.cost.roofline import RooflineConfig

if TYPE_CHECKING:
    from des.catalog.specs import GPUSpec
    from des.cost.base import CostKind
    from des.cost.frontend import FrontendSpec


@dataclass(frozen=True)
class RunHardware:
    """What of a run the sds of its GPUs depend on: its pools' ``(gpu, tp)`` pairs, in pool
    order, and its serving ``frontend`` (None: the cost model has no serving stack)."""

    pools: tuple[tuple[GPUSpec, int], ...]
    frontend: FrontendSpec | None = None


#: A source of sds: ``(gpu, efficiency, run or None) -> {group: sd}`` (see the module).
SdSource = Callable[["GPUSpec", Efficiency, "RunHardware | None"], Mapping[UncertaintyGroup, float]]


def _efficiency_sds(gpu: GPUSpec, efficiency: Efficiency, run: RunHardware | None) -> Mapping[UncertaintyGroup, float]:
    """The residual sds the efficiency factors carry (``Efficiency.uncertainty``)."""
    return efficiency.uncertainty


def _interconnect_sds(
    gpu: GPUSpec, efficiency: Efficiency, run: RunHardware | None
) -> Mapping[UncertaintyGroup, float]:
    """The tensor-parallel all-reduce's sd, from the GPU's interconnect spec (fitted to NCCL
    profiles, or a transfer rule's wider band: :mod:`des.catalog.interconnect`), where the
    run has such GPUs in a tensor-parallel group (alone, one runs no all-reduce)."""
    if run is None or all(tp == 1 for pool_gpu, tp in run.pools if pool_gpu.name == gpu.name):
        return {}
    return {"communication": gpu.link.uncertainty}


def _frontend_sds(gpu: GPUSpec, efficiency: Efficiency, run: RunHardware | None) -> Mapping[UncertaintyGroup, float]:
    """The CPU time's sd: the serving front-end's (:mod:`des.cost.frontend`), which carries
    the larger and less certain share of it, combined in quadrature with the engine core's
    (``Efficiency.uncertainty['cpu']``, if any); the engine core's alone without a front-end."""
    frontend = run.frontend if run is not None else None
    if frontend is None:
        return {}
    core = efficiency.uncertainty.get("cpu", 0.0)
    return {"cpu": math.hypot(core, frontend.uncertainty)}


#: The sources of a GPU's sds, in order of precedence (later wins): plug new ones in here.
SD_SOURCES: tuple[SdSource, ...] = (_efficiency_sds, _interconnect_sds, _frontend_sds)


@dataclass(frozen=True)
class FactorSource:
    """Where one GPU type's step-time factors come from (see the module).

    ``efficiency`` is None when the cost model uses no efficiency factors (a constant or
    linear step time, set by hand: provenance ``spec``, nothing to draw)."""

    gpu: GPUSpec
    efficiency: Efficiency | None
    provenance: Provenance
    basis: str
    sds: dict[UncertaintyGroup, float] = field(default_factory=dict)

    @property
    def uncertain(self) -> bool:
        """Whether some group of work carries a non-zero sd."""
        return any(sd > 0 for sd in self.sds.values())

    def describe(self) -> str:
        """In words: ``rtx4090: fitted to <basis>; sd of ln(time): gemm 0.05, attention 0.08``."""
        if self.efficiency is None:
            text = f"{self.gpu.name}: spec only ({self.basis})"
        elif self.provenance == "fitted":
            basis = self.basis.removeprefix("fitted to ")
            text = f"{self.gpu.name}: fitted to {basis or 'a kernel profile (basis not given)'}"
        elif self.provenance == "transferred":
            basis = self.basis.removeprefix("transferred from ")
            text = f"{self.gpu.name}: transferred from {basis or 'fitted architectures (basis not given)'}"
        else:
            text = f"{self.gpu.name}: spec only" + (f" ({self.basis})" if self.basis else "")
        sds = [f"{g} {self.sds[g]:.2g}" for g in UNCERTAINTY_GROUPS if self.sds.get(g)]
        return text + (f"; sd of ln(time): {', '.join(sds)}" if sds else "; no uncertainty stated")


def factor_source(gpu: GPUSpec, efficiency: Efficiency | None = None, run: RunHardware | None = None) -> FactorSource:
    """The factor source of ``gpu`` whose cost model uses ``efficiency`` (default: the
    GPU's own), its sds gathered from :data:`SD_SOURCES` (``run``: the run's hardware, when
    there is one; ``des costmodel`` has none)."""
    efficiency = efficiency or gpu.efficiency
    sds: dict[UncertaintyGroup, float] = {}
    for source in SD_SOURCES:
        sds.update(source(gpu, efficiency, run))
    return FactorSource(gpu, efficiency, efficiency.provenance, efficiency.basis, sds)


def factor_sources(cost: CostKind, run: RunHardware) -> tuple[FactorSource, ...]:
    """One :class:`FactorSource` per distinct GPU type of ``run``'s pools, in pool order, for
    the cost model ``cost``: its ``efficiency`` over the GPU's (as
    :func:`des.cost.roofline.build_roofline` does); a constant or linear step time uses no factors."""
    gpus: list[GPUSpec] = []
    for gpu, _ in run.pools:
        if gpu not in gpus:
            gpus.append(gpu)
    if not isinstance(cost, RooflineConfig):
        return tuple(FactorSource(g, None, "spec", f"step times set by the {cost.kind} cost model") for g in gpus)
    return tuple(factor_source(g, cost.efficiency, run) for g in gpus)


def run_provenance(sources: Sequence[FactorSource]) -> Provenance:
    """The least-fitted provenance of a run's GPUs (:data:`PROVENANCE_ORDER`)."""
    return max((s.provenance for s in sources), key=PROVENANCE_ORDER.index, default="spec")


def no_uncertainty_note(sources: Sequence[FactorSource]) -> str | None:
    """Why ``model_uncertainty`` would draw nothing (every sd 0), or None."""
    if any(s.uncertain for s in sources):
        return None
    names = ", ".join(s.gpu.name for s in sources)
    return (
        f"no GPU of the run ({names}) states an uncertainty for its step-time factors (every sd is 0): "
        "the replications draw no model error, and the intervals cover sampling error only"
    )


@dataclass(frozen=True)
class ModelDraws:
    """One run's draw of the model's error: per GPU type, a multiplier per group."""

    draws: tuple[tuple[GPUSpec, dict[UncertaintyGroup, float]], ...]

    def for_gpu(self, gpu: GPUSpec) -> dict[UncertaintyGroup, float] | None:
        """The multipliers of ``gpu``'s type (None if the draw does not know it)."""
        for known, multipliers in self.draws:
            if known == gpu:
                return multipliers
        return None

    def describe(self) -> list[str]:
        """Per GPU type, the multipliers drawn (groups with an sd): ``rtx4090: gemm x1.04, attention x0.97``."""
        return [
            f"{gpu.name}: "
            + (", ".join(f"{g} x{m:.3g}" for g, m in multipliers.items() if m != 1.0) or "none (every sd 0)")
            for gpu, multipliers in self.draws
        ]


def draw(sources: Sequence[FactorSource], rng: np.random.Generator) -> ModelDraws:
    """Multipliers ``exp(sd · z)``, ``z ~ N(0, 1)``, for every group of every GPU type of
    ``sources`` (in their order, groups in :data:`UNCERTAINTY_GROUPS` order)."""
    out = []
    for source in sources:
        z = rng.standard_normal(len(UNCERTAINTY_GROUPS))
        multipliers = {
            g: math.exp(source.sds.get(g, 0.0) * float(x)) for g, x in zip(UNCERTAINTY_GROUPS, z, strict=True)
        }
        out.append((source.gpu, multipliers))
    return ModelDraws(tuple(out))


__all__ = [
    "SD_SOURCES",
    "FactorSource",
    "ModelDraws",
    "draw",
    "factor_source",
    "factor_sources",
    "no_uncertainty_note",
    "RunHardware",
    "run_provenance",
]
