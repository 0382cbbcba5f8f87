"""Token-length distributions: positive integers with exactly the moments they state.

Every distribution is a law on the integers ``n >= 1`` given by its CDF ``F`` and
inverse CDF; optional ``min`` / ``max`` *truncate* it (condition on
``min <= n <= max``), never clip it. Sampling is by inversion of the truncated CDF,
``n = F⁻¹(U)`` with ``U ~ Uniform(F(min - 1), F(max))``, so truncation costs no
rejection loop. :meth:`LengthDist.moments` gives the exact mean and variance of what is
sampled (closed forms where they exist, otherwise sums over the pmf), and the tests
check the samplers against them.

- ``fixed{value}``: always ``value``.
- ``uniform{low, high}``: each integer of ``[low, high]`` with equal probability.
- ``geometric{mean}``: ``P(n) = p (1 - p)^(n - 1)``, ``p = 1 / mean``.
- ``lognormal{mean, sigma}``: ``n = round(X)``, ``X`` lognormal with mean ``mean`` and
  log-standard-deviation ``sigma`` (so ``mu = ln(mean) - sigma² / 2``); values that
  round to 0 are excluded by the implicit ``min: 1``.
- ``empirical{path, column}``: the lengths listed in a file, each equally likely.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import (
    Field,
    PositiveFloat,
    PositiveInt,
    PrivateAttr,
    model_validator,
)

from des.config import FilePath, Strict
from des.registry import Registry, check_union, kind_of
from des.workload._buffer import Buffered
from des.workload.formats.checks import existing_file, first_line, positive_ints

#: Lengths a pmf table spans at most (8 MB an array): :meth:`LengthDist.moments` adds the
#: support beyond in closed form, so a heavy tail (lognormal sigma 2.5) costs no memory.
TABLE_POINTS = 2**20


class LengthDist(Strict):
    """Base of the length laws: truncation, inverse-CDF sampling and exact moments."""

    min: PositiveInt | None = None
    max: PositiveInt | None = None

    @model_validator(mode="after")
    def _check_bounds(self) -> LengthDist:
        self._prepare()
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"max: min ({self.min}) is greater than max ({self.max})")
        lo, hi = self._bounds()
        if self._mass(lo, hi) <= 0:
            raise ValueError(f"min/max [{lo}, {hi}] leave no probability mass")
        return self

    def _mass(self, lo: int, hi: float) -> float:
        """P(lo <= N <= hi) as the check of the bounds sees it."""
        return float(self._cdf(np.array([hi]))[0] - self._cdf(np.array([lo - 1]))[0])

    # -- the law, untruncated, on n >= 1 (subclasses) ------------------------------
    def _prepare(self) -> None:
        """Load whatever the law needs (files) before it is checked."""

    def _cdf(self, n: np.ndarray) -> np.ndarray:
        """P(N <= n) for integer arrays ``n`` (0 for n < 1)."""
        raise NotImplementedError

    def _ppf(self, u: np.ndarray) -> np.ndarray:
        """Smallest integer ``n`` with ``P(N <= n) >= u``."""
        raise NotImplementedError

    def _sf(self, n: np.ndarray) -> np.ndarray:
        """P(N > n), accurate in the upper tail where ``1 - cdf`` is not."""
        return 1.0 - self._cdf(n)

    def _upper(self) -> int:
        """An integer beyond which the untruncated law has mass < 1e-15, for sums."""
        return int(self._ppf(np.array([1 - 1e-15]))[0])

    # -- derived ---------------------------------------------------------------------
    def _bounds(self) -> tuple[int, float]:
        lo = self.min or 1
        hi = self.max if self.max is not None else math.inf
        return lo, hi

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` independent lengths (int64) drawn with ``rng``."""
        lo, hi = self._bounds()
        a = self._cdf(np.array([lo - 1]))[0]
        b = self._cdf(np.array([hi]))[0] if math.isfinite(hi) else 1.0
        u = a + (b - a) * rng.random(size)
        n = self._ppf(u)
        # U == a has probability ~0 but maps to lo - 1 under floating point: guard it.
        return np.clip(n, lo, hi if math.isfinite(hi) else None).astype(np.int64)

    def _top(self) -> int:
        """The largest length the pmf table needs: ``max``, or where the untruncated tail is < 1e-15."""
        lo, hi = self._bounds()
        return int(min(hi, max(self._upper(), lo)))

    def _masses(self, lo: int, top: int) -> tuple[np.ndarray, np.ndarray]:
        """The lengths ``lo..top`` and their probabilities under the untruncated law."""
        n = np.arange(lo - 1, top + 1)
        cdf, sf = self._cdf(n), self._sf(n)
        # differences of the CDF below the median and of the survival function above it
        return n[1:], np.where(cdf[1:] < 0.5, np.diff(cdf), -np.diff(sf))

    def pmf_table(self) -> tuple[np.ndarray, np.ndarray]:
        """Support and probabilities of the truncated law (up to a 1e-15 tail)."""
        n, p = self._masses(self._bounds()[0], self._top())
        return n, p / p.sum()

    def _tail(self, c: int, hi: float) -> tuple[float, float, float]:
        """``P(c < N <= hi)``, ``E[N; c < N <= hi]`` and ``E[N²; c < N <= hi]`` of the
        untruncated law, for laws whose table would pass :data:`TABLE_POINTS`."""
        raise NotImplementedError(f"{type(self).__name__} has no closed-form tail")

    def mean_bounds(self) -> tuple[float, float]:
        """Bounds on the sampled mean, cheaper than :meth:`moments` where a law knows them."""
        mean, _ = self.moments()
        return mean, mean

    def moments(self) -> tuple[float, float]:
        """Exact mean and variance of the sampled lengths: sums over the pmf, the part of a
        long support past :data:`TABLE_POINTS` lengths added in closed form."""
        lo, hi = self._bounds()
        top = self._top()
        if top - lo < TABLE_POINTS:
            n, p = self.pmf_table()
            mean = float(np.dot(n, p))
            return mean, float(np.dot((n - mean) ** 2, p))
        cut = lo - 1 + TABLE_POINTS
        n, p = self._masses(lo, cut)
        t0, t1, t2 = self._tail(cut, hi)
        z = float(p.sum()) + t0
        mean = (float(np.dot(n, p)) + t1) / z
        var = (float(np.dot((n - mean) ** 2, p)) + t2 - 2 * mean * t1 + mean**2 * t0) / z
        return mean, var


