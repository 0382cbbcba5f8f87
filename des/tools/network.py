"""Fit NCCL's all-reduce cost to measured collectives: ``des calibrate --network DIR``.

The profiles are Vidur's (``data/vidur-kernel-profiles/network/``, MIT;
profiler ``vidur/profiling/collectives/``): one folder per system
(``a100_dgx``, ``h100_pairwise_nvlink``, ...) with ``all_reduce.csv``, one row per
(``num_workers``, ``devices_per_node``, ``size``) with the median NCCL kernel time in
``time_stats.all_reduce.median`` (**milliseconds**, kineto's CUDA time of the ``nccl``
kernels, eager mode, fp16). ``size`` is in **bytes**: the profiler records
``self._size * 2`` for a buffer of ``size`` fp16 elements (``collectives_wrapper.py``:
``"size": self._size * 2,  # bytes``), and Vidur's predictor divides it by
``2 × embedding_dim`` to get tokens.

A collective profile of one pair of GPUs in LLMServingSim's form (``nccl_2gpu.csv``:
``collective,bytes,us``, ``bytes`` the all-reduce's input and the all-gather's local input,
``us`` the median time in **microseconds**; :func:`read_collectives`) is fitted the same
way at TP 2, per collective (:func:`fit_collectives`); an all-gather of ``S`` local bytes
among ``n`` GPUs moves ``(n - 1) × S`` per GPU, so its curve is ``latency + (n - 1) × S /
bus_bandwidth``.

Only rows within one node are fitted (``devices_per_node == num_workers``: vLLM's tensor
parallelism stays in a node). For each TP degree ``n``,

    ``t(S) = latency + 2 (n - 1) / n × S / bus_bandwidth``

is fitted by least squares in log time (a 2 KB and a 64 MB message weigh alike), both
parameters in log space so they stay positive. The errors reported are those of the
fitted curve against the measured medians; the standard deviation of the log residuals
is what :mod:`des.catalog.interconnect` calls a fitted link's uncertainty (with the part
vLLM's own all-reduce adds, :data:`CUSTOM_SD`, which no NCCL profile measures).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from des.catalog.interconnect import AllReduceCost, log_sd, ring_factor
from des.errors import ScenarioError
from des.tools.profile_csv import read_csv

FLAG = "--network"
FILE = "all_reduce.csv"
TIME = "time_stats.all_reduce.median"
COLUMNS = (TIME, "num_workers", "size", "devices_per_node")
#: sd of ln(true/predicted) of vLLM's own all-reduce time: its per-call latency is taken
#: from published isolated-primitive benchmarks (vLLM PRs #24111, #24532; SGLang #2688),
#: not fitted, and the same-bus-bandwidth assumption adds to it.
CUSTOM_SD = 0.25
#: Which profile's fit each catalog GPU carries (NVSwitch systems: every pair on NVLink).
CATALOG = {"a100-80gb": "a100_dgx", "h100-80gb": "h100_dgx"}
#: A two-GPU collective profile (LLMServingSim's ``hardware.yaml`` samples written out).
COLLECTIVES_FILE = "nccl_2gpu.csv"
COLLECTIVE_COLUMNS = ("collective", "bytes", "us")
#: Catalog GPUs whose NCCL cost is fitted to a two-GPU collective profile under the data folder.
CATALOG_COLLECTIVES = {"rtx-pro-6000-server": "rtxpro6000-vllm-kernel-profile/nccl_2gpu.csv"}
#: Profiles whose 4-GPU ring crosses PCIe between NVLink pairs: the measured NCCL cost of
#: PCIe peer-to-peer (PCIe 4.0 on the A100 system, PCIe 5.0 on the H100 one).
PCIE = {"pcie4": ("a100_pairwise_nvlink", 4), "pcie5": ("h100_pairwise_nvlink", 4)}


@dataclass(frozen=True)
class DegreeFit:
    """The fit at one TP degree: the cost, and its errors against the profile (fractions)."""

    tp: int
    points: int
    cost: AllReduceCost
    median_abs_error: float
    max_abs_error: float
    log_sd: float


@dataclass(frozen=True)
class NetworkFit:
    """All TP degrees of one profile (a system's ``all_reduce.csv``)."""

    name: str
    path: Path
    degrees: dict[int, DegreeFit]

    @property
    def pooled_log_sd(self) -> float:
        """sd of the log residuals over all its TP degrees (each point alike)."""
        n = sum(d.points for d in self.degrees.values())
        return math.sqrt(sum(d.log_sd**2 * d.points for d in self.degrees.values()) / n)

    @property
    def uncertainty(self) -> float:
        """sd of ln(true/predicted) of what vLLM runs on this link: the fit's residuals
        and vLLM's own all-reduce (:data:`CUSTOM_SD`), to 2 significant digits."""
        return _sig(log_sd(self.pooled_log_sd, CUSTOM_SD), 2)

    def nccl(self) -> dict[int, AllReduceCost]:
        """The fitted costs, rounded to 4 significant digits as the catalog holds them."""
        return {
            n: AllReduceCost(latency=_sig(d.cost.latency), bus_bandwidth=_sig(d.cost.bus_bandwidth))
            for n, d in sorted(self.degrees.items())
        }


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits - 1}e}")


