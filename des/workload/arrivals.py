"""Arrival processes: the times at which requests reach the cluster.

Open processes produce inter-arrival gaps (seconds) from their own generator:

- ``poisson{rate}``: exponential gaps of mean ``1 / rate``.
- ``gamma{rate, cv}``: a renewal process with gamma gaps of mean ``1 / rate`` and
  coefficient of variation ``cv`` (shape ``1 / cv²``); ``cv > 1`` is burstier than
  Poisson, ``cv = 1`` is Poisson, ``cv < 1`` is smoother.
- ``mmpp{rates, mean_sojourn, transitions}``: a Markov-modulated Poisson process; in
  state ``i`` requests arrive at ``rates[i]`` per second, the state lasts an exponential
  time of mean ``mean_sojourn[i]`` seconds, then jumps to ``j`` with probability
  ``transitions[i][j]`` (default: uniformly to another state). The process starts in
  its stationary state distribution, so it is stationary from t = 0.
- ``onoff{on_rate, off_rate, mean_on, mean_off}``: the two-state MMPP of bursts
  (``on_rate``) and lulls (``off_rate``, default 0).
- ``nhpp{schedule}``: the non-homogeneous Poisson process of the rate schedule λ(t)
  (:mod:`des.workload.schedule`: ``piecewise`` or ``diurnal``), drawn exactly by
  thinning from the ``"arrivals"`` stream; its gaps end at the horizon.

``modulate: SCHEDULE`` on ``poisson``, ``gamma``, ``mmpp``, ``onoff`` and ``trace``
multiplies the process's rate by ``λ(t)/mean`` of the schedule, exactly, by a change of
time: the process runs in operational time τ, and an event at τ arrives at
``Λ_m⁻¹(τ)``, ``Λ_m(t) = ∫₀ᵗ λ(s)/mean ds`` (:func:`~des.workload.schedule.modulated`;
a replay's recorded times are moved the same way). A constant schedule changes nothing.
A closed loop has no rate to modulate.

Every rate is at most :data:`~des.workload.schedule.MAX_RATE` requests per second, what a
run can simulate for even a second; a gamma's ``cv`` lies in ``[MIN_CV, MAX_CV]``; a
closed loop has at most :data:`MAX_USERS` users, whose retries after rejections stay
within ``MAX_RATE``. The states of an MMPP (or onoff) change at most ``MAX_RATE`` times a
second on average (each change is a draw, like an arrival), and its gaps stop at the
horizon (:class:`_MMPPGaps`): a process that almost never brings an arrival
(``mean_on: 1e-9, mean_off: 1e9``) ends a run on time. One of three or more states
must bring an arrival every :data:`MAX_VISITS` state changes or more often (two states
skip such stretches in bulk). A modulated process stays within ``MAX_RATE`` at its schedule's peak.

Closed users and trace replays are arrival processes too. Every arrival process
makes its own SimPy processes from the run's :class:`~des.workload.source.Sources`
(``processes``; their bodies live in :mod:`des.workload.source`), so that whoever builds
a run never asks which kind it has. Every open process states its exact long-run
``rate`` (of a schedule's process: the schedule's mean, see
:attr:`~des.workload.schedule.Piecewise.mean`); :func:`expected_count` and
:func:`expected_time` give the requests expected by a time and the time by which a
count is expected, exactly under a schedule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np
from pydantic import (
    AfterValidator,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    PrivateAttr,
    model_validator,
)

from des.config import FilePath, Strict
from des.registry import Registry, check_union, kind_of
from des.workload._buffer import Buffered
from des.workload.formats import TRACE_FORMATS, infer_format, read_trace
from des.workload.formats.base import HASH_BLOCK_TOKENS, OptionError, ReadOptions, TraceFormat
from des.workload.schedule import MAX_RATE, Diurnal, Piecewise, Schedule, modulated, operational
from des.workload.source import Session, Sources, closed_user, open_loop, open_sessions, trace_replay
from des.workload.trace import TraceStats, trace_stats
from des.workload.trace_content import trace_requests

if TYPE_CHECKING:
    import pandas as pd

#: The burstiest gamma process: with shape 1/cv² its gaps underflow to 0 s but for one
#: in cv²/709, so beyond cv 1000 arrivals come in clumps of over 1,400 requests at one
#: instant (140,000 at cv 10^4), each followed by a lull of about cv²/rate seconds.
MAX_CV = 1e3
#: The smoothest gamma process: its shape 1/cv² must be a float (1e300).
MIN_CV = 1e-150
#: The most states an MMPP draw visits one by one: a two-state process jumps the on/off
#: cycles beyond in bulk; one of three or more states must bring an arrival at least
#: once per this many state changes on average.
MAX_VISITS = 10_000
#: The most closed-loop users: each is a SimPy process; the review's 10^6 users held
#: 1.7 GB and had not finished 60 s in 400 s.
MAX_USERS = 1_000_000


def _simulable(rate: float) -> float:
    if rate > MAX_RATE:
        raise ValueError(
            f"{rate:g} requests per second is beyond {MAX_RATE:g}, more than a run can simulate for even "
            "a second (a million requests take about 45 s and 700 MB)"
        )
    return rate


#: An arrival rate a run can simulate (requests per second).
Rate = Annotated[PositiveFloat, AfterValidator(_simulable)]

#: A rate schedule that multiplies a process's rate by ``λ(t)/mean`` (left out of dumps when unset).
Modulate = Annotated[Schedule | None, Field(exclude_if=lambda v: v is None)]


def _modulation_simulable(rate: float, schedule: Piecewise | Diurnal | None) -> None:
    """ValueError when a process of long-run ``rate`` modulated by ``schedule`` goes beyond
    :data:`MAX_RATE` at the schedule's peak."""
    if schedule is None:
        return
    peak = rate * schedule.peak / schedule.mean
    if peak > MAX_RATE:
        raise ValueError(
            f"modulate: the schedule's peak is {schedule.peak / schedule.mean:.3g} times its mean, so "
            f"{rate:g} requests per second become {peak:.3g} there, beyond {MAX_RATE:g}"
        )


