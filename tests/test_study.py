"""Studies: sweep bookkeeping, resume, isolation, backends, confidence intervals,
capacity search against theory, and the analysis scripts on a small sweep."""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np
import pandas as pd
import pytest

import des
from des.errors import ScenarioError
from des.study import load_study, replication_seed, sweep
from des.study.intervals import estimate
from des.study.runner import SweepLocked, sweep_lock
from tests.helpers import SCENARIOS, des_cli, md1

SMALL: dict[str, Any] = {
    "name": "small",
    "base": str(SCENARIOS / "qwen7b-4090-poisson.yaml"),
    "set": {"horizon.duration": 60, "warmup": 10, "slo": {"ttft": 2.0, "tpot": 0.1}},
    "variants": {"continuous": {}, "static": {"scheduler": {"kind": "static", "max_batch_size": 16}}},
    "grid": {"workload.arrival.rate": [1, 3]},
    "replications": 2,
}


def drop_wall(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[c for c in frame.columns if c.startswith("wall_time")])


def test_expansion_seeds_and_rows(tmp_path):
    study = load_study(SMALL)
    assert len(study.runs) == 2 * 2 * 2
    assert len({r.run_id for r in study.runs}) == len(study.runs)
    # common random numbers: replication r has one seed everywhere, and seeds differ across r
    by_rep: dict[int, set[int]] = {}
    for r in study.runs:
        by_rep.setdefault(r.replication, set()).add(r.seed)
    assert all(len(s) == 1 for s in by_rep.values())
    assert by_rep[0] != by_rep[1]
    assert by_rep[0] == {replication_seed(0, 0)}
    static = next(r for r in study.runs if r.variant == "static")
    assert static.scenario["scheduler"] == {**static.scenario["scheduler"], "kind": "static", "max_batch_size": 16}
    assert "max_num_seqs" not in static.scenario["scheduler"]  # a different kind replaces, not merges
    runs, points = sweep(study, tmp_path / "out", workers=1)
    assert len(runs) == 8 and len(points) == 4
    assert list(runs["run"]) == list(range(8))
    assert set(points["n"]) == {2}
    assert {"throughput_rps_lo", "throughput_rps_hi", "pooled_ttft_p99", "all_stable"} <= set(points.columns)
    # the point's mean is the mean of its runs
    g = runs[(runs["variant"] == "continuous") & (runs["workload.arrival.rate"] == 3)]
    pt = points[(points["variant"] == "continuous") & (points["workload.arrival.rate"] == 3)].iloc[0]
    assert pt["ttft_p99"] == pytest.approx(g["ttft_p99"].mean())
    # its interval comes from batches of the runs' measured requests, and stays above the fastest of them
    frames = [pd.read_parquet(tmp_path / "out" / "runs" / rid / "latencies.parquet") for rid in g["run_id"]]
    series = [f.sort_values("arrival_time")["ttft"].to_numpy() for f in frames]
    e = estimate("ttft_p99", g["ttft_p99"].to_numpy(), series)
    mean, lo, hi = e.value, e.low, e.high
    assert (pt["ttft_p99_lo"], pt["ttft_p99_hi"]) == pytest.approx((lo, hi))
    assert min(s.min() for s in series) <= lo <= mean <= hi
    assert pt["interval_method"].startswith("latencies: batch means")
    # pooled percentiles come from the runs' measured requests
    lat = pd.concat([pd.read_parquet(tmp_path / "out" / "runs" / rid / "latencies.parquet") for rid in g["run_id"]])
    assert pt["pooled_ttft_p99"] == pytest.approx(np.percentile(lat["ttft"], 99))
    assert pt["pooled_requests"] == len(lat)
    # each run's summary is exactly what des run gives for that scenario
    one = runs.iloc[5]
    direct = des.simulate(des.load_scenario(study.runs[5].scenario)).summary
    assert one["ttft_p99"] == direct["ttft_p99"] and one["seed"] == study.runs[5].seed


