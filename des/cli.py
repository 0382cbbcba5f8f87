"""The ``des`` command.

``des run [SCENARIO] [--out DIR] [--seed N] [--set dotted.key=value ...]`` simulates a
scenario (the embedded default when none is given), prints a summary and writes the
results folder. Invalid input prints ``error: <dotted.path>: <problem>`` lines on
stderr and exits with status 2, writing nothing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from des.errors import ScenarioError

err_console = Console(stderr=True)


def _console() -> Console:
    """stdout console; wide enough for the tables when not a terminal (pipes, logs)."""
    c = Console()
    return c if c.is_terminal else Console(width=150)


def _fail(exc: ScenarioError) -> None:
    for line in exc.lines():
        click.echo(line, err=True)
    sys.exit(2)


class _Group(click.Group):
    """Usage errors (unknown option, bad value) print one ``error:`` line and exit 2."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        try:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Abort:
            click.echo("aborted", err=True)
            sys.exit(130)
        except click.UsageError as exc:
            msg = exc.format_message().replace("\n", " ")
            click.echo(f"error: {msg}", err=True)
            sys.exit(2)
        except click.ClickException as exc:
            click.echo(f"error: {exc.format_message()}", err=True)
            sys.exit(exc.exit_code)


@click.group(cls=_Group)
@click.version_option(package_name="des")
def main() -> None:
    """des: discrete-event simulation of LLM inference serving."""


@main.command()
@click.argument("scenario", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Results folder (default: results/<scenario name>/).",
)
@click.option("--seed", type=int, default=None, help="Override the scenario's seed.")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a scenario field, e.g. --set workload.arrival.rate=3.5 (repeatable).",
)
@click.option("--quiet", is_flag=True, help="Print nothing but errors.")
def run(scenario: Path | None, out_dir: Path | None, seed: int | None, overrides: tuple[str, ...], quiet: bool) -> None:
    """Simulate SCENARIO (default: the embedded RTX 4090 + Qwen2.5-7B scenario)."""
    from des.output import check_writable, write_result
    from des.scenario import load_scenario, scenario_warnings
    from des.simulation import simulate

    items: list = list(overrides)
    if seed is not None:
        if seed < 0:
            _fail(ScenarioError(("--seed", f"must be >= 0 (got {seed})")))
        items.append(("seed", seed))
    try:
        sc = load_scenario(scenario, items)
    except ScenarioError as exc:
        _fail(exc)
    for note in scenario_warnings(sc):
        err_console.print(f"[yellow]warning:[/] {note}", highlight=False)
    out_dir = out_dir or Path("results") / sc.name
    try:
        check_writable(out_dir)
    except OSError as exc:
        _fail(ScenarioError(("--out", f"cannot write to {str(out_dir)!r}: {exc}")))

    t0 = time.perf_counter()
    progress_cb, progress_ctx = _progress(quiet)
    with progress_ctx:
        result = simulate(sc, progress=progress_cb)
    wall = time.perf_counter() - t0
    try:
        write_result(result, out_dir)
    except OSError as exc:
        _fail(ScenarioError(("--out", f"cannot write to {str(out_dir)!r}: {exc.strerror or exc}")))
    if not quiet:
        _print_summary(sc, result.summary, wall, out_dir)


