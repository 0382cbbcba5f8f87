"""Study files: a base scenario, variants merged over it, a grid, and replications.

```yaml
name: schedulers-vs-load
base: qwen7b-4090-poisson.yaml        # a scenario path (relative to this file) or an inline scenario
set:                                  # dotted key -> value, applied to the base first
  horizon.drain: false
variants:                             # name -> partial scenario merged over the base
  continuous: {}
  static: {scheduler: {kind: static, max_batch_size: 8}}
grid:                                 # dotted key -> values; several keys make their product
  workload.arrival.rate: [2, 4, 6, 8]
replications: 3
seed: 0                               # default: the base scenario's seed
keep_tables: false                    # also keep each run's requests.parquet and steps.parquet
model_uncertainty: false              # each run draws the step-time model's error (des.cost.uncertainty)
```

With ``model_uncertainty: true`` every run of the study (not its saturation probes, which
set the loads and run the model as fitted) draws its own multipliers of the step-time
model's error, and the points' intervals come from the spread across replications
(:mod:`des.study.intervals`): they then cover the model's error as well as sampling
error. Replications default to :data:`MODEL_REPLICATIONS` then; fewer are warned about
(:func:`model_notes`).

Instead of one grid of arrival rates shared by every variant (which jumps past a
slow scheduler's capacity after two points), ``load`` gives each variant its own:

```yaml
load: {fractions: [0.1, 0.3, 0.5, 0.7, 0.9, 1.0, 1.1]}   # of each variant's saturation throughput
```

A sweep then first runs a *saturation probe* per variant (its scenario with
closed-loop arrivals: ``2 x max batch`` users per instance of every pool, sending
without pause, so every batch is full) into ``runs/<variant>/saturation/``, reads its
throughput ``S``, and runs the grid at ``workload.arrival.rate = fraction x S``
(rounded to 4 digits); the runs' tables carry both ``load`` and the rate. Saturation
depends on the engine, so a grid point that sets keys outside ``workload.arrival``
(which the probe replaces; ``workload.arrival.cv`` is left to the grid's runs) gets a
probe of its own, in ``runs/<variant>/<point>/saturation/``.

A grid axis may also be a mapping of named *levels*, each setting several dotted keys
together (a list of values sets one key). Its name, a plain word, heads a column of
the tables and its level names fill it; each level's keys are set in order, as a
list-valued key's value would be (so ``scheduler.kind: disaggregated`` keeps the
scheduler's other settings):

```yaml
grid:
  config:
    continuous-x4: {cluster.replicas: 4}
    1P+3D: {scheduler.kind: disaggregated, scheduler.prefill.instances: 1, scheduler.decode.instances: 3}
    2P+2D: {scheduler.kind: disaggregated, scheduler.prefill.instances: 2, scheduler.decode.instances: 2}
```

A problem found at many points of the design (a bad value, a bad level) is reported
once, where it first occurs.

A trace replays the same requests at every seed: replication ``r >= 1`` of a point
that replays a trace replays a block-bootstrap resample of it instead (``RunSpec.resample``,
:mod:`des.study.resample`), replication 0 the recording.

Merging is key by key, except that a mapping naming a different ``kind``,
``process`` or ``dist`` than the base replaces the base's mapping whole (a static
scheduler shares no keys with a continuous one). Replication ``r`` runs with seed
``SeedSequence([seed, r])`` at every variant and grid point: common random numbers,
so that differences between variants are not noise between seeds.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, PositiveFloat, PositiveInt, ValidationError, field_validator, model_validator

from des.config import Flag, Strict
from des.dotted import deep_copy, merge, set_dotted
from des.errors import ScenarioError
from des.scenario import load_scenario, problems_of, read_yaml

RATE = "workload.arrival.rate"
#: The arrivals a saturation probe replaces: grid keys under it do not reach the probe.
ARRIVAL = "workload.arrival"
NAME = re.compile(r"[A-Za-z0-9_.+-]+")
#: Replications a point needs when its intervals rest on their spread alone (model
#: uncertainty): the prediction interval's factor ``t(R-1) · sqrt(1 + 1/R)`` is within
#: about 20 % of its limit 1.96 from 10 on (2.37; 3.04 at 5, 4.97 at 3).
MODEL_REPLICATIONS = 10


class LoadGrid(Strict):
    """Arrival rates as fractions of each variant's saturation throughput."""

    fractions: list[PositiveFloat] = Field(min_length=1)


