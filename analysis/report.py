"""Write reports/README.md: the headline study's figures and what they say.

Reads the sweeps written by ``make run`` (``results/headline``, ``results/burstiness``,
``results/detail``, ``results/lesson-grid``), by ``make studies`` (the prefill/decode
studies ``results/pd-*``, the prefix-caching studies ``results/caching-*``,
``results/models-4090`` and ``results/speculative``) and by ``make day``
(``results/day-4090``, ``results/burst-4090``); a section whose studies are missing says
which target sweeps them (:data:`SECTIONS`). It draws every figure into
``reports/`` with the other analysis scripts, reads each scheduler's capacity under the
default SLO off the headline sweep (analysis/capacity.py), adds the prefill/decode
(analysis/pd_report.py), prefix-caching (analysis/caching.py), what-a-4090-serves
(analysis/models.py) and day-of-traffic (analysis/day.py) sections and writes the report around them:
analysis/templates/report.md filled with :func:`facts` and the sections' Markdown.

    python -m analysis.report --results results --out reports
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import (
    burstiness,
    caching,
    calibration,
    capacity,
    cdf,
    day,
    latency_vs_load,
    models,
    pd_report,
    slot_grid,
    throughput,
    timeline,
)
from analysis.common import CV, RATE, Sweep
from analysis.markdown import render


def _figures(res: Path, out: Path) -> dict[str, Path]:
    figures = {
        "latency": latency_vs_load.main([str(res / "headline"), "--out", str(out / "latency_vs_load.png")]),
        "throughput": throughput.main([str(res / "headline"), "--out", str(out / "throughput.png")]),
        "burstiness": burstiness.main([str(res / "burstiness"), "--out", str(out / "burstiness.png")]),
        "cdf": cdf.main([str(res / "detail"), "--rate", "1", "--out", str(out / "cdf.png")]),
        "timeline": timeline.main([str(res / "detail"), "--out", str(out / "timeline.png")]),
        "slot_grid": slot_grid.main([str(res / "lesson-grid"), "--out", str(out / "slot_grid.png")]),
    }
    calibration.main(["--out", str(out)])
    return figures


def headline_facts(points: pd.DataFrame, runs: pd.DataFrame, study: Mapping[str, Any]) -> dict[str, Any]:
    """The headline study's setup: its loads, each scheduler's saturation throughput, its
    runs and requests, and the SLO its goodput counts."""
    saturation = (points[RATE] / points["load"]).groupby(points["variant"]).median()
    slo = study.get("set", {}).get("slo", {})
    return {
        "fractions": ", ".join(f"{f:g}" for f in sorted(points["load"].unique())),
        "saturations": ", ".join(f"{v} {saturation[v]:.2f} req/s" for v in saturation.index),
        "reps": int(study.get("replications", 1)),
        "runs": len(runs),
        "requests": int(runs["num_requests"].sum()),
        "goodput_slo": " and ".join(f"{k} ≤ {v:g} s" for k, v in slo.items()),
    }


def factor_facts(runs: pd.DataFrame, scenario: Mapping[str, Any]) -> dict[str, Any]:
    """Where the headline's step times come from: each GPU type's factors, fitted (to
    what), transferred (from what) or spec only, with their stated uncertainty, read from
    a run's resolved ``scenario``; and the runs' ``factor_provenance`` (the least-fitted
    GPU of each run, from their summaries)."""
    from des.scenario import load_scenario

    sources = load_scenario(scenario).deployment.factors
    kinds = sorted(set(runs["factor_provenance"].dropna())) if "factor_provenance" in runs else []
    return {
        "factor_sources": "; ".join(s.describe() for s in sources),
        "factor_provenance": ", ".join(kinds) or "not recorded (runs older than factor_provenance)",
    }


def capacity_facts(points: pd.DataFrame, slo: dict[str, float] = capacity.DEFAULT_SLO) -> dict[str, Any]:
    """Each scheduler's capacity under ``slo`` (cv 1 and 3), and what static batching and
    bursts cost: the headline study's continuous and static batching, Poisson and cv 3."""
    caps = capacity.capacities(points, slo)

    def at(variant: str, cv: float) -> pd.Series:
        return caps[(caps["variant"] == variant) & (caps[CV] == cv)].iloc[0]

    cont, stat, bursty = at("continuous", 1.0), at("static", 1.0), at("continuous", 3.0)
    static_low = points[(points["variant"] == "static") & (points[CV] == 1.0)].sort_values(RATE).iloc[0]
    return {
        "slo_ttft": slo["ttft_p99"],
        "slo_tpot_ms": slo["tpot_p50"] * 1e3,
        "capacity_lines": "\n".join(f"- {capacity.describe(row, slo)}" for _, row in caps.iterrows()),
        "continuous_capacity": cont["capacity"],
        "static_low_rate": static_low[RATE],
        "static_low_ttft": static_low["ttft_p99"],
        "static_max_throughput": stat["max_throughput"],
        "continuous_max_throughput": cont["max_throughput"],
        "throughput_ratio": cont["max_throughput"] / stat["max_throughput"],
        "bursty_loss": 1 - bursty["capacity"] / cont["capacity"],
    }


