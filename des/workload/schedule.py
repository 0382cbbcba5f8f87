"""Rate schedules: an arrival rate λ(t) (requests per second) that changes over a run.

A schedule is the ``schedule`` of a non-homogeneous Poisson process (``process: nhpp``)
or the ``modulate`` of another arrival process (its rate times ``λ(t) / mean``). Two
kinds:

- ``piecewise{times, rates}``: rate ``rates[i]`` from ``times[i]`` until ``times[i+1]``
  (seconds), the last one until the horizon. ``times`` start at 0 and increase strictly
  (a quiet start is a rate of 0 from 0). ``piecewise{path}`` reads the same from a CSV
  file with a header and one row per interval: the interval's start in a column
  ``time`` (or ``start``, the same thing), seconds, and its rate in a column ``rate``.
- ``diurnal{mean, peak_to_trough, peak_time, period}``: the sinusoid
  ``λ(t) = mean·(1 + a·cos(2π(t − peak_time)/period))`` with ``a = (r − 1)/(r + 1)``,
  so that its peak over its trough is ``r = peak_to_trough``; ``period`` defaults to a
  day (86400 s); ``peak_time`` and ``period`` take units (``14h``, ``24h``).

Every schedule states its integral ``Λ(t) = ∫₀ᵗ λ(s) ds`` (:meth:`cumulative`, the
requests expected by ``t``) and its inverse ``Λ⁻¹(y) = inf{t : Λ(t) ≥ y}``
(:meth:`inverse`, ``inf`` when the schedule never brings ``y`` requests): closed forms
for ``piecewise`` (a search in the precomputed integrals at the segment starts), and
for ``diurnal`` a safeguarded Newton iteration on one period (Λ grows by
``mean·period`` per period).

**Mean.** :attr:`~Piecewise.mean` is the schedule's own mean rate, independent of any
run: ``mean`` for ``diurnal`` (its mean over a period); for ``piecewise`` the
time-weighted mean of its rates where the last, open-ended rate counts for as long as
the interval before it (a CSV of regular intervals: one interval); a single rate is its
own mean. A ``modulate`` divides by it, and it is the ``rate`` an ``nhpp`` states.
:meth:`mean_rate` is the exact mean over ``[0, horizon]``.

**Thinning** (Lewis & Shedler 1979; :meth:`thinned_gaps`): candidates at a bound rate
``λ̄`` each accepted with probability ``λ(t)/λ̄``. ``piecewise`` takes each segment's
own rate as its bound, so every candidate inside the segment is accepted without a
draw; a candidate past the segment's end is dropped and a new one drawn from the end
(memorylessness), and segments of rate 0 are jumped. ``diurnal`` takes its peak
``mean·(1 + a)`` as the bound. A candidate at which ``λ(t) == λ̄`` is accepted without
a draw, so that a constant schedule gives the gaps of ``poisson{rate}`` byte for byte.
Draws, all from the generator given (a run's ``"arrivals"`` stream): the candidates'
standard exponentials and the acceptance uniforms, each kind ``CHUNK`` at a time
(:class:`~des.workload._buffer.Buffered`), a block of one kind drawn when the last of
that kind is used up; a piecewise schedule draws exponentials only. The cost of a gap
is O(1) amortised: a pointer walks the segments as time advances (no search), and
the time change searches the precomputed integrals by bisection.

**Time change** (:class:`TimeChanged`, ``modulate``): a process is run in operational
time ``τ`` and an event at ``τ`` happens at ``t = Λ_m⁻¹(τ)`` with ``m = λ/mean``; its
rate is multiplied by ``m(t)``, exactly (a Poisson process so moved is the NHPP of
rate ``rate·m(t)`` in law). A constant schedule is the identity and leaves the process
as it was.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from typing import Annotated, Literal

import numpy as np
from numpy.typing import ArrayLike
from pydantic import Field, PositiveFloat, PrivateAttr, model_validator

from des.config import MAX_TIME, FilePath, Seconds, Strict
from des.registry import Registry, check_union, kind_of
from des.workload._buffer import Buffered
from des.workload.formats.checks import show
from des.workload.formats.files import FileProblem, csv_table, utf8_bytes

#: The largest arrival rate (requests per second). A million requests take about 45 s of
#: CPU and 700 MB (reliability review 3: 10^6 req/s for 1 s); at 1e7 req/s one simulated
#: second costs some 8 minutes and 7 GB, and a rate of 1e300 never ends.
MAX_RATE = 1e7
#: The CSV columns a piecewise schedule's file may name its intervals' starts by.
TIME_COLUMNS = ("time", "start")


class Piecewise(Strict):
    """A rate (requests per second) constant on each interval ``[times[i], times[i+1])`` (seconds),
    the last until the horizon; from ``times`` and ``rates``, or from the CSV at ``path``."""

    kind: Literal["piecewise"] = "piecewise"
    times: list[float] | None = None
    rates: list[float] | None = None
    path: FilePath | None = None
    _t: np.ndarray = PrivateAttr()
    _r: np.ndarray = PrivateAttr()
    _cum: np.ndarray = PrivateAttr()

    @model_validator(mode="after")
    def _points(self) -> Piecewise:
        if self.path is not None:
            if self.times is not None or self.rates is not None:
                raise ValueError("path: give the intervals either in a CSV file (path) or as times and rates, not both")
            times, rates = _read_csv(self.path)
            problem = _problem(times, rates)
            if problem is not None:
                column, row, phrase = problem
                where = f" line {row + 2}: {column}" if row is not None else ":"
                raise ValueError(f"path: {self.path.name}{where} {phrase}")
        else:
            if self.times is None or self.rates is None:
                missing = "times" if self.times is None else "rates"
                raise ValueError(f"{missing}: required (or path: a CSV of time,rate)")
            times, rates = np.array(self.times, dtype=float), np.array(self.rates, dtype=float)
            problem = _problem(times, rates)
            if problem is not None:
                column, row, phrase = problem
                where = f" {column}s[{row}] =" if row is not None else ""
                raise ValueError(f"{column}s:{where} {phrase}")
        self._t, self._r = times, rates
        self._cum = np.concatenate([[0.0], np.cumsum(rates[:-1] * np.diff(times))])
        return self

    @property
    def mean(self) -> float:
        """The schedule's mean rate (requests per second): time-weighted, the last rate counted
        for as long as the interval before it; a single rate is its own mean."""
        t, r, cum = self._t, self._r, self._cum
        if len(t) == 1:
            return float(r[0])
        last = float(t[-1] - t[-2])
        return float((cum[-1] + r[-1] * last) / (t[-1] + last))

    @property
    def peak(self) -> float:
        """The highest rate (requests per second)."""
        return float(self._r.max())

    @property
    def constant(self) -> bool:
        """Whether the rate never changes."""
        return bool(np.all(self._r == self._r[0]))

    def scaled(self, factor: float) -> Piecewise:
        """The schedule with every rate multiplied by ``factor``."""
        return Piecewise(times=[float(x) for x in self._t], rates=[float(x) * factor for x in self._r])

    def rate_at(self, t: ArrayLike) -> np.ndarray:
        """λ(t), requests per second (t ≥ 0 seconds)."""
        i = np.searchsorted(self._t, t, side="right") - 1
        return self._r[np.maximum(i, 0)]

    def cumulative(self, t: ArrayLike) -> np.ndarray:
        """Λ(t) = ∫₀ᵗ λ(s) ds: the requests expected by ``t`` seconds (0 for t ≤ 0, inf at inf
        unless the last rate is 0)."""
        x = np.maximum(np.asarray(t, dtype=float), 0.0)
        i = np.searchsorted(self._t, x, side="right") - 1
        r = self._r[i]
        with np.errstate(invalid="ignore"):  # 0 · inf: the last rate 0 brings nothing past its start
            more = np.where(r > 0, r * (x - self._t[i]), 0.0)
        return self._cum[i] + more

    def inverse(self, y: ArrayLike) -> np.ndarray:
        """Λ⁻¹(y) = inf{t : Λ(t) ≥ y}, seconds (0 for y ≤ 0; inf beyond what the schedule brings).

        Never a time inside a segment of rate 0: a point of ``(cum[i], cum[i+1]]`` maps into
        segment ``i``, whose rate is then positive, at most one ulp before its end."""
        y = np.asarray(y, dtype=float)
        t, r, cum = self._t, self._r, self._cum
        i = np.maximum(np.searchsorted(cum, y, side="left") - 1, 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.where(r[i] > 0, t[i] + (y - cum[i]) / r[i], np.inf)
        ends = np.append(np.nextafter(t[1:], -np.inf), np.inf)
        return np.where(y <= 0, 0.0, np.minimum(s, ends[i]))

    def real_time(self) -> Callable[[float], float]:
        """``τ ↦ Λ_m⁻¹(τ)`` for ``m = λ/mean`` (seconds to seconds), one τ at a time by bisection."""
        t, r, ends = self._t.tolist(), self._r.tolist(), [*np.nextafter(self._t[1:], -np.inf).tolist(), math.inf]
        cum, mean, last = self._cum.tolist(), self.mean, len(t) - 1

        def real(tau: float) -> float:
            y = tau * mean
            if y <= 0:
                return 0.0
            i = max(bisect.bisect_left(cum, y) - 1, 0)
            if r[i] == 0:
                return math.inf if i == last else ends[i]
            return min(t[i] + (y - cum[i]) / r[i], ends[i])

        return real

    def mean_rate(self, horizon: float) -> float:
        """The mean rate over ``[0, horizon]`` (requests per second): Λ(horizon) / horizon."""
        return float(self.cumulative(horizon)) / horizon

    def thinned_gaps(self, rng: np.random.Generator, horizon: float = math.inf) -> Callable[[], float]:
        """Gaps (seconds) of the NHPP of rate λ(t) from t = 0, by thinning (:class:`_PiecewiseGaps`)."""
        return _PiecewiseGaps(self._t, self._r, rng, horizon)


class Diurnal(Strict):
    """A day's sinusoid: ``mean·(1 + a·cos(2π(t − peak_time)/period))`` requests per second,
    ``a = (r − 1)/(r + 1)`` for the ratio ``r = peak_to_trough`` of its peak to its trough."""

    kind: Literal["diurnal"] = "diurnal"
    mean: PositiveFloat
    peak_to_trough: float
    peak_time: Seconds
    period: Seconds = 86400.0

    @model_validator(mode="after")
    def _shape(self) -> Diurnal:
        if not self.peak_to_trough >= 1:
            raise ValueError(
                f"peak_to_trough: must be ≥ 1, the peak rate over the trough's (1 is a constant rate; "
                f"got {self.peak_to_trough:g})"
            )
        if not 0 < self.period <= MAX_TIME:
            raise ValueError(f"period: must be > 0 and ≤ {MAX_TIME:g} s (got {self.period:g})")
        if self.peak > MAX_RATE:
            raise ValueError(
                f"mean: its peak of {self.peak:.3g} requests per second is beyond {MAX_RATE:g}, more than a run "
                "can simulate for even a second"
            )
        return self

    def scaled(self, factor: float) -> Diurnal:
        """The sinusoid with its mean (and so every rate) multiplied by ``factor``."""
        return Diurnal.model_validate({**self.model_dump(), "mean": self.mean * factor})

    @property
    def amplitude(self) -> float:
        """``a = (r − 1)/(r + 1)``, in [0, 1)."""
        r = self.peak_to_trough
        return (r - 1) / (r + 1)

    @property
    def peak(self) -> float:
        """The highest rate, ``mean·(1 + a)`` requests per second."""
        return self.mean * (1 + self.amplitude)

    @property
    def constant(self) -> bool:
        return self.amplitude == 0

    @property
    def _omega(self) -> float:
        return 2 * math.pi / self.period

    def rate_at(self, t: ArrayLike) -> np.ndarray:
        """λ(t), requests per second."""
        return self.mean * (1 + self.amplitude * np.cos(self._omega * (np.asarray(t, dtype=float) - self.peak_time)))

    def _unit(self, t: np.ndarray) -> np.ndarray:
        """Λ(t) / mean = t + (a/ω)(sin(ω(t − φ)) + sin(ωφ)), seconds of operational time."""
        w, phi = self._omega, self.peak_time
        return t + (self.amplitude / w) * (np.sin(w * (t - phi)) + math.sin(w * phi))

    def cumulative(self, t: ArrayLike) -> np.ndarray:
        """Λ(t) = ∫₀ᵗ λ(s) ds: the requests expected by ``t`` seconds (inf at inf)."""
        x = np.maximum(np.asarray(t, dtype=float), 0.0)
        finite = np.isfinite(x)
        return np.where(finite, self.mean * self._unit(np.where(finite, x, 0.0)), np.inf)

    def inverse(self, y: ArrayLike) -> np.ndarray:
        """Λ⁻¹(y), seconds: Λ grows by ``mean·period`` a period, so ``y`` falls in period
        ``k = ⌊y / (mean·period)⌋`` and the rest is solved on ``[0, period]`` by Newton's
        method kept inside a bracket that bisection shrinks (Λ/mean is within ``2a/ω`` of t)."""
        u = np.asarray(y, dtype=float) / self.mean
        finite = np.isfinite(u)
        u = np.where(finite, np.maximum(u, 0.0), 0.0)
        p, w, a, phi = self.period, self._omega, self.amplitude, self.peak_time
        k = np.floor(u / p)
        rest = u - k * p
        c = a / w
        lo, hi = np.maximum(rest - 2 * c, 0.0), np.minimum(rest + 2 * c, p)
        s = np.clip(rest, lo, hi)
        tol = 4 * math.ulp(p)
        for _ in range(200):
            f = s + c * (np.sin(w * (s - phi)) + math.sin(w * phi)) - rest
            lo, hi = np.where(f < 0, s, lo), np.where(f > 0, s, hi)
            slope = 1 + a * np.cos(w * (s - phi))
            with np.errstate(divide="ignore", invalid="ignore"):
                step = s - f / slope
            bad = ~((step > lo) & (step < hi))
            nxt = np.where(bad, 0.5 * (lo + hi), step)
            done = (np.abs(nxt - s) <= tol) | (f == 0)
            s = np.where(f == 0, s, nxt)
            if done.all():
                break
        return np.where(finite, k * p + s, np.inf)

    def real_time(self) -> Callable[[float], float]:
        """``τ ↦ Λ_m⁻¹(τ)`` for ``m = λ/mean`` (seconds to seconds), one τ at a time: the
        scalar form of :meth:`inverse`. A time change asks for increasing τ, so Newton's
        method starts from the last answer moved by the last slope, which that answer
        also bounds from below: two or three steps instead of six or seven."""
        p, w, a, phi = self.period, self._omega, self.amplitude, self.peak_time
        c, sin_phi, tol = a / w, math.sin(w * phi), 4 * math.ulp(p)
        sin, cos = math.sin, math.cos
        last = [-1.0, 0.0, 0.0, 1.0]  # the last call's period, rest, answer and slope there

        def real(tau: float) -> float:
            if tau <= 0:
                return 0.0
            if tau == math.inf:
                return math.inf
            k = math.floor(tau / p)
            rest = tau - k * p
            lo, hi = max(rest - 2 * c, 0.0), min(rest + 2 * c, p)
            if k == last[0] and rest >= last[1] and last[3] > 0:
                lo = max(lo, last[2])
                s = min(max(last[2] + (rest - last[1]) / last[3], lo), hi)
            else:
                s = min(max(rest, lo), hi)
            slope = 1.0
            for _ in range(200):
                f = s + c * (sin(w * (s - phi)) + sin_phi) - rest
                slope = 1 + a * cos(w * (s - phi))
                if f == 0:
                    break
                if f < 0:
                    lo = s
                else:
                    hi = s
                step = s - f / slope if slope > 0 else lo
                nxt = step if lo < step < hi else 0.5 * (lo + hi)
                if abs(nxt - s) <= tol:
                    s = nxt
                    break
                s = nxt
            last[:] = [k, rest, s, slope]
            return k * p + s

        return real

    def mean_rate(self, horizon: float) -> float:
        """The mean rate over ``[0, horizon]`` (requests per second): Λ(horizon) / horizon."""
        return float(self.cumulative(horizon)) / horizon

    def thinned_gaps(self, rng: np.random.Generator, horizon: float = math.inf) -> Callable[[], float]:
        """Gaps (seconds) of the NHPP of rate λ(t) from t = 0, by thinning (:class:`_DiurnalGaps`)."""
        return _DiurnalGaps(self, rng, horizon)


def _problem(times: np.ndarray, rates: np.ndarray) -> tuple[str, int | None, str] | None:
    """What is wrong with a piecewise schedule's points: (``time`` or ``rate``, the index of
    the point or None, the problem as a phrase that opens with the value), or None."""
    if len(times) != len(rates):
        return "rate", None, f"{len(rates)} rates for {len(times)} times: one rate per time"
    if len(times) == 0:
        return "time", None, "none given: at least one time (0) and its rate"
    for i, (t, r) in enumerate(zip(times.tolist(), rates.tolist(), strict=True)):
        if not math.isfinite(t):
            return "time", i, f"{t} is not a finite number of seconds"
        if not math.isfinite(r):
            return "rate", i, f"{r} is not a finite number of requests per second"
        if i == 0 and t != 0:
            return "time", i, f"{t:g} s: the times must start at 0 (a quiet start is a rate of 0 from 0)"
        if i > 0 and t <= times[i - 1]:
            how = (
                "repeats the time before it"
                if t == times[i - 1]
                else f"comes before the time before it ({times[i - 1]:g} s)"
            )
            return "time", i, f"{t:g} s {how}: times must increase strictly"
        if t > MAX_TIME:
            return "time", i, f"{t:g} s is beyond {MAX_TIME:g} s (317 years), where a double no longer times a step"
        if r < 0:
            return "rate", i, f"{r:g} (from t = {t:g} s) is negative"
        if r > MAX_RATE:
            return (
                "rate",
                i,
                (
                    f"{r:g} requests per second (from t = {t:g} s) is beyond {MAX_RATE:g}, more than a run can "
                    "simulate for even a second"
                ),
            )
    if not rates.any():
        return "rate", None, "all 0: the schedule brings no request"
    return None


def _read_csv(path) -> tuple[np.ndarray, np.ndarray]:
    """The starts (seconds) and rates of a piecewise schedule's CSV; ValueError naming the problem.

    Read as every CSV des reads (:func:`~des.workload.formats.files.csv_table`: ``#`` starts a
    comment, a row must have the header's number of fields), with spaces after a comma skipped."""
    import pandas as pd

    from des.workload.formats.checks import has_columns

    name = path.name
    try:
        frame = csv_table(utf8_bytes(path), skipinitialspace=True)
    except FileNotFoundError:
        raise ValueError(f"path: no such file {str(path)!r}") from None
    except OSError as exc:
        raise ValueError(f"path: cannot read {str(path)!r}: {getattr(exc, 'strerror', None) or exc}") from None
    except FileProblem as exc:
        raise ValueError(f"path: {name} {exc}") from None
    except pd.errors.EmptyDataError:
        raise ValueError(f"path: {name} is empty: needs a header (time,rate) and one row per interval") from None
    except pd.errors.ParserError as exc:
        raise ValueError(f"path: {name} is not a CSV table: {str(exc).strip().splitlines()[-1]}") from None
    columns = [str(c).strip().lower() for c in frame.columns]
    frame.columns = pd.Index(columns)
    named = [c for c in TIME_COLUMNS if c in columns]
    others = [c for c in columns if c not in (*TIME_COLUMNS, "rate")]
    if len(named) != 1 or "rate" not in columns or others:
        raise ValueError(
            f"path: {name} needs the columns time (or start), seconds, and rate, requests per second "
            f"({has_columns(columns).replace('has: ', 'it has ', 1)})"
        )
    if frame.empty:
        raise ValueError(f"path: {name} has no rows: one per interval (its start and its rate)")
    out = []
    for column, label in ((named[0], "time"), ("rate", "rate")):
        values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
        bad = np.flatnonzero(np.isnan(values))
        if len(bad):
            value = show(frame[column].iloc[bad[0]])
            raise ValueError(f"path: {name} line {bad[0] + 2}: {label} {value} is not a number")
        out.append(values)
    return out[0], out[1]


class _PiecewiseGaps:
    """Gaps of the NHPP of a piecewise rate, by thinning against each segment's own rate.

    A candidate ``E / r_i`` (``E`` standard exponential, drawn ``CHUNK`` at a time from the
    generator: :class:`~des.workload._buffer.Buffered`) inside segment ``i`` is accepted
    without a draw (the rate there is the bound); one at or past the segment's end is
    dropped and the next drawn from the end. Segments of rate 0 are jumped at once
    (``_next``: the first segment of positive rate from each one), and a segment of the
    same rate as the one before is one with it (so a constant schedule, however
    written, draws the gaps of ``poisson{rate}``). The gaps are the
    open loop's own: ``now`` is their sum as it adds them, and one that would reach
    ``horizon`` is inf, as is every one after it. Cost per gap: O(1) plus one per segment end crossed.
    """

    __slots__ = ("_t", "_scale", "_ends", "_next", "_i", "_e", "now", "horizon")

    def __init__(self, times: np.ndarray, rates: np.ndarray, rng: np.random.Generator, horizon: float):
        starts = np.flatnonzero(np.diff(rates, prepend=-1.0) != 0)  # where the rate changes
        times, rates = times[starts], rates[starts]
        n = len(times)
        self._t = times.tolist()
        self._scale = [1.0 / r if r > 0 else math.inf for r in rates.tolist()]
        self._ends = [*times[1:].tolist(), math.inf]
        nxt, k = [n] * (n + 1), n
        for i in range(n - 1, -1, -1):
            if rates[i] > 0:
                k = i
            nxt[i] = k
        self._next = nxt
        self._i = 0
        self._e = Buffered(lambda m: rng.exponential(1.0, m))
        self.now, self.horizon = 0.0, horizon

    def __call__(self) -> float:
        now, t, i = self.now, self.now, self._i
        crossed = False
        while True:
            i = self._next[i]
            if i == len(self._t):
                return self._end()
            if self._t[i] > t:
                t, crossed = self._t[i], True
            if t >= self.horizon:
                return self._end()
            g = self._e() * self._scale[i]
            end = self._ends[i]
            if t + g < end:
                break
            if end >= self.horizon:
                return self._end()
            t, crossed, i = end, True, i + 1
        self._i = i
        if t + g >= self.horizon:
            return self._end()
        gap = (t + g) - now if crossed else g
        self.now = now + gap
        return gap

    def _end(self) -> float:
        """No more arrivals: inf now and on every later call."""
        self.now = math.inf
        return math.inf


class _DiurnalGaps:
    """Gaps of the NHPP of a diurnal rate, by thinning against its peak ``λ̄ = mean·(1 + a)``.

    Candidates come at ``E / λ̄`` apart; one at ``t`` is accepted when ``U·λ̄ < λ(t)``,
    or without a draw when ``λ(t) ≥ λ̄`` (a constant schedule: every one). Draw order:
    ``E`` and ``U`` are each drawn ``CHUNK`` at a time from the generator, a block of one
    kind when the last of that kind is used up. Like :class:`_PiecewiseGaps` the gaps
    are the open loop's own and end at ``horizon`` (inf).
    """

    __slots__ = ("_scale", "_a", "_w", "_phi", "_e", "_u", "now", "horizon")

    def __init__(self, schedule: Diurnal, rng: np.random.Generator, horizon: float):
        self._scale = 1.0 / schedule.peak
        self._a, self._w, self._phi = schedule.amplitude, 2 * math.pi / schedule.period, schedule.peak_time
        self._e = Buffered(lambda m: rng.exponential(1.0, m))
        self._u = Buffered(lambda m: rng.random(m))
        self.now, self.horizon = 0.0, horizon

    def __call__(self) -> float:
        a, gap = self._a, 0.0
        while True:
            gap += self._e() * self._scale
            t = self.now + gap
            if t >= self.horizon:
                self.now = math.inf  # and inf on every later call
                return math.inf
            shape = 1 + a * math.cos(self._w * (t - self._phi))  # λ(t) / mean; the bound is 1 + a
            if shape >= 1 + a or self._u() * (1 + a) < shape:
                break
        self.now += gap
        return gap


class TimeChanged:
    """Gaps of a process run in operational time τ and moved to real time ``t = real(τ)``.

    ``gaps(h)`` makes the process's gaps for an operational horizon ``h``; ``real`` is
    ``Λ_m⁻¹`` and ``operational`` is ``Λ_m``. The real gaps are taken against the open
    loop's own sum of them (``now``), so rounding never accumulates, and end at
    ``horizon`` (inf), as do the operational ones at ``Λ_m(horizon)``.
    """

    __slots__ = ("_gaps", "_real", "_tau", "now", "horizon")

    def __init__(
        self,
        gaps: Callable[[float], Callable[[], float]],
        real: Callable[[float], float],
        operational_horizon: float,
        horizon: float,
    ):
        self._gaps, self._real = gaps(operational_horizon), real
        self._tau, self.now, self.horizon = 0.0, 0.0, horizon

    def __call__(self) -> float:
        if self.now == math.inf:
            return math.inf
        self._tau += self._gaps()
        t = self._real(self._tau)
        if t >= self.horizon:
            self.now = math.inf  # and inf on every later call
            return math.inf
        gap = max(t - self.now, 0.0)
        self.now += gap
        return gap


SCHEDULES: Registry[type[Strict]] = Registry("rate schedule")
for _cls in (Piecewise, Diurnal):
    SCHEDULES.register(kind_of(_cls), _cls)

#: A rate schedule of a scenario (``workload.arrival.schedule``, ``workload.arrival.modulate``).
Schedule = Annotated[Piecewise | Diurnal, Field(discriminator="kind")]
check_union(Schedule, SCHEDULES)


def operational(schedule: Piecewise | Diurnal, t: float) -> float:
    """``Λ_m(t) = Λ(t) / mean``: the operational time (seconds) of real time ``t`` under ``m = λ/mean``."""
    return float(schedule.cumulative(t)) / schedule.mean


def modulated(
    gaps: Callable[[float], Callable[[], float]], schedule: Piecewise | Diurnal, horizon: float
) -> Callable[[], float]:
    """The gaps ``gaps(horizon)`` of a process whose rate is multiplied by ``λ(t)/mean``
    (:class:`TimeChanged`); a constant schedule leaves them as they are."""
    if schedule.constant:
        return gaps(horizon)
    return TimeChanged(gaps, schedule.real_time(), operational(schedule, horizon), horizon)