class StudySpec(Strict):
    name: str = "study"
    base: str | dict[str, Any]
    set: dict[str, Any] = Field(default_factory=dict)
    variants: dict[str, dict[str, Any]] = Field(default_factory=dict)
    grid: dict[str, Any] = Field(default_factory=dict)  # key -> list of values, or axis -> named levels
    replications: PositiveInt = 1
    seed: int | None = Field(None, ge=0)
    keep_tables: bool = False
    load: LoadGrid | None = None
    model_uncertainty: Flag = False

    @model_validator(mode="before")
    @classmethod
    def _model_replications(cls, data: Any) -> Any:
        """With model uncertainty, replications default to :data:`MODEL_REPLICATIONS`."""
        if isinstance(data, dict) and data.get("model_uncertainty") is True and "replications" not in data:
            return {**data, "replications": MODEL_REPLICATIONS}
        return data

    @model_validator(mode="after")
    def _load_sets_the_rate(self) -> StudySpec:
        if self.load is None:
            return self
        for axis in self.grid:
            for key in axis_keys(self, axis):
                if key == RATE or RATE.startswith(key + "."):
                    where = axis if key == axis else f"{axis} sets {key}, which"
                    raise ValueError(f"grid: {where} cannot vary when load gives each variant its own rates")
        return self

    @field_validator("variants")
    @classmethod
    def _variant_names(cls, v: dict) -> dict:
        for name in v:
            if not NAME.fullmatch(name):
                raise ValueError(f"variant name {name!r}: use letters, digits and _ . + - only")
        return v

    @field_validator("grid")
    @classmethod
    def _grid_values(cls, v: dict) -> dict:
        for key, values in v.items():
            if not isinstance(values, list | dict):
                raise ValueError(
                    f"{key}: give a list of values for the key, or a mapping of named levels "
                    f"(each a mapping of dotted keys to values); got {values!r}"
                )
            if not values:
                raise ValueError(f"{key}: needs at least one value")
            if isinstance(values, dict):
                _check_levels(key, values)
            elif len(set(map(repr, values))) != len(values):
                raise ValueError(f"{key}: values repeat")
        return v


def _check_levels(axis: str, levels: dict[Any, Any]) -> None:
    """A grid axis of named levels: a plain name, level names fit for folders, and each
    level a mapping of one or more dotted keys."""
    if not re.fullmatch(r"[A-Za-z0-9_]+", axis):
        raise ValueError(
            f"{axis}: a grid axis of named levels needs a plain name (letters, digits, _), "
            "not a dotted key: its levels set the keys"
        )
    for label, settings in levels.items():
        if not isinstance(label, str) or not NAME.fullmatch(label):
            raise ValueError(f"{axis}.{label}: name a level with letters, digits and _ . + - only (quote it in YAML)")
        if not isinstance(settings, dict) or not all(isinstance(k, str) for k in settings):
            raise ValueError(f"{axis}.{label}: a level is a mapping of dotted keys to values, got {settings!r}")
        if not settings:
            raise ValueError(f"{axis}.{label}: needs at least one dotted key to set")


def axis_keys(spec: StudySpec, axis: str) -> list[str]:
    """The dotted keys a grid axis sets: itself, or every key its levels set."""
    values = spec.grid[axis]
    if isinstance(values, dict):
        return list(dict.fromkeys(k for settings in values.values() for k in settings))
    return [axis]


def axis_points(spec: StudySpec, axis: str) -> list[tuple[Any, list[tuple[str, Any]]]]:
    """A grid axis's points: (the value its column shows, the dotted keys and values it sets)."""
    values = spec.grid[axis]
    if isinstance(values, dict):
        return [(label, list(settings.items())) for label, settings in values.items()]
    return [(v, [(axis, v)]) for v in values]


@dataclass(frozen=True)
class RunSpec:
    """One simulation of a study: where it sits in the design and its full scenario.

    ``resample``: the scenario replays a trace, and this run replays a block-bootstrap
    resample of it drawn with ``seed`` instead (:mod:`des.study.resample`)."""

    index: int
    run_id: str
    variant: str
    point: tuple[tuple[str, Any], ...]
    replication: int
    seed: int
    scenario: dict[str, Any]
    resample: bool = False

    @property
    def digest(self) -> str:
        """A hash of the resolved scenario (and of the resampling, if any): a finished run
        is reused only if it matches."""
        text = json.dumps(self.scenario, sort_keys=True, default=str)
        if self.resample:
            from des.study.resample import KIND

            text += f"\nresample: {KIND} v1"
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def is_replay(scenario: Mapping[str, Any]) -> bool:
    """Whether a (resolved) scenario replays a trace."""
    return bool(scenario.get("workload", {}).get("arrival", {}).get("process") == "trace")


