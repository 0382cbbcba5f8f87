"""Base class for validated configuration data, and the YAML it is read from.

Configuration objects are frozen pydantic models that reject unknown keys. They hold
data only: no file I/O happens in their validators except reading a file the user
named (traces, empirical length tables), and only to check it once at load time.

A number field takes a number: not a boolean (``true`` would be 1) and not a string
(``'64'``), which pydantic would otherwise convert. YAML is read as YAML 1.2 reads
numbers (``1e9`` and ``1.2e10`` are floats; PyYAML's YAML 1.1 makes them strings), and
a mapping that repeats a key is an error, not its last value.
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, ClassVar, Union, get_args, get_origin

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, ValidationInfo, model_validator

#: The latest time (seconds) a run may reach. A double's spacing at 1e10 s is 1.9 µs and
#: doubles beyond it: a step of a few milliseconds would be timed wrongly and latencies
#: would lose their digits (at 1e15 s the spacing is 0.125 s).
MAX_TIME = 1e10


#: Seconds per unit of a duration written with one (``2s``, ``2000ms``, ``50 us``, ``1.5min``, ``1h``).
TIME_UNITS = {"s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "min": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*([a-zµ]*)\s*$")


def parse_seconds(value: Any) -> tuple[float, bool]:
    """A duration as (seconds, whether a unit was written): a number is seconds; a string is a
    number and a unit of :data:`TIME_UNITS` (or none: seconds). ValueError otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"must be a duration, e.g. 2, 2s or 2000ms (got {value!r})")
    if not isinstance(value, str):
        return float(value), False
    m = _DURATION.match(value)
    if m is None or m.group(2) not in ("", *TIME_UNITS):
        raise ValueError(f"{value!r} is not a duration: a number and a unit, one of {', '.join(TIME_UNITS)}")
    return float(m.group(1)) * TIME_UNITS.get(m.group(2), 1.0), m.group(2) != ""


#: Latency limits (seconds) a serving SLO plausibly sets, by metric: outside, a unit is likely wrong.
PLAUSIBLE_LATENCY = {"ttft": (1e-3, 600.0), "tpot": (1e-4, 10.0), "e2e": (1e-3, 3600.0), "queue_delay": (0.0, 3600.0)}


def plausible_latency(metric: str, seconds: float) -> str | None:
    """Why ``seconds`` is an implausible limit for the latency ``metric`` (``ttft``, or a
    statistic of it such as ``ttft_p99``), or None."""
    family = metric if metric in PLAUSIBLE_LATENCY else metric.rsplit("_", 1)[0]
    if family not in PLAUSIBLE_LATENCY:
        return None
    low, high = PLAUSIBLE_LATENCY[family]
    if seconds > high:
        return (
            f"{seconds:g} s is implausible for {metric} (over {high:g} s): a bare number is seconds; "
            f"meant {seconds:g}ms?"
        )
    if seconds < low:
        return f"{seconds:g} s is implausible for {metric} (under {low:g} s): a bare number is seconds"
    return None


def _flag(value: Any) -> bool:
    """``value`` when it is a boolean; ValueError otherwise (pydantic would take ``"yes"``, 1)."""
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false (got {value!r})")
    return value


#: A switch: ``true`` or ``false`` only, not a string or number that pydantic would read as one.
Flag = Annotated[bool, BeforeValidator(_flag)]


class _Duration:
    """Marks a number field that also takes a string with a time unit (``2000ms``)."""


#: A duration in seconds, written as a number of seconds or with a unit (``2s``, ``2000ms``).
Seconds = Annotated[float, BeforeValidator(lambda v: parse_seconds(v)[0]), _Duration()]


def _numbers_in(annotation: Any) -> str | None:
    """``"number"`` when ``annotation`` is an int or float (optional or constrained), ``"list"``
    when it is a list (of lists) of them, else None."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return None if any(isinstance(a, _Duration) for a in args[1:]) else _numbers_in(args[0])
    if origin in (Union, types.UnionType):
        kinds = {_numbers_in(a) for a in args if a is not type(None)}
        return kinds.pop() if len(kinds) == 1 else None
    if origin is list and args:
        return "list" if _numbers_in(args[0]) else None
    return "number" if annotation in (int, float) else None


def _not_a_number(value: Any) -> str | None:
    """Why ``value`` is not a number a user wrote as one (a boolean or a string), or None."""
    if isinstance(value, bool):
        return f"must be a number, not a boolean (got {str(value).lower()})"
    if isinstance(value, str):
        return f"must be a number, not the string {value!r}"
    return None


class Strict(BaseModel):
    """A frozen pydantic model that forbids unknown keys, non-finite numbers, and
    booleans or strings where numbers belong. A null given for a key that takes no null
    but has a default unsets it: the default applies (``--set cluster.router=null``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)
    _number_fields: ClassVar[dict[str, str]] = {}
    _unsettable: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        fields = {
            name: None if any(isinstance(m, _Duration) for m in f.metadata) else _numbers_in(f.annotation)
            for name, f in cls.model_fields.items()
        }  # a bare Seconds field keeps its marker in the metadata, not the annotation
        cls._number_fields = {name: kind for name, kind in fields.items() if kind is not None}
        cls._unsettable = frozenset(
            name for name, f in cls.model_fields.items() if not f.is_required() and not _takes_none(f.annotation)
        )

    @model_validator(mode="before")
    @classmethod
    def _numbers_are_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if any(v is None for v in data.values()):
                data = {k: v for k, v in data.items() if v is not None or k not in cls._unsettable}
            problems = []
            for name, kind in cls._number_fields.items():
                if name in data:
                    value = data[name]
                    problem = _not_a_number(value) if kind == "number" else _not_numbers(value)
                    if problem is not None:
                        problems.append((name, problem))
            if problems:
                from des.errors import ScenarioError  # the scenario names each field's path

                raise ScenarioError(problems)
        return data


