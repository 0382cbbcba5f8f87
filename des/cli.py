"""The ``des`` command: each subcommand parses its flags, calls the library, renders.

``des run [SCENARIO] [--out DIR] [--seed N] [--set dotted.key=value ...]
[--model-uncertainty]`` simulates a scenario (the embedded default when none is given),
prints a summary and writes the results folder; ``des sweep STUDY`` runs a study; ``des capacity`` searches for the
highest load within SLOs; ``des costmodel`` tabulates the roofline; ``des calibrate``,
``des compare`` and ``des bench`` run the tools of :mod:`des.tools`; ``des ui`` serves the
what-if page (:mod:`des.ui`). Invalid input
prints ``error: <dotted.path or --flag>: <problem>`` lines on stderr and exits with
status 2, writing nothing (:func:`user_errors`). Ctrl-C exits 130 (``aborted``) and
SIGTERM 143 (``terminated``), a sweep's workers ended first (:class:`_Group`). What is
shown lives in :mod:`des.render`, a module per command.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

import click

from des.errors import ScenarioError
from des.ui import DEFAULT_PORT as UI_PORT

if TYPE_CHECKING:
    from des.catalog.precision import Precision
    from des.catalog.specs import GPUSpec, ModelSpec
    from des.scenario import Scenario

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(writes: str = "--out") -> Callable[[F], F]:
    """Turn ``ScenarioError`` and ``OSError`` into ``error:`` lines on stderr and exit status 2;
    an ``OSError`` is blamed on the flag naming what the command ``writes``."""

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            try:
                return command(*args, **kwargs)
            except ScenarioError as exc:
                lines = exc.lines()
            except OSError as exc:
                lines = [f"error: {writes}: {exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")]
            for line in lines:
                click.echo(line, err=True)
            sys.exit(2)

        return wrapper  # type: ignore[return-value]

    return decorate


class _Group(click.Group):
    """Usage errors (unknown option, bad value) print one ``error:`` line and exit 2.
    Ctrl-C (SIGINT) prints ``aborted`` and exits 130; SIGTERM prints ``terminated`` and
    exits 143 (128 + 15, as a shell reports it), after the same clean-up
    (:mod:`des.interrupt`)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        from des.interrupt import Terminated, check, sigterm_raises

        with sigterm_raises():
            try:
                value = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
                check()  # a SIGTERM whose exception was lost on the way
                return value
            except Terminated as exc:
                click.echo("terminated", err=True)
                sys.exit(exc.code)
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


def _scenario(
    path: Path | None,
    overrides: Sequence[str],
    seed: int | None = None,
    model_uncertainty: bool = False,
    hardware: bool = True,
) -> Scenario:
    """The scenario at ``path`` (the embedded default when None) with ``--set``, ``--seed``
    and ``--model-uncertainty``; ``hardware=False``: not checked against its own GPUs
    (:func:`des.scenario.load_scenario`), for ``des plan``, which deploys it on others."""
    from des.scenario import load_scenario, read_yaml
    from des.study.spec import is_study

    if path is not None and is_study(read_yaml(path)):
        raise ScenarioError(("scenario", f"{str(path)!r} is a study, not a scenario: run it with `des sweep {path}`"))
    items: list[str | tuple[str, Any]] = list(overrides)
    if _seed(seed) is not None:
        items.append(("seed", seed))
    if model_uncertainty:
        items.append(("model_uncertainty", True))
    return load_scenario(path, items, hardware=hardware)


def _seed(seed: int | None) -> int | None:
    """``--seed``, which must be >= 0 when given."""
    if seed is not None and seed < 0:
        raise ScenarioError(("--seed", f"must be >= 0 (got {seed})"))
    return seed


def _writable(out_dir: Path) -> Path:
    """``out_dir``, once it is known to be creatable and writable (before a long run)."""
    from des.output import check_writable

    try:
        check_writable(out_dir)
    except OSError as exc:
        raise ScenarioError(("--out", f"cannot write to {str(out_dir)!r}: {exc}")) from None
    return out_dir