def resamples(scenario: Mapping[str, Any], replication: int) -> bool:
    """Whether replication ``replication`` of ``scenario`` replays a resample of its trace:
    every replication but the first of a trace replay (the first replays the recording)."""
    return replication > 0 and is_replay(scenario)


@dataclass(frozen=True)
class Study:
    """A validated study: its runs, and (for a ``load`` study) the saturation probes that
    must run first; :meth:`at_saturation` then gives the study with its real rates."""

    spec: StudySpec
    runs: list[RunSpec]
    base: dict[str, Any] = field(default_factory=dict)
    probes: list[RunSpec] = field(default_factory=list)

    @property
    def grid_keys(self) -> list[str]:
        return (["load", RATE] if self.spec.load else []) + list(self.spec.grid)

    def at_saturation(self, throughput: Mapping[str, float]) -> Study:
        """The study with each point's rates at its fractions of ``throughput[probe]`` (req/s),
        keyed by the run id of the point's saturation probe."""
        missing = [p.run_id for p in self.probes if not throughput.get(p.run_id)]
        if missing:
            raise ScenarioError([(p, "the saturation probe served no request") for p in missing])
        runs, problems = _expand(self.spec, self.base, throughput)
        if problems:
            raise ScenarioError(problems)
        return Study(self.spec, runs, self.base)


def replication_seed(seed: int, r: int) -> int:
    """The seed of replication ``r`` (the same at every variant and grid point)."""
    return int(np.random.SeedSequence([seed, r]).generate_state(1)[0])


def slug(value: Any) -> str:
    """``value`` as a folder-name-safe string."""
    text = json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else str(value)
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", text)[:60]


def is_study(data: Mapping[str, Any]) -> bool:
    """Whether a mapping read from YAML is a study (it names a ``base`` scenario), not a scenario."""
    return "base" in data


def load_study(source: str | Path | Mapping[str, Any], base_dir: Path | None = None) -> Study:
    """Validate a study and expand it into runs, validating every run's scenario.

    A ``load`` study is expanded at a stand-in saturation of 1 req/s (to validate every
    scenario now); run its ``probes`` and call :meth:`Study.at_saturation` for the runs.
    """
    spec, base_dir = _read_spec(source, base_dir)
    base = _base_scenario(spec, base_dir)
    probes: list[RunSpec] = []
    problems: list[tuple[str, str]] = []
    if spec.load:
        probes, problems = _probes(spec, base)
    stand_in = {p.run_id: 1.0 for p in probes} if spec.load else None
    runs, more = _expand(spec, base, stand_in)
    problems = _distinct(problems + more)
    if problems:
        raise ScenarioError(problems)
    return Study(spec, runs, base, probes)