class Fixed(LengthDist):
    dist: Literal["fixed"] = "fixed"
    value: PositiveInt

    def _cdf(self, n):
        return (np.asarray(n) >= self.value).astype(float)

    def _ppf(self, u):
        return np.full(np.shape(u), self.value, dtype=np.int64)

    def _upper(self) -> int:
        return self.value

    def moments(self) -> tuple[float, float]:
        return float(self.value), 0.0


class Uniform(LengthDist):
    dist: Literal["uniform"] = "uniform"
    low: PositiveInt
    high: PositiveInt

    def _prepare(self) -> None:
        if self.low > self.high:
            raise ValueError(f"high: low ({self.low}) is greater than high ({self.high})")

    def _cdf(self, n):
        k = self.high - self.low + 1
        return np.clip((np.asarray(n, dtype=float) - self.low + 1) / k, 0.0, 1.0)

    def _ppf(self, u):
        k = self.high - self.low + 1
        return (self.low - 1 + np.ceil(np.asarray(u) * k)).astype(np.int64)

    def _upper(self) -> int:
        return self.high

    def moments(self) -> tuple[float, float]:
        lo, hi = self._bounds()
        a, b = max(self.low, lo), min(self.high, hi)  # truncation keeps a uniform law
        return (a + b) / 2, ((b - a + 1) ** 2 - 1) / 12