def _default_folder(name: str) -> Path:
    """``results/<name>/``, where a command writes without ``--out``. A name that would put
    that folder anywhere but inside ``results/`` is refused (it is then a path, not a
    name); a nested name (``study/variant/r0``, as a sweep names its runs) stays nested."""
    parts = Path(name).parts
    if "\0" in name:
        why = "holds a NUL character"
    elif Path(name).is_absolute():
        why = "is an absolute path"
    elif ".." in parts:
        why = "has a '..' part"
    elif not parts:
        why = "names no folder"
    else:
        return Path("results") / name
    where = "the results folder without --out, results/<name>/, must be a folder inside results/"
    raise ScenarioError(("name", f"{name!r} {why}: {where}; give --out DIR or another name"))


OUT = click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Results folder (default: results/NAME/).",
)
SET = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a scenario field, e.g. --set workload.arrival.rate=3.5 (repeatable; paths are relative to here).",
)
WORKERS = click.option(
    "--workers", type=click.IntRange(min=1), default=None, help="Parallel runs (default: all cores)."
)
BACKEND = click.option("--backend", type=click.Choice(["local", "dask"]), default="local", show_default=True)
ADDRESS = click.option("--address", default=None, help="tcp://host:port of a dask scheduler (default: a LocalCluster).")
QUIET = click.option("--quiet", is_flag=True, help="Print nothing but errors.")
MODEL_UNCERTAINTY = click.option(
    "--model-uncertainty",
    is_flag=True,
    help="Draw the step-time model's error from the GPUs' stated uncertainty (model_uncertainty: true).",
)
SLOS = click.option(
    "--slo",
    "slos",
    multiple=True,
    required=True,
    metavar="'METRIC<=VALUE'",
    help="An objective on a summary metric, e.g. --slo 'ttft_p99<=2' (quoted: the shell reads < and >; "
    "repeatable; all must hold).",
)
SCENARIO = click.argument("scenario", required=False, type=click.Path(dir_okay=False, path_type=Path))


@main.command()
@SCENARIO
@OUT
@click.option("--seed", type=int, default=None, help="Override the scenario's seed.")
@SET
@click.option(
    "--steps",
    type=click.Choice(["all", "sampled", "none"]),
    default="all",
    show_default=True,
    help="Rows of steps.parquet: every GPU step, a systematic sample of at most 100,000, or no file.",
)
@MODEL_UNCERTAINTY
@QUIET
@user_errors()
def run(
    scenario: Path | None,
    out_dir: Path | None,
    seed: int | None,
    overrides: tuple[str, ...],
    steps: str,
    model_uncertainty: bool,
    quiet: bool,
) -> None:
    """Simulate SCENARIO (default: the embedded RTX 4090 + Qwen2.5-7B scenario)."""
    from des.output import RESULT_FILES, folder_lock, remove_stale_staging, write_result
    from des.render.console import warning
    from des.render.progress import progress
    from des.render.run import run_summary
    from des.scenario import scenario_warnings
    from des.simulation import simulate

    sc = _scenario(scenario, overrides, seed, model_uncertainty)
    for note in scenario_warnings(sc):
        warning(note)
    out_dir = _writable(out_dir or _default_folder(sc.name))
    t0 = time.perf_counter()
    tick, bar = progress("run", quiet)
    # the folder's lock, as a sweep's: refused while a sweep, a capacity search or another
    # run writes there; a run that fails or is interrupted leaves no folder it created
    with folder_lock(out_dir, "run", tidy=True):
        remove_stale_staging(out_dir, RESULT_FILES)
        with bar:
            result = simulate(sc, progress=tick)
        written = write_result(result, out_dir, steps=steps)
    if not quiet:
        run_summary(sc, result, time.perf_counter() - t0, out_dir, [p.name for p in written])


