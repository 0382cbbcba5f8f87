"""Golden summaries of the shipped scenarios: regenerate on purpose with `make golden`.

For every scenario in ``scenarios/`` this runs ``REPLICATIONS`` replications (seeds
derived from the scenario's seed) and stores, per pinned metric, their mean and
standard deviation, and the value at the scenario's own seed, in
``tests/golden/<name>.json``. ``tests/test_golden.py`` reruns each scenario at its own
seed and requires every metric inside the 99.9 % prediction interval of the
replications, ``mean ± t(0.9995, R-1) · sd · sqrt(1 + 1/R)``: a change of behaviour
shows up, a change of random draws does not.

    python -m tests.golden            # rewrite the golden files
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import des
from des.study.spec import replication_seed
from tests.helpers import ROOT

GOLDEN = Path(__file__).resolve().parent / "golden"
REPLICATIONS = 8
METRICS = (
    "num_requests", "throughput_rps", "output_tokens_per_s", "ttft_mean", "ttft_p99", "tpot_mean", "tpot_p99",
    "e2e_mean", "e2e_p99", "queue_delay_mean", "mean_batch_size", "gpu_busy_fraction", "preemptions",
    "mean_in_system",
)  # fmt: skip


def shipped() -> list[Path]:
    """The shipped scenario files (studies, which have a ``base``, excluded)."""
    import yaml

    return sorted(p for p in (ROOT / "scenarios").glob("*.yaml") if "base" not in yaml.safe_load(p.read_text()))


def pinned(summary: dict) -> dict:
    return {m: (np.nan if summary.get(m) is None else float(summary[m])) for m in METRICS}


def generate(path: Path) -> dict:
    sc = des.load_scenario(path)
    own = pinned(des.simulate(sc).summary)
    reps = [
        pinned(des.simulate(des.load_scenario(sc, [("seed", replication_seed(sc.seed, r))])).summary)
        for r in range(REPLICATIONS)
    ]
    metrics: dict[str, dict[str, float | None]] = {}
    out = {"scenario": path.name, "seed": sc.seed, "replications": REPLICATIONS, "metrics": metrics}
    for m in METRICS:
        vals = np.array([r[m] for r in reps])
        metrics[m] = {
            "own_seed": None if np.isnan(own[m]) else own[m],
            "mean": None if np.isnan(vals).any() else float(vals.mean()),
            "sd": None if np.isnan(vals).any() else float(vals.std(ddof=1)),
        }
    return out


def main() -> None:
    GOLDEN.mkdir(exist_ok=True)
    for path in shipped():
        data = generate(path)
        (GOLDEN / f"{path.stem}.json").write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote tests/golden/{path.stem}.json")


if __name__ == "__main__":
    main()
