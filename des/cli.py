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
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Results folder (default: results/<scenario name>/).")
@click.option("--seed", type=int, default=None, help="Override the scenario's seed.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override a scenario field, e.g. --set workload.arrival.rate=3.5 (repeatable).")
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
@click.option("--weights", default="bf16", show_default=True, help="Weight format (bf16, fp8, int8, int4-awq, int4-gptq).")
@click.option("--kv-cache-dtype", default="bf16", show_default=True, help="KV cache format (bf16, fp8).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Draw step time vs batch size on a roofline into this PNG.")
def costmodel(gpu_name: str, model_name: str, tp: int, weights: str, kv_cache_dtype: str, plot_path: Path | None) -> None:
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
        precision = Precision(weights=weights, kv_cache_dtype=kv_cache_dtype)
    except ValidationError as exc:
        err = exc.errors()[0]
        flag = "--weights" if err["loc"][0] == "weights" else "--kv-cache-dtype"
        _fail(ScenarioError((flag, f"{err['msg'].lower()} (got {err['input']!r})")))
    try:
        rep = CostReport.build(gpu, model, precision, tp)
        facts = rep.facts()
    except ScenarioError as exc:
        _fail(exc)
    console = Console()
    gib = 1 << 30
    head = Table.grid(padding=(0, 2))
    head.add_row("model", f"{model.name}: {facts['params'] / 1e9:.2f} B parameters, {precision.weights} weights "
                 f"{facts['weight_bytes'] / gib:.2f} GiB, KV {facts['kv_bytes_per_token']:,} bytes/token ({precision.kv_cache_dtype})")
    head.add_row("gpu", f"{tp} x {gpu.name}: {gpu.peak_flops(precision.compute_dtype) / 1e12:.1f} TFLOP/s "
                 f"{precision.compute_dtype}, {gpu.memory_bandwidth / 1e9:.0f} GB/s, {gpu.memory_bytes / gib:.1f} GiB; "
                 f"mfu {gpu.efficiency.mfu_prefill}/{gpu.efficiency.mfu_decode}, mbu {gpu.efficiency.mbu}, "
                 f"overhead {gpu.efficiency.step_overhead * 1e3:.1f} ms/step")
    head.add_row("ridge", f"{facts['ridge_tokens']:.0f} tokens per step (compute overtakes weight reads)")
    head.add_row("kv", f"{facts['kv_tokens_0.90']:,} tokens at gpu_memory_utilization 0.90, "
                 f"{facts['kv_tokens_0.92']:,} at 0.92")
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


def _progress(quiet: bool):
    from contextlib import nullcontext

    if quiet or not err_console.is_terminal:
        return None, nullcontext()
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    bar = Progress(
        TextColumn("simulating"), BarColumn(), TextColumn("{task.fields[now]:>9.1f} s simulated"),
        TextColumn("{task.fields[n]} requests"), TimeRemainingColumn(), console=err_console, transient=True,
    )
    task = bar.add_task("sim", total=1.0, now=0.0, n=0)

    def update(now: float, horizon: float, n: int) -> None:
        bar.update(task, completed=min(now / horizon, 1.0) if horizon else 1.0, now=now, n=n)

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
    console = Console()
    head = Table.grid(padding=(0, 2))
    head.add_row("scenario", f"{sc.name}  (seed {sc.seed})")
    head.add_row("hardware", f"{sc.cluster.replicas} x {sc.cluster.tp} x {sc.gpu.name}, {sc.model.name}, "
                 f"{sc.scheduler.kind} batching, {sc.cost_model.kind} cost")
    head.add_row("requests", f"{s['num_requests']:,} arrived: {s['num_completed']:,} completed, "
                 f"{s['num_rejected']:,} rejected, {s['num_unfinished']:,} unfinished")
    head.add_row("load", f"offered {_fmt(s['offered_rps'])} req/s, throughput {_fmt(s['throughput_rps'])} req/s, "
                 f"{_fmt(s['output_tokens_per_s'])} output tok/s")
    head.add_row("engine", f"GPU busy {_fmt(s['gpu_busy_fraction'])}, mean batch {_fmt(s['mean_batch_size'])}, "
                 f"{s['preemptions']:,} preemptions, KV capacity {s['kv_capacity_tokens']:,} tokens")
    head.add_row("stable", f"{_fmt(s['stable'])} (backlog growth {s['backlog_growth']:.3f} of arrivals)")
    console.print(head)
    table = Table(title="latency (seconds)", title_justify="left")
    table.add_column("metric")
    for col in ("mean", "p50", "p90", "p95", "p99"):
        table.add_column(col, justify="right")
    for name in ("ttft", "tpot", "e2e", "queue_delay"):
        table.add_row(name, *(_fmt(s[f"{name}_{c}"]) for c in ("mean", "p50", "p90", "p95", "p99")))
    console.print(table)
    console.print(f"wrote {out_dir}/ (requests.parquet, steps.parquet, summary.json, scenario.yaml) "
                  f"in {wall:.2f} s", highlight=False)


if __name__ == "__main__":
    main()
