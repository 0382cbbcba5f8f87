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
```

Instead of one grid of arrival rates shared by every variant (which jumps past a
slow scheduler's capacity after two points), ``load`` gives each variant its own:

```yaml
load: {fractions: [0.1, 0.3, 0.5, 0.7, 0.9, 1.0, 1.1]}   # of each variant's saturation throughput
```

A sweep then first runs one *saturation probe* per variant (its scenario with
closed-loop arrivals: ``2 x max batch x replicas`` users sending without pause, so
every batch is full) into ``runs/<variant>/saturation/``, reads its throughput
``S``, and runs the grid at ``workload.arrival.rate = fraction x S`` (rounded to 4
digits); the runs' tables carry both ``load`` and the rate.

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

from des.config import Strict
from des.dotted import deep_copy, merge, set_dotted
from des.errors import ScenarioError
from des.scenario import load_scenario, problems_of, read_yaml

RATE = "workload.arrival.rate"


class LoadGrid(Strict):
    """Arrival rates as fractions of each variant's saturation throughput."""

    fractions: list[PositiveFloat] = Field(min_length=1)


class StudySpec(Strict):
    name: str = "study"
    base: str | dict[str, Any]
    set: dict[str, Any] = Field(default_factory=dict)
    variants: dict[str, dict[str, Any]] = Field(default_factory=dict)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    replications: PositiveInt = 1
    seed: int | None = Field(None, ge=0)
    keep_tables: bool = False
    load: LoadGrid | None = None

    @model_validator(mode="after")
    def _load_sets_the_rate(self) -> StudySpec:
        if self.load is not None and RATE in self.grid:
            raise ValueError(f"grid: {RATE} cannot be a grid key when load gives each variant its own rates")
        return self

    @field_validator("variants")
    @classmethod
    def _variant_names(cls, v: dict) -> dict:
        for name in v:
            if not re.fullmatch(r"[A-Za-z0-9_.+-]+", name):
                raise ValueError(f"variant name {name!r}: use letters, digits and _ . + - only")
        return v

    @field_validator("grid")
    @classmethod
    def _grid_values(cls, v: dict) -> dict:
        for key, values in v.items():
            if not values:
                raise ValueError(f"{key}: needs at least one value")
            if len(set(map(repr, values))) != len(values):
                raise ValueError(f"{key}: values repeat")
        return v


@dataclass(frozen=True)
class RunSpec:
    """One simulation of a study: where it sits in the design and its full scenario."""

    index: int
    run_id: str
    variant: str
    point: tuple[tuple[str, Any], ...]
    replication: int
    seed: int
    scenario: dict[str, Any]

    @property
    def digest(self) -> str:
        """A hash of the resolved scenario: a finished run is reused only if it matches."""
        text = json.dumps(self.scenario, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


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
        """The study with each variant's rates at its fractions of ``throughput[variant]`` (req/s)."""
        missing = [v for v in self.spec.variants or {"base": {}} if not throughput.get(v)]
        if missing:
            raise ScenarioError([(f"{v}/saturation", "the saturation probe served no request") for v in missing])
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
    variants = spec.variants or {"base": {}}
    runs, problems = _expand(spec, base, dict.fromkeys(variants, 1.0) if spec.load else None)
    probes: list[RunSpec] = []
    if spec.load:
        probes, more = _probes(spec, base)
        problems += more
    if problems:
        raise ScenarioError(problems)
    return Study(spec, runs, base, probes)


def _probes(spec: StudySpec, base: dict[str, Any]) -> tuple[list[RunSpec], list[tuple[str, str]]]:
    """One saturation probe per variant: closed-loop users enough to keep every batch full."""
    seed = spec.seed if spec.seed is not None else base["seed"]
    probes: list[RunSpec] = []
    problems: list[tuple[str, str]] = []
    for vname, partial in (spec.variants or {"base": {}}).items():
        merged = merge(base, partial)
        where = f"{vname}/saturation"
        if "rate" not in merged["workload"]["arrival"]:
            problems.append((f"{vname}: workload.arrival", "a load grid needs arrivals with a rate"))
            continue
        try:
            cap = load_scenario(merged).scheduler.max_batch
        except ScenarioError as exc:
            problems += [(f"{vname}: {p}", m) for p, m in exc.problems]
            continue
        users = 2 * cap * merged["cluster"]["replicas"]
        closed = {"process": "closed", "concurrency": users, "think_time": 0.0}
        s = point_scenario(merged, [("workload.arrival", closed)], where)
        s["seed"] = replication_seed(seed, 0)
        s["name"] = f"{spec.name}/{where}"
        probes.append(RunSpec(len(probes), where, vname, (), 0, s["seed"], s))
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
    if not spec.set:
        return base
    try:
        return load_scenario(base, list(spec.set.items())).resolved()
    except ScenarioError as exc:
        raise exc.prefixed("set") from None


def _expand(
    spec: StudySpec, base: dict[str, Any], saturation: Mapping[str, float] | None = None
) -> tuple[list[RunSpec], list[tuple[str, str]]]:
    """Variants x grid points x replications, each scenario validated; the problems found.

    With ``saturation`` (req/s per variant, for a ``load`` study) each variant's points
    also run over ``load`` fractions, at ``workload.arrival.rate = fraction x saturation``.
    """
    seed = spec.seed if spec.seed is not None else base["seed"]
    keys = list(spec.grid)
    runs: list[RunSpec] = []
    problems: list[tuple[str, str]] = []
    for vname, partial in (spec.variants or {"base": {}}).items():
        merged = merge(base, partial)
        for values in itertools.product(*(spec.grid[k] for k in keys)) if keys else [()]:
            point = tuple(zip(keys, values, strict=True))
            for pre in _load_points(spec, saturation, vname):
                where = "/".join([vname, *(f"{k}={slug(v)}" for k, v in (*pre[:1], *point))])
                try:
                    checked = point_scenario(merged, (*pre[1:], *point), where)  # "load" is no field
                except ScenarioError as exc:
                    problems += exc.problems
                    continue
                for r in range(spec.replications):
                    s = dict(checked)
                    s["seed"] = replication_seed(seed, r)
                    s["name"] = f"{spec.name}/{where}/r{r}"
                    runs.append(RunSpec(len(runs), f"{where}/r{r}", vname, (*pre, *point), r, s["seed"], s))
    return runs, problems


def _load_points(spec: StudySpec, saturation: Mapping[str, float] | None, variant: str) -> list[tuple]:
    """The ``(("load", f), (rate key, rate))`` prefixes of a variant's points; one empty
    prefix without a load grid."""
    if spec.load is None or saturation is None:
        return [()]
    return [(("load", f), (RATE, float(f"{f * saturation[variant]:.4g}"))) for f in spec.load.fractions]


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