def static_tpot_facts(points: pd.DataFrame) -> dict[str, Any]:
    """Static batching's highest p99 TPOT at a stable point of the headline sweep (seconds
    per token), which the report explains."""
    static = points[(points["variant"] == "static") & points["all_stable"].astype(bool)]
    return {"static_tpot_p99_max": float(static["tpot_p99"].max()) if len(static) else math.nan}


def burstiness_facts(points: pd.DataFrame) -> dict[str, Any]:
    """The table of p99 TTFT at cv 1 and at the highest cv, per GPU count."""
    top = points[CV].max()
    lines = []
    for variant, g in points.groupby("variant", sort=False):
        at = g.set_index(CV)["ttft_p99"]
        lines.append(f"| {variant.replace('-', ' ')} | {at.get(1.0, math.nan):.2f} s | {at.get(top, math.nan):.2f} s |")
    return {"burstiness_table": "\n".join([f"| GPUs | p99 TTFT at cv 1 | at cv {top:g} |", "|---|---|---|", *lines])}


def facts(res: Path) -> dict[str, Any]:
    """The numbers of analysis/templates/report.md outside its sections, read from the
    headline and burstiness sweeps in ``res``."""
    head = Sweep(res / "headline")
    points = head.points
    runs = head.runs
    return (
        headline_facts(points, runs, head.study)
        | factor_facts(runs, head.scenario(str(runs["run_id"].iloc[0])))
        | capacity_facts(points)
        | static_tpot_facts(points)
        | burstiness_facts(Sweep(res / "burstiness").points)
    )


#: The report's sections beyond the headline's: the function writing each, its title, the studies it
#: reads, and the make target that runs them (``make run`` runs the headline's studies only).
SECTIONS: dict[str, tuple[Callable[[Path, Path], tuple[str, dict[str, Path]]], str, tuple[str, ...], str]] = {
    "pd_section": (
        pd_report.section,
        "Disaggregated prefill/decode serving, at equal GPU count",
        ("pd-compare", "pd-breakeven", "pd-split", "pd-interference", "pd-hetero"),
        "make studies",
    ),
    "caching_section": (caching.section, "Prefix caching", ("caching-system-prompt", "caching-chat"), "make studies"),
    "models_section": (models.section, "What one RTX 4090 can serve", ("models-4090", "speculative"), "make studies"),
    "day_section": (
        day.section,
        "A day of traffic: a cluster fixed for the peak against autoscaling",
        ("day-4090", "burst-4090"),
        "make day",
    ),
}


def not_run(title: str, studies: tuple[str, ...], target: str, res: Path) -> str:
    """A section's place in the report when its studies have not been swept into ``res``."""
    names = ", ".join(f"`scenarios/{s}.yaml`" for s in studies)
    return (
        f"## {title}\n\nNot in this report: its studies ({names}) have not been swept into `{res}`. "
        f"`{target}` sweeps them and writes this report again with this section.\n"
    )


def sections(res: Path, out: Path) -> tuple[dict[str, str], dict[str, Path]]:
    """Each section of :data:`SECTIONS` (Markdown) and the figures drawn for them; a section
    whose studies are not all in ``res`` says how to get it and draws nothing."""
    texts: dict[str, str] = {}
    figures: dict[str, Path] = {}
    for key, (section, title, studies, target) in SECTIONS.items():
        if not all((res / s / "points.parquet").is_file() for s in studies):
            texts[key] = not_run(title, studies, target, res)
            continue
        texts[key], drawn = section(res, out)
        figures |= {f"pd_{k}": v for k, v in drawn.items()} if key == "pd_section" else drawn
    return texts, figures


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=Path("results"))
    ap.add_argument("--out", type=Path, default=Path("reports"))
    args = ap.parse_args(argv)
    res, out = args.results, args.out
    out.mkdir(parents=True, exist_ok=True)
    figures = _figures(res, out)
    texts, drawn = sections(res, out)
    figures |= drawn
    text = render("report", facts(res) | texts)
    path = out / "README.md"
    path.write_text(text)
    print(f"wrote {path} and {len(figures)} figures")
    return path


if __name__ == "__main__":
    main()