def _distinct(problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each problem once: the same field and message at several points of the design is
    reported where it first occurs."""
    seen: set[tuple[str, str]] = set()
    out = []
    for where, message in problems:
        key = (where.rpartition(": ")[2], message)
        if key not in seen:
            seen.add(key)
            out.append((where, message))
    return out


@dataclass(frozen=True)
class GridPoint:
    """One point of the grid: the value each axis shows in the tables, and the dotted
    keys each axis sets there (one for a list of values, several for a named level)."""

    axes: tuple[tuple[str, Any, tuple[tuple[str, Any], ...]], ...]

    @property
    def shown(self) -> tuple[tuple[str, Any], ...]:
        return tuple((axis, value) for axis, value, _ in self.axes)

    @property
    def settings(self) -> list[tuple[str, Any]]:
        return [kv for _, _, keys in self.axes for kv in keys]

    def engine(self) -> tuple[tuple[tuple[str, Any], ...], list[tuple[str, Any]]]:
        """What a saturation probe shares of this point: the axes that set some key outside
        the arrivals (which the probe replaces), and those keys."""
        shared = tuple((a, v) for a, v, keys in self.axes if any(not _under_arrival(k) for k, _ in keys))
        return shared, [(k, v) for k, v in self.settings if not _under_arrival(k)]


def _points(spec: StudySpec) -> list[GridPoint]:
    """The grid's points, in the product order of its axes."""
    axes = [[(axis, shown, tuple(keys)) for shown, keys in axis_points(spec, axis)] for axis in spec.grid]
    return [GridPoint(tuple(combo)) for combo in itertools.product(*axes)]


def _under_arrival(key: str) -> bool:
    return key == ARRIVAL or key.startswith(ARRIVAL + ".")


def probe_id(variant: str, shared: tuple[tuple[str, Any], ...]) -> str:
    """The run id of the saturation probe of ``variant`` at the shared part of a point."""
    return "/".join([variant, *(f"{k}={slug(v)}" for k, v in shared), "saturation"])


def _probes(spec: StudySpec, base: dict[str, Any]) -> tuple[list[RunSpec], list[tuple[str, str]]]:
    """A saturation probe per variant and distinct engine point: closed-loop users enough
    to keep every batch of every pool full."""
    seed = spec.seed if spec.seed is not None else base["seed"]
    probes: list[RunSpec] = []
    problems: list[tuple[str, str]] = []
    for vname, partial in (spec.variants or {"base": {}}).items():
        merged = merge(base, partial)
        if "rate" not in merged["workload"]["arrival"]:
            problems.append((f"{vname}: workload.arrival", "a load grid needs arrivals with a rate"))
            continue
        done: set[str] = set()
        for point in _points(spec):
            shared, keys = point.engine()
            where = probe_id(vname, shared)
            if where in done:
                continue
            done.add(where)
            try:
                engine = load_scenario(point_scenario(merged, keys, where.removesuffix("/saturation")))
            except ScenarioError as exc:
                problems += exc.problems
                continue
            users = 2 * sum(pool.engines * pool.policy.max_batch for pool in engine.layout.pools)
            closed = {"process": "closed", "concurrency": users, "think_time": 0.0}
            s = point_scenario(merged, [*keys, (ARRIVAL, closed)], where)
            s["model_uncertainty"] = False  # a probe sets the loads: the model as fitted
            s["seed"] = replication_seed(seed, 0)
            s["name"] = f"{spec.name}/{where}"
            probes.append(RunSpec(len(probes), where, vname, shared, 0, s["seed"], s))
    return probes, problems


def _read_spec(source: str | Path | Mapping[str, Any], base_dir: Path | None) -> tuple[StudySpec, Path]:
    """The validated study and the folder its relative paths start from."""
    if isinstance(source, Mapping):
        data, base_dir = dict(source), base_dir or Path.cwd()
    else:
        path = Path(source)
        data, base_dir = read_yaml(path), path.resolve().parent
        if not is_study(data) and "workload" in data:
            raise ScenarioError(("study", f"{str(path)!r} is a scenario, not a study: run it with `des run {path}`"))
    try:
        return StudySpec.model_validate(data), base_dir
    except ValidationError as exc:
        raise ScenarioError(problems_of(exc)) from None


def _base_scenario(spec: StudySpec, base_dir: Path) -> dict[str, Any]:
    """The base scenario with the study's ``set`` applied, resolved; errors under ``base.`` / ``set.``."""
    # a path is relative to the study file; Path's "/" keeps an absolute one as it is
    source = base_dir / spec.base if isinstance(spec.base, str) else spec.base
    try:
        base = load_scenario(source).resolved()
    except ScenarioError as exc:
        raise exc.prefixed("base") from None
    if spec.model_uncertainty:
        base["model_uncertainty"] = True
    if spec.set:
        try:
            base = load_scenario(base, list(spec.set.items())).resolved()
        except ScenarioError as exc:
            raise exc.prefixed("set") from None
    return _unpinned(base)


def _unpinned(base: dict[str, Any]) -> dict[str, Any]:
    """The resolved ``base`` without its ``precision`` when that is just its model's own
    (the catalog's ``default_precision``, else bf16): the same scenario, whose variants and
    grid points that name another model then run it in that model's own format (gpt-oss in
    MXFP4) rather than in the base model's."""
    loaded = load_scenario(base)
    own = load_scenario({k: v for k, v in base.items() if k != "precision"})
    if loaded.precision != own.precision:
        return base
    return {k: v for k, v in base.items() if k != "precision"}


def uses_model_uncertainty(scenario: Mapping[str, Any]) -> bool:
    """Whether a (resolved) scenario's runs draw the step-time model's error."""
    return bool(scenario.get("model_uncertainty"))


def model_notes(study: Study) -> list[str]:
    """Warnings for a study whose runs draw the model's error: too few replications for
    intervals that rest on their spread; no GPU stating an uncertainty (said once)."""
    from des.cost.uncertainty import FactorSource, no_uncertainty_note

    drawing = [r for r in study.runs if r.replication == 0 and uses_model_uncertainty(r.scenario)]
    if not drawing:
        return []
    notes = []
    n = study.spec.replications
    if n < MODEL_REPLICATIONS:
        notes.append(
            f"replications: {n} with model_uncertainty; its intervals rest on the spread across replications "
            f"(the t factor {_t_factor(n)} against 1.96 with many): give {MODEL_REPLICATIONS} or more"
        )
    seen: set[str] = set()
    sources: list[FactorSource] = []
    for run in drawing:
        parts = [run.scenario.get(k) for k in ("gpu", "cost_model", "scheduler", "cluster")]
        key = json.dumps(parts, sort_keys=True)
        if key not in seen:
            seen.add(key)
            sources += load_scenario(run.scenario).deployment.factors
    none = no_uncertainty_note(sources)
    if none:
        notes.append(f"model_uncertainty: {none}")
    return notes


def _t_factor(n: int) -> str:
    """``t(n-1) · sqrt(1 + 1/n)``, the half-width of a prediction interval from ``n`` values in sds."""
    if n < 2:
        return "infinite: no interval from one replication"
    from scipy import stats

    return f"{float(stats.t.ppf(0.975, n - 1)) * (1 + 1 / n) ** 0.5:.2f}"


def _expand(
    spec: StudySpec, base: dict[str, Any], saturation: Mapping[str, float] | None = None
) -> tuple[list[RunSpec], list[tuple[str, str]]]:
    """Variants x grid points x replications, each scenario validated; the problems found.

    With ``saturation`` (req/s by saturation probe, for a ``load`` study) each point also
    runs over ``load`` fractions, at ``workload.arrival.rate = fraction x`` its probe's.
    """
    seed = spec.seed if spec.seed is not None else base["seed"]
    runs: list[RunSpec] = []
    problems: list[tuple[str, str]] = []
    for vname, partial in (spec.variants or {"base": {}}).items():
        merged = merge(base, partial)
        for point in _points(spec):
            probe = probe_id(vname, point.engine()[0])
            for pre in _load_points(spec, saturation, probe):
                where = "/".join([vname, *(f"{k}={slug(v)}" for k, v in (*pre[:1], *point.shown))])
                try:
                    checked = point_scenario(merged, (*pre[1:], *point.settings), where)  # "load" is no field
                except ScenarioError as exc:
                    problems += exc.problems
                    continue
                for r in range(spec.replications):
                    s = dict(checked)
                    s["seed"] = replication_seed(seed, r)
                    s["name"] = f"{spec.name}/{where}/r{r}"
                    shown = (*pre, *point.shown)
                    runs.append(RunSpec(len(runs), f"{where}/r{r}", vname, shown, r, s["seed"], s, resamples(s, r)))
    return runs, problems


def _load_points(spec: StudySpec, saturation: Mapping[str, float] | None, probe: str) -> list[tuple]:
    """The ``(("load", f), (rate key, rate))`` prefixes of the points measured by the
    saturation probe ``probe``; one empty prefix without a load grid."""
    if spec.load is None or saturation is None:
        return [()]
    if probe not in saturation:  # its probe could not be built: the probe's problem says why
        return []
    return [(("load", f), (RATE, float(f"{f * saturation[probe]:.4g}"))) for f in spec.load.fractions]


def point_scenario(scenario: dict[str, Any], point: Sequence[tuple[str, Any]], where: str) -> dict[str, Any]:
    """``scenario`` with the dotted keys of ``point`` set, validated and resolved.

    Problems name ``grid.<key>`` when a key cannot be set, ``<where>: <path>`` when the
    result is not a valid scenario.
    """
    data = deep_copy(scenario)
    try:
        for k, v in point:
            set_dotted(data, k, v)
    except ScenarioError as exc:
        raise ScenarioError([(f"grid.{p}", m) for p, m in exc.problems]) from None
    try:
        return load_scenario(data).resolved()
    except ScenarioError as exc:
        raise ScenarioError([(f"{where}: {p}", m) for p, m in exc.problems]) from None
