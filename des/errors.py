"""Errors raised for invalid user input.

Every problem names the dotted path of the field it concerns, so the CLI can print
one clear line per problem (``error: workload.arrival.rate: must be > 0 (got -1)``)
and exit with status 2 instead of a traceback.
"""

from __future__ import annotations


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

    def prefixed(self, prefix: str) -> ScenarioError:
        """The same problems with ``prefix.`` put before every path."""
        return ScenarioError([(f"{prefix}.{p}" if p else prefix, m) for p, m in self.problems])