class Open(Strict):
    """An open arrival process: requests (or conversations) at the epochs of a point
    process of gaps drawn by ``gaps(rng)``, whoever is already in the system."""

    def gaps(self, rng: np.random.Generator, horizon: float = math.inf) -> Callable[[], float]:
        """A callable returning successive gaps (seconds) from t = 0; one that would end past
        ``horizon`` may be returned as inf (the open loop stops there anyway)."""
        raise NotImplementedError

    def arrival_gaps(self, rng: np.random.Generator, horizon: float = math.inf) -> Callable[[], float]:
        """The gaps of the arrivals: :meth:`gaps`, moved by ``modulate`` when the process has one."""
        schedule = getattr(self, "modulate", None)
        if schedule is None:
            return self.gaps(rng, horizon)
        return modulated(lambda h: self.gaps(rng, h), schedule, horizon)

    def processes(self, src: Sources) -> list[Session]:
        """One process: new requests at the epochs, or conversations begun at them."""
        gaps = self.arrival_gaps(src.streams["arrivals"], src.duration)
        if src.start is not None:
            return [open_sessions(src.env, gaps, src.new(), src.start, src.duration, src.budget)]
        return [open_loop(src.env, gaps, src.new(), src.submit, src.duration, src.budget)]


class Poisson(Open):
    process: Literal["poisson"] = "poisson"
    rate: Rate
    modulate: Modulate = None

    @model_validator(mode="after")
    def _modulation(self) -> Poisson:
        _modulation_simulable(self.rate, self.modulate)
        return self

    def gaps(self, rng: np.random.Generator, horizon: float = math.inf):
        scale = 1.0 / self.rate
        return Buffered(lambda n: rng.exponential(scale, n))


class Gamma(Open):
    process: Literal["gamma"] = "gamma"
    rate: Rate
    cv: PositiveFloat = 1.0
    modulate: Modulate = None

    @model_validator(mode="after")
    def _check_cv(self) -> Gamma:
        if self.cv > MAX_CV:
            raise ValueError(
                f"cv: {self.cv:g} is beyond {MAX_CV:g}: a gamma of shape 1/cv² draws gaps that underflow to 0 s "
                "but for about one in cv²/709, so requests would come in clumps at single instants, not as a "
                "burstier stream"
            )
        if self.cv < MIN_CV:
            raise ValueError(f"cv: {self.cv:g} is below {MIN_CV:g}, where the gamma's shape 1/cv² overflows a float")
        _modulation_simulable(self.rate, self.modulate)
        return self

    def gaps(self, rng: np.random.Generator, horizon: float = math.inf):
        shape = 1.0 / self.cv**2
        scale = 1.0 / (self.rate * shape)
        return Buffered(lambda n: rng.gamma(shape, scale, n))