def _problem(msg: str) -> ScenarioError:
    return ScenarioError((FLAG, msg))


def profile_files(path: Path) -> dict[str, Path]:
    """The ``all_reduce.csv`` files under ``path``: the folder itself, its subfolders
    (Vidur's ``network/``), or ``network/*/`` below it (Vidur's profiling root); by system name."""
    if not path.exists():
        raise _problem(f"{str(path)!r}: no such folder")
    if not path.is_dir():
        raise _problem(f"{str(path)!r} is not a folder")
    if (path / FILE).is_file():
        return {path.resolve().name: path / FILE}
    for root in (path, path / "network"):
        found = {p.parent.name: p for p in sorted(root.glob(f"*/{FILE}"))}
        if found:
            return found
    raise _problem(
        f"{str(path)!r}: no {FILE} in it, in its subfolders or in network/*/ (Vidur's NCCL profiles), "
        f"nor a {COLLECTIVES_FILE} (collective,bytes,us)"
    )


def read_all_reduce(path: Path) -> pd.DataFrame:
    """One node's rows of an ``all_reduce.csv``: ``tp``, ``bytes``, ``time`` (seconds)."""
    name = str(path)
    frame = read_csv(path, _problem)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise _problem(f"{name!r}: needs the columns {', '.join(COLUMNS)} (missing {', '.join(missing)})")
    values = {c: pd.to_numeric(frame[c], errors="coerce").to_numpy(dtype=float) for c in COLUMNS}
    for col, low in ((TIME, 0.0), ("size", 0.0), ("num_workers", 1.0), ("devices_per_node", 1.0)):
        v = values[col]
        bad = ~np.isfinite(v) | (v <= low) if col in (TIME, "size") else ~np.isfinite(v) | (v < low)
        if bad.any():
            i = int(np.argmax(bad))
            raise _problem(f"{name!r} row {i + 1}: {col} {frame[col].iloc[i]!r} is not a number > {low:g}")
    one_node = (values["devices_per_node"] == values["num_workers"]) & (values["num_workers"] >= 2)
    if not one_node.any():
        raise _problem(f"{name!r}: no rows within one node of 2 or more GPUs (devices_per_node == num_workers)")
    return pd.DataFrame(
        {
            "tp": values["num_workers"][one_node].astype(np.int64),
            "bytes": values["size"][one_node],
            "time": values[TIME][one_node] * 1e-3,
        }
    )


def fit_degree(tp: int, nbytes: np.ndarray, seconds: np.ndarray, ring: float | None = None) -> DegreeFit:
    """Least squares in log time of ``latency + ring × bytes / bus_bandwidth`` (``ring``: bytes
    each GPU moves per byte of the message, the all-reduce's ``2 (tp - 1) / tp`` by default)."""
    if len(nbytes) < 8 or len(np.unique(nbytes)) < 4:
        raise _problem(f"tp {tp}: needs at least 8 rows over 4 message sizes to fit (has {len(nbytes)})")
    ring = ring_factor(tp) if ring is None else ring
    log_t = np.log(seconds)

    def residuals(p: np.ndarray) -> np.ndarray:
        return np.log(np.exp(p[0]) + ring * nbytes / np.exp(p[1])) - log_t

    small, large = np.argmin(nbytes), np.argmax(nbytes)
    start = np.array([math.log(seconds[small]), math.log(max(ring * nbytes[large] / seconds[large], 1.0))])
    res = least_squares(residuals, start, method="lm")
    cost = AllReduceCost(latency=float(np.exp(res.x[0])), bus_bandwidth=float(np.exp(res.x[1])))
    err = np.abs(np.expm1(res.fun))  # |predicted / measured - 1|
    return DegreeFit(
        tp=tp,
        points=len(nbytes),
        cost=cost,
        median_abs_error=float(np.median(err)),
        max_abs_error=float(err.max()),
        log_sd=float(np.sqrt(np.mean(res.fun**2))),
    )


