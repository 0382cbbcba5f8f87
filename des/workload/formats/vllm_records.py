"""vLLM's own per-request records: the engine's request stats and its OpenTelemetry spans.

Two file forms, read into the per-request table of :mod:`des.workload.formats` (the
columns of :data:`~des.workload.formats.COLUMNS`, plus ``preemptions`` and
``queue_delay`` where the file has them):

**Request records** (format ``vllm-records``): JSON lines, one finished request each,
holding the fields of vLLM's ``RequestStateStats`` (``vllm/v1/metrics/stats.py``), as
``dataclasses.asdict(output.metrics)`` of each finished ``RequestOutput`` writes them
(``RequestState.make_request_output`` passes ``metrics=self.stats``,
``vllm/v1/engine/output_processor.py``; the engine needs stats logging on), plus the
prompt length (``len(output.prompt_token_ids)``):

- ``arrival_time``: when the frontend received the request, ``time.time()`` (wall
  clock, seconds since the epoch);
- ``queued_ts``, ``scheduled_ts``, ``first_token_ts``, ``last_token_ts``: the engine
  core's ``EngineCoreEvent`` / output timestamps, ``time.monotonic()`` (seconds since
  an arbitrary origin, another clock); ``scheduled_ts`` is the *first* scheduling
  ("ignore preemptions" in ``IterationStats.update_from_events``); vLLM leaves a
  timestamp it never set at 0.0;
- ``first_token_latency`` (newer releases): the frontend's ``iteration_timestamp -
  arrival_time`` when the first token came out, wall clock;
- the output length: ``num_generation_tokens`` (``RequestStateStats``'s and
  ``FinishedRequestStats``'s name), or ``completion_tokens`` (the OpenAI ``usage`` name
  vLLM's server answers with), or ``output_toks``; the prompt length: ``num_prompt_tokens``
  (``FinishedRequestStats``), or ``prompt_tokens`` (``usage``), or ``prompt_token_ids`` as a
  list (``RequestOutput``), or ``input_toks`` (``RequestStateStats`` lacks it: the dump adds it).
  ``input_toks`` and ``output_toks`` are the names of LLMServingSim's vLLM benchmark
  (``bench/core/runner.py``, ``_record_from_metrics``), whose ``requests.jsonl`` is
  ``request_id, input_toks, output_toks`` and the ``RequestStateStats`` timestamps;
- optional: ``num_preemptions`` (the engine's ``Request.num_preemptions``, as its journey
  events carry it), ``finish_reason`` (``abort``/``error``, or ``FinishReason`` 2/3, mark
  a failed request), ``request_id``.

*The two clocks.* Differences of the monotonic timestamps are exact (one clock, one
process); only the step from the wall-clock ``arrival_time`` to them needs an offset
``c`` (``wall = monotonic + c``). With ``first_token_latency``, each request gives its
own: ``c_i = arrival_time + first_token_latency - first_token_ts``, which makes the TTFT
exactly vLLM's and the end ``e2e = first_token_latency + (last_token_ts - first_token_ts)``.
Without it, one offset for the run: the engine core queues a request after the frontend
received it, so ``c >= arrival_time - queued_ts`` for every request, and
``c = max(arrival_time - queued_ts)`` is the tightest such bound: every latency is then
short by the *smallest* frontend delay of the run (tokenising one prompt and handing it
over, milliseconds). ``meta["clocks"]`` says which was used; offsets of one run that
spread over more than :data:`MAX_OFFSET_SPREAD` seconds mean the file mixes runs or
hosts, and are refused.

**OpenTelemetry spans** (format ``otel``): what vLLM exports with
``--otlp-traces-endpoint`` (``vllm/tracing.py``, ``OutputProcessor.do_tracing`` in
``vllm/v1/engine/output_processor.py``), saved in OTLP/JSON by an OpenTelemetry
Collector's file exporter: one ``{"resourceSpans": [...]}`` object per line (or one
object for the file). Each ``llm_request`` span starts at the request's arrival
(``startTimeUnixNano``, the frontend's wall clock) and carries
``gen_ai.latency.time_to_first_token``, ``gen_ai.latency.e2e`` (both on that same wall
clock: no second clock here), ``gen_ai.usage.prompt_tokens`` and
``gen_ai.usage.completion_tokens``; a span whose status code is 2 (error) or whose
``gen_ai.response.finish_reason`` says ``abort`` is a failed request. The spans carry no
preemption count. Other spans (a client's, the API server's) are skipped. The same spans
as Jaeger exports them (its UI's "Download JSON": ``{"data": [{"spans": [...]}]}``, start
in microseconds, attributes as ``tags``) are read too.

Not read: the server's request logging (``--enable-log-requests``: "Received request ..."
and "Finished request ..." lines), whose times are its log format's, to the second
(``%m-%d %H:%M:%S`` in ``vllm/logger.py``): too coarse to time a request.

Problems are one-line ``ValueError``\\ s naming the file, the line and the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from des.workload.formats.checks import MAX_TOKENS
from des.workload.formats.files import NestedTooDeep, json_value, user_bytes

if TYPE_CHECKING:
    import pandas as pd

#: Keys that make a JSON line a vLLM request record (:func:`looks_like_records`).
RECORD_SIGNATURE = ("arrival_time", "first_token_ts", "last_token_ts")
MONOTONIC = ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")
#: The names a record gives its prompt and output lengths by, the first present one read (see the module).
PROMPT_KEYS = ("num_prompt_tokens", "prompt_tokens", "prompt_token_ids", "input_toks")
OUTPUT_KEYS = ("num_generation_tokens", "completion_tokens", "output_toks")
FAILED_REASONS = ("abort", "error")
#: ``FinishReason`` (``vllm/v1/engine/__init__.py``, an IntEnum: STOP 0, LENGTH 1, ABORT 2,
#: ERROR 3, REPETITION 4) of a failed request, when the dump kept the number.
FAILED_CODES = (2, 3)
#: Seconds the per-request clock offsets of one run may spread over (see the module).
MAX_OFFSET_SPREAD = 1.0
SPAN_NAME = "llm_request"
TTFT = "gen_ai.latency.time_to_first_token"
E2E = "gen_ai.latency.e2e"
PROMPT = "gen_ai.usage.prompt_tokens"
COMPLETION = "gen_ai.usage.completion_tokens"
FINISH = "gen_ai.response.finish_reason"
#: OTLP's status code of a span that ended in an error.
STATUS_ERROR = 2


def _fail(path: Path, msg: str) -> ValueError:
    return ValueError(f"{str(path)!r}: {msg}")


def _text(path: Path) -> str:
    return user_bytes(path).decode("utf-8")


def _json_lines(path: Path, text: str) -> list[tuple[int, Any]]:
    """(line number, value) of each non-blank line."""
    out = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((i, json_value(line)))
        except json.JSONDecodeError as exc:
            raise _fail(path, f"line {i} is not valid JSON ({exc.msg})") from None
        except NestedTooDeep as exc:
            raise _fail(path, f"line {i} is {exc}") from None
    if not out:
        raise _fail(path, "is empty")
    return out


def _number(value: Any) -> float | None:
    """A JSON number (OTLP writes 64-bit integers as strings: those too), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def looks_like_records(row: object) -> bool:
    """Whether a parsed JSON line is a vLLM request record."""
    return isinstance(row, dict) and all(k in row for k in RECORD_SIGNATURE)