class MMPP(Open):
    process: Literal["mmpp"] = "mmpp"
    rates: list[Annotated[NonNegativeFloat, AfterValidator(_simulable)]] = Field(min_length=2)
    mean_sojourn: list[PositiveFloat] = Field(min_length=2)
    transitions: list[list[NonNegativeFloat]] | None = None
    modulate: Modulate = None

    @model_validator(mode="after")
    def _check(self) -> MMPP:
        k = len(self.rates)
        if len(self.mean_sojourn) != k:
            raise ValueError(f"mean_sojourn: needs {k} entries, one per rate (got {len(self.mean_sojourn)})")
        if not any(self.rates):
            raise ValueError("rates: at least one state must have a positive rate")
        if self.transitions is not None:
            m = self.transitions
            if len(m) != k or any(len(row) != k for row in m):
                raise ValueError(f"transitions: must be a {k}x{k} matrix")
            for i, row in enumerate(m):
                if row[i] != 0:
                    raise ValueError(f"transitions: row {i} must have 0 on the diagonal")
                if abs(sum(row) - 1) > 1e-9:
                    raise ValueError(f"transitions: row {i} sums to {sum(row)}, not 1")
        w, s = self.state_probabilities(), np.array(self.mean_sojourn)
        changes = float(np.sum(w / s))  # state changes per second, on average
        if changes > MAX_RATE:
            raise ValueError(
                f"mean_sojourn: the states change {changes:.3g} times a second on average, beyond {MAX_RATE:g} "
                "(each change is a draw, like an arrival)"
            )
        if k > 2 and not changes <= MAX_VISITS * self.rate:
            raise ValueError(
                f"rates: the process brings one arrival every {changes / self.rate:.3g} state changes on average, "
                f"beyond {MAX_VISITS:,}: the states of a chain of more than two are drawn one by one "
                "(raise rates or mean_sojourn of the states with arrivals)"
            )
        _modulation_simulable(self.rate, self.modulate)
        return self

    @property
    def jump_matrix(self) -> np.ndarray:
        k = len(self.rates)
        if self.transitions is not None:
            return np.array(self.transitions, dtype=float)
        m = np.full((k, k), 1.0 / (k - 1))
        np.fill_diagonal(m, 0.0)
        return m

    def state_probabilities(self) -> np.ndarray:
        """Long-run fraction of time spent in each state."""
        p = self.jump_matrix
        k = len(self.rates)
        # stationary law of the embedded jump chain: pi P = pi, sum pi = 1
        a = np.vstack([p.T - np.eye(k), np.ones(k)])
        b = np.zeros(k + 1)
        b[-1] = 1.0
        pi = np.linalg.lstsq(a, b, rcond=None)[0]
        w = pi * np.array(self.mean_sojourn)
        return w / w.sum()

    @property
    def rate(self) -> float:
        """Long-run arrival rate, requests per second."""
        return float(np.dot(self.state_probabilities(), self.rates))

    def gaps(self, rng: np.random.Generator, horizon: float = math.inf):
        return _MMPPGaps(
            np.array(self.rates),
            np.array(self.mean_sojourn),
            self.jump_matrix,
            self.state_probabilities(),
            rng,
            horizon,
        )


class OnOff(Open):
    process: Literal["onoff"] = "onoff"
    on_rate: Rate
    off_rate: Annotated[NonNegativeFloat, AfterValidator(_simulable)] = 0.0
    mean_on: PositiveFloat
    mean_off: PositiveFloat
    modulate: Modulate = None

    @model_validator(mode="after")
    def _changes_simulable(self) -> OnOff:
        changes = 2 / (self.mean_on + self.mean_off)  # state changes per second, on average
        if changes > MAX_RATE:
            name = "mean_on" if self.mean_on <= self.mean_off else "mean_off"
            raise ValueError(
                f"{name}: {getattr(self, name):g} s: the states change {changes:.3g} times a second on average, "
                f"beyond {MAX_RATE:g} (each change is a draw, like an arrival)"
            )
        _modulation_simulable(self.rate, self.modulate)
        return self

    def as_mmpp(self) -> MMPP:
        return MMPP(rates=[self.on_rate, self.off_rate], mean_sojourn=[self.mean_on, self.mean_off])

    @property
    def rate(self) -> float:
        return (self.on_rate * self.mean_on + self.off_rate * self.mean_off) / (self.mean_on + self.mean_off)

    def gaps(self, rng: np.random.Generator, horizon: float = math.inf):
        return self.as_mmpp().gaps(rng, horizon)