@main.command()
@click.option("--gpu", "gpu_name", default="rtx4090", show_default=True, help="Catalog GPU.")
@click.option("--model", "model_name", default="qwen2.5-7b", show_default=True, help="Catalog model.")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True, help="Tensor-parallel GPUs.")
@click.option(
    "--weights", default="bf16", show_default=True, help="Weight format (bf16, fp8, int8, int4-awq, int4-gptq)."
)
@click.option("--kv-cache-dtype", default="bf16", show_default=True, help="KV cache format (bf16, fp8).")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Draw step time vs batch size on a roofline into this PNG.",
)
def costmodel(
    gpu_name: str, model_name: str, tp: int, weights: str, kv_cache_dtype: str, plot_path: Path | None
) -> None:
    """Tabulate the roofline step-time model of a GPU and model."""
    from pydantic import ValidationError

    from des import catalog
    from des.catalog.memory import Precision
    from des.costmodel import CostReport

    try:
        gpu, model = catalog.gpu(gpu_name), catalog.model(model_name)
    except ScenarioError as exc:
        _fail(ScenarioError([(f"--{p}", m) for p, m in exc.problems]))
    try:
        precision = Precision.model_validate({"weights": weights, "kv_cache_dtype": kv_cache_dtype})
    except ValidationError as exc:
        err = exc.errors()[0]
        flag = "--weights" if err["loc"][0] == "weights" else "--kv-cache-dtype"
        _fail(ScenarioError((flag, f"{err['msg'].lower()} (got {err['input']!r})")))
    try:
        rep = CostReport.build(gpu, model, precision, tp)
        facts = rep.facts()
    except ScenarioError as exc:
        _fail(exc)
    console = _console()
    gib = 1 << 30
    head = Table.grid(padding=(0, 2))
    head.add_row(
        "model",
        f"{model.name}: {facts['params'] / 1e9:.2f} B parameters, {precision.weights} weights "
        f"{facts['weight_bytes'] / gib:.2f} GiB, "
        f"KV {facts['kv_bytes_per_token']:,} bytes/token ({precision.kv_cache_dtype})",
    )
    head.add_row(
        "gpu",
        f"{tp} x {gpu.name}: {gpu.peak_flops(precision.compute_dtype) / 1e12:.1f} TFLOP/s "
        f"{precision.compute_dtype}, {gpu.memory_bandwidth / 1e9:.0f} GB/s, {gpu.memory_bytes / gib:.1f} GiB; "
        f"GEMMs at {gpu.efficiency.gemm_compute:.2f} of peak, weights at {gpu.efficiency.weight_bandwidth:.2f} "
        f"of bandwidth (knee {gpu.efficiency.gemm_knee:.2f}), CPU {gpu.efficiency.step_overhead * 1e3:.2g} ms/step",
    )
    head.add_row("ridge", f"{facts['ridge_tokens']:.0f} tokens per step (compute overtakes weight reads)")
    head.add_row(
        "kv", f"{facts['kv_tokens_0.90']:,} tokens at gpu_memory_utilization 0.90, {facts['kv_tokens_0.92']:,} at 0.92"
    )
    console.print(head)
    dec = Table(title="decode step (ms) and output tokens/s, by batch size and context", title_justify="left")
    dec.add_column("batch", justify="right")
    for c in (512, 2048, 8192):
        dec.add_column(f"ms @{c}", justify="right")
        dec.add_column(f"tok/s @{c}", justify="right")
    for row in rep.decode_table():
        cells = [str(row["batch"])]
        for c in (512, 2048, 8192):
            cells += [f"{row[f'ms@{c}']:.2f}", f"{row[f'tok/s@{c}']:,.0f}"]
        dec.add_row(*cells)
    console.print(dec)
    pre = Table(title="prefill of one prompt in one step", title_justify="left")
    for col in ("prompt tokens", "ms", "tok/s"):
        pre.add_column(col, justify="right")
    for row in rep.prefill_table():
        pre.add_row(f"{row['prompt']:,}", f"{row['ms']:.1f}", f"{row['tok/s']:,.0f}")
    console.print(pre)
    if plot_path is not None:
        try:
            rep.plot(plot_path)
        except OSError as exc:
            _fail(ScenarioError(("--plot", f"cannot write {str(plot_path)!r}: {exc.strerror or exc}")))
        console.print(f"wrote {plot_path}", highlight=False)