class Geometric(LengthDist):
    dist: Literal["geometric"] = "geometric"
    mean: float = Field(ge=1)

    @property
    def p(self) -> float:
        return 1.0 / self.mean

    def _cdf(self, n):
        n = np.maximum(np.asarray(n, dtype=float), 0.0)
        return -np.expm1(n * math.log1p(-self.p)) if self.p < 1 else (n >= 1).astype(float)

    def _sf(self, n):
        n = np.maximum(np.asarray(n, dtype=float), 0.0)
        return np.exp(n * math.log1p(-self.p)) if self.p < 1 else (n < 1).astype(float)

    def _ppf(self, u):
        if self.p >= 1:
            return np.ones(np.shape(u), dtype=np.int64)
        n = np.ceil(np.log1p(-np.asarray(u)) / math.log1p(-self.p))
        return np.maximum(n, 1).astype(np.int64)

    def moments(self) -> tuple[float, float]:
        if self.min is None and self.max is None:
            return self.mean, (1 - self.p) / self.p**2
        return super().moments()

    def _tail(self, c: int, hi: float) -> tuple[float, float, float]:
        # memoryless: given N > c, N - c is geometric again (mean 1/p, E[M²] = (2 - p)/p²)
        p = self.p

        def beyond(c: float) -> np.ndarray:
            if not math.isfinite(c):
                return np.zeros(3)
            q = math.exp(c * math.log1p(-p))
            return q * np.array([1.0, c + 1 / p, c * c + 2 * c / p + (2 - p) / p**2])

        t0, t1, t2 = beyond(c) - beyond(hi)
        return float(t0), float(t1), float(t2)


class LogNormal(LengthDist):
    dist: Literal["lognormal"] = "lognormal"
    mean: PositiveFloat
    sigma: PositiveFloat

    @property
    def mu(self) -> float:
        return math.log(self.mean) - self.sigma**2 / 2

    def _partial(self, k: int, a: float, b: float) -> float:
        """``E[X^k; a < X <= b]`` of the continuous lognormal ``X``: ``exp(k mu + k² sigma² / 2)
        (Phi(d(a)) - Phi(d(b)))`` with ``d(x) = (mu + k sigma² - ln x) / sigma``. Through
        ``math.erfc``, so that checking a scenario does not import scipy (sampling does)."""
        mu, s = self.mu, self.sigma

        def phi_d(x: float) -> float:
            if x <= 0:
                return 1.0
            if not math.isfinite(x):
                return 0.0
            return 0.5 * math.erfc(-(mu + k * s * s - math.log(x)) / (s * math.sqrt(2)))

        return math.exp(k * mu + k * k * s * s / 2) * (phi_d(a) - phi_d(b))

    def _mass(self, lo: int, hi: float) -> float:
        return self._partial(0, lo - 0.5, hi + 0.5)  # N = round(X) in [lo, hi]

    def mean_bounds(self) -> tuple[float, float]:
        # round(X) in [lo, hi] is X in [lo - 0.5, hi + 0.5), and rounding moves X by <= 0.5
        lo, hi = self._bounds()
        m = self._partial(1, lo - 0.5, hi + 0.5) / self._partial(0, lo - 0.5, hi + 0.5)
        return m - 0.5, m + 0.5

    def _cdf(self, n):
        from scipy import special

        x = np.asarray(n, dtype=float) + 0.5
        with np.errstate(divide="ignore"):
            z = (np.log(np.maximum(x, 0.0)) - self.mu) / self.sigma
        return special.ndtr(z)

    def _sf(self, n):
        from scipy import special

        x = np.asarray(n, dtype=float) + 0.5
        with np.errstate(divide="ignore"):
            z = (np.log(np.maximum(x, 0.0)) - self.mu) / self.sigma
        return special.ndtr(-z)

    def _ppf(self, u):
        from scipy import special

        x = np.exp(self.mu + self.sigma * special.ndtri(np.asarray(u)))
        return np.ceil(x - 0.5).astype(np.int64)

    def _tail(self, c: int, hi: float) -> tuple[float, float, float]:
        # N = round(X) > c is X > c + 0.5; X's partial moments stand for N's, rounding moving
        # each length by at most 0.5 token past c = 2^20 (1/12 of a token² is added to the
        # second moment, as for a uniform rounding error)
        a, b = c + 0.5, hi + 0.5
        t0 = self._partial(0, a, b)
        return t0, self._partial(1, a, b), self._partial(2, a, b) + t0 / 12

    def _upper(self) -> int:
        from scipy import special

        z = special.ndtri(1 - 1e-15)  # the 1e-15 upper quantile, computed without inversion loss
        return int(math.ceil(math.exp(self.mu + self.sigma * z)))


