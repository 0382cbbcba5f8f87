"""Benchmark: wall time of a one-hour simulated RTX 4090 + Qwen2.5-7B Poisson run near 70 % load.

The load is set from the capacity the simulator itself predicts: the throughput of a
saturated run (arrivals at 3x what one GPU can carry) gives the capacity, and the
benchmark runs `des run` for 3600 s of arrivals at 70 % of it, three times, as a whole
process each time, and reports the median wall time. Also times the per-step reference
engine in-process, to show what fast-forwarding buys.

    python benchmarks/bench_run.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

import des


def capacity_rps() -> float:
    sc = des.load_scenario(None, ["horizon.duration=300", "warmup=60", "workload.arrival.rate=40"])
    return des.simulate(sc).summary["throughput_rps"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--load", type=float, default=0.7)
    args = ap.parse_args()
    cap = capacity_rps()
    rate = round(args.load * cap, 3)
    print(f"capacity of one RTX 4090 + Qwen2.5-7B (default workload): {cap:.2f} req/s; running at {rate} req/s")
    overrides = ["--set", "horizon.duration=3600", "--set", "warmup=300", "--set", f"workload.arrival.rate={rate}"]
    walls = []
    with tempfile.TemporaryDirectory() as out:
        for i in range(args.repeats):
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "des.cli", "run", *overrides, "--out", out, "--quiet"], check=True)
            walls.append(time.perf_counter() - t0)
            print(f"  run {i + 1}: {walls[-1]:.2f} s")
    sc = des.load_scenario(None, [o for o in overrides if o != "--set"])
    t0 = time.perf_counter()
    r = des.simulate(sc)
    fast = time.perf_counter() - t0
    t0 = time.perf_counter()
    des.simulate(sc, fast_forward=False)
    slow = time.perf_counter() - t0
    s = r.summary
    print(f"median wall time (whole process, {args.repeats} runs): {statistics.median(walls):.2f} s")
    print(
        f"in-process: {fast:.2f} s fast-forward, {slow:.2f} s per-step reference; "
        f"{s['num_requests']:,} requests, {s['num_steps']:,} steps, mean batch {s['mean_batch_size']:.1f}, "
        f"GPU busy {s['gpu_busy_fraction']:.2f}, stable {s['stable']}"
    )


if __name__ == "__main__":
    main()
