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

Lengths pass through float64 (the inverse CDF), which holds every integer only up to
2^53 (:data:`MAX_LENGTH`): every bound and value is at most that, and a law without
``max`` must keep its lengths below it (its upper 1e-15 quantile, after truncation:
:meth:`LengthDist._reach`), else validation names the parameter that sends them
beyond. A truncation ``[min, max]`` must keep a probability of at least
:data:`MIN_MASS`; one deep in the upper tail (below :data:`TAIL`) is sampled by
inverting the survival function, which stays exact there while the CDF rounds to 1.
"""

from __future__ import annotations

import math
from pathlib import Path
from statistics import NormalDist
from typing import Annotated, ClassVar, Literal

import numpy as np
from pydantic import (
    AfterValidator,
    Field,
    PositiveFloat,
    PositiveInt,
    PrivateAttr,
    model_validator,
)

from des.config import FilePath, Strict
from des.registry import Registry, check_union, kind_of
from des.workload._buffer import Buffered
from des.workload.formats.checks import existing_file, first_line, has_columns, positive_ints
from des.workload.formats.files import FileProblem, csv_table, utf8_bytes

#: Lengths a pmf table spans at most (8 MB an array): :meth:`LengthDist.moments` adds the
#: support beyond in closed form, so a heavy tail (lognormal sigma 2.5) costs no memory.
TABLE_POINTS = 2**20

#: The largest length a law may produce or name: float64, through which lengths are
#: drawn (the inverse CDF), holds every integer exactly only up to 2^53.
MAX_LENGTH = 2**53
#: The smallest probability a truncation ``[min, max]`` may keep: below it the law's CDF
#: and survival function, and so its samples and moments, are no longer floats one can
#: invert (1e-15 of it must stay a normal double for :meth:`LengthDist._reach`).
MIN_MASS = 1e-290
#: A truncation keeping less than this of the upper tail (``P(N >= min)``) is sampled by
#: inverting the survival function: the CDF inversion would resolve it to coarser than
#: 1e-10 and round the top of its interval to 1 (an infinite length).
TAIL = 1e-6
#: Floats of lengths are capped here before the int64 cast, so that no draw overflows it.
_CAST_LIMIT = float(2**62)


def _countable(n: int) -> int:
    if n > MAX_LENGTH:
        raise ValueError(f"{n:,} is beyond 2^53 = {MAX_LENGTH:,}, the largest length des counts exactly")
    return n


#: A positive token count des can count exactly.
Length = Annotated[PositiveInt, AfterValidator(_countable)]


def _to_int(x: np.ndarray) -> np.ndarray:
    """Lengths computed as floats, as int64 (an infinite or huge float capped first)."""
    return np.minimum(x, _CAST_LIMIT).astype(np.int64)


def _log_normal_mass(za: float, zb: float) -> float:
    """``ln(Phi(zb) - Phi(za))`` for ``za < zb`` (either may be infinite), through the tail
    whose logarithm does not round: -inf for an interval of no mass."""
    from scipy import special

    if za >= zb:
        return -math.inf
    if za > 0:  # the upper tail: Phi(-za) - Phi(-zb)
        za, zb = -zb, -za
    elif zb > 0:  # across the median: neither tail is small
        mass = 1.0 - float(special.ndtr(za)) - float(special.ndtr(-zb))
        return math.log(mass) if mass > 0 else -math.inf
    la, lb = float(special.log_ndtr(za)), float(special.log_ndtr(zb))
    return lb + math.log1p(-math.exp(la - lb)) if la < lb else -math.inf


#: The largest ``sigma`` of a lognormal law: ``exp(sigma²)``, its second moment over its
#: squared mean, must be a float (its variance is ``mean² (exp(sigma²) - 1)``).
MAX_SIGMA = math.sqrt(math.log(np.finfo(float).max))


def check_sigma(sigma: float) -> None:
    """Raise ValueError (naming ``sigma``) if a lognormal's moments overflow a float."""
    if sigma > MAX_SIGMA:
        raise ValueError(
            f"sigma: {sigma:g} is beyond {MAX_SIGMA:.4g}, where exp(sigma²), the law's second moment "
            "over its squared mean, overflows a float"
        )


