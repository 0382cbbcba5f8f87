"""``des compare``: replay a measured serving run through des and put the two side by side.

The measured run is a ``vllm bench serve --save-result --save-detailed`` JSON
(:mod:`des.workload.formats.vllm_bench`) or a per-request CSV/JSONL log
(:mod:`des.workload.formats.request_log`). Its successful requests are replayed with
their arrival times and token counts (a ``trace`` workload) on the engine of a scenario
(the embedded default, or a file, with ``--set`` overrides as in ``des run``), the run
drained to the last request. Measured and simulated are then summarised the same way:

- throughput: completed requests and output tokens per second over the span from the
  first arrival to the last completion;
- TTFT, TPOT (``(e2e - ttft) / (output_tokens - 1)``, requests of 2+ tokens) and
  end-to-end latency: mean, p50, p90, p99 (numpy's linear-interpolation percentiles, as
  vLLM's benchmark computes them);
- ITL, when the measured run has inter-token gaps: the simulated ITLs are each request's
  mean gap repeated for its ``output_tokens - 1`` gaps (des records when a request's
  first and last tokens come out, not every token's), so the mean is like for like and the
  percentiles are a per-request view;

each with its error ``(simulated - measured) / measured``. A des run written out in either
format compares to itself with zero error; scaling the measured latencies by ``k`` shows
as ``1 / k - 1`` on every latency statistic.

:func:`compare` returns a :class:`Comparison`; the command writes its files
(:func:`des.output.write_comparison`) and shows it (:func:`des.render.comparison`).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from des.errors import ScenarioError
from des.workload.formats.files import data_suffix
from des.workload.formats.request_log import read_request_log
from des.workload.formats.vllm_bench import read_vllm_bench

ARG = "RESULT"
FORMATS = ("auto", "vllm-bench", "csv", "jsonl")
LATENCIES = ("ttft", "tpot", "itl", "e2e")
STATS = ("mean", "p50", "p90", "p99")
#: Scenario fields the measured run decides; ``--set`` may not change them.
FROM_RESULT = ("workload", "horizon", "warmup")


@dataclass
class Measured:
    """A measured run's per-request rows and where they came from."""

    path: Path
    format: str
    rows: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    has_itl: bool = False

    @property
    def completed(self) -> pd.DataFrame:
        return self.rows[self.rows["success"]]

    @property
    def failed(self) -> int:
        """Requests that did not succeed (not replayed)."""
        return int((~self.rows["success"]).sum())


def read_measured(path: Path, fmt: str = "auto", seed: int = 0) -> Measured:
    """The measured run at ``path``; problems as ScenarioError naming ``RESULT``."""
    if fmt == "auto":
        suffix = data_suffix(path)
        fmt = {".json": "vllm-bench", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}.get(suffix, "")
        if not fmt:
            raise ScenarioError(
                (
                    "--format",
                    f"cannot tell the format of {str(path)!r} from its suffix; give one of vllm-bench, csv, jsonl",
                )
            )
    try:
        rows = read_vllm_bench(path, seed) if fmt == "vllm-bench" else read_request_log(path, jsonl=fmt == "jsonl")
    except ValueError as exc:
        raise ScenarioError((ARG, str(exc))) from None
    if not rows["success"].any():
        raise ScenarioError((ARG, f"{str(path)!r}: no request succeeded, so there is nothing to compare"))
    return Measured(path, fmt, rows, dict(rows.attrs.get("meta", {})), bool(rows.attrs.get("has_itl", False)))


# -- statistics ------------------------------------------------------------------------------


