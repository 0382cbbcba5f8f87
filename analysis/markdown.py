"""The report's prose: Markdown templates in ``analysis/templates/``, filled from facts.

Every section of the report is made the same way:

1. ``facts(...)`` reads the section's numbers and verdicts off what the sweeps hold and
   returns them as a dict (plain values, unit-tested on hand-made tables);
2. ``analysis/templates/<name>.md`` holds the section's words, with ``{placeholders}``
   naming facts and their format specs (``{capacity:.2f}``, ``{requests:,}``,
   ``{study[reps]}`` for a fact that is a dict); a literal brace is doubled
   (``{{kind: disaggregated}}``);
3. :func:`render` fills the template with :meth:`str.format_map`.

What a template cannot say by itself (the rows of a table whose shape is data, a
sentence that depends on a verdict) is a string that a small function of the section's
module builds, and ``facts`` holds it under its own name. The templates are read next to
this file, so the scripts find them however they are started (``python -m analysis.x``
from the project root, or imported by the tests).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

TEMPLATES = Path(__file__).resolve().parent / "templates"


def render(name: str, facts: Mapping[str, Any]) -> str:
    """``analysis/templates/<name>.md`` filled with ``facts``; a placeholder the facts lack
    raises KeyError with its name."""
    return (TEMPLATES / f"{name}.md").read_text(encoding="utf-8").format_map(facts)


def row(cells: Iterable[object]) -> str:
    """One row of a Markdown table: ``| a | b |``."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def rows(table: Iterable[Iterable[object]]) -> str:
    """Rows of a Markdown table, one a line."""
    return "\n".join(row(cells) for cells in table)


def join_and(items: Sequence[int]) -> str:
    """``512``, ``512 and 1,024``, ``512, 1,024 and 2,048``."""
    words = [f"{x:,}" for x in items]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]