class Interrupt(Exception):
    pass


def test_interrupted_sweep_resumes_where_it_stopped(tmp_path):
    study = load_study(SMALL)
    out = tmp_path / "out"
    seen = []

    def stop_after_three(done, total, reused, phase=""):
        seen.append(done)
        if done == 3:
            raise Interrupt

    with pytest.raises(Interrupt):
        sweep(study, out, workers=1, progress=stop_after_three)
    assert not (out / "runs.parquet").exists()
    finished = sorted(p.parent for p in out.glob("runs/**/run.json"))
    assert len(finished) == 3
    stamps = {p: (p / "summary.json").stat().st_mtime_ns for p in finished}
    log = []
    runs, points = sweep(study, out, workers=1, progress=lambda d, t, r, phase="": log.append((d, t, r)))
    assert log[0] == (3, 8, 3)  # three reused, five run
    assert all((p / "summary.json").stat().st_mtime_ns == stamps[p] for p in finished)
    fresh_runs, fresh_points = sweep(study, tmp_path / "fresh", workers=1)
    assert drop_wall(runs).equals(drop_wall(fresh_runs))
    assert drop_wall(points).equals(drop_wall(fresh_points))


def test_a_sweep_shows_progress_inside_its_runs_and_its_probes(tmp_path):
    """The runs done move inside each run (the share of its horizon simulated), never back,
    reach the whole at the end, and leave no progress file; a load study's saturation probes
    are told as their own phase before its runs."""
    study = load_study({**SMALL, "variants": {"continuous": {}}, "grid": {}, "load": {"fractions": [0.5, 0.9]}})
    log: list[tuple[float, int, str]] = []
    sweep(study, tmp_path / "out", workers=1, progress=lambda d, t, r, phase="": log.append((d, t, phase)))
    probes = [e for e in log if e[2] == "probing saturation"]
    runs = [e for e in log if e[2] == ""]
    assert probes and log[: len(probes)] == probes  # the probes first
    for part in (probes, runs):
        done = [d for d, _, _ in part]
        assert done == sorted(done) and done[-1] == part[-1][1]  # never back, and all of them at the end
        assert any(d % 1 for d in done)  # inside a run
    assert len(runs) > runs[-1][1] + 1
    assert not list((tmp_path / "out").glob("runs/**/.progress*"))


def test_a_run_in_a_worker_keeps_its_share_in_its_folder(tmp_path):
    """A run in a pool worker writes its share done into its folder (read by the sweep for
    the runs in flight), whole, and removes it when the run is written."""
    from des.study.runner import PROGRESS_FILE, _share_of, _share_writer, execute

    spec = load_study(SMALL).runs[0]
    folder = tmp_path / spec.run_id
    folder.mkdir(parents=True)
    assert _share_of(folder) == 0.0  # nothing written yet
    _share_writer(folder / PROGRESS_FILE)(0.4217)
    assert _share_of(folder) == 0.4217 and sorted(p.name for p in folder.iterdir()) == [PROGRESS_FILE]
    (folder / PROGRESS_FILE).write_text("1.7")
    assert _share_of(folder) == 0.99  # a run is done only when it is written
    seen: list[float] = []
    execute(spec, str(tmp_path), False, seen.append)
    assert seen and all(0 <= s <= 0.99 for s in seen)
    assert not (folder / PROGRESS_FILE).exists() and (folder / "run.json").exists()


def test_a_changed_study_reruns_only_what_changed(tmp_path):
    out = tmp_path / "out"
    sweep(load_study(SMALL), out, workers=1)
    changed = {**SMALL, "grid": {"workload.arrival.rate": [1, 2]}}
    log = []
    runs, _ = sweep(load_study(changed), out, workers=1, progress=lambda d, t, r, phase="": log.append(r))
    assert log[0] == 4  # the rate-1 runs are reused, the rate-2 ones run
    assert sorted(runs["workload.arrival.rate"].unique()) == [1, 2]