class NHPP(Open):
    """The non-homogeneous Poisson process of rate ``schedule`` λ(t), requests per second.

    Drawn by thinning (:meth:`~des.workload.schedule.Piecewise.thinned_gaps`): exactly
    the law of the schedule, a constant schedule the gaps of ``poisson{rate}`` from the
    same seed, byte for byte. ``rate`` is the schedule's mean; :func:`expected_count` is
    its integral Λ(t). ``rate_scale`` multiplies every rate of the schedule (what ``des
    capacity`` and ``des plan`` push on: how much more of this day fits).
    """

    process: Literal["nhpp"] = "nhpp"
    schedule: Schedule
    rate_scale: PositiveFloat = 1.0
    _scaled: Schedule = PrivateAttr()

    @model_validator(mode="after")
    def _scale(self) -> NHPP:
        if self.rate_scale == 1.0:
            self._scaled = self.schedule
            return self
        try:
            self._scaled = self.schedule.scaled(self.rate_scale)
        except ValueError as exc:
            raise ValueError(f"rate_scale: {self.rate_scale:g} takes the schedule beyond what a run can simulate "
                             f"({str(exc).splitlines()[0]})") from None  # fmt: skip
        return self

    @property
    def scaled(self) -> Schedule:
        """The schedule the arrivals follow: ``schedule`` with every rate times ``rate_scale``."""
        return self._scaled

    @property
    def rate(self) -> float:
        """The scaled schedule's mean rate, requests per second (:attr:`~des.workload.schedule.Piecewise.mean`)."""
        return self._scaled.mean

    def gaps(self, rng: np.random.Generator, horizon: float = math.inf):
        return self._scaled.thinned_gaps(rng, horizon)


class _MMPPGaps:
    """Gaps of an MMPP, drawn exactly by racing the next arrival against the state's end.

    The gaps follow one another from t = 0 (``now`` is their sum, as the open loop adds
    them): a draw whose states reach ``horizon`` before an arrival returns inf there,
    without visiting the states beyond, where the open loop would stop anyway. A two-state
    process that visits :data:`MAX_VISITS` states in one draw without an arrival jumps the
    rest of the draw in whole cycles (:meth:`_cycles`). Below both, every draw is made as
    it always was: the same draws in the same order.
    """

    def __init__(self, rates, sojourn, jumps, start, rng: np.random.Generator, horizon: float = math.inf):
        self.rates, self.sojourn, self.jumps, self.rng = rates, sojourn, jumps, rng
        self.cum_jumps = np.cumsum(jumps, axis=1)
        self.state = int(rng.choice(len(rates), p=start))
        self.left = rng.exponential(sojourn[self.state])  # time left in the current state
        self._u = Buffered(lambda n: rng.exponential(1.0, n))
        self.now, self.horizon = 0.0, horizon

    def __call__(self) -> float:
        gap = 0.0
        visits = 0
        while True:
            r = self.rates[self.state]
            t = self._u() / r if r > 0 else math.inf
            if t <= self.left:
                self.left -= t
                self.now += gap + t
                return gap + t
            gap += self.left
            if self.now + gap >= self.horizon:
                return math.inf
            visits += 1
            if visits >= MAX_VISITS and len(self.rates) == 2:
                return self._cycles(gap)
            row = self.cum_jumps[self.state]
            self.state = min(int(np.searchsorted(row, self.rng.random(), side="right")), len(row) - 1)
            self.left = self.rng.exponential(self.sojourn[self.state])

    def _cycles(self, gap: float) -> float:
        """The rest of a two-state draw, ``gap`` seconds in, at the end of a state: whole
        cycles (the other state, then this one) without an arrival, then the arrival.

        A visit to state x brings no arrival with probability ``f = 1 / (1 + r s)`` (its
        exponential end, mean ``s``, beats the first arrival, rate ``r``); its length is
        then exponential of mean ``s f``, and so is the time to the arrival in a visit that
        has one. So the cycles without an arrival are geometric in number, ``C``, and take
        ``Gamma(C, s_a f_a) + Gamma(C, s_b f_b)`` seconds; the next cycle has the arrival
        in its first state with probability ``(1 - f_a) / (1 - f_a f_b)``. After it the
        state lasts a fresh exponential (memorylessness), as after any arrival.
        """
        rng = self.rng
        a, b = 1 - self.state, self.state  # the order the states come in
        r, s = self.rates, self.sojourn
        log_fa, log_fb = -math.log1p(r[a] * s[a]), -math.log1p(r[b] * s[b])
        if log_fa + log_fb == 0.0:  # no arrival a float can tell from never
            return math.inf
        mean_a, mean_b = s[a] * math.exp(log_fa), s[b] * math.exp(log_fb)
        cycles_float = math.log(1.0 - rng.random()) / (log_fa + log_fb)
        if not math.isfinite(cycles_float):
            return math.inf
        cycles = math.floor(cycles_float)
        if cycles > 0:
            gap += rng.gamma(cycles, mean_a) + rng.gamma(cycles, mean_b)
        # which state of the next cycle brings the arrival: a, or b after an arrival-free a
        p_a = -math.expm1(log_fa) / -math.expm1(log_fa + log_fb)
        if rng.random() < p_a:
            self.state = a
        else:
            gap += rng.exponential(mean_a)
            self.state = b
        gap += rng.exponential(mean_a if self.state == a else mean_b)
        self.left = rng.exponential(s[self.state])
        if self.now + gap >= self.horizon:
            return math.inf
        self.now += gap
        return gap


