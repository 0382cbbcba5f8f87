"""A ``des plan`` question and its answer, as ``des capacity`` has them
(:class:`des.study.capacity.CapacityQuestion`): :meth:`PlanQuestion.ask` checks the question
against the scenario and the catalog, problems naming the flag at fault, and takes the
defaults; :meth:`PlanQuestion.answer` plans (:func:`des.plan.planner.plan`), derives the
winner's launch commands (:mod:`des.plan.launch`) and writes the plan's files
(:func:`des.plan.output.write`). Its figure is the command's to draw
(:func:`des.figures.plan.pareto`), its words the command's to print (:mod:`des.render.plan`)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from des.catalog.prices import PriceBook
from des.errors import ScenarioError, did_you_mean
from des.plan.planner import Outcome, Plan
from des.scenario import Scenario
from des.study.capacity import SLOTerm
from des.study.runner import Backend


@dataclass(frozen=True)
class PlanOptions:
    """How wide a plan searches and how sure it is: prefill/decode ``splits``, ``mixed``
    splits (the decode pool on another GPU type), the model's quantised ``variants``, the
    ``pipeline`` depths, the values of ``max_num_seqs`` and ``max_num_batched_tokens`` to
    try (None: the scenario's), a capacity search of the winner and runners-up
    (``capacities``), and ``replications`` per candidate."""

    splits: bool = True
    mixed: bool = False
    variants: bool = False
    pipeline: Sequence[int] = (1,)
    max_num_seqs: Sequence[int] | None = None
    max_num_batched_tokens: Sequence[int] | None = None
    capacities: bool = False
    replications: int = 3


@dataclass(frozen=True)
class PlanAnswer:
    """A plan (every candidate's outcome), the winner's ``vllm serve`` commands (as
    ``plan.json`` holds them: None without a winner, one ``{"error": ...}`` when vLLM cannot
    launch it as such) and ``plan.json``'s content, written into the plan's folder."""

    plan: Plan
    launch: list[dict[str, Any]] | None
    body: dict[str, Any]
    files: tuple[str, ...] = ()  # the names of the files written into the plan's folder

    @property
    def met(self) -> bool:
        """Whether a configuration meets the SLOs."""
        return self.plan.winner is not None


@dataclass(frozen=True)
class PlanQuestion:
    """A validated ``des plan`` question: the cheapest configuration of ``scenario``'s model
    and workload among ``gpus`` (at most ``max_gpus``, priced by ``book``) that meets
    ``slos`` at ``load`` (req/s, or a replay's or rate schedule's ``rate_scale``)."""

    scenario: Scenario
    load: float
    slos: tuple[SLOTerm, ...]
    gpus: tuple[str, ...]
    max_gpus: int
    book: PriceBook
    options: PlanOptions = PlanOptions()

    @classmethod
    def ask(
        cls,
        scenario: Scenario,
        slos: Sequence[str],
        rate: float | None = None,
        rate_scale: float | None = None,
        gpus: Sequence[str] | None = None,
        max_gpus: int = 8,
        prices: Iterable[str] = (),
        price_file: Path | None = None,
        options: PlanOptions | None = None,
    ) -> PlanQuestion:
        """Check the question; problems name the flag at fault. ``rate`` (req/s) for an open
        arrival process, ``rate_scale`` for a trace replay or a rate schedule (``nhpp``);
        ``prices``: ``NAME=USD_PER_HOUR`` overrides over ``price_file`` over the catalog's;
        ``gpus``: catalog names (default: every catalog GPU with a price); ``options``: the
        search's breadth and replications (default: :class:`PlanOptions`'s)."""
        from des import catalog
        from des.plan.planner import at_load
        from des.plan.space import candidates
        from des.scenario import load_scenario
        from des.study.capacity import check_measured, metric_names, parse_slo

        scaled = getattr(scenario.workload.arrival, "process", None) in ("trace", "nhpp")
        if scaled and (rate is not None or rate_scale is None):
            raise ScenarioError(
                ("--rate-scale", "a trace replay's or a rate schedule's load is its rates scaled: give --rate-scale")
            )
        if not scaled and (rate is None or rate_scale is not None):
            raise ScenarioError(("--rate", "give the target load in requests per second (--rate-scale is for traces)"))
        load = rate_scale if scaled else rate
        assert load is not None
        flag = "--rate-scale" if scaled else "--rate"
        if not (math.isfinite(load) and load > 0):
            raise ScenarioError((flag, f"must be a finite number > 0 (got {load})"))
        options = options or PlanOptions()
        terms = tuple(parse_slo(text, metric_names()) for text in slos)
        check_measured(terms, scenario)
        data, param = at_load(scenario, load)
        try:  # the base at the load, on no GPU in particular (its candidates are checked on theirs)
            load_scenario(data, hardware=False)
        except ScenarioError as exc:
            raise exc.for_option(flag, param) from None
        _check_engine_settings(data, options)
        book = PriceBook.build(prices, price_file)
        known = catalog.gpu_names()
        if gpus is None:
            names = [g for g in known if book.per_gpu_hour(g) is not None]
        else:
            names = list(gpus)
            if not names:
                raise ScenarioError(("--gpus", f"no GPU given; known: {', '.join(known)}"))
            for g in names:
                if g not in known:
                    raise ScenarioError(
                        ("--gpus", f"unknown GPU {g!r}{did_you_mean(g, known)}; known: {', '.join(known)}")
                    )
            unpriced = [g for g in names if book.per_gpu_hour(g) is None]
            if unpriced:
                g = unpriced[0]
                why = f"{g} has no price, so its configurations cannot be ranked: give one with --price {g}=USD"
                raise ScenarioError(("--gpus", why))
        o = options
        space = candidates(
            scenario, names, max_gpus, o.splits, o.mixed, _listed(o.max_num_seqs), _listed(o.max_num_batched_tokens),
            o.variants, o.pipeline,
        )  # fmt: skip
        if not space:
            depth = min(o.pipeline)
            raise ScenarioError((
                "--pp" if depth > max_gpus else "--max-gpus",
                f"no configuration fits in --max-gpus {max_gpus}: an engine of pipeline depth {depth} takes at least "
                f"{depth} GPUs",
            ))  # fmt: skip
        return cls(scenario, load, terms, tuple(names), max_gpus, book, options)

    def prices(self) -> dict[str, dict[str, Any]]:
        """The price per GPU-hour of each GPU considered and its source (``plan.json``'s ``prices``)."""
        return {g: {"usd_per_gpu_hour": self.book.per_gpu_hour(g), "source": self.book.source(g)} for g in self.gpus}

    def answer(
        self,
        runner: Backend,
        folder: Path,
        progress: Callable[[Outcome], None] | None = None,
        figures: Mapping[str, Callable[[Plan, Path], object]] | None = None,
    ) -> PlanAnswer:
        """Plan, with every run under ``folder/runs/`` (a plan started again reuses them), and
        write the plan's files into ``folder``, with ``figures`` (name: a function drawing
        the plan at the path given), all moved into place together
        (:func:`des.plan.output.write`); ``progress`` is told of each candidate simulated and
        each capacity searched.

        ``runner`` is a backend not yet entered (:func:`des.study.runner.open_backend`): it
        is opened inside the folder's lock and closed, its workers ended, before the files
        are written."""
        from des.plan import output
        from des.plan.planner import plan
        from des.study.runner import sweep_lock

        o = self.options
        with sweep_lock(folder, "plan"):
            with runner:
                result = plan(
                    self.scenario, self.load, self.slos, self.gpus, self.max_gpus, self.book, o.replications, runner,
                    folder / "runs", splits=o.splits, progress=progress, mixed=o.mixed,
                    max_num_seqs=None if o.max_num_seqs is None else list(o.max_num_seqs),
                    max_num_batched_tokens=None if o.max_num_batched_tokens is None else list(o.max_num_batched_tokens),
                    variants=o.variants, pipeline=o.pipeline, capacities=o.capacities,
                )  # fmt: skip
            launch = launch_of(result)
            draw = {name: functools.partial(figure, result) for name, figure in (figures or {}).items()}
            body, files = output.write(result, folder, launch, self.prices(), draw)
        return PlanAnswer(result, launch, body, tuple(files))


#: The largest values of the engine settings a plan tries (``--max-num-seqs``,
#: ``--max-num-batched-tokens``): 64 times vLLM's largest default ``max_num_seqs`` (1,024,
#: on GPUs of 70 GiB and more), and a token budget above the longest context in the catalog
#: (which a budget must hold with chunked prefill off), 2^24 tokens.
ENGINE_SETTING_LIMITS = {"max_num_seqs": 1 << 16, "max_num_batched_tokens": 1 << 24}


def _listed(values: Sequence[int] | None) -> list[int] | None:
    return None if values is None else list(values)


def _check_engine_settings(data: dict[str, Any], options: PlanOptions) -> None:
    """Each value of ``--max-num-seqs`` and ``--max-num-batched-tokens``, within its limit
    (:data:`ENGINE_SETTING_LIMITS`) and taken by the base scenario (``data``, plain data at
    the target load) as its setting, before any run: ScenarioError naming the flag."""
    from des.scenario import load_scenario

    kind = data["scheduler"].get("kind")
    for flag, key, values in (
        ("--max-num-seqs", "max_num_seqs", options.max_num_seqs),
        ("--max-num-batched-tokens", "max_num_batched_tokens", options.max_num_batched_tokens),
    ):
        if values is None or kind == "static":  # static batches have no such settings (the space ignores them)
            continue
        for value in values:
            if value > ENGINE_SETTING_LIMITS[key]:
                raise ScenarioError((flag, f"{value} is beyond {ENGINE_SETTING_LIMITS[key]:,}, the most a plan tries"))
            try:
                load_scenario(data, [(f"scheduler.{key}", value)], hardware=False)
            except ScenarioError as exc:
                raise exc.for_option(flag, f"scheduler.{key}") from None


def launch_of(result: Plan) -> list[dict[str, Any]] | None:
    """The winner's ``vllm serve`` commands as plain data; None without a winner, and one
    ``{"error": ...}`` when des simulates it but vLLM cannot launch it as such (saying why)."""
    if result.winner is None or result.winner.scenario is None:
        return None
    from des.plan.launch import launch_commands

    try:
        return [c.as_dict() for c in launch_commands(result.winner.scenario)]
    except ScenarioError as exc:
        return [{"error": "; ".join(f"{p}: {m}" for p, m in exc.problems)}]