@main.command()
@click.argument("study_path", metavar="STUDY", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Results folder (default: results/<study name>/).",
)
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Parallel runs (default: all cores).")
@click.option("--backend", type=click.Choice(["local", "dask"]), default="local", show_default=True)
@click.option("--address", default=None, help="tcp://host:port of a dask scheduler (default: a LocalCluster).")
@click.option("--quiet", is_flag=True, help="Print nothing but errors.")
def sweep(
    study_path: Path, out_dir: Path | None, workers: int | None, backend: str, address: str | None, quiet: bool
) -> None:
    """Run every variant x grid point x replication of STUDY; write runs.parquet and points.parquet."""
    from des.output import check_writable
    from des.study import load_study
    from des.study import sweep as run_sweep
    from des.study.runner import SweepLocked

    try:
        study = load_study(study_path)
    except ScenarioError as exc:
        _fail(exc)
    out_dir = out_dir or Path("results") / study.spec.name
    try:
        check_writable(out_dir)
    except OSError as exc:
        _fail(ScenarioError(("--out", f"cannot write to {str(out_dir)!r}: {exc}")))
    progress_cb, ctx = _count_progress(quiet, "runs")
    t0 = time.perf_counter()
    try:
        with ctx:
            runs, points = run_sweep(
                study, out_dir, workers=workers, backend=backend, address=address, progress=progress_cb
            )
    except SweepLocked as exc:
        _fail(ScenarioError(("--out", str(exc))))
    if not quiet:
        _print_points(points, study.grid_keys)
        console = _console()
        console.print(
            f"{len(runs)} runs ({len(points)} points x {study.spec.replications} replications) in "
            f"{time.perf_counter() - t0:.1f} s; wrote {out_dir}/runs.parquet and points.parquet",
            highlight=False,
        )


def _print_points(points, grid_keys) -> None:
    table = Table(title="mean over replications [95 % CI]", title_justify="left")
    for col in ("variant", *grid_keys, "throughput_rps", "ttft_p99", "tpot_p50", "e2e_p99", "stable"):
        table.add_column(col, justify="left" if col == "variant" else "right")

    def ci(p, m) -> str:
        if p[m] != p[m]:
            return "-"
        if p[f"{m}_lo"] == p[f"{m}_lo"]:
            return f"{p[m]:.3g} [{p[f'{m}_lo']:.3g}, {p[f'{m}_hi']:.3g}]"
        return f"{p[m]:.3g}"

    for _, p in points.iterrows():
        table.add_row(
            str(p["variant"]),
            *(str(p[k]) for k in grid_keys),
            *(ci(p, m) for m in ("throughput_rps", "ttft_p99", "tpot_p50", "e2e_p99")),
            "yes" if p["all_stable"] else "NO",
        )
    _console().print(table)