@main.command()
@click.option(
    "--cases",
    default="10k,50k,static,bursty,prefix-cached,disaggregated",
    show_default=True,
    help="Comma-separated cases: 10k, 50k, 1m, static, bursty, prefix-cached, disaggregated, smoke.",
)
@click.option("--engines", default="fast,reference", show_default=True, help="fast, reference or both.")
@click.option("--repeats", type=click.IntRange(min=1), default=3, show_default=True, help="Runs per case and engine.")
@click.option("--json", "as_json", type=click.Path(dir_okay=False, path_type=Path), help="Also write the table here.")
@user_errors("--json")
def bench(cases: str, engines: str, repeats: int, as_json: Path | None) -> None:
    """Time des on standard workloads: whole-process wall time, requests and steps per second, peak memory."""
    from des.render.tools import bench_line, bench_table
    from des.tools.bench import CASES, ENGINES
    from des.tools.bench import bench as run_bench

    chosen = _choices("--cases", cases, list(CASES))
    motors = _choices("--engines", engines, list(ENGINES))
    measures = run_bench(chosen, motors, repeats, progress=bench_line)
    bench_table(measures)
    if as_json is not None:
        import json

        as_json.write_text(json.dumps([m.row() for m in measures], indent=2) + "\n")


def _ints(flag: str, text: str | None) -> list[int] | None:
    """Comma-separated positive integers (None when not given); anything else names the flag."""
    if text is None:
        return None
    try:
        values = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise ScenarioError((flag, f"expected positive integers separated by commas, got {text!r}")) from None
    if not values or min(values) < 1:
        raise ScenarioError((flag, f"expected positive integers separated by commas, got {text!r}"))
    return values


