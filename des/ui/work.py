"""What a job of the what-if page does, in its own process: a run, or a load sweep.

Both call the library as the CLI does (:func:`des.scenario.load_scenario`,
:func:`des.simulation.simulate`, :func:`des.study.sweep`) and return what the page
shows as JSON-ready mappings; a sweep also draws its figure into the job's folder
(``sweep.svg``, ``sweep.png``). ``report(fraction, message)`` is told how far along the
job is. This module is imported once by the job processes' fork server, so that each
job starts with the library already loaded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from des.errors import ScenarioError
from des.figures.axes import save, slo_text
from des.figures.load import latency_against_load, mark_capacity
from des.output import json_ready
from des.render.console import fmt
from des.render.run import LATENCY_COLUMNS, LATENCY_ROWS, summary_rows
from des.render.study import estimate, said
from des.scenario import load_scenario, scenario_warnings
from des.simulation import RunProgress, simulate
from des.study import load_study
from des.study import sweep as run_sweep
from des.study.grid_capacity import DEFAULT_SLO, capacities, slo_metrics
from des.study.spec import RATE
from des.ui import browse
from des.ui.browse import plain

Report = Callable[[float | None, str], None]

#: The load grid of the page's sweep, as fractions of the configuration's saturation.
DEFAULT_FRACTIONS = (0.2, 0.4, 0.6, 0.8, 0.9, 1.0, 1.1)


def run(doc: Mapping[str, Any], report: Report) -> dict[str, Any]:
    """Simulate the scenario ``doc``: its summary (``summary.json``'s keys), the lines
    ``des run`` prints above its latency table, the table, the scenario's warnings, and the
    engine settings vLLM's defaults filled in each pool (``engine_defaults``, resolved)."""
    sc = load_scenario(doc)
    t0 = time.perf_counter()

    def tick(p: RunProgress) -> None:
        report(p.fraction, f"{p.now:,.0f} s simulated, {p.arrived:,} requests")

    result = simulate(sc, progress=tick)
    s = result.summary
    return {
        "summary": json_ready(s),
        "rows": [list(row) for row in summary_rows(sc, result)],
        "latency": {
            "columns": list(LATENCY_COLUMNS),
            "rows": [[name, *(fmt(s.get(f"{name}_{c}")) for c in LATENCY_COLUMNS)] for name in LATENCY_ROWS],
        },
        "warnings": scenario_warnings(sc),
        # the engine settings each pool left out and vLLM's defaults filled, resolved (pool order)
        "engine_defaults": [
            dict(p.layout.defaults.values) if p.layout.defaults is not None else {} for p in sc.deployment.pools
        ],
        "wall": time.perf_counter() - t0,
    }


def sweep_study(doc: Mapping[str, Any], fractions: list[float], replications: int) -> dict[str, Any]:
    """The study the page's sweep runs: the scenario at ``fractions`` of its own saturation
    (a probe measures it), ``replications`` runs each, stopped at the horizon (an
    overloaded point is flagged unstable rather than drained)."""
    return {
        "name": str(doc.get("name") or "what-if"),
        "base": dict(doc),
        "set": {"horizon.drain": False},
        "load": {"fractions": fractions},
        "replications": replications,
    }


def sweep(doc: Mapping[str, Any], fractions: list[float], replications: int, folder: Path, report: Report):
    """Latency against load for the scenario ``doc``, with 95 % intervals, and the capacity
    under its SLO (or the reports' default, p99 TTFT <= 2 s and median TPOT <= 0.1 s)."""
    sc = load_scenario(doc)  # the scenario's own problems, named as des run names them
    if "rate" not in type(sc.workload.arrival).model_fields:  # as a study's load grid requires
        raise ScenarioError((
            "workload.arrival.process",
            f"the sweep varies the arrival rate, which {sc.workload.arrival.process} arrivals do not have: pick "
            "poisson or gamma (sweep a closed loop's users or a trace's rate_scale with des sweep and a grid)",
        ))  # fmt: skip
    try:
        study = load_study(sweep_study(doc, fractions, replications), base_dir=Path.cwd())
    except ScenarioError as exc:
        raise ScenarioError([(p.removeprefix("base."), m) for p, m in exc.problems]) from None

    def tick(done: float, total: int, reused: int, phase: str = "") -> None:
        report(done / total if total else None, "measuring saturation" if phase else f"{int(done)} of {total} runs")

    report(0.0, "measuring saturation")
    _, points = run_sweep(study, folder / "sweep", workers=None, progress=tick)
    slo = slo_metrics(doc.get("slo") if isinstance(doc.get("slo"), Mapping) else None)
    slo = slo or dict(DEFAULT_SLO)
    caps = capacities(points, slo, by=["variant"])
    cap = caps.iloc[0]
    fig = latency_against_load(points, {m.rsplit("_", 1)[0]: v for m, v in slo.items()}, title=str(doc.get("name", "")))
    mark_capacity(fig, cap["capacity"], plain(cap["ci_low"]), plain(cap["ci_high"]), str(estimate(cap, "req/s")))
    fig.savefig(folder / "sweep.svg", bbox_inches="tight")
    save(fig, folder / "sweep.png")
    table = points[
        [RATE, "offered_rps", "throughput_rps", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "all_stable"]
    ]
    return {
        "capacity": said(cap, "req/s") or "none: the SLO fails at the lowest load",
        "capacity_value": None if cap["capacity"] is None else float(cap["capacity"]),
        "ci": [plain(cap["ci_low"]), plain(cap["ci_high"])],
        "saturation": plain(cap["saturation"]),
        "slo": dict(slo),
        "slo_text": " and ".join(slo_text(m, v).removeprefix("SLO: ") for m, v in slo.items()),
        "points": browse.table(table, "points"),
        "replications": replications,
    }