class LengthDist(Strict):
    """Base of the length laws: truncation, inverse-CDF sampling and exact moments."""

    min: Length | None = None
    max: Length | None = None
    #: Whether :meth:`_isf` samples truncations deep in the upper tail (laws of unbounded support).
    _TAIL_SAMPLING: ClassVar[bool] = False

    @model_validator(mode="after")
    def _check_bounds(self) -> LengthDist:
        self._prepare()
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"max: min ({self.min}) is greater than max ({self.max})")
        lo, hi = self._bounds()
        mass = self._mass(lo, hi)
        if mass <= 0:
            raise ValueError(f"min/max [{lo}, {hi}] leave no probability mass")
        if mass < MIN_MASS:
            raise ValueError(
                f"min/max [{lo}, {hi}] leave a probability of {mass:.3g}, below {MIN_MASS:g}: "
                "(numerically) no length lies there"
            )
        if not math.isfinite(hi):
            reach = self._reach()
            if not reach <= MAX_LENGTH:
                name = self._reach_cause(reach)
                raise ValueError(
                    f"{name}: {getattr(self, name):g} gives lengths up to {reach:.3g} tokens "
                    f"(the upper 1e-15 quantile{' above min' if self.min else ''}), beyond 2^53 = {MAX_LENGTH:,}, "
                    "the largest length des counts exactly; set max, or narrow the law"
                )
        return self

    def _mass(self, lo: int, hi: float) -> float:
        """P(lo <= N <= hi) as the check of the bounds sees it: differences of the CDF
        below the median, of the survival function above it (where the CDF rounds to 1)."""
        below = self._cdf(np.array([lo - 1]))[0]
        if below < 0.5:
            return float(self._cdf(np.array([hi]))[0] - below)
        return float(self._sf(np.array([lo - 1]))[0] - (self._sf(np.array([hi]))[0] if math.isfinite(hi) else 0.0))

    def _reach(self) -> float:
        """The truncated law's upper 1e-15 quantile (a float, maybe inf): how far its
        lengths go. Laws of unbounded support override it."""
        lo, hi = self._bounds()
        return float(min(hi, max(self._upper(), lo)))

    def _reach_cause(self, reach: float) -> str:
        """The parameter that sends the lengths beyond :data:`MAX_LENGTH`."""
        return "mean"

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

    def _isf(self, v: np.ndarray) -> np.ndarray:
        """Smallest integer ``n`` with ``P(N > n) <= v`` (laws with ``_TAIL_SAMPLING``)."""
        raise NotImplementedError

    def _upper(self) -> float:
        """A length beyond which the untruncated law has mass < 1e-15, for sums (a
        float: inf, or a huge one, where the law reaches past any length)."""
        return float(self._ppf(np.array([1 - 1e-15]))[0])

    # -- derived ---------------------------------------------------------------------
    def _kept(self, lo: int) -> float:
        """``P(N >= lo)`` of the untruncated law, from its survival function."""
        return float(self._sf(np.array([lo - 1]))[0])

    def _bounds(self) -> tuple[int, float]:
        lo = self.min or 1
        hi = self.max if self.max is not None else math.inf
        return lo, hi

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` independent lengths (int64) drawn with ``rng``: the inverse CDF of
        ``U ~ Uniform(F(min - 1), F(max))``, or, for a truncation deep in the upper tail,
        the inverse survival function of ``V ~ Uniform(S(max), S(min - 1))``."""
        lo, hi = self._bounds()
        sa = self._kept(lo)
        if self._TAIL_SAMPLING and sa < TAIL:
            sb = self._sf(np.array([hi]))[0] if math.isfinite(hi) else 0.0
            n = self._isf(sa - (sa - sb) * rng.random(size))  # V > S(max): U < 1
        else:
            a = self._cdf(np.array([lo - 1]))[0]
            b = self._cdf(np.array([hi]))[0] if math.isfinite(hi) else 1.0
            u = a + (b - a) * rng.random(size)
            # U == b has probability ~0 (rounding) but maps to an infinite length when b == 1
            n = self._ppf(np.minimum(u, np.nextafter(b, 0.0)))
        # U == a has probability ~0 but maps to lo - 1 under floating point: guard it.
        return np.clip(n, lo, hi if math.isfinite(hi) else None).astype(np.int64)

    def _top(self) -> int:
        """The largest length the pmf table needs: ``max``, or where the untruncated tail is
        < 1e-15, or, for a truncation deep in the upper tail, where the truncated law's is."""
        lo, hi = self._bounds()
        if self._kept(lo) < TAIL:
            return int(math.ceil(min(hi, self._reach())))
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
    value: Length

    def _cdf(self, n):
        return (np.asarray(n) >= self.value).astype(float)

    def _ppf(self, u):
        return np.full(np.shape(u), self.value, dtype=np.int64)

    def _upper(self) -> float:
        return float(self.value)

    def moments(self) -> tuple[float, float]:
        return float(self.value), 0.0


class Uniform(LengthDist):
    dist: Literal["uniform"] = "uniform"
    low: Length
    high: Length

    def _prepare(self) -> None:
        if self.low > self.high:
            raise ValueError(f"high: low ({self.low}) is greater than high ({self.high})")

    def _cdf(self, n):
        k = self.high - self.low + 1
        return np.clip((np.asarray(n, dtype=float) - self.low + 1) / k, 0.0, 1.0)

    def _ppf(self, u):
        k = self.high - self.low + 1
        return (self.low - 1 + np.ceil(np.asarray(u) * k)).astype(np.int64)

    def _upper(self) -> float:
        return float(self.high)

    def moments(self) -> tuple[float, float]:
        lo, hi = self._bounds()
        a, b = max(self.low, lo), min(self.high, hi)  # truncation keeps a uniform law
        return (a + b) / 2, ((b - a + 1) ** 2 - 1) / 12


class Geometric(LengthDist):
    dist: Literal["geometric"] = "geometric"
    mean: float = Field(ge=1)
    _TAIL_SAMPLING: ClassVar[bool] = True

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
        return _to_int(np.maximum(n, 1))

    def _isf(self, v):
        if self.p >= 1:
            return np.ones(np.shape(v), dtype=np.int64)
        n = np.ceil(np.log(np.asarray(v)) / math.log1p(-self.p))
        return _to_int(np.maximum(n, 1))

    def _reach(self) -> float:
        # memoryless: given N >= min, N - min + 1 is geometric again
        lo, hi = self._bounds()
        tail = math.log(1e-15) / math.log1p(-self.p) if self.p < 1 else 0.0
        return float(min(hi, lo + max(tail - 1, 0.0)))

    def moments(self) -> tuple[float, float]:
        if self.min is None and self.max is None:
            return self.mean, (1 - self.p) / self.p**2
        # truncated to [lo, hi], N - lo has weights exp(-lam x) on x = 0..L, L = hi - lo:
        # mean g(lam) - (L + 1) g((L + 1) lam) and variance k(lam) - (L + 1)² k((L + 1) lam),
        # g(y) = 1 / (e^y - 1), k(y) = e^y / (e^y - 1)², taken without their poles 1/y and
        # 1/y², which cancel: exact for a mean of 1e300 (a uniform law on [lo, hi]) as for 2
        lo, hi = self._bounds()
        if self.p >= 1:
            return float(lo), 0.0
        lam = -math.log1p(-self.p)
        if not math.isfinite(hi):  # memoryless: N - lo + 1 is geometric again
            return lo - 1 + self.mean, (1 - self.p) / self.p**2
        m = hi - lo + 1
        return lo + _g_smooth(lam) - m * _g_smooth(m * lam), _k_smooth(lam) - m * m * _k_smooth(m * lam)


def _g_smooth(y: float) -> float:
    """``1 / (e^y - 1) - 1 / y`` for y > 0 (a series near 0, where the two cancel)."""
    if y < 0.1:
        return -0.5 + y / 12 - y**3 / 720 + y**5 / 30240 - y**7 / 1209600 + y**9 / 47900160
    return math.exp(-y) / -math.expm1(-y) - 1 / y


def _k_smooth(y: float) -> float:
    """``e^y / (e^y - 1)² - 1 / y²`` for y > 0 (a series near 0, where the two cancel)."""
    if y < 0.1:
        y2 = y * y
        return -1 / 12 + y2 / 240 - y2**2 / 6048 + y2**3 / 172800 - y2**4 / 5322240
    return math.exp(-y) / math.expm1(-y) ** 2 - 1 / (y * y)


class LogNormal(LengthDist):
    dist: Literal["lognormal"] = "lognormal"
    mean: PositiveFloat
    sigma: PositiveFloat
    _TAIL_SAMPLING: ClassVar[bool] = True

    def _prepare(self) -> None:
        check_sigma(self.sigma)

    @property
    def mu(self) -> float:
        return math.log(self.mean) - self.sigma**2 / 2

    def _partial(self, k: int, a: float, b: float) -> float:
        """``E[X^k; a < X <= b]`` of the continuous lognormal ``X``: ``exp(k mu + k² sigma² / 2)
        (Phi(d(a)) - Phi(d(b)))`` with ``d(x) = (mu + k sigma² - ln x) / sigma``. Through
        ``math.erfc``, so that checking a scenario does not import scipy (sampling does).
        With both ends below the median of ``ln X``'s law the difference is taken of the
        lower tails (``Phi(-d)``), which do not round to 1; a factor too large for a float
        is applied in logarithms, where the product is one."""
        mu, s = self.mu, self.sigma

        def phi_d(x: float, sign: float = 1.0) -> float:
            if x <= 0:
                return 1.0 if sign > 0 else 0.0
            if not math.isfinite(x):
                return 0.0 if sign > 0 else 1.0
            return 0.5 * math.erfc(-sign * (mu + k * s * s - math.log(x)) / (s * math.sqrt(2)))

        mass = phi_d(a) - phi_d(b)
        if phi_d(a) > 0.5 and phi_d(b) > 0.5:
            mass = phi_d(b, -1.0) - phi_d(a, -1.0)
        power = k * mu + k * k * s * s / 2
        if power < 700 and mass > 1e-280:
            return math.exp(power) * mass
        # a factor beyond a float, or a probability near underflow: their product in logarithms
        z = [(math.log(x) - mu - k * s * s) / s if x > 0 else -math.inf for x in (a, b)]
        v = power + _log_normal_mass(z[0], z[1])
        return math.exp(v) if v < 709 else math.inf

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

        with np.errstate(over="ignore"):
            x = np.exp(self.mu + self.sigma * special.ndtri(np.asarray(u)))
        return _to_int(np.ceil(x - 0.5))

    def _isf(self, v):
        from scipy import special

        with np.errstate(over="ignore"):
            x = np.exp(self.mu - self.sigma * special.ndtri(np.asarray(v)))
        return _to_int(np.ceil(x - 0.5))

    def _log_reach(self) -> float:
        """ln of the truncated law's upper 1e-15 quantile (``max`` ignored): X beyond it has
        probability 1e-15 of what the truncation keeps, ``P(X > min - 0.5)``."""
        lo, _ = self._bounds()
        return self.mu - self.sigma * NormalDist().inv_cdf(1e-15 * self._partial(0, lo - 0.5, math.inf))

    def _reach(self) -> float:
        lo, hi = self._bounds()
        if math.isfinite(hi):
            return float(hi)
        v = self._log_reach()
        return math.exp(v) if v < 709 else math.inf

    def _reach_cause(self, reach: float) -> str:
        # the mean, when it makes at least half of the lengths' orders of magnitude; else the spread
        return "mean" if math.log(self.mean) >= self._log_reach() / 2 else "sigma"

    def _tail(self, c: int, hi: float) -> tuple[float, float, float]:
        # N = round(X) > c is X > c + 0.5; X's partial moments stand for N's, rounding moving
        # each length by at most 0.5 token past c = 2^20 (1/12 of a token² is added to the
        # second moment, as for a uniform rounding error)
        a, b = c + 0.5, hi + 0.5
        t0 = self._partial(0, a, b)
        return t0, self._partial(1, a, b), self._partial(2, a, b) + t0 / 12

    def _upper(self) -> float:
        from scipy import special

        z = special.ndtri(1 - 1e-15)  # the 1e-15 upper quantile, computed without inversion loss
        v = self.mu + self.sigma * z
        return float(math.ceil(math.exp(v))) if v < 709 else math.inf


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

    def _upper(self) -> float:
        return float(self._values[-1])

    def _tail(self, c: int, hi: float) -> tuple[float, float, float]:
        v = self._values.astype(float)
        p = np.diff(self._cum, prepend=0.0)
        keep = (v > c) & (v <= hi)
        return float(p[keep].sum()), float(np.dot(v[keep], p[keep])), float(np.dot(v[keep] ** 2, p[keep]))


def read_lengths(path: Path, column: str | None) -> np.ndarray:
    """Positive integer lengths (tokens) from ``path``, read as every CSV des reads
    (:func:`~des.workload.formats.files.csv_table`: ``#`` starts a comment, every row has the
    first row's number of fields); raises ValueError naming the problem."""
    import pandas as pd

    existing_file(path)
    try:
        data = utf8_bytes(path)
    except (OSError, FileProblem) as exc:
        raise ValueError(f"cannot read {str(path)!r}: {first_line(exc)}") from None
    try:
        if column is None:
            frame = csv_table(data, header=None)
            if frame.shape[1] != 1:
                raise ValueError(f"{str(path)!r} has {frame.shape[1]} columns; name one with 'column'")
            series = frame.iloc[:, 0]
            if series.size and not _is_number(series.iloc[0]):
                series = series.iloc[1:]  # a header line
        else:
            frame = csv_table(data)
            if column not in frame.columns:
                names = has_columns(frame.columns).replace("has: ", "columns: ", 1)
                raise ValueError(f"{str(path)!r} has no column {column!r}; {names}")
            series = frame[column]
    except FileProblem as exc:  # a row of another width than the first
        raise ValueError(f"{str(path)!r} {exc}") from None
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