def _choices(flag: str, text: str, valid: list[str]) -> list[str]:
    """The comma-separated names of ``text``, each one of ``valid``; an unknown one names the flag."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in valid]
    if unknown or not names:
        raise ScenarioError((flag, f"unknown {', '.join(unknown) or 'empty list'}; valid: {', '.join(valid)}"))
    return names


@main.command()
@click.option("--gpu", "gpu_name", default="rtx4090", show_default=True, help="Catalog GPU.")
@click.option("--model", "model_name", default="qwen2.5-7b", show_default=True, help="Catalog model.")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True, help="Tensor-parallel GPUs.")
@click.option(
    "--weights",
    default=None,
    help="Weight format (bf16, fp16, fp8, int8, int4-awq, int4-gptq, mxfp4, nvfp4); default: the model's own (bf16 "
    "unless its catalog entry names a default_precision).",
)
@click.option("--kv-cache-dtype", default="bf16", show_default=True, help="KV cache format (bf16, fp8).")
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Draw step time vs batch size on a roofline into this PNG.",
)
@user_errors("--plot")
def costmodel(
    gpu_name: str, model_name: str, tp: int, weights: str | None, kv_cache_dtype: str, plot_path: Path | None
) -> None:
    """Tabulate the roofline step-time model of a GPU and model."""
    from des.render.console import wrote
    from des.render.tools import cost_report
    from des.tools.costmodel import CostReport

    rep = CostReport.build(*_hardware(gpu_name, model_name, weights, kv_cache_dtype), tp)
    cost_report(rep)
    if plot_path is not None:
        from des.figures.tools import plot_roofline

        plot_roofline(rep, plot_path)
        wrote(plot_path)


def _hardware(
    gpu_name: str, model_name: str, weights: str | None, kv_cache_dtype: str
) -> tuple[GPUSpec, ModelSpec, Precision]:
    """Catalog GPU, model and precision from flags (no ``--weights``: the model's own format);
    problems name the flag."""
    from pydantic import ValidationError

    from des.catalog.memory import with_native
    from des.catalog.precision import Precision

    gpu, model = _specs(gpu_name, model_name)
    given = {"kv_cache_dtype": kv_cache_dtype} | ({"weights": weights} if weights is not None else {})
    try:
        precision = Precision.model_validate(with_native(model.default_precision, given))
    except ValidationError as exc:
        err = exc.errors()[0]
        flag = "--weights" if err["loc"][0] == "weights" else "--kv-cache-dtype"
        raise ScenarioError((flag, f"{err['msg'].lower()} (got {err['input']!r})")) from None
    from des.catalog.quantization import unsupported

    refused = unsupported(gpu, precision)
    if refused is not None:
        raise ScenarioError(("--weights", refused))
    return gpu, model, precision


@overload
def _specs(gpu_name: str, model_name: str) -> tuple[GPUSpec, ModelSpec]: ...
@overload
def _specs(gpu_name: str, model_name: str | None) -> tuple[GPUSpec, ModelSpec | None]: ...
def _specs(gpu_name: str, model_name: str | None) -> tuple[GPUSpec, ModelSpec | None]:
    """The catalog GPU and model named by --gpu and --model (None: not given); a problem names its flag."""
    from des import catalog

    flag = "--gpu"
    try:
        gpu = catalog.gpu(gpu_name)
        flag = "--model"
        model = catalog.model(model_name) if model_name is not None else None
    except ScenarioError as exc:
        raise ScenarioError([(flag, m) for _, m in exc.problems]) from None
    return gpu, model


FIGURE_FORMATS = ("png", "svg", "pdf")


def _figure_format(path: Path, flag: str) -> str:
    """The image format a figure path asks for (by its suffix; none: PNG)."""
    fmt = path.suffix.lstrip(".").lower() or "png"
    if fmt not in FIGURE_FORMATS:
        raise ScenarioError((flag, f"{str(path)!r}: figures are written as {', '.join(FIGURE_FORMATS)} (by suffix)"))
    return fmt


@main.command()
@click.argument("study_path", metavar="STUDY", type=click.Path(dir_okay=False, path_type=Path))
@OUT
@WORKERS
@BACKEND
@ADDRESS
@QUIET
@click.option("--brief", is_flag=True, help="Progress, then one line: no table of the points.")
@user_errors()
def sweep(
    study_path: Path,
    out_dir: Path | None,
    workers: int | None,
    backend: str,
    address: str | None,
    quiet: bool,
    brief: bool,
) -> None:
    """Run every variant x grid point x replication of STUDY; write runs.parquet and points.parquet."""
    from des.render.console import warning
    from des.render.progress import progress
    from des.render.study import points_table, sweep_done
    from des.study import load_study
    from des.study import sweep as run_sweep
    from des.study.spec import model_notes

    study = load_study(study_path)
    for note in model_notes(study):
        warning(note)
    out_dir = _writable(out_dir or _default_folder(study.spec.name))
    tick, bar = progress("sweep", quiet, f"sweeping {study.spec.name}")
    t0 = time.perf_counter()
    with bar:
        runs, points = run_sweep(study, out_dir, workers=workers, backend=backend, address=address, progress=tick)
    if not quiet:
        if not brief:
            points_table(points, study.grid_keys)
        sweep_done(len(runs), len(points), study.spec.replications, time.perf_counter() - t0, out_dir)


@main.command()
@SCENARIO
@SLOS
@click.option(
    "--param",
    default=None,
    help="The parameter to push as high as the SLOs allow (default: workload.arrival.rate, or a trace's rate_scale).",
)
@click.option("--low", type=float, default=None, help="A value at which the SLOs hold (default: start / 8).")
@click.option("--high", type=float, default=None, help="A first upper value to try (default: the scenario's).")
@click.option(
    "--replicas-for",
    "target_rate",
    type=float,
    default=None,
    help="Instead: the fewest replicas (the colocated pool's instances) that carry this arrival rate (req/s).",
)
@click.option(
    "--replications",
    type=click.IntRange(min=1),
    default=None,
    help="Replications per value (default: 5; 10 with model uncertainty, whose intervals rest on their spread).",
)
@click.option(
    "--tolerance",
    type=click.FloatRange(min=1e-4, max=0.5),
    default=0.02,
    show_default=True,
    help="Relative width at which bisection stops.",
)
@OUT
@WORKERS
@BACKEND
@ADDRESS
@SET
@MODEL_UNCERTAINTY
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON (for scripts); the log goes to stderr.")
@user_errors()
def capacity(
    scenario: Path | None,
    slos: tuple[str, ...],
    param: str | None,
    low: float | None,
    high: float | None,
    target_rate: float | None,
    replications: int | None,
    tolerance: float,
    out_dir: Path | None,
    workers: int | None,
    backend: str,
    address: str | None,
    overrides: tuple[str, ...],
    model_uncertainty: bool,
    as_json: bool,
) -> None:
    """The highest PARAM (default: the arrival rate) at which every SLO holds, with a 95 % CI.

    Every value tried is logged as a line as soon as its replications are done; the runs
    are kept in OUT/capacity/<value>/r<k>/, so a search started again reuses them.
    """
    import json

    from des.render.console import warning
    from des.render.study import capacity_answer, probe_line
    from des.study.capacity import CapacityQuestion
    from des.study.runner import open_backend
    from des.study.sweep import default_workers

    sc = _scenario(scenario, overrides, model_uncertainty=model_uncertainty)
    question = CapacityQuestion.ask(
        sc, slos, param, target_rate, replications=replications, low=low, high=high, tolerance=tolerance
    )
    for note in question.notes:
        warning(note)
    runner = open_backend(backend, workers or default_workers(), address)
    runner.check()
    out_dir = _writable(out_dir or _default_folder(sc.name))
    answer = question.answer(
        runner,
        out_dir,
        lambda ev: click.echo(probe_line(question.param, ev), err=as_json),
    )
    if as_json:
        click.echo(json.dumps(answer.as_dict(), indent=2, default=float))
    elif answer.value is None:
        click.echo(f"no answer: {answer.note}")
        sys.exit(1)
    else:
        click.echo(capacity_answer(answer))


@main.command()
@SCENARIO
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=None, help="The target load (req/s).")
@click.option(
    "--rate-scale",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="For a trace replay or a rate schedule (nhpp): the target load as its rates times this (1: as given).",
)
@SLOS
@click.option(
    "--gpus", default=None, help="GPU types to consider, comma-separated (default: every catalog GPU priced)."
)
@click.option("--max-gpus", type=click.IntRange(min=1, max=64), default=8, show_default=True, help="Most GPUs.")
@click.option("--no-splits", is_flag=True, help="Colocated serving only (no prefill/decode splits).")
@click.option("--mixed", is_flag=True, help="Also splits with the decode pool on another of the GPU types.")
@click.option("--variants", is_flag=True, help="Also the model's quantised checkpoints in the catalog (AWQ, FP8, ...).")
@click.option("--pp", "pipeline", default="1", show_default=True, metavar="N,N", help="Pipeline depths to try.")
@click.option("--capacity", "capacities", is_flag=True, help="Also search the winner's and runners-up's capacity.")
@click.option("--max-num-seqs", "seqs", default=None, metavar="N,N", help="Values of max_num_seqs to try.")
@click.option("--max-num-batched-tokens", "budgets", default=None, metavar="N,N", help="Token budgets to try.")
@click.option("--price", "prices", multiple=True, metavar="NAME=USD_PER_HOUR", help="A GPU's price (repeatable).")
@click.option("--price-file", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Prices: a YAML mapping or a CSV gpu,usd_per_gpu_hour.")  # fmt: skip
@click.option("--replications", type=click.IntRange(min=2), default=3, show_default=True, help="Per candidate.")
@click.option("--scheduler", "address", default=None, help="tcp://host:port of a dask scheduler to run on.")
@OUT
@WORKERS
@SET
@click.option("--json", "as_json", is_flag=True, help="Print plan.json (for scripts); the log goes to stderr.")
@user_errors()
def plan(
    scenario: Path | None,
    rate: float | None,
    rate_scale: float | None,
    slos: tuple[str, ...],
    gpus: str | None,
    max_gpus: int,
    no_splits: bool,
    mixed: bool,
    variants: bool,
    pipeline: str,
    capacities: bool,
    seqs: str | None,
    budgets: str | None,
    prices: tuple[str, ...],
    price_file: Path | None,
    replications: int,
    address: str | None,
    out_dir: Path | None,
    workers: int | None,
    overrides: tuple[str, ...],
    as_json: bool,
) -> None:
    """The cheapest configuration (GPU type and count, tensor parallelism, colocated or a
    prefill/decode split) that meets every SLO at RATE req/s, with its cost and the vLLM
    commands that launch it.

    Candidates that do not fit or cannot carry the rate at their GPUs' peaks are pruned;
    the rest are simulated cheapest first (common random numbers, the study's 95 %
    intervals). Writes OUT/plan.json, OUT/candidates.parquet, OUT/winner.yaml and
    OUT/pareto.png; the runs are kept in OUT/runs/, so a plan started again reuses them.
    """
    from des.figures.plan import pareto
    from des.plan.output import dumps
    from des.plan.question import PlanOptions, PlanQuestion
    from des.render.plan import answer_text, outcome_line
    from des.study.runner import open_backend
    from des.study.sweep import default_workers

    sc = _scenario(scenario, overrides, hardware=False)  # its model and workload, planned on the GPUs searched
    options = PlanOptions(
        splits=not no_splits, mixed=mixed, variants=variants, pipeline=_ints("--pp", pipeline) or [1],
        max_num_seqs=_ints("--max-num-seqs", seqs), max_num_batched_tokens=_ints("--max-num-batched-tokens", budgets),
        capacities=capacities, replications=replications,
    )  # fmt: skip
    names = None if gpus is None else [g.strip() for g in gpus.split(",") if g.strip()]
    question = PlanQuestion.ask(sc, slos, rate, rate_scale, names, max_gpus, prices, price_file, options)
    backend = open_backend("dask" if address else "local", workers or default_workers(), address, "--scheduler")
    backend.check()
    out_dir = _writable(out_dir or _default_folder(f"plan-{sc.name}"))
    answer = question.answer(
        backend, out_dir, lambda o: click.echo(outcome_line(o), err=as_json), figures={"pareto.png": pareto}
    )
    if as_json:
        click.echo(dumps(answer.body))
    else:
        click.echo(answer_text(answer.body))
        click.echo(f"wrote {out_dir}/ ({', '.join(answer.files)})")
    if not answer.met:
        raise SystemExit(1)


@main.command()
@click.argument("profile_dir", metavar="PROFILE_DIR", required=False, type=click.Path(path_type=Path))
@click.option("--gpu", "gpu_name", help="Catalog GPU the profile was measured on (its spec sheet).")
@click.option(
    "--model",
    "model_name",
    default=None,
    help="Catalog model whose shapes the profile measured (LLMServingSim profiles; a Vidur profile names its own).",
)
@click.option(
    "--network",
    "network_dir",
    type=click.Path(path_type=Path),
    help="Fit NCCL's all-reduce cost per TP degree to the collective profiles in this folder instead "
    "(Vidur's network/ format) and print its errors.",
)
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
@user_errors()
def calibrate(
    profile_dir: Path | None,
    gpu_name: str | None,
    model_name: str | None,
    network_dir: Path | None,
    out_path: Path | None,
    plot_path: Path | None,
) -> None:
    """Fit the roofline's efficiency factors to the kernel profile in PROFILE_DIR (--gpu
    required), or, with --network DIR, the all-reduce cost to NCCL profiles.

    PROFILE_DIR is an LLMServingSim profile (dense.csv, per_sequence.csv, attention.csv:
    every op group; needs --model), a tree of them (<org>/<model>/<variant>/tp<N>/ with a
    meta.yaml per model naming it: every model and TP degree at once) or one GPU's folder of
    Vidur profiles
    (<org>/<model>/mlp.csv: GEMM and element-wise groups over its models and TP degrees;
    the GPU's other factors are kept)."""
    from des.figures.tools import plot_fit
    from des.output import write_files
    from des.render.tools import calibration, network_fit
    from des.tools.calibrate import fit_folder

    if network_dir is not None:
        from des.tools.network import fit_networks

        if profile_dir is not None:
            raise ScenarioError(("--network", "fits the NCCL profiles alone: give no PROFILE_DIR with it"))
        network_fit(fit_networks(network_dir))
        return
    if profile_dir is None:
        raise ScenarioError(("PROFILE_DIR", "missing: the kernel profile's folder (or --network DIR)"))
    if gpu_name is None:
        raise ScenarioError(("--gpu", "required with PROFILE_DIR"))
    gpu, model = _specs(gpu_name, model_name)
    fit = fit_folder(profile_dir, gpu, model)
    out_path = out_path or Path(f"{gpu.name}.calibration.yaml")
    plot_path = plot_path or out_path.with_suffix(".png")
    fmt = _figure_format(plot_path, "--plot")
    if plot_path.resolve() == out_path.resolve():
        raise ScenarioError(("--plot", f"{str(plot_path)!r} is also the calibration file (--out)"))
    text = fit.calibration_text()
    write_files(
        {out_path: lambda tmp: tmp.write_text(text), plot_path: lambda tmp: plot_fit(fit, tmp, fmt)},
        {out_path: "--out", plot_path: "--plot"},
    )
    calibration(fit, out_path, plot_path)


@main.command()
@click.argument("result", metavar="RESULT", type=click.Path(path_type=Path))
@click.argument("scenario", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "vllm-bench", "vllm-records", "otel", "csv", "jsonl"]),
    default="auto",
    show_default=True,
    help="RESULT's format (auto: from its content: a vllm bench serve result, vLLM request records "
    "or OpenTelemetry spans, a CSV or JSONL table).",
)
@click.option(
    "--server-log",
    type=click.Path(dir_okay=False, path_type=Path),
    help=(
        "The vLLM server's log or a saved /metrics scrape: its KV cache size and preemptions, and the "
        "engine settings it ran (max_model_len, ...: the replay's where SCENARIO and --set give none)."
    ),
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
@user_errors()
def compare(
    result: Path,
    scenario: Path | None,
    fmt: str,
    server_log: Path | None,
    overrides: tuple[str, ...],
    seed: int | None,
    out_dir: Path | None,
    as_json: bool,
) -> None:
    """Replay the requests of a measured run (RESULT) through des on SCENARIO's engine and compare.

    RESULT is a vllm bench serve --save-result --save-detailed JSON, vLLM's request records
    (JSON lines) or OpenTelemetry spans (OTLP/JSON), or a CSV/JSONL table of requests."""
    from des.figures.tools import plot_cdfs
    from des.render.console import warning
    from des.render.tools import comparison, comparison_json
    from des.tools.compare import compare as replay_and_compare
    from des.tools.compare import read_measured, write_comparison

    measured = read_measured(result, fmt, _seed(seed) or 0, server_log)
    out_dir = _writable(out_dir or Path("results") / f"compare-{result.stem}")
    cmp = replay_and_compare(measured, scenario, overrides, seed)
    for note in cmp.notes:
        warning(note)
    try:
        write_comparison(cmp, out_dir, plot_cdfs)
    except OSError as exc:
        raise ScenarioError(("--out", f"cannot write to {str(out_dir)!r}: {exc.strerror or exc}")) from None
    if as_json:
        comparison_json(cmp)
    else:
        comparison(cmp, out_dir)


@main.command()
@click.option(
    "--port",
    type=click.IntRange(min=0, max=65535),
    default=UI_PORT,
    show_default=True,
    help="The port to listen on (0: any free port).",
)
@click.option(
    "--results",
    "results",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("results"),
    show_default=True,
    help="The folder of des run / sweep / plan results the page browses.",
)
@click.option("--no-browser", is_flag=True, help="Print the address; do not open a browser.")
@user_errors("--port")
def ui(port: int, results: Path, no_browser: bool) -> None:
    """The what-if page: a local web app that runs des as you change a scenario.

    Prints its address (http://127.0.0.1:PORT/?token=..., the token a secret of this launch:
    only a browser that opened it may use the page) and serves until Ctrl-C."""
    from des.ui import serve

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: uvicorn has shut down, then re-raised it
        serve(port, results, open_browser=not no_browser)
    click.echo("stopped", err=True)


if __name__ == "__main__":
    main()
