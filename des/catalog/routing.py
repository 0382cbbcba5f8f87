"""How a mixture of experts' tokens spread over its experts: the distinct experts a step reads.

A step of ``T`` tokens in a sparse layer of ``E`` experts, ``k`` per token, streams the
weights of every expert at least one of its tokens picked. Under **uniform** routing each
token leaves a given expert out with probability ``1 − k/E``, so the expected number of
distinct experts is ``E · (1 − (1 − k/E)^T)`` (:func:`des.cost.roofline.expected_experts`).

Real routers are skewed: some experts are popular, others rare. **Zipf** routing
(``routing: {zipf: s}``) gives expert ``i`` (1-based, by popularity) the weight ``i^−s``,
normalised to a distribution ``w``; a token picks expert ``i`` with the inclusion probability
``q_i = min(1, c · w_i)``, where ``c`` makes ``Σ q_i = k`` (the ``k`` picks of a token, the
capped experts always picked; solved by water-filling). Tokens pick independently, so the
expected distinct experts are ``Σ_i (1 − (1 − q_i)^T)``: fewer than uniform's for ``s > 0``
(the same ``k`` picks concentrate on fewer experts), and exactly uniform's at ``s = 0``
(every ``q_i = k/E``). :func:`distinct_table` precomputes that sum for every ``T`` up to a
bound at build time, so the per-step cost is a table lookup.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any, Literal

import numpy as np
from pydantic import NonNegativeFloat, ValidationError

from des.config import Strict
from des.errors import ScenarioError, did_you_mean, reword, validation_errors


class Zipf(Strict):
    """Zipf-skewed expert popularity with exponent ``zipf`` (0: uniform)."""

    zipf: NonNegativeFloat


Routing = Literal["uniform"] | Zipf


def routing(value: Any) -> Any:
    """A model's ``routing`` as written, checked as the one it is: ``uniform``, or a mapping
    that is a :class:`Zipf` (its problems named by its own keys, ``zipf``, not by both
    kinds a union would try). ValueError (ScenarioError) otherwise."""
    if value == "uniform" or isinstance(value, Zipf):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"must be 'uniform' or {{zipf: s}}, a Zipf skew s >= 0 (got {value!r})")
    try:
        return Zipf.model_validate(value)
    except ValidationError as exc:
        problems = []
        for err in validation_errors(exc):
            key, kind = ".".join(map(str, err["loc"])), err["type"]
            if kind == "extra_forbidden":
                message = "unknown key" + did_you_mean(key, Zipf.model_fields)
            elif kind == "missing":
                message = "required"
            else:
                message = reword(err["msg"].removeprefix("Value error, "))
                if kind != "scenario_error" and isinstance(err.get("input"), int | float | str):
                    message += f" (got {err['input']!r})"
            problems.append((key, message))
        raise ScenarioError(problems) from None


#: Token counts the precomputed table covers; a step of more tokens reads the table's last
#: entry (at 65 536 tokens every expert with ``q_i ≥ 2e-4`` is all but certainly touched).
TABLE_TOKENS = 1 << 16


def inclusion_probabilities(experts: int, k: int, s: float) -> np.ndarray:
    """Per-expert probability that one token picks it, ``q_i = min(1, c · i^−s / Σ j^−s)``
    with ``Σ q_i = k`` (water-filling over the capped experts). The weights are taken in
    log space, relative to the most popular expert left (``(i / i₀)^−s``, the first 1), so
    a steep skew underflows the rare experts to 0, never the sum: as ``s`` grows the ``k``
    most popular are picked by every token and the others by none, its limit."""
    log_rank = np.log(np.arange(1, experts + 1, dtype=float))
    q = np.empty(experts)
    capped = 0  # the most popular experts, picked by every token
    while True:
        rest = np.exp(-s * (log_rank[capped:] - log_rank[capped]))
        scaled = rest * (k - capped) / rest.sum()
        if scaled[0] <= 1.0 or capped == k:
            q[:capped] = 1.0
            q[capped:] = np.minimum(scaled, 1.0)
            return q
        capped += 1


def distinct_experts(experts: int, miss: float, table: tuple[float, ...] | None, tokens: int) -> float:
    """Expected distinct experts ``tokens`` tokens touch in one sparse layer: ``table``'s
    entry under skewed routing (its last beyond its end), else uniform routing's
    ``E · (1 − (1 − k/E)^T)`` (``miss = 1 − k/E``); 0 for a dense model."""
    if table is not None:
        return table[tokens if tokens < len(table) else -1]
    return experts * (1.0 - miss**tokens) if experts else 0.0


def distinct_table(experts: int, k: int, routing: Routing, tokens: int = TABLE_TOKENS) -> tuple[float, ...] | None:
    """Expected distinct experts of one sparse layer for ``T = 0 … tokens`` tokens under
    ``routing``; None for uniform routing (the closed form needs no table)."""
    if not isinstance(routing, Zipf) or not experts:
        return None
    return _zipf_table(experts, k, routing.zipf, tokens)


@cache
def _zipf_table(experts: int, k: int, s: float, tokens: int) -> tuple[float, ...]:
    q = inclusion_probabilities(experts, k, s)
    t = np.arange(tokens + 1, dtype=float)
    # Σ_i (1 − (1 − q_i)^T), one expert at a time (E × T floats at once would be large)
    total = np.zeros(tokens + 1)
    for qi in q:
        total += -np.expm1(t * np.log1p(-qi)) if qi < 1.0 else (t > 0).astype(float)
    return tuple(total.tolist())


def expected_distinct(experts: int, k: int, routing: Routing, tokens: int) -> float:
    """Expected distinct experts ``tokens`` tokens touch in one sparse layer under ``routing``."""
    if not isinstance(routing, Zipf):
        return experts * (1.0 - (1.0 - k / experts) ** tokens) if experts else 0.0
    q = inclusion_probabilities(experts, k, routing.zipf)
    always = q >= 1.0  # experts every token picks
    rest = -np.expm1(tokens * np.log1p(-q[~always]))
    return float(np.sum(rest) + (np.count_nonzero(always) if tokens > 0 else 0))