def looks_like_spans(data: object) -> bool:
    """Whether a parsed JSON value is a span export: OTLP/JSON (``resourceSpans``) or Jaeger's
    (``data``, a list of traces with ``spans``)."""
    if not isinstance(data, dict):
        return False
    traces = data.get("data")
    jaeger = isinstance(traces, list) and bool(traces) and isinstance(traces[0], dict) and "spans" in traces[0]
    return "resourceSpans" in data or jaeger


# -- request records -----------------------------------------------------------------------


def read_vllm_records(path: Path) -> pd.DataFrame:
    """The per-request rows of a JSON-lines dump of vLLM request records (see the module)."""
    lines = _json_lines(path, _text(path))
    n = len(lines)
    arrival = np.empty(n)
    mono = {k: np.full(n, np.nan) for k in MONOTONIC}
    first_latency = np.full(n, np.nan)
    prompt = np.zeros(n, dtype=np.int64)
    output = np.zeros(n, dtype=np.int64)
    preempt = np.full(n, -1, dtype=np.int64)
    success = np.ones(n, dtype=bool)
    for j, (line, row) in enumerate(lines):
        where = f"line {line}"
        if not isinstance(row, dict):
            raise _fail(path, f"{where} is not a JSON object (one request record per line)")
        missing = [k for k in RECORD_SIGNATURE if k not in row]
        missing += [" or ".join(keys) for keys in (OUTPUT_KEYS, PROMPT_KEYS) if not any(k in row for k in keys)]
        if missing:
            raise _fail(
                path,
                f"{where} lacks {'; '.join(missing)} (a vLLM request record: RequestStateStats fields and the "
                f"lengths); has: {', '.join(map(str, row)) or 'nothing'}",
            )
        arrival[j] = _time(path, where, row, "arrival_time", positive=True)
        for key in MONOTONIC:
            if key in row:
                mono[key][j] = _time(path, where, row, key)
        if row.get("first_token_latency") not in (None, 0, 0.0):
            first_latency[j] = _time(path, where, row, "first_token_latency")
        prompt[j] = _prompt_tokens(path, where, row)
        output[j] = _count(path, where, row, next(k for k in OUTPUT_KEYS if k in row))
        if row.get("num_preemptions") is not None:
            preempt[j] = _count(path, where, row, "num_preemptions")
        reason = row.get("finish_reason")
        if isinstance(reason, int) and not isinstance(reason, bool):
            failed = reason in FAILED_CODES
        else:
            failed = isinstance(reason, str) and reason.lower().rsplit(".", 1)[-1] in FAILED_REASONS
        success[j] = not failed and output[j] >= 1 and mono["first_token_ts"][j] > 0
        if success[j]:
            _check_order(path, where, row, mono, j)
    offset, clocks = _offsets(path, lines, arrival, mono, first_latency, success)
    ttft = mono["first_token_ts"] + offset - arrival
    e2e = mono["last_token_ts"] + offset - arrival
    queue = mono["scheduled_ts"] + offset - arrival
    ok = success
    ttft, e2e, queue = (np.where(ok, x, np.nan) for x in (ttft, e2e, queue))
    frame = _frame(arrival, prompt, output, ttft, e2e, success)
    if not np.isnan(queue[ok]).all():
        frame["queue_delay"] = queue
    if (preempt >= 0).any():
        frame["preemptions"] = np.where(preempt >= 0, preempt, 0)
    return _sorted(frame, {"arrivals": "arrival_time (wall clock)", "clocks": clocks})