def test_sweeps_in_different_folders_do_not_collide_and_one_folder_is_locked(tmp_path):
    study = load_study(SMALL)
    results = {}

    def go(name):
        results[name] = sweep(study, tmp_path / name, workers=1)

    threads = [threading.Thread(target=go, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert drop_wall(results["a"][0]).equals(drop_wall(results["b"][0]))
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        ".sweep.lock",
        "points.parquet",
        "runs",
        "runs.parquet",
        "study.yaml",
    ]
    with sweep_lock(tmp_path / "a"), pytest.raises(SweepLocked):
        sweep(study, tmp_path / "a", workers=1)


def test_local_and_dask_backends_agree_exactly(tmp_path):
    pytest.importorskip("dask.distributed")
    study = load_study({**SMALL, "replications": 1})
    local_runs, local_points = sweep(study, tmp_path / "local", workers=2)
    dask_runs, dask_points = sweep(study, tmp_path / "dask", workers=2, backend="dask")
    assert drop_wall(local_runs).equals(drop_wall(dask_runs))
    assert drop_wall(local_points).equals(drop_wall(dask_points))


@pytest.mark.slow
def test_confidence_intervals_cover_the_md1_mean_at_the_stated_rate(tmp_path):
    # 40 independent studies of 4 replications each: their 95 % CIs of the mean queue
    # delay should cover the Pollaczek-Khinchine value about 95 % of the time.
    rate, s = 0.5, 1.0
    truth = rate * s**2 / (2 * (1 - rate * s))
    covered = 0
    k = 40
    for i in range(k):
        study = load_study({"name": f"md1-{i}", "base": md1(rate), "seed": 1000 + i, "replications": 4})
        _, points = sweep(study, tmp_path / f"s{i}", workers=1)
        p = points.iloc[0]
        covered += p["queue_delay_mean_lo"] <= truth <= p["queue_delay_mean_hi"]
    # binomial: 95 % of 40 is 38 with sd 1.4; three sds below is 33.9
    assert covered >= 34, f"{covered}/{k} intervals covered {truth}"


def test_capacity_finds_the_pollaczek_khinchine_rate_within_its_interval(tmp_path):
    path = tmp_path / "md1.yaml"
    import yaml

    path.write_text(yaml.safe_dump(md1(0.5, 6000, seed=3)))
    slo = 1.0  # Wq(λ) = λ s² / (2 (1 - λ s)) = 1 s  =>  λ = 2 W / (s (s + 2 W)) = 2/3
    truth = 2 * slo / (1.0 * (1.0 + 2 * slo))
    out = des_cli(
        "capacity",
        str(path),
        "--slo",
        f"queue_delay_mean<={slo}",
        "--replications",
        "5",
        "--json",
        "--workers",
        "2",
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["ci_low"] <= truth <= res["ci_high"], res
    assert res["ci_low"] <= res["capacity"] <= res["ci_high"]
    assert res["ci_high"] - res["ci_low"] < 0.1


def test_fewest_replicas_for_a_target_rate(tmp_path):
    sc = {**md1(0.5, 3000), "cluster": {"replicas": 1, "router": "least_outstanding"}}
    import yaml

    path = tmp_path / "md1.yaml"
    path.write_text(yaml.safe_dump(sc))
    out = des_cli(
        "capacity",
        str(path),
        "--slo",
        "queue_delay_mean<=0.5",
        "--replicas-for",
        "2.5",
        "--replications",
        "3",
        "--json",
        "--workers",
        "2",
    )
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    # 2.5 req/s of 1 s jobs: 2 servers are overloaded, 3 run at 83 % (queues too long), 4 at 62 %
    assert res["replicas"] == 4
    held = {e["value"]: e["holds"] for e in res["evaluations"]}
    assert held[4] and not held.get(3, False) and not held.get(2, False)


@pytest.mark.parametrize(
    "bad, path",
    [
        ({**SMALL, "replicas": 3}, "replicas"),
        (
            {**SMALL, "grid": {"workload.arrival.rate": [1, -2]}},
            "continuous/workload.arrival.rate=-2: workload.arrival.rate",
        ),
        (
            {**SMALL, "grid": {"workload.arrival.speed": [1]}},
            "continuous/workload.arrival.speed=1: workload.arrival.speed",
        ),
        ({**SMALL, "variants": {"x": {"scheduler": {"kind": "magic"}}}}, "x/workload.arrival.rate=1: scheduler.kind"),
        ({**SMALL, "base": "nope.yaml"}, "base.scenario"),
        ({**SMALL, "grid": {"workload.arrival.rate": []}}, "grid"),
    ],
)
def test_study_errors_name_the_field(bad, path):
    with pytest.raises(ScenarioError) as info:
        load_study(bad)
    assert path in [p for p, _ in info.value.problems], info.value.problems


def test_sweep_cli_and_the_analysis_scripts_on_a_small_sweep(tmp_path):
    import yaml

    study = tmp_path / "small.yaml"
    study.write_text(
        yaml.safe_dump(
            {
                **SMALL,
                "set": {**SMALL["set"], "workload.arrival": {"process": "gamma", "rate": 1.0, "cv": 1.0}},
                "grid": {"workload.arrival.cv": [1.0, 3.0], "workload.arrival.rate": [1, 3]},
            }
        )
    )
    out = tmp_path / "sweep"
    proc = des_cli("sweep", str(study), "--out", str(out), "--workers", "2")
    assert proc.returncode == 0, proc.stderr
    assert "16 runs" in proc.stdout
    from analysis import burstiness, capacity, latency_vs_load, throughput

    figs = tmp_path / "figs"
    for mod in (latency_vs_load, throughput, burstiness):
        png = mod.main([str(out), "--out", str(figs / f"{mod.__name__.split('.')[-1]}.png")])
        assert png.stat().st_size > 20_000
    caps = capacity.main([str(out)])
    assert set(caps["variant"]) == {"continuous", "static"}
    cont = caps[(caps["variant"] == "continuous") & (caps["workload.arrival.cv"] == 1.0)].iloc[0]
    assert cont["capacity"] == 3.0 and cont["holds_everywhere"]


def test_a_load_grid_gives_each_variant_its_own_rates_from_its_saturation(tmp_path):
    study = load_study(
        {
            "name": "load",
            "base": str(SCENARIOS / "qwen7b-4090-poisson.yaml"),
            "set": {"horizon.duration": 60, "warmup": 10, "horizon.drain": False},
            "variants": {"continuous": {}, "static": {"scheduler": {"kind": "static", "max_batch_size": 16}}},
            "load": {"fractions": [0.3, 1.2]},
        }
    )
    assert [p.run_id for p in study.probes] == ["continuous/saturation", "static/saturation"]
    runs, points = sweep(study, tmp_path / "out", workers=1)
    saturation = {
        v: json.loads((tmp_path / "out" / "runs" / v / "saturation" / "summary.json").read_text())["throughput_rps"]
        for v in ("continuous", "static")
    }
    assert saturation["static"] < saturation["continuous"] / 3
    for _, p in points.iterrows():
        assert p["workload.arrival.rate"] == pytest.approx(p["load"] * saturation[p["variant"]], rel=1e-3)
    # every curve runs from light load (stable) to past its own knee (unstable)
    for _, g in points.groupby("variant"):
        by_load = g.set_index("load")["all_stable"]
        assert by_load[0.3] and not by_load[1.2]
    with pytest.raises(ScenarioError) as info:
        load_study({**SMALL, "load": {"fractions": [0.5]}})
    assert info.value.problems[0][0] == "grid"


def test_analysis_scripts_read_a_single_run_folder(tmp_path):
    from analysis import cdf, latency_vs_load, throughput, timeline

    out = tmp_path / "run"
    proc = des_cli("run", "--set", "horizon.duration=60", "--set", "warmup=10", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    for mod in (cdf, timeline, latency_vs_load, throughput):
        png = mod.main([str(out), "--out", str(tmp_path / f"{mod.__name__}.png")])
        assert png.stat().st_size > 20_000


def test_capacity_readout_leaves_an_unreached_interval_end_open():
    from analysis import capacity

    rates = [1.0, 2.0, 4.0]
    points = pd.DataFrame(
        {
            "variant": "continuous",
            "workload.arrival.rate": rates,
            "all_stable": True,
            # means cross the limit 1 between 2 and 4 req/s; the lower bounds never do
            "ttft_p99": [0.2, 0.8, 1.6],
            "ttft_p99_lo": [0.1, 0.3, 0.6],
            "ttft_p99_hi": [0.4, 1.2, 3.0],
            "throughput_rps": rates,
        }
    )
    row = capacity.capacities(points, {"ttft_p99": 1.0}).iloc[0]
    assert 2.0 < row["capacity"] < 4.0
    assert row["ci_high"] is None
    assert "above the grid" in capacity.describe(row, {"ttft_p99": 1.0})


def test_capacity_readout_does_not_interpolate_towards_an_unstable_point():
    from analysis import capacity

    # at 4 req/s a replication was unstable while the latencies' means stayed within the
    # limit (a short overloaded run): the estimate stays at 2, the sure failure is at 4
    points = pd.DataFrame(
        {
            "variant": "continuous",
            "workload.arrival.rate": [1.0, 2.0, 4.0],
            "all_stable": [True, True, False],
            "ttft_p99": [0.2, 0.5, 0.9],
            "ttft_p99_lo": [0.1, 0.4, 0.7],
            "ttft_p99_hi": [0.3, 0.6, 1.2],
            "throughput_rps": [1.0, 2.0, 3.6],
        }
    )
    row = capacity.capacities(points, {"ttft_p99": 1.0}).iloc[0]
    assert (row["capacity"], row["ci_low"], row["ci_high"]) == (2.0, 2.0, 4.0)
    assert row["saturation"] != row["saturation"]  # a plain rate grid: no probe
    # nor towards an unstable point whose latencies did pass the limit: they measure the run
    beyond = points.assign(ttft_p99=[0.2, 0.5, 1.5], ttft_p99_lo=[0.1, 0.4, 1.2], ttft_p99_hi=[0.3, 0.6, 2.0])
    row = capacity.capacities(beyond, {"ttft_p99": 1.0}).iloc[0]
    assert (row["capacity"], row["ci_low"], row["ci_high"]) == (2.0, 2.0, 4.0)


def test_capacity_readout_of_a_load_grid_stays_within_the_probes_saturation():
    from analysis import capacity

    # a load grid at fractions of a probe's 10 req/s: the point at 1.1 is overloaded by
    # construction even though its (short) run passed the stability check and its means
    # look fine; between 0.5 and 0.9 the mean crosses the limit 1 at sqrt(0.5 * 2) = 1
    loads = [0.5, 0.9, 1.1]
    points = pd.DataFrame(
        {
            "variant": ["a"] * 3 + ["b"] * 3,
            "load": loads * 2,
            "workload.arrival.rate": [5.0, 9.0, 11.0] * 2,
            "all_stable": True,
            "ttft_p99": [0.5, 0.8, 0.9, 0.5, 2.0, 0.9],
            "ttft_p99_lo": [0.4, 0.6, 0.7, 0.4, 1.5, 0.7],
            "ttft_p99_hi": [0.6, 0.95, 1.1, 0.6, 2.5, 1.1],
            "throughput_rps": [5.0, 9.0, 10.0] * 2,
        }
    )
    caps = capacity.capacities(points, {"ttft_p99": 1.0}).set_index("variant")
    a, b = caps.loc["a"], caps.loc["b"]
    assert a["saturation"] == pytest.approx(10.0) and not a["holds_everywhere"]
    # a holds up to 0.9 x S; the point past S bounds it from above at S, not at 11
    assert (a["capacity"], a["ci_low"], a["ci_high"]) == pytest.approx((9.0, 9.0, 10.0))
    # b: log-interpolated crossings of the mean, the upper and the lower bounds
    t = lambda lo, hi: 5 + 4 * np.log(1 / lo) / np.log(hi / lo)  # noqa: E731
    assert b["capacity"] == pytest.approx(t(0.5, 2.0)) and b["capacity"] == pytest.approx(7.0)
    assert (b["ci_low"], b["ci_high"]) == pytest.approx((t(0.6, 2.5), t(0.4, 1.5)))
    by = capacity.capacities(points.assign(config="x"), {"ttft_p99": 1.0}, by=["config", "variant"])
    assert list(by["config"]) == ["x", "x"] and by["capacity"].tolist() == pytest.approx([9.0, 7.0])
    # a grid that stops below S with the SLO still holding: at least the top load, at most S
    below = capacity.capacities(points[points["load"] < 1], {"ttft_p99": 1.0}).set_index("variant").loc["a"]
    assert below["holds_everywhere"] and (below["capacity"], below["ci_high"]) == pytest.approx((9.0, 10.0))


def test_a_variant_naming_another_model_runs_it_in_its_own_format(tmp_path):
    # the base's precision is its model's own (bf16): a variant switching to gpt-oss-20b
    # gets gpt-oss's MXFP4; one that names a precision keeps it; a base that pins a
    # precision of its own passes it on
    # gpt-oss-20b with every weight in fp8 (20.6 GiB) fits a 4090 at 0.92 and 128 sequences, not
    # at vllm serve's 0.9 and 256 (a larger sampler peak), and its KV cache holds one sequence of 992 tokens
    engine = {"kind": "continuous", "gpu_memory_utilization": 0.92, "max_num_seqs": 128, "max_model_len": 512}
    base = {**md1(), "cost_model": {"kind": "roofline"}, "scheduler": engine}
    study = {"name": "s", "base": base, "variants": {"own": {}, "oss": {"model": "gpt-oss-20b"},
             "fp8": {"model": "qwen3-8b", "precision": {"weights": "fp8"}}}}  # fmt: skip
    runs = {r.variant: r.scenario for r in load_study(study, tmp_path).runs}
    assert runs["own"]["precision"]["weights"] == "bf16"
    assert runs["oss"]["precision"]["weights"] == "mxfp4"
    assert runs["fp8"]["precision"]["weights"] == "fp8"
    pinned = load_study({**study, "base": {**base, "precision": {"weights": "fp8"}}}, tmp_path).runs
    assert {r.variant: r.scenario["precision"]["weights"] for r in pinned}["own"] == "fp8"


def test_a_schedule_s_points_say_their_stability_does_not_apply(tmp_path, capsys):
    """Runs whose arrivals follow a schedule have no stability verdict (``stable`` null): their
    point says so (``stability_applies`` false), and the sweep's table prints n/a, not yes."""
    from des.render.study import points_table

    nhpp = {"process": "nhpp", "schedule": {"kind": "piecewise", "times": [0, 20, 40], "rates": [1, 3, 2]}}
    study = load_study(
        {
            **SMALL,
            "variants": {"scheduled": {"workload": {"arrival": nhpp}}, "poisson": {}},
            "grid": {},
            "replications": 1,
        }
    )
    runs, points = sweep(study, tmp_path / "out", workers=1)
    by = points.set_index("variant")
    assert runs.set_index("variant").loc["scheduled", "stable"] is None
    assert not by.loc["scheduled", "stability_applies"] and by.loc["poisson", "stability_applies"]
    points_table(points, [])
    rows = {line.split("│")[1].strip(): line for line in capsys.readouterr().out.splitlines() if line.startswith("│")}
    assert rows["scheduled"].rstrip("│ ").endswith("n/a") and rows["poisson"].rstrip("│ ").endswith("yes")
