"""Errors raised for invalid user input.

Every problem names the dotted path of the field it concerns, so the CLI can print
one clear line per problem (``error: workload.arrival.rate: must be > 0 (got -1)``)
and exit with status 2 instead of a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class ScenarioError(ValueError):
    """One or more problems in user input, each a ``(dotted_path, message)`` pair."""

    def __init__(self, problems: list[tuple[str, str]] | tuple[str, str]):
        if isinstance(problems, tuple):
            problems = [problems]
        self.problems: list[tuple[str, str]] = list(problems)
        super().__init__("; ".join(f"{p}: {m}" if p else m for p, m in self.problems))

    def lines(self) -> list[str]:
        """The problems as ``error: path: message`` lines."""
        return [f"error: {p}: {m}" if p else f"error: {m}" for p, m in self.problems]

    def for_option(self, option: str, *fields: str) -> ScenarioError:
        """The problems of a value the command-line ``option`` set at ``fields`` (a key and
        the other names it goes by): theirs named by the option (``--rate: must be a finite
        number``), any other's it caused named under it (``--rate-scale: horizon: ...``)."""
        return ScenarioError([(option, m if p in fields else f"{p}: {m}" if p else m) for p, m in self.problems])

    def prefixed(self, prefix: str) -> ScenarioError:
        """The same problems with ``prefix.`` put before every path."""
        return ScenarioError([(f"{prefix}.{p}" if p else prefix, m) for p, m in self.problems])


_REWORD = (
    ("Input should be greater than or equal to", "must be >="),
    ("Input should be greater than", "must be >"),
    ("Input should be less than or equal to", "must be <="),
    ("Input should be less than", "must be <"),
    ("Input should be a valid", "must be a valid"),
    ("Input should be", "must be"),
)


def reword(msg: str) -> str:
    """A pydantic message in the CLI's words (``Input should be greater than 0`` -> ``must be > 0``)."""
    for old, new in _REWORD:
        if msg.startswith(old):
            return new + msg[len(old) :]
    return msg[0].lower() + msg[1:] if msg else msg


def validation_errors(exc: Any) -> list[dict[str, Any]]:
    """The errors of a pydantic ``ValidationError``, where a :class:`ScenarioError` raised
    inside validation (naming fields below the model that raised it) becomes one error of
    type ``scenario_error`` per problem, at its own location and with no input."""
    out: list[dict[str, Any]] = []
    for err in exc.errors(include_url=False):
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, ScenarioError):
            for path, message in cause.problems:
                loc = (*err["loc"], *path.split("."))
                out.append({"type": "scenario_error", "loc": loc, "msg": message, "input": None, "ctx": {}})
        else:
            out.append(err)
    return out


def did_you_mean(name: str, valid: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the valid name closest to ``name`` (case and ``-``/``_``
    aside), or ``""`` when none is close."""
    import difflib

    def plain(text: str) -> str:
        return text.lower().replace("-", "").replace("_", "").replace(".", "")

    by_plain = {plain(v): v for v in valid}
    if plain(name) in by_plain:
        return f" (did you mean {by_plain[plain(name)]!r}?)"
    prefixed = [v for p, v in by_plain.items() if p.startswith(plain(name))] if len(plain(name)) >= 2 else []
    close = difflib.get_close_matches(plain(name), list(by_plain), n=1, cutoff=0.7)
    best = prefixed[0] if len(prefixed) == 1 else (by_plain[close[0]] if close else None)
    return f" (did you mean {best!r}?)" if best is not None else ""