def _time(path: Path, where: str, row: dict[str, Any], key: str, positive: bool = False) -> float:
    x = _number(row[key])
    if x is None or not math.isfinite(x) or x < 0 or (positive and x == 0):
        what = "a time in seconds > 0" if positive else "a time in seconds >= 0"
        raise _fail(path, f"{where}: {key} is {row[key]!r}, not {what}")
    return x


def _count(path: Path, where: str, row: dict[str, Any], key: str) -> int:
    v = row[key]
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_TOKENS:
        raise _fail(path, f"{where}: {key} is {v!r}, not a whole number >= 0")
    return v


def _prompt_tokens(path: Path, where: str, row: dict[str, Any]) -> int:
    key = next(k for k in PROMPT_KEYS if k in row)
    if key == "prompt_token_ids":
        ids = row[key]
        if not isinstance(ids, list) or not ids:
            raise _fail(path, f"{where}: prompt_token_ids is not a non-empty list")
        return len(ids)
    n = _count(path, where, row, key)
    if n < 1:
        raise _fail(path, f"{where}: {key} is 0; a request has at least one prompt token")
    return n


def _check_order(path: Path, where: str, row: dict[str, Any], mono: dict[str, np.ndarray], j: int) -> None:
    """The engine's timestamps of a finished request come in its life's order (those it set)."""
    prev = None
    for key in MONOTONIC:
        t = mono[key][j]
        if math.isnan(t):
            continue
        if t == 0.0:
            raise _fail(path, f"{where}: {key} is 0 (never set) on a request that produced tokens")
        if prev is not None and t < mono[prev][j]:
            raise _fail(path, f"{where}: {key} {row[key]!r} is before {prev} {row[prev]!r} (same monotonic clock)")
        prev = key