def _takes_none(annotation: Any) -> bool:
    """Whether a field of ``annotation`` accepts None."""
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return _takes_none(args[0])
    if origin in (Union, types.UnionType):
        return any(a is type(None) or _takes_none(a) for a in args)
    return annotation is type(None) or annotation is Any


def _not_numbers(value: Any) -> str | None:
    """Why a list (of lists) of numbers holds something that is not one, or None."""
    if not isinstance(value, list):
        return None
    for item in value:
        problem = _not_numbers(item) if isinstance(item, list) else _not_a_number(item)
        if problem is not None:
            return problem
    return None


def resolve_path(path: Path, info: ValidationInfo) -> Path:
    """``path`` made absolute against the validation context's ``base_dir`` (the
    directory of the scenario file), so relative paths mean the same from any CWD.

    A context with ``file_roots`` (folders; the what-if page's uploads, results and working
    directory) refuses a path outside them, links followed, before anything reads it: a
    scenario sent to the page must not make it read (and quote) other files."""
    context = (info.context or {}) if info is not None else {}
    base = context.get("base_dir")
    if not path.is_absolute() and base is not None:
        path = Path(base) / path
    roots = context.get("file_roots")
    if roots is not None and not within(path, roots):
        raise ValueError(
            f"the page reads only files uploaded through it (or under its results folder or working "
            f"directory), not {str(path)!r}: choose the file with the field's button"
        )
    return path


def within(path: Path, roots: Iterable[Path]) -> bool:
    """Whether ``path``, its links followed, lies inside one of ``roots`` (theirs followed too)."""
    try:
        real = path.resolve()
        return any(real.is_relative_to(Path(root).resolve()) for root in roots)
    except (OSError, RuntimeError):  # a link loop, a name too long
        return False


#: A path field of a scenario: relative paths are relative to the scenario file (:func:`resolve_path`).
FilePath = Annotated[Path, AfterValidator(resolve_path)]


_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, ~10x faster, when built


class DuplicateKey(yaml.constructor.ConstructorError):
    """A YAML mapping names the same key twice."""


class _Loader(_SAFE_LOADER):
    """The safe loader, with YAML 1.2's floats and without duplicate keys."""

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`: its keys may be overridden here
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                if key in seen:
                    raise DuplicateKey(None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
            except TypeError:  # an unhashable key: the constructor reports it
                pass
        return super().construct_mapping(node, deep)


#: Floats as YAML 1.2 (and JSON) write them: ``1e9``, ``-2.5E-3``, ``1.2e10``; YAML 1.1 needs ``1.0e+9``.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


#: The most nodes a YAML document's aliases may add when written out. A few hundred bytes
#: of nested aliases ("billion laughs") stand for millions of nodes, which whatever walks
#: the document (a copy, JSON, validation) would expand; a scenario's anchors add dozens.
MAX_ALIAS_NODES = 100_000


class AliasBomb(yaml.constructor.ConstructorError):
    """A YAML document whose aliases expand beyond :data:`MAX_ALIAS_NODES` nodes, or into themselves."""


def load_yaml(text: str) -> Any:
    """A YAML document through libyaml when PyYAML has it, floats as YAML 1.2 writes them, a
    repeated key an error (:class:`DuplicateKey`), aliases bounded (:class:`AliasBomb`;
    every error is a ``yaml.YAMLError``)."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if "&" in text:  # no anchor, no alias
            _refuse_alias_bombs(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _refuse_alias_bombs(root: Any) -> None:
    """Count the nodes of the composed document ``root`` as its aliases write them out
    (each distinct node once, with its size remembered), without expanding anything;
    :class:`AliasBomb` past :data:`MAX_ALIAS_NODES` more than it holds, or on an alias
    inside the node it names."""
    size: dict[int, int] = {}
    started: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if isinstance(node.value, list):
            kids = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else node.value
        else:
            kids = []
        if done:
            size[key] = 1 + sum(size[id(kid)] for kid in kids)
            continue
        if key in size:
            continue
        if key in started:  # reached again below itself: an alias inside its own anchor
            raise AliasBomb(None, None, "an alias refers to a node that holds it", node.start_mark)
        started.add(key)
        stack.append((node, True))
        stack.extend((kid, False) for kid in kids if id(kid) not in size)
    expanded = size[id(root)]
    if expanded - len(size) > MAX_ALIAS_NODES:
        raise AliasBomb(
            None,
            None,
            f"its aliases expand it to {expanded:,} nodes, {expanded - len(size):,} more than it holds; "
            f"at most {MAX_ALIAS_NODES:,} more are allowed",
            root.start_mark,
        )