class Empirical(LengthDist):
    """Lengths read from a file: one integer per line, or the column ``column`` of a CSV."""

    dist: Literal["empirical"] = "empirical"
    path: FilePath
    column: str | None = None
    _values: np.ndarray = PrivateAttr()
    _cum: np.ndarray = PrivateAttr()

    def _prepare(self) -> None:
        try:
            vals = read_lengths(self.path, self.column)
        except ValueError as exc:
            raise ValueError(f"path: {exc}") from None
        values, counts = np.unique(vals, return_counts=True)
        self._values = values
        self._cum = np.cumsum(counts) / counts.sum()

    def _cdf(self, n):
        idx = np.searchsorted(self._values, np.asarray(n), side="right")
        return np.concatenate([[0.0], self._cum])[idx]

    def _ppf(self, u):
        idx = np.searchsorted(self._cum, np.asarray(u), side="left")
        return self._values[np.minimum(idx, len(self._values) - 1)]

    def _upper(self) -> int:
        return int(self._values[-1])

    def _tail(self, c: int, hi: float) -> tuple[float, float, float]:
        v = self._values.astype(float)
        p = np.diff(self._cum, prepend=0.0)
        keep = (v > c) & (v <= hi)
        return float(p[keep].sum()), float(np.dot(v[keep], p[keep])), float(np.dot(v[keep] ** 2, p[keep]))


def read_lengths(path: Path, column: str | None) -> np.ndarray:
    """Positive integer lengths from ``path``; raises ValueError naming the problem."""
    import pandas as pd

    existing_file(path)
    try:
        if column is None:
            frame = pd.read_csv(path, header=None, comment="#")
            if frame.shape[1] != 1:
                raise ValueError(f"{str(path)!r} has {frame.shape[1]} columns; name one with 'column'")
            series = frame.iloc[:, 0]
            if series.size and not _is_number(series.iloc[0]):
                series = series.iloc[1:]  # a header line
        else:
            frame = pd.read_csv(path, comment="#")
            if column not in frame.columns:
                raise ValueError(
                    f"{str(path)!r} has no column {column!r}; columns: {', '.join(map(str, frame.columns))}"
                )
            series = frame[column]
    except (OSError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise ValueError(f"cannot read {str(path)!r}: {first_line(exc)}") from None
    if series.size == 0:
        raise ValueError(f"{str(path)!r} holds no lengths")
    return positive_ints(series, f"{str(path)!r} value #{{row}}")


def _is_number(x) -> bool:
    try:
        float(x)
    except (TypeError, ValueError):
        return False
    return True


LENGTHS: Registry[type[LengthDist]] = Registry("length distribution")
for _cls in (Fixed, Uniform, Geometric, LogNormal, Empirical):
    LENGTHS.register(kind_of(_cls), _cls)

LengthConfig = Annotated[Fixed | Uniform | Geometric | LogNormal | Empirical, Field(discriminator="dist")]
check_union(LengthConfig, LENGTHS)


class LengthStream(Buffered):
    """Draws lengths of ``dist`` one at a time with ``rng`` (chunked: fast and reproducible)."""

    __slots__ = ()

    def __init__(self, dist: LengthDist, rng: np.random.Generator):
        super().__init__(lambda n: dist.sample(rng, n))