def _stats(values: np.ndarray) -> dict[str, float]:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return {s: math.nan for s in STATS}
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {"mean": float(v.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def itls(rows: pd.DataFrame, measured: bool) -> np.ndarray:
    """Inter-token gaps (seconds): of a measured run, as recorded; of a des run, each
    request's mean gap (its TPOT) repeated for its ``output_tokens - 1`` gaps."""
    if measured:
        return np.array([g for gaps in rows["itl"] if gaps is not None for g in gaps], dtype=float)
    multi = rows[rows["output_tokens"] > 1]
    return np.repeat(multi["tpot"].to_numpy(float), (multi["output_tokens"] - 1).to_numpy())


def summarize(rows: pd.DataFrame, measured: bool, itl: bool) -> dict[str, float]:
    """Throughput and latency statistics of completed requests (columns as the readers return)."""
    span = float((rows["arrival_time"] + rows["e2e"]).max() - rows["arrival_time"].min())
    out: dict[str, float] = {
        "requests": float(len(rows)),
        "throughput_rps": len(rows) / span if span > 0 else math.nan,
        "output_tokens_per_s": float(rows["output_tokens"].sum()) / span if span > 0 else math.nan,
    }
    for name in LATENCIES:
        if name == "itl" and not itl:
            continue
        values = itls(rows, measured) if name == "itl" else rows[name].to_numpy(float)
        for stat, v in _stats(values).items():
            out[f"{name}_{stat}"] = v
    return out


def error(simulated: float, measured: float) -> float:
    """``(simulated - measured) / measured``; 0 when both are 0; NaN when undefined."""
    if not (math.isfinite(simulated) and math.isfinite(measured)):
        return math.nan
    if measured == 0:
        return 0.0 if simulated == 0 else math.nan
    return simulated / measured - 1.0


@dataclass
class Comparison:
    """Measured against simulated, metric by metric (seconds, requests/s, tokens/s)."""

    measured: Measured
    simulated: pd.DataFrame  # the replay's completed requests, same columns as measured
    rejected: int
    table: pd.DataFrame  # metric, measured, simulated, error
    scenario: Any

    def errors(self) -> dict[str, float]:
        return dict(zip(self.table["metric"], self.table["error"], strict=True))

    def as_dict(self) -> dict[str, Any]:
        """Both runs' facts and the table as flat keys (``ttft_p99_measured``, ``..._simulated``,
        ``..._error``): what ``comparison.json`` holds."""
        facts = {
            "result": str(self.measured.path),
            "format": self.measured.format,
            "measured_requests": len(self.measured.rows),
            "measured_failed": self.measured.failed,
            "simulated_completed": len(self.simulated),
            "simulated_rejected": self.rejected,
            **{f"meta_{k}": v for k, v in self.measured.meta.items() if isinstance(v, str | int | float | bool)},
        }
        table = {f"{r.metric}_{col}": getattr(r, col) for r in self.table.itertuples(index=False) for col in
                 ("measured", "simulated", "error")}  # fmt: skip
        return {**facts, **table}

    def trace_csv(self) -> str:
        """The replayed requests as a trace (:func:`trace_csv`)."""
        return trace_csv(self.measured)

    def rerun_scenario(self, trace: str = "trace.csv") -> dict[str, Any]:
        """The replay's scenario, resolved, reading its requests from ``trace``: ``des run`` on it
        reruns the replay."""
        scenario = self.scenario.resolved()
        scenario["workload"]["arrival"]["path"] = trace
        return scenario


def simulated_rows(requests: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """A des run's completed requests in the readers' columns, and how many were rejected."""
    done = requests[requests["status"] == "completed"]
    rows = pd.DataFrame(
        {
            "arrival_time": done["arrival_time"].to_numpy(float),
            "prompt_tokens": done["prompt_tokens"].to_numpy(np.int64),
            "output_tokens": done["output_tokens"].to_numpy(np.int64),
            "ttft": done["ttft"].to_numpy(float),
            "e2e": done["e2e"].to_numpy(float),
            "tpot": done["tpot"].to_numpy(float),
            "success": True,
        }
    )
    rows["itl"] = [
        [float(t)] * (int(n) - 1) if n > 1 else [] for t, n in zip(rows["tpot"], rows["output_tokens"], strict=True)
    ]
    return rows, int((requests["status"] != "completed").sum())


def trace_csv(measured: Measured) -> str:
    """The measured run's completed requests, by arrival, as a csv trace
    (``arrival_time,prompt_tokens,output_tokens``; times to the last bit)."""
    done = measured.completed.sort_values("arrival_time", kind="stable")
    lines = ["arrival_time,prompt_tokens,output_tokens"]
    lines += [
        f"{float(a)!r},{int(p)},{int(o)}"
        for a, p, o in zip(done["arrival_time"], done["prompt_tokens"], done["output_tokens"], strict=True)
    ]
    return "\n".join(lines) + "\n"


def replay_scenario(measured: Measured, scenario: Path | None, overrides: Iterable[str], trace: Path) -> Any:
    """The scenario that replays the measured requests (written to ``trace``) on the given engine."""
    from des.scenario import load_scenario, parse_override

    items: list[str | tuple[str, Any]] = []
    for text in overrides:
        key, value = parse_override(text)
        if key.split(".")[0] in FROM_RESULT:
            raise ScenarioError(("--set", f"{key} comes from RESULT (its requests and arrivals); set the engine only"))
        items.append((key, value))
    trace.write_text(trace_csv(measured))
    items += [
        ("workload", {"arrival": {"process": "trace", "path": str(trace)}}),
        ("horizon", {"drain": True}),
        ("warmup", 0.0),
    ]
    return load_scenario(scenario, items)


def compare(
    measured: Measured, scenario: Path | None = None, overrides: Iterable[str] = (), seed: int | None = None
) -> Comparison:
    """Replay ``measured`` on the engine of ``scenario`` (with ``overrides``) and compare."""
    from des.simulation import simulate

    with tempfile.TemporaryDirectory(prefix="des-compare-") as tmp:
        items = list(overrides)
        if seed is not None:
            items.append(f"seed={seed}")
        sc = replay_scenario(measured, scenario, items, Path(tmp) / "requests.csv")
        result = simulate(sc)
    sim, rejected = simulated_rows(result.requests)
    itl = measured.has_itl
    meas_stats = summarize(measured.completed, measured=True, itl=itl)
    sim_stats = summarize(sim, measured=False, itl=itl) if len(sim) else {k: math.nan for k in meas_stats}
    if "duration" in measured.meta and measured.meta.get("arrivals") != "start_times":
        # without send times the measured span is not known; the benchmark's own duration is
        duration = measured.meta["duration"]
        if isinstance(duration, int | float) and duration > 0:
            meas_stats["throughput_rps"] = len(measured.completed) / duration
            meas_stats["output_tokens_per_s"] = float(measured.completed["output_tokens"].sum()) / duration
    rows = [
        {"metric": k, "measured": meas_stats[k], "simulated": sim_stats.get(k, math.nan)}
        for k in meas_stats
        if k != "requests"
    ]
    table = pd.DataFrame(rows)
    table["error"] = [error(s, m) for s, m in zip(table["simulated"], table["measured"], strict=True)]
    return Comparison(measured, sim, rejected, table, sc)