class Closed(Strict):
    """``concurrency`` users, each sending a request, waiting for it, then thinking."""

    process: Literal["closed"] = "closed"
    concurrency: PositiveInt = Field(le=MAX_USERS)
    think_time: NonNegativeFloat = 0.0
    think_dist: Literal["fixed", "exponential"] = "exponential"
    retry_delay: PositiveFloat = 1.0
    modulate: Annotated[object, Field(exclude_if=lambda v: v is None)] = None

    @model_validator(mode="after")
    def _retries_simulable(self) -> Closed:
        if self.modulate is not None:
            raise ValueError(
                "modulate: a closed loop has no arrival rate to modulate: each user sends when its last answer "
                "is back (use an open process, e.g. poisson, with modulate, or an nhpp)"
            )
        # users whose requests are all rejected send one every retry_delay (+ think) seconds
        if self.concurrency / self.retry_delay > MAX_RATE:
            raise ValueError(
                f"retry_delay: {self.retry_delay:g} s lets {self.concurrency:,} users retry rejected requests "
                f"{self.concurrency / self.retry_delay:.3g} times a second, beyond {MAX_RATE:g} requests per second"
            )
        return self

    def think(self, rng: np.random.Generator):
        if self.think_time == 0:
            return lambda: 0.0
        if self.think_dist == "fixed":
            return lambda: self.think_time
        return Buffered(lambda n: rng.exponential(self.think_time, n))

    def processes(self, src: Sources) -> list[Session]:
        """One process per user, its think times drawn from the ``"think"`` stream, its
        client's turnaround from ``src.turnaround``."""
        think = self.think(src.streams["think"])
        make = src.new()
        return [
            closed_user(src.env, think, make, src.submit, src.duration, src.budget, self.retry_delay, src.turnaround)
            for _ in range(self.concurrency)
        ]


