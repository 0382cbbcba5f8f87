"""Paths and scenarios shared by the tests (imported explicitly; pytest advises against importing conftest)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"


def des_cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``python -m des.cli ARGS`` as a user runs it from ``cwd``, output captured."""
    return subprocess.run([sys.executable, "-m", "des.cli", *args], capture_output=True, text=True, cwd=cwd)


def start_ui(results: Path, cwd: Path) -> tuple[subprocess.Popen, str]:
    """``des ui --no-browser --port 0 --results RESULTS`` started as a user starts it from
    ``cwd``; the process and the first line it printed (its address, with its token:
    ``http://127.0.0.1:PORT/?token=...``, see :func:`ui_address`)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "des.cli", "ui", "--no-browser", "--port", "0", "--results", str(results)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
    )
    return proc, proc.stdout.readline().strip()  # type: ignore[union-attr]


def ui_address(url: str) -> tuple[str, dict[str, str]]:
    """The base address (``http://127.0.0.1:PORT/``) of the page ``des ui`` printed as
    ``url``, and the header that carries its token for a client other than a browser."""
    base, _, token = url.partition("?token=")
    return base, {"X-Des-Token": token}


def ledger(cluster: Any) -> pd.DataFrame:
    """A run's requests as the cluster's ledger holds them, with the tokens each generated."""
    from des.metrics import requests_table

    table = requests_table(cluster.ledger)
    table["generated"] = cluster.ledger.arrays()["generated"]
    return table


def md1(rate: float = 0.5, n: int = 2500, seed: int = 0) -> dict[str, Any]:
    """One slot, one step of 1 s per request, Poisson arrivals at ``rate`` req/s: M/D/1 at
    ``rate`` load, ``n`` requests, 100 s of warm-up."""
    return {
        "name": "md1",
        "seed": seed,
        "horizon": {"num_requests": n},
        "warmup": 100,
        "workload": {
            "arrival": {"process": "poisson", "rate": rate},
            "prompt_tokens": {"dist": "fixed", "value": 1},
            "output_tokens": {"dist": "fixed", "value": 1},
        },
        "cost_model": {"kind": "constant", "step_time": 1.0},
        "scheduler": {"kind": "static", "max_batch_size": 1},
    }
