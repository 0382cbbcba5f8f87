"""``des bench``: how fast des simulates, on standard workloads, fast and reference engines.

Each case is a scenario run the way ``des run`` runs it (load, simulate, write the
results folder), in a fresh Python process per run so that start-up and peak memory
count as a user meets them. For every case and engine the table gives the median wall
time of the repeats, the simulated requests and GPU steps per second of wall time,
and the peak resident memory. The *fast* engine is the default one; the *reference*
engine (``fast_forward=False``) runs every GPU step through SimPy and is the one the
fast engine must match exactly.

Cases (RTX 4090 + Qwen2.5-7B unless said): ``10k``, ``50k`` and ``1m`` requests of 512
prompt and 128 output tokens under Poisson arrivals at 8.4 req/s with continuous
batching; ``static`` (batches of 32) at 1.8 req/s; ``bursty`` (gamma, cv 3) at 6 req/s;
``prefix-cached`` (a 1024-token system prompt of 4 groups before 256 tokens of one's
own, prefix caching on) at 8 req/s; ``disaggregated`` (1 prefill + 1 decode 4090) at
8 req/s; 10,000 requests each; ``smoke``, 200 requests, to check that the bench runs.
``plan``: ``des plan`` of the default scenario (Qwen2.5-7B, 600 s runs) at 30 req/s under
p99 TTFT ≤ 1 s and median TPOT ≤ 50 ms over 4 GPU types (RTX 4090, L40S, A100-80GB,
H100) × 1–8 GPUs × tensor parallelism × colocated and every P:D split, 3 replications, on
every core (target: under 5 minutes on 2 cores; its requests and steps columns count the
requests simulated and the runs; the engine is always the fast one).

    des bench --cases 10k,50k --repeats 3
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LENGTHS = {"prompt_tokens": {"dist": "fixed", "value": 512}, "output_tokens": {"dist": "fixed", "value": 128}}


def _poisson(n: int, rate: float = 8.4, **extra: Any) -> dict[str, Any]:
    return {
        "name": f"bench-{n}",
        "seed": 0,
        "horizon": {"num_requests": n},
        "workload": {"arrival": {"process": "poisson", "rate": rate}, **LENGTHS, **extra},
    }


CASES: dict[str, dict[str, Any]] = {
    "10k": _poisson(10_000),
    "50k": _poisson(50_000),
    "1m": _poisson(1_000_000),
    "static": {**_poisson(10_000, 1.8), "scheduler": {"kind": "static", "max_batch_size": 32, "max_wait": 0.05}},
    "bursty": {
        **_poisson(10_000),
        "workload": {"arrival": {"process": "gamma", "rate": 6.0, "cv": 3.0}, **LENGTHS},
    },
    "prefix-cached": _poisson(
        10_000,
        8.0,
        prompt_tokens={"dist": "fixed", "value": 256},
        shared_prefix={"tokens": 1024, "groups": 4},
    ),
    "disaggregated": {**_poisson(10_000, 8.0), "scheduler": {"kind": "disaggregated"}},
    "smoke": _poisson(200),
    "plan": {},  # des plan (:func:`run_plan`), not one scenario
}
ENGINES = ("fast", "reference")


@dataclass
class Measure:
    """One case on one engine: wall times of the repeats (seconds), requests, steps, peak RSS (bytes)."""

    case: str
    engine: str
    walls: list[float]
    requests: int
    steps: int
    peak_bytes: int

    @property
    def wall(self) -> float:
        return statistics.median(self.walls)

    def row(self) -> dict[str, Any]:
        return {
            "case": self.case,
            "engine": self.engine,
            "requests": self.requests,
            "steps": self.steps,
            "wall_s": self.wall,
            "requests_per_s": self.requests / self.wall,
            "steps_per_s": self.steps / self.wall,
            "peak_mb": self.peak_bytes / 2**20,
        }


def run_one(case: str, engine: str, out_dir: Path) -> dict[str, Any]:
    """Run ``case`` as ``des run`` does (in this process) and return its counts and peak memory."""
    from des.output import write_result
    from des.scenario import load_scenario
    from des.simulation import simulate

    if case == "plan":
        return run_plan(out_dir)
    result = simulate(load_scenario(CASES[case]), fast_forward=engine == "fast")
    write_result(result, out_dir)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kilobytes
    return {"requests": result.summary["num_requests"], "steps": result.summary["num_steps"], "peak": peak}


def run_plan(out_dir: Path) -> dict[str, Any]:
    """The ``plan`` case: a whole plan, as ``des plan`` runs it; requests simulated and runs."""
    from des.catalog.prices import PriceBook
    from des.plan.planner import plan
    from des.scenario import load_scenario
    from des.study.capacity import metric_names, parse_slo
    from des.study.runner import open_backend
    from des.study.sweep import default_workers

    slos = [parse_slo(t, metric_names()) for t in ("ttft_p99<=1", "tpot_p50<=0.05")]
    gpus = ["rtx4090", "l40s", "a100-80gb", "h100-80gb"]
    with open_backend("local", default_workers()) as runner:
        result = plan(load_scenario(None), 30.0, slos, gpus, 8, PriceBook.from_catalog(), 3, runner, out_dir / "runs")
    runs = list((out_dir / "runs").rglob("summary.json"))
    requests = sum(json.loads(p.read_text())["num_requests"] for p in runs)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    assert result.winner is not None
    return {"requests": requests, "steps": len(runs), "peak": peak}


def measure(case: str, engine: str, repeats: int) -> Measure:
    """``repeats`` whole-process runs of ``case`` on ``engine``."""
    walls, info = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            t0 = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-m", "des.tools.bench", "--one", case, "--engine", engine, "--out", tmp],
                capture_output=True,
                text=True,
                check=True,
            )
            walls.append(time.perf_counter() - t0)
            info = json.loads(proc.stdout.strip().splitlines()[-1])
    return Measure(case, engine, walls, info["requests"], info["steps"], info["peak"])


def bench(cases: list[str], engines: list[str], repeats: int, progress: Any = None) -> list[Measure]:
    out = []
    for case in cases:
        for engine in engines:
            m = measure(case, engine, repeats)
            out.append(m)
            if progress is not None:
                progress(m)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--one", choices=list(CASES), help=argparse.SUPPRESS)
    ap.add_argument("--engine", choices=ENGINES, default="fast", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:  # a child: one run, its counts as a JSON line
        print(json.dumps(run_one(args.one, args.engine, args.out or Path(tempfile.mkdtemp()))))
        return
    ap.print_usage()


if __name__ == "__main__":
    main()
