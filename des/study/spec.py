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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, PositiveInt, ValidationError, field_validator

from des.config import Strict
from des.dotted import deep_copy, merge, set_dotted
from des.errors import ScenarioError
from des.scenario import load_scenario, problems_of, read_yaml


class StudySpec(Strict):
    name: str = "study"
    base: str | dict[str, Any]
    set: dict[str, Any] = Field(default_factory=dict)
    variants: dict[str, dict[str, Any]] = Field(default_factory=dict)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    replications: PositiveInt = 1
    seed: int | None = Field(None, ge=0)
    keep_tables: bool = False

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
    spec: StudySpec
    runs: list[RunSpec]

    @property
    def grid_keys(self) -> list[str]:
        return list(self.spec.grid)


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
    """Validate a study and expand it into runs, validating every run's scenario."""
    spec, base_dir = _read_spec(source, base_dir)
    base = _base_scenario(spec, base_dir)
    runs, problems = _expand(spec, base)
    if problems:
        raise ScenarioError(problems)
    return Study(spec, runs)


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


def _expand(spec: StudySpec, base: dict[str, Any]) -> tuple[list[RunSpec], list[tuple[str, str]]]:
    """Variants x grid points x replications, each scenario validated; the problems found."""
    seed = spec.seed if spec.seed is not None else base["seed"]
    keys = list(spec.grid)
    runs: list[RunSpec] = []
    problems: list[tuple[str, str]] = []
    for vname, partial in (spec.variants or {"base": {}}).items():
        merged = merge(base, partial)
        for values in itertools.product(*(spec.grid[k] for k in keys)) if keys else [()]:
            point = tuple(zip(keys, values, strict=True))
            where = "/".join([vname, *(f"{k}={slug(v)}" for k, v in point)])
            try:
                checked = point_scenario(merged, point, where)
            except ScenarioError as exc:
                problems += exc.problems
                continue
            for r in range(spec.replications):
                s = dict(checked)
                s["seed"] = replication_seed(seed, r)
                s["name"] = f"{spec.name}/{where}/r{r}"
                runs.append(RunSpec(len(runs), f"{where}/r{r}", vname, point, r, s["seed"], s))
    return runs, problems


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