@main.command()
@click.argument("scenario", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--slo",
    "slos",
    multiple=True,
    required=True,
    metavar="METRIC<=VALUE",
    help="An objective on a summary metric, e.g. ttft_p99<=2 (repeatable; all must hold).",
)
@click.option(
    "--param",
    default="workload.arrival.rate",
    show_default=True,
    help="The parameter to push as high as the SLOs allow.",
)
@click.option("--low", type=float, default=None, help="A value at which the SLOs hold (default: start / 8).")
@click.option("--high", type=float, default=None, help="A first upper value to try (default: the scenario's).")
@click.option(
    "--replicas-for",
    "target_rate",
    type=float,
    default=None,
    help="Instead: the fewest cluster.replicas that carry this arrival rate (req/s).",
)
@click.option("--replications", type=click.IntRange(min=1), default=5, show_default=True)
@click.option(
    "--tolerance",
    type=click.FloatRange(min=1e-4, max=0.5),
    default=0.02,
    show_default=True,
    help="Relative width at which bisection stops.",
)
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Parallel runs (default: all cores).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a scenario field.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (for scripts).")
def capacity(scenario, slos, param, low, high, target_rate, replications, tolerance, workers, overrides, as_json):
    """The highest PARAM (default: arrival rate) at which every SLO holds, with a 95 % CI."""
    import json as jsonlib

    from des.scenario import load_scenario
    from des.study.capacity import (
        Search,
        SummaryPool,
        find_capacity,
        find_min_replicas,
        metric_names,
        parse_slo,
    )
    from des.study.sweep import default_workers

    try:
        sc = load_scenario(scenario, list(overrides))
        terms = [parse_slo(s, metric_names()) for s in slos]
        base = sc.resolved()
        if target_rate is not None:
            if target_rate <= 0:
                raise ScenarioError(("--replicas-for", f"must be > 0 (got {target_rate})"))
            base = load_scenario(base, [("workload.arrival.rate", target_rate)]).resolved()
            param = "cluster.replicas"
        else:
            load_scenario(base, [(param, _probe_value(base, param))])
    except ScenarioError as exc:
        _fail(exc)
    quiet = as_json
    console = Console(stderr=True)

    def show(ev) -> None:
        if not quiet:
            verdict = (
                "surely holds"
                if ev.surely_holds
                else "holds"
                if ev.holds
                else "surely fails"
                if ev.surely_fails
                else "fails"
            )
            ms = ", ".join(f"{k} {v[0]:.3g} [{v[1]:.3g}, {v[2]:.3g}]" for k, v in ev.metrics.items())
            console.print(f"  {param} = {ev.value:g}: {ms}; {verdict}", highlight=False)

    with SummaryPool(workers or default_workers()) as pool:
        search = Search(
            base, param, terms, replications, pool, integer=target_rate is not None, seed=base["seed"], on_eval=show
        )
        try:
            if target_rate is not None:
                result = find_min_replicas(search, start=int(base["cluster"]["replicas"]))
            else:
                result = find_capacity(search, low, high, tolerance)
        except ScenarioError as exc:
            _fail(exc)
    if as_json:
        click.echo(jsonlib.dumps(result, indent=2, default=float))
        return
    key = "replicas" if target_rate is not None else "capacity"
    value = result[key]
    out = _console()
    if value is None:
        out.print(f"no answer: {result['note']}", highlight=False)
        sys.exit(1)
    what = f"fewest replicas carrying {target_rate:g} req/s" if target_rate is not None else f"capacity ({param})"
    ci = f"95 % CI [{_fmt(result['ci_low'])}, {_fmt(result['ci_high'])}]"
    out.print(
        f"{what} under {' and '.join(result['slos'])}: {value:.4g}  {ci}  "
        f"({result['replications']} replications per value, {len(result['evaluations'])} values tried)",
        highlight=False,
    )


def _probe_value(base: dict, dotted: str):
    from des.dotted import get_dotted

    try:
        node = get_dotted(base, dotted)
    except KeyError:
        raise ScenarioError(("--param", f"{dotted!r} is not a field of the scenario")) from None
    if isinstance(node, bool) or not isinstance(node, int | float):
        raise ScenarioError(("--param", f"{dotted!r} is {node!r}, not a number"))
    return node


def _count_progress(quiet: bool, unit: str):
    from contextlib import nullcontext

    if quiet or not err_console.is_terminal:
        return None, nullcontext()
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("sweeping"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
    )
    task = bar.add_task("sweep", total=None)

    def update(done: int, total: int, reused: int) -> None:
        bar.update(task, completed=done, total=total)

    return update, bar


def _progress(quiet: bool):
    """A progress bar on stderr when it is a terminal: simulated share of the arrival
    horizon, then the requests left while the run drains."""
    from contextlib import nullcontext

    if quiet or not err_console.is_terminal:
        return None, nullcontext()
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[now]:>10,.1f} s simulated"),
        TextColumn("{task.fields[n]:>8,} requests"),
        TextColumn("{task.fields[note]}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )
    task = bar.add_task("simulating", total=1.0, now=0.0, n=0, note="")

    def update(p) -> None:
        frac = p.fraction
        if p.draining:
            bar.update(
                task, description="draining", completed=1.0, now=p.now, n=p.arrived, note=f"{p.in_system:,} left"
            )
        else:
            bar.update(
                task,
                completed=frac,
                total=None if frac is None else 1.0,
                now=p.now,
                n=p.arrived,
                note=f"{p.in_system:,} in system",
            )

    return update, bar


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, int):
        return f"{v:,}"
    if abs(v) >= 100:
        return f"{v:,.1f}"
    return f"{v:.4g}"