class Trace(Strict):
    """Replay of a recorded trace: its requests at their recorded times, with their lengths.

    ``format`` says how to read ``path``, one of :data:`des.workload.formats.TRACE_FORMATS`
    (``csv``, ``jsonl``, ``mooncake``, ``azure``, ``burstgpt``, ``vllm-bench``). Without
    it the file name decides: ``.csv`` -> csv, ``.jsonl``/``.ndjson`` -> jsonl, ``.json``
    -> vllm-bench, anything else -> csv (:func:`~des.workload.formats.infer_format`).

    A request recorded at ``t`` arrives at ``(t - t0) * time_scale / rate_scale`` seconds,
    where ``t0`` is the trace's first arrival: logs hold epoch timestamps, and a replay
    starts at 0. ``absolute_times: true`` keeps the recorded times (``t0 = 0``).

    - ``time_scale`` converts the file's time unit to seconds. Unset, it is the format's
      own unit (:attr:`unit_seconds`): 0.001 for ``mooncake``, whose timestamps are
      milliseconds, 1 for every other format. Set, it replaces it (0.001 for a CSV of
      milliseconds).
    - ``rate_scale`` multiplies the load: 2 replays the same requests twice as fast
      (every gap halved), 0.5 half as fast. It is the parameter ``des capacity``
      searches on a trace: how much more of this traffic fits.
    - ``model`` keeps only the rows of one model (``burstgpt``: ``ChatGPT`` or ``GPT-4``),
      ``log_type`` those of one log type (``burstgpt``: ``Conversation log`` or ``API log``).
    - ``hash_block_tokens``: how many prompt tokens each of a row's ``hash_ids`` covers
      (512, Mooncake's block size).
    - ``max_concurrency``: at most this many of the trace's requests in the system at once;
      one due while they are waits for one to leave and arrives when sent (a benchmark
      client's semaphore, as ``vllm bench serve --max-concurrency``; rows all at 0 make a
      closed loop of that many users).
    - ``modulate``: a rate schedule whose shape the replay takes on: a request due at
      ``τ`` (after the scales above) arrives at ``Λ_m⁻¹(τ)``, so its rate is multiplied
      by ``λ(t)/mean`` (:mod:`des.workload.schedule`); rows past what a schedule ending
      in rate 0 brings never arrive (:attr:`notes` counts them).

    :attr:`table` is the replay: the trace table of :mod:`des.workload.formats.base`
    with ``arrival_time`` in simulated seconds; :attr:`notes` says what the reader
    skipped on purpose (e.g. BurstGPT's failed requests).
    """

    process: Literal["trace"] = "trace"
    path: FilePath
    format: Annotated[str, AfterValidator(TRACE_FORMATS.known)] | None = None
    time_scale: PositiveFloat | None = None
    rate_scale: PositiveFloat = 1.0
    absolute_times: bool = False
    model: str | None = None
    log_type: str | None = None
    hash_block_tokens: PositiveInt = HASH_BLOCK_TOKENS
    max_concurrency: PositiveInt | None = Field(default=None, le=MAX_USERS)
    modulate: Modulate = None
    _table: pd.DataFrame = PrivateAttr()

    @model_validator(mode="after")
    def _read(self) -> Trace:
        fmt = self.trace_format
        for option in ("model", "log_type"):
            if getattr(self, option) is not None and option not in fmt.filters:
                able = ", ".join(n for n in TRACE_FORMATS if option in TRACE_FORMATS.get(n).filters)
                what = option.replace("_", " ")
                raise ValueError(f"{option}: a {fmt.name} trace has no {what} column to filter on (only {able})")
        options = ReadOptions(hash_block_tokens=self.hash_block_tokens, model=self.model, log_type=self.log_type)
        try:
            self._table = read_trace(self.path, self.format, options)
        except OptionError as exc:
            raise ValueError(f"{exc.field}: {exc}") from None
        except ValueError as exc:
            raise ValueError(f"path: {exc}") from None
        return self

    @property
    def trace_format(self) -> TraceFormat:
        """The format the file is read in: ``format``, or the one its name implies."""
        return TRACE_FORMATS.get(self.format or infer_format(self.path))

    @property
    def unit_seconds(self) -> float:
        """Seconds per time unit of the file: ``time_scale``, else the format's unit."""
        return self.time_scale if self.time_scale is not None else self.trace_format.unit_seconds

    @property
    def offset(self) -> float:
        """Recorded time (file units) moved to t = 0: the first arrival, or 0 with ``absolute_times``."""
        return 0.0 if self.absolute_times else float(self._table["arrival_time"].iloc[0])

    @property
    def table(self) -> pd.DataFrame:
        """The trace's rows sorted by arrival, with arrival times in simulated seconds.

        Columns ``arrival_time``, ``prompt_tokens``, ``output_tokens`` and those of
        ``conversation_id``, ``prefix_group``, ``prefix_tokens``, ``hash_ids`` the file has
        (:mod:`des.workload.formats.base` gives their types and sentinels).
        """
        t = self._table.copy()
        since = t["arrival_time"] - self.offset
        ticks = self.trace_format.ticks_per_second
        if self.time_scale is None and ticks != 1:
            t["arrival_time"] = since / (ticks * self.rate_scale)
        else:
            t["arrival_time"] = since * (self.unit_seconds / self.rate_scale)
        schedule = self.modulate
        if schedule is not None and not schedule.constant:
            real = schedule.inverse(t["arrival_time"].to_numpy() * schedule.mean)
            t["arrival_time"] = real
            t = t[np.isfinite(real)]
        return t

    @property
    def recorded_start(self) -> str:
        """The first arrival as recorded: a UTC date and time when the file's clock has a date
        (Azure's TIMESTAMP), else its time in the file's unit."""
        origin = self._table.attrs.get("clock_origin")
        first = float(self._table["arrival_time"].iloc[0])
        if origin is None:
            return f"{first:,.6g}"
        import pandas as pd

        stamp = pd.Timestamp(origin) + pd.Timedelta(seconds=first * self.trace_format.unit_seconds)
        return f"{stamp:%Y-%m-%d %H:%M:%S.%f}"[:-3] + " UTC"

    @property
    def notes(self) -> list[str]:
        """What the reader skipped on purpose, one sentence each (empty when nothing)."""
        notes = list(self._table.attrs.get("notes", []))
        lost = len(self._table) - len(self.table)
        if lost:
            notes.append(
                f"{lost:,} rows come after all the requests the modulating schedule brings (its last rate is 0) "
                "and never arrive"
            )
        return notes

    def stats(self) -> TraceStats:
        """Requests, span, mean rate and burstiness (cv of the gaps) of the replayed arrivals."""
        return trace_stats(self.table["arrival_time"].to_numpy())

    def processes(self, src: Sources) -> list[Session]:
        """One process replaying the rows, with the content they state (:mod:`des.workload.trace_content`)."""
        t = self.table
        specs = trace_requests(t, src.ids, self.hash_block_tokens, src.shared_prefix)
        times = t["arrival_time"].tolist()
        return [trace_replay(src.env, times, specs, src.submit, src.duration, src.budget, self.max_concurrency)]


