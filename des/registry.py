"""One registry shape for every family of named kinds.

Schedulers, cost models, routers, arrival processes, length distributions and trace
formats are each chosen by a name in the scenario (``scheduler.kind``,
``cost_model.kind``, ``cluster.router``, ``workload.arrival.process``, ...). Each family
keeps its kinds in a :class:`Registry`: :meth:`~Registry.register` adds one (a second
kind of the same name is an error), :meth:`~Registry.get` looks one up (an unknown name
is an error that lists the valid ones) and :meth:`~Registry.names` lists them.

Configuration kinds are pydantic classes whose discriminator field (``kind``,
``process`` or ``dist``) has the kind's name as its default; :func:`kind_of` reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")

#: Fields that carry a configuration's kind name.
DISCRIMINATORS = ("kind", "process", "dist")


class UnknownKind(KeyError):
    """A name no kind of the family is registered under; ``str()`` lists the valid ones."""

    def __init__(self, family: str, name: str, valid: list[str]):
        super().__init__(name)
        self.family, self.name, self.valid = family, name, valid

    def __str__(self) -> str:
        return f"unknown {self.family} {self.name!r}; valid: {', '.join(self.valid)}"


class Registry(Generic[T]):
    """The kinds of one family (``family`` names it in errors), in registration order."""

    def __init__(self, family: str):
        self.family = family
        self._kinds: dict[str, T] = {}

    def register(self, name: str, kind: T) -> T:
        """Add ``kind`` under ``name``; raises ValueError if the name is taken."""
        if name in self._kinds:
            raise ValueError(f"{self.family} {name!r} is already registered")
        self._kinds[name] = kind
        return kind

    def get(self, name: str) -> T:
        """The kind registered as ``name``; raises :class:`UnknownKind` otherwise."""
        try:
            return self._kinds[name]
        except KeyError:
            raise UnknownKind(self.family, name, self.names()) from None

    def names(self) -> list[str]:
        return list(self._kinds)

    def known(self, name: str) -> str:
        """``name``, if a kind is registered under it; otherwise ValueError listing the valid
        ones (the validator of a configuration field that names a kind)."""
        if name not in self._kinds:
            raise ValueError(str(UnknownKind(self.family, name, self.names())))
        return name

    def __contains__(self, name: object) -> bool:
        return name in self._kinds

    def __iter__(self) -> Iterator[str]:
        return iter(self._kinds)

    def __len__(self) -> int:
        return len(self._kinds)


def kind_of(config_cls: type) -> str:
    """The kind name a configuration class declares: the default of its discriminator field."""
    fields: dict[str, Any] = getattr(config_cls, "model_fields", {})
    for key in DISCRIMINATORS:
        if key in fields:
            return str(fields[key].default)
    raise TypeError(f"{config_cls.__name__} has no {'/'.join(DISCRIMINATORS)} field")


C = TypeVar("C", bound=type)


def config_registrar(registry: Registry[Any]) -> Callable[[C], C]:
    """A class decorator registering a configuration class under :func:`kind_of` it."""

    def register(cls: C) -> C:
        registry.register(kind_of(cls), cls)
        return cls

    return register


def union_members(union: Any) -> tuple[type, ...]:
    """The classes of a tagged union ``Annotated[A | B | ..., Field(discriminator=...)]``."""
    from typing import get_args

    inner = get_args(union)[0] if get_args(union) else union
    return get_args(inner) or (inner,)


def check_union(union: Any, registry: Registry[Any]) -> None:
    """Raise TypeError unless the tagged union and the registry hold the same kinds.

    The union is written out so a type checker sees every member's fields; this check
    (run where both are defined) keeps it from drifting from the registry.
    """
    in_union = {kind_of(m) for m in union_members(union)}
    if in_union != set(registry):
        raise TypeError(
            f"{registry.family}: the tagged union holds {sorted(in_union)} but the registry {sorted(registry)}"
        )