def _print_summary(sc, s: dict, wall: float, out_dir: Path) -> None:
    console = _console()
    head = Table.grid(padding=(0, 2))
    head.add_row("scenario", f"{sc.name}  (seed {sc.seed})")
    head.add_row(
        "hardware",
        f"{sc.cluster.replicas} x {sc.cluster.tp} x {sc.gpu.name}, {sc.model.name}, "
        f"{sc.scheduler.kind} batching, {sc.cost_model.kind} cost",
    )
    head.add_row(
        "requests",
        f"{s['num_requests']:,} arrived: {s['num_completed']:,} completed, "
        f"{s['num_rejected']:,} rejected, {s['num_unfinished']:,} unfinished",
    )
    head.add_row(
        "load",
        f"offered {_fmt(s['offered_rps'])} req/s, throughput {_fmt(s['throughput_rps'])} req/s, "
        f"{_fmt(s['output_tokens_per_s'])} output tok/s",
    )
    head.add_row(
        "engine",
        f"GPU busy {_fmt(s['gpu_busy_fraction'])}, mean batch {_fmt(s['mean_batch_size'])}, "
        f"{s['preemptions']:,} preemptions, KV capacity {s['kv_capacity_tokens']:,} tokens",
    )
    head.add_row("stable", f"{_fmt(s['stable'])} (backlog growth {s['backlog_growth']:.3f} of arrivals)")
    console.print(head)
    table = Table(title="latency (seconds)", title_justify="left")
    table.add_column("metric")
    for col in ("mean", "p50", "p90", "p95", "p99"):
        table.add_column(col, justify="right")
    for name in ("ttft", "tpot", "e2e", "queue_delay"):
        table.add_row(name, *(_fmt(s[f"{name}_{c}"]) for c in ("mean", "p50", "p90", "p95", "p99")))
    console.print(table)
    console.print(
        f"wrote {out_dir}/ (requests.parquet, steps.parquet, summary.json, scenario.yaml) in {wall:.2f} s",
        highlight=False,
    )


@main.command()
@click.argument("profile_dir", metavar="PROFILE_DIR", type=click.Path(path_type=Path))
@click.option("--gpu", "gpu_name", required=True, help="Catalog GPU the profile was measured on (its spec sheet).")
@click.option("--model", "model_name", required=True, help="Catalog model whose shapes the profile measured.")
@click.option(
    "--out",
    "out_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Calibration file to write (default: <gpu>.calibration.yaml).",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Figure of predicted against measured time per op group (default: --out with .png).",
)
def calibrate(profile_dir: Path, gpu_name: str, model_name: str, out_path: Path | None, plot_path: Path | None) -> None:
    """Fit the roofline's efficiency factors to the kernel profile in PROFILE_DIR."""
    from des.calibrate import run_calibration

    try:
        run_calibration(profile_dir, gpu_name, model_name, out_path, plot_path, _console())
    except ScenarioError as exc:
        _fail(exc)


@main.command()
@click.argument("result", metavar="RESULT", type=click.Path(path_type=Path))
@click.argument("scenario", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "vllm-bench", "csv", "jsonl"]),
    default="auto",
    show_default=True,
    help="RESULT's format (auto: by suffix, .json is a vllm bench serve result).",
)
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override an engine field (repeatable).")
@click.option("--seed", type=int, default=None, help="Seed (routing; arrivals drawn when RESULT has no send times).")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for comparison.json, cdf.png, the replay (default: results/compare-<RESULT name>/).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the errors as JSON (for scripts).")
def compare(
    result: Path,
    scenario: Path | None,
    fmt: str,
    overrides: tuple[str, ...],
    seed: int | None,
    out_dir: Path | None,
    as_json: bool,
) -> None:
    """Replay the requests of a measured run (RESULT) through des on SCENARIO's engine and compare."""
    from des.compare import run_compare

    try:
        run_compare(result, scenario, fmt, overrides, seed, out_dir, as_json, _console())
    except ScenarioError as exc:
        _fail(exc)


if __name__ == "__main__":
    main()
