"""A ``des plan`` question and its answer, as ``des capacity`` has them
(:class:`des.study.capacity.CapacityQuestion`): :meth:`PlanQuestion.ask` checks the question
against the scenario and the catalog, problems naming the flag at fault, and takes the
defaults; :meth:`PlanQuestion.answer` plans (:func:`des.plan.planner.plan`), derives the
winner's launch commands (:mod:`des.plan.launch`) and writes the plan's files
(:func:`des.plan.output.write`). Its figure is the command's to draw
(:func:`des.figures.plan.pareto`), its words the command's to print (:mod:`des.render.plan`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
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
        from des.study.capacity import metric_names, parse_slo

        scaled = getattr(scenario.workload.arrival, "process", None) in ("trace", "nhpp")
        if scaled and (rate is not None or rate_scale is None):
            raise ScenarioError(
                ("--rate-scale", "a trace replay's or a rate schedule's load is its rates scaled: give --rate-scale")
            )
        if not scaled and (rate is None or rate_scale is not None):
            raise ScenarioError(("--rate", "give the target load in requests per second (--rate-scale is for traces)"))
        load = rate_scale if scaled else rate
        assert load is not None
        terms = tuple(parse_slo(text, metric_names()) for text in slos)
        book = PriceBook.build(prices, price_file)
        known = catalog.gpu_names()
        if gpus is None:
            names = [g for g in known if book.per_gpu_hour(g) is not None]
        else:
            names = list(gpus)
            if not names:
                raise ScenarioError(("--gpus", f"names no GPU; known: {', '.join(known)}"))
            for g in names:
                if g not in known:
                    raise ScenarioError(
                        ("--gpus", f"unknown GPU {g!r}{did_you_mean(g, known)}; known: {', '.join(known)}")
                    )
        return cls(scenario, load, terms, tuple(names), max_gpus, book, options or PlanOptions())

    def prices(self) -> dict[str, dict[str, Any]]:
        """The price per GPU-hour of each GPU considered and its source (``plan.json``'s ``prices``)."""
        return {g: {"usd_per_gpu_hour": self.book.per_gpu_hour(g), "source": self.book.source(g)} for g in self.gpus}

    def answer(self, runner: Backend, folder: Path, progress: Callable[[Outcome], None] | None = None) -> PlanAnswer:
        """Plan, with every run under ``folder/runs/`` (a plan started again reuses them), and
        write the plan's files into ``folder``; ``progress`` is told of each candidate
        simulated and each capacity searched.

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
            body = output.write(result, folder, launch, self.prices())
        return PlanAnswer(result, launch, body)


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