def expected_count(arrival: object, t: float) -> float | None:
    """The requests an open process is expected to bring by ``t`` seconds (None: not an open
    process): ``Λ(t)`` for an nhpp, ``rate · Λ_m(t)`` for a modulated process, else ``rate · t``."""
    if isinstance(arrival, NHPP):
        return float(arrival.scaled.cumulative(t))
    if isinstance(arrival, Poisson | Gamma | MMPP | OnOff):
        schedule = arrival.modulate
        return arrival.rate * (operational(schedule, t) if schedule is not None else t)
    return None


def expected_time(arrival: object, n: float) -> float | None:
    """The time (seconds) by which an open process is expected to have brought ``n`` requests,
    the inverse of :func:`expected_count` (inf when a schedule never brings that many; None:
    not an open process)."""
    if isinstance(arrival, NHPP):
        return float(arrival.scaled.inverse(n))
    if isinstance(arrival, Poisson | Gamma | MMPP | OnOff):
        schedule = arrival.modulate
        tau = n / arrival.rate
        return float(schedule.inverse(tau * schedule.mean)) if schedule is not None else tau
    return None


def scheduled(arrival: object) -> bool:
    """Whether an arrival process's rate follows a schedule (an nhpp, or a ``modulate``)."""
    return isinstance(arrival, NHPP) or getattr(arrival, "modulate", None) is not None


def peak_rate(arrival: object) -> float | None:
    """The highest rate (req/s) a scheduled process reaches: an nhpp's schedule's peak as
    scaled, a modulated process's rate times its schedule's peak over its mean (None: its
    rate follows no schedule)."""
    if isinstance(arrival, NHPP):
        return float(arrival.scaled.peak)
    schedule = getattr(arrival, "modulate", None)
    if schedule is None:
        return None
    return float(arrival.rate * schedule.peak / schedule.mean)  # type: ignore[attr-defined]


ARRIVALS: Registry[type[Strict]] = Registry("arrival process")
for _cls in (Poisson, Gamma, MMPP, OnOff, NHPP, Closed, Trace):
    ARRIVALS.register(kind_of(_cls), _cls)

ArrivalConfig = Annotated[Poisson | Gamma | MMPP | OnOff | NHPP | Closed | Trace, Field(discriminator="process")]
check_union(ArrivalConfig, ARRIVALS)