def _offsets(
    path: Path,
    lines: list[tuple[int, Any]],
    arrival: np.ndarray,
    mono: dict[str, np.ndarray],
    first_latency: np.ndarray,
    success: np.ndarray,
) -> tuple[np.ndarray, str]:
    """Each request's offset ``c`` (``wall = monotonic + c``) and how it was found (see the module)."""
    if not success.any():
        return np.zeros(len(arrival)), "none (no request finished)"
    if np.isfinite(first_latency[success]).all():
        offset = arrival + first_latency - mono["first_token_ts"]
        how = "per request: arrival_time + first_token_latency - first_token_ts"
    elif np.isfinite(mono["queued_ts"][success]).all():
        bound = arrival - mono["queued_ts"]
        offset = np.full(len(arrival), float(np.max(bound[success])))
        how = "one for the run: max(arrival_time - queued_ts) (latencies short by the smallest frontend delay)"
    else:
        j = int(np.argmax(success & ~np.isfinite(mono["queued_ts"]) & ~np.isfinite(first_latency)))
        raise _fail(
            path,
            f"line {lines[j][0]}: has neither first_token_latency nor queued_ts, so its engine timestamps "
            "(monotonic clock) cannot be put on arrival_time's wall clock",
        )
    spread = float(np.ptp(offset[success]))
    if spread > MAX_OFFSET_SPREAD:
        raise _fail(
            path,
            f"the offsets between arrival_time's wall clock and the engine's monotonic clock spread over "
            f"{spread:,.3g} s (more than {MAX_OFFSET_SPREAD:g} s): does the file mix runs or hosts?",
        )
    return offset, how


def _frame(
    arrival: np.ndarray, prompt: np.ndarray, output: np.ndarray, ttft: np.ndarray, e2e: np.ndarray, success: np.ndarray
) -> pd.DataFrame:
    import pandas as pd

    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(output > 1, (e2e - ttft) / (output - 1), np.nan)
    frame = pd.DataFrame(
        {
            "arrival_time": arrival - arrival.min(),
            "prompt_tokens": prompt,
            "output_tokens": output,
            "ttft": ttft,
            "e2e": e2e,
            "tpot": tpot,
            "itl": [None] * len(arrival),
            "success": success,
        }
    )
    return frame


def _sorted(frame: pd.DataFrame, meta: dict[str, Any]) -> pd.DataFrame:
    """The rows by arrival (stable), with the run's facts in ``attrs``."""
    out = frame.sort_values("arrival_time", kind="stable", ignore_index=True)
    out.attrs["meta"] = meta
    out.attrs["has_itl"] = False
    return out