def fit_network(name: str, path: Path) -> NetworkFit:
    """Fit every TP degree of one system's ``all_reduce.csv``."""
    rows = read_all_reduce(path)
    degrees = {
        int(tp): fit_degree(int(tp), g["bytes"].to_numpy(), g["time"].to_numpy())
        for tp, g in rows.groupby("tp", sort=True)
    }
    return NetworkFit(name, path, degrees)


def fit_networks(path: Path) -> list[NetworkFit]:
    """Fits of every profile found under ``path`` (:func:`profile_files`); a folder holding a
    two-GPU collective profile (``nccl_2gpu.csv``) gives one fit per collective, named
    ``<folder>`` (the all-reduce) and ``<folder> all_gather``."""
    if path.is_dir() and (path / COLLECTIVES_FILE).is_file():
        name = path.resolve().name
        fits = fit_collectives(path / COLLECTIVES_FILE)
        return [
            NetworkFit(name if kind == "all_reduce" else f"{name} {kind}", path / COLLECTIVES_FILE, {2: d})
            for kind, d in sorted(fits.items(), key=lambda kv: kv[0] != "all_reduce")
        ]
    return [fit_network(name, file) for name, file in profile_files(path).items()]


def network_table(fits: list[NetworkFit]) -> list[dict[str, float | int | str]]:
    """One row per profile and TP degree: the fitted cost and its errors (percent)."""
    return [
        {
            "profile": f.name,
            "tp": d.tp,
            "points": d.points,
            "latency_us": d.cost.latency * 1e6,
            "bus_gb_s": d.cost.bus_bandwidth / 1e9,
            "median_abs_pct": 100 * d.median_abs_error,
            "max_abs_pct": 100 * d.max_abs_error,
            "log_sd": d.log_sd,
        }
        for f in fits
        for d in f.degrees.values()
    ]


def read_collectives(path: Path) -> pd.DataFrame:
    """A two-GPU collective profile (``collective,bytes,us``): ``collective``, ``bytes``,
    ``time`` (seconds); every problem one line naming the file, row and column."""
    name = str(path)
    if not path.is_file():
        raise _problem(f"{name!r}: no such file")
    frame = read_csv(path, _problem)
    if tuple(frame.columns) != COLLECTIVE_COLUMNS:
        raise _problem(f"{name!r}: columns must be {','.join(COLLECTIVE_COLUMNS)}")
    if frame.empty:
        raise _problem(f"{name!r} has no rows")
    values = {c: pd.to_numeric(frame[c], errors="coerce").to_numpy(dtype=float) for c in ("bytes", "us")}
    for col, v in values.items():
        bad = ~np.isfinite(v) | (v <= 0) | (v > (1e12 if col == "bytes" else 1e7))
        if bad.any():
            i = int(np.argmax(bad))
            raise _problem(f"{name!r} row {i + 1}: {col} {frame[col].iloc[i]!r} is not a number > 0")
    kinds = frame["collective"].astype(str).str.strip()
    unknown = sorted(set(kinds) - set(COLLECTIVE_RING))
    if unknown:
        raise _problem(f"{name!r}: collective {unknown[0]!r} is not one of {', '.join(COLLECTIVE_RING)}")
    return pd.DataFrame({"collective": kinds, "bytes": values["bytes"], "time": values["us"] * 1e-6})


#: Bytes each of two GPUs moves per byte of a collective's sample size: the all-reduce's
#: input (``2 (n - 1) / n`` = 1), the all-gather's local input (``n - 1`` = 1).
COLLECTIVE_RING = {"all_reduce": ring_factor(2), "all_gather": 1.0}


def fit_collectives(path: Path) -> dict[str, DegreeFit]:
    """Each collective of a two-GPU profile fitted at TP 2 (:func:`fit_degree`)."""
    rows = read_collectives(path)
    return {
        kind: fit_degree(2, g["bytes"].to_numpy(), g["time"].to_numpy(), COLLECTIVE_RING[kind])
        for kind, g in rows.groupby("collective", sort=True)
    }