# -- OpenTelemetry spans ---------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    """One ``llm_request`` span, whichever export it came from: where it is (for errors), its
    start (seconds since the epoch, or None if unreadable: ``start_raw``), attributes, status."""

    where: str
    start: float | None
    start_raw: object
    attrs: dict[str, Any]
    error: bool


def read_otel_spans(path: Path) -> pd.DataFrame:
    """The per-request rows of vLLM's ``llm_request`` spans in an OTLP/JSON or Jaeger JSON file
    (see the module)."""
    text = _text(path)
    try:
        objects = [(1, json_value(text))]
    except json.JSONDecodeError:
        objects = _json_lines(path, text)
    except NestedTooDeep as exc:
        raise _fail(path, f"JSON {exc}") from None
    spans: list[Span] = []
    for line, obj in objects:
        if not looks_like_spans(obj):
            raise _fail(path, f"line {line} is not a span export (OTLP/JSON resourceSpans, or Jaeger's data)")
        spans += _jaeger_spans(path, line, obj) if "data" in obj else _otlp_spans(path, line, obj)
    if not spans:
        raise _fail(path, f"holds no {SPAN_NAME!r} span (vLLM's, exported with --otlp-traces-endpoint)")
    n = len(spans)
    arrival, ttft, e2e = np.empty(n), np.empty(n), np.empty(n)
    prompt, output = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    success = np.ones(n, dtype=bool)
    for j, span in enumerate(spans):
        where, attrs = span.where, span.attrs
        if span.start is None or not span.start > 0:
            raise _fail(path, f"{where}: its start {span.start_raw!r} is not a time")
        arrival[j] = span.start
        for key, out in ((TTFT, ttft), (E2E, e2e)):
            x = _number(attrs.get(key))
            if x is None or not math.isfinite(x) or x < 0:
                raise _fail(path, f"{where}: attribute {key} is {attrs.get(key)!r}, not a time in seconds >= 0")
            out[j] = x
        for key, counts in ((PROMPT, prompt), (COMPLETION, output)):
            x = _number(attrs.get(key))
            if x is None or x < 0 or x != round(x) or x > MAX_TOKENS:
                raise _fail(path, f"{where}: attribute {key} is {attrs.get(key)!r}, not a whole number >= 0")
            counts[j] = int(x)
        failed = span.error or "abort" in str(attrs.get(FINISH, "")).lower()
        success[j] = not failed and output[j] >= 1 and prompt[j] >= 1
        if success[j] and e2e[j] < ttft[j] * (1 - 1e-12):
            raise _fail(path, f"{where}: {E2E} {e2e[j]!r} is before {TTFT} {ttft[j]!r}")
    frame = _frame(arrival, prompt, output, np.where(success, ttft, np.nan), np.where(success, e2e, np.nan), success)
    return _sorted(frame, {"arrivals": "span start (wall clock)", "clocks": "one (the frontend's wall clock)"})


def _otlp_spans(path: Path, line: int, obj: dict[str, Any]) -> list[Span]:
    """The ``llm_request`` spans of one OTLP/JSON export: ``startTimeUnixNano`` (ns, a string),
    ``attributes`` as ``[{"key", "value": {"doubleValue"|"intValue"|...: v}}]``, ``status.code``."""
    out = []
    for resource in _list(path, line, obj, "resourceSpans"):
        scopes = resource.get("scopeSpans", resource.get("instrumentationLibrarySpans", []))
        for scope in scopes if isinstance(scopes, list) else []:
            for i, span in enumerate(scope.get("spans", []) if isinstance(scope, dict) else []):
                if not (isinstance(span, dict) and span.get("name") == SPAN_NAME):
                    continue
                raw = span.get("startTimeUnixNano")
                start = _number(raw)
                status = span.get("status") or {}
                error = isinstance(status, dict) and _number(status.get("code")) == STATUS_ERROR
                where = f"line {line}, span {span.get('spanId', i)!s}"
                out.append(Span(where, start / 1e9 if start is not None else None, raw, _attributes(span), error))
    return out


def _jaeger_spans(path: Path, line: int, obj: dict[str, Any]) -> list[Span]:
    """The ``llm_request`` spans of a Jaeger JSON export (its UI's "Download JSON", its query
    API): ``data[].spans[]`` with ``operationName``, ``startTime`` (µs since the epoch) and
    ``tags`` as ``[{"key", "type", "value"}]``; an ``error`` tag true marks a failed request."""
    out = []
    for trace in _list(path, line, obj, "data"):
        for i, span in enumerate(trace.get("spans", []) if isinstance(trace.get("spans"), list) else []):
            if not (isinstance(span, dict) and span.get("operationName") == SPAN_NAME):
                continue
            tags = span.get("tags")
            attrs = {
                str(t.get("key")): t.get("value")
                for t in (tags if isinstance(tags, list) else [])
                if isinstance(t, dict)
            }
            raw = span.get("startTime")
            start = _number(raw)
            error = attrs.get("error") in (True, "true") or str(attrs.get("otel.status_code", "")).upper() == "ERROR"
            where = f"line {line}, span {span.get('spanID', i)!s}"
            out.append(Span(where, start / 1e6 if start is not None else None, raw, attrs, error))
    return out


def _list(path: Path, line: int, obj: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = obj.get(key)
    if not isinstance(value, list):
        raise _fail(path, f"line {line}: {key} is not a list")
    return [v for v in value if isinstance(v, dict)]


def _attributes(span: dict[str, Any]) -> dict[str, Any]:
    """A span's attributes as ``{key: value}`` (OTLP/JSON: ``[{"key", "value": {"doubleValue": ..}}]``)."""
    out: dict[str, Any] = {}
    attrs = span.get("attributes")
    for item in attrs if isinstance(attrs, list) else []:
        if isinstance(item, dict) and isinstance(item.get("value"), dict) and item["value"]:
            out[str(item.get("key"))] = next(iter(item["value"].values()))
    return out
