"""The result JSON of ``vllm bench serve --save-result --save-detailed`` as a per-request table.

vLLM's serving benchmark (``vllm/benchmarks/serve.py``; ``benchmarks/benchmark_serving.py``
in older releases) saves run-level facts (``date``, ``backend``, ``model_id``,
``tokenizer_id``, ``num_prompts``, ``request_rate`` (a number, or ``"inf"``),
``burstiness``, ``max_concurrency`` (null when unset), ``duration``, ``completed``,
``failed``, ``ramp_up_strategy`` when the rate ramped, and any ``--metadata KEY=VALUE``
as a top-level key) and, with ``--save-detailed``, one list entry per request in send
order: ``input_lens``, ``output_lens``, ``ttfts`` (seconds from sending to the first
streamed token), ``itls`` (the gaps between later chunks, seconds), ``generated_texts``,
``errors`` (empty when the request succeeded). Failed requests carry ``output_lens`` 0
and ``ttfts`` 0. What each release has:

- ``benchmarks/benchmark_serving.py`` (up to 0.9): the lists above and no more; no
  ``failed`` count, no latencies, no send times (its goodput key is spelt
  ``"request_goodput:"``);
- ``vllm bench serve``: also ``latencies`` (send to last token) and ``start_times``
  (``time.perf_counter()`` when the request was sent, i.e. after the client's
  ``--max-concurrency`` semaphore let it through); recent releases add ``queue_times``
  (``client_queue_time``: how long the request waited for that semaphore) and keep
  ``latencies`` and ``queue_times`` even without ``--save-detailed``.

Neither has the server's own timestamps, its preemptions or its KV cache size (give
those with ``--metadata``, e.g. ``--metadata gpu=h100-80gb kv_cache_tokens=41408``: the
keys of :data:`META_KEYS` are kept, or pass the server log to ``des compare
--server-log``).

:func:`read_vllm_bench` turns that into one row per request: ``arrival_time`` (seconds
after the first request; from ``start_times`` when saved, else drawn the way the
benchmark draws them from ``request_rate`` and ``burstiness``, with the given seed),
(drawn ones count from the benchmark's start, the first after one gap, as vLLM sends them),
``issue_time`` when a ``max_concurrency`` held requests back (when the benchmark issued
the request, before the semaphore: ``start_times - queue_times``, or the drawn times
without ``start_times``, so all 0 at an infinite rate: a closed loop),
``prompt_tokens``, ``output_tokens``, ``ttft``, ``e2e`` (``latencies``, else ``ttft`` plus
the sum of ``itls``), ``tpot`` (``(e2e - ttft) / (output_tokens - 1)``, as the benchmark
computes it; NaN for one token), ``itl`` (the list) and ``success``. The run-level facts
are in ``frame.attrs["meta"]``. :func:`write_vllm_bench` writes such a table back in the
benchmark's format (for fixtures and for exporting a des run).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from des.workload.formats.checks import MAX_TOKENS
from des.workload.formats.files import NestedTooDeep, json_value, user_bytes

if TYPE_CHECKING:
    import pandas as pd

#: Run-level keys kept in ``attrs["meta"]`` when the file has them.
META_KEYS = (
    "date",
    "backend",
    "label",
    "model_id",
    "tokenizer_id",
    "num_prompts",
    "request_rate",
    "burstiness",
    "max_concurrency",
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "ramp_up_strategy",
    # --metadata keys des reads (the GPU, and the server's KV cache and preemptions)
    "gpu",
    "tensor_parallel_size",
    "kv_cache_tokens",
    "num_gpu_blocks",
    "block_size",
    "num_preemptions",
)
PER_REQUEST = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times", "errors")


def _fail(path: Path, msg: str) -> ValueError:
    return ValueError(f"{str(path)!r}: {msg}")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _numbers(path: Path, data: dict[str, Any], key: str, n: int, integer: bool = False) -> np.ndarray:
    """The list ``key`` as floats: finite and >= 0; with ``integer``, token counts: whole
    numbers up to :data:`~des.workload.formats.checks.MAX_TOKENS` (beyond, no int64 holds them)."""
    values = data[key]
    out = np.empty(n)
    for i, v in enumerate(values):
        x = _number(v)
        if x is None or not math.isfinite(x) or x < 0 or (integer and (x != round(x) or x > MAX_TOKENS)):
            what = f"a whole number from 0 to {MAX_TOKENS:,}" if integer else "a finite number >= 0"
            raise _fail(path, f"{key}[{i}] is {v!r}, not {what}")
        out[i] = x
    return out


def read_vllm_bench(path: Path, seed: int = 0) -> pd.DataFrame:
    """The per-request rows of a ``vllm bench serve --save-detailed`` result file."""
    import pandas as pd

    data = _load(path)
    lists, n = _lists(path, data)
    prompt = _numbers(path, lists, "input_lens", n, integer=True)
    output = _numbers(path, lists, "output_lens", n, integer=True)
    ttft = _numbers(path, lists, "ttfts", n)
    success = np.array([not e for e in lists["errors"]]) if "errors" in lists else output > 0
    itls = _itls(path, lists["itls"]) if "itls" in lists else None
    e2e = _ends(path, lists, n, ttft, itls)
    for i in np.flatnonzero(success).tolist():
        if prompt[i] < 1 or output[i] < 1:
            raise _fail(path, f"request {i} succeeded with {int(prompt[i])} prompt and {int(output[i])} output tokens")
        if e2e[i] < ttft[i] * (1 - 1e-12):
            raise _fail(path, f"request {i} ended ({e2e[i]!r} s) before its first token ({ttft[i]!r} s)")
    meta = {k: data[k] for k in META_KEYS if k in data}
    arrival = _arrivals(path, data, lists, n, seed, meta)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(output > 1, (e2e - ttft) / (output - 1), np.nan)
    frame = pd.DataFrame(
        {
            "arrival_time": arrival,
            "prompt_tokens": prompt.astype(np.int64),
            "output_tokens": output.astype(np.int64),
            "ttft": ttft,
            "e2e": e2e,
            "tpot": tpot,
            "itl": itls if itls is not None else [None] * n,
            "success": success,
        }
    )
    issue = _issue_times(path, data, lists, n, arrival, meta)
    if issue is not None:
        frame["issue_time"] = issue
    frame.attrs["meta"] = meta
    frame.attrs["has_itl"] = itls is not None
    return frame


def _issue_times(
    path: Path, data: dict[str, Any], lists: dict[str, list[Any]], n: int, arrival: np.ndarray, meta: dict[str, Any]
) -> np.ndarray | None:
    """When the benchmark issued each request, before ``max_concurrency`` let it through (seconds,
    the origin of ``arrival``); None when no such limit held requests back."""
    limit = data.get("max_concurrency")
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise _fail(path, f"max_concurrency is {limit!r}, not a whole number >= 1 or null")
    if meta["arrivals"] != "start_times":
        return arrival  # drawn: the issue times themselves (see _arrivals)
    if "queue_times" not in lists:
        meta["issues"] = "start_times (the file has no queue_times: waits for max_concurrency unknown)"
        return arrival
    queue = _numbers(path, lists, "queue_times", n)
    meta["issues"] = "start_times - queue_times"
    issue = arrival - queue
    return np.asarray(issue - min(0.0, float(issue.min())))


def _load(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` (compressed as its name says, a leading byte order mark
    dropped: see :mod:`~des.workload.formats.files`)."""
    text = user_bytes(path, "result file").decode("utf-8")
    try:
        data = json_value(text)
    except json.JSONDecodeError as exc:
        raise _fail(path, f"not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except NestedTooDeep as exc:
        raise NestedTooDeep(f"{str(path)!r}: JSON {exc}") from None
    if not isinstance(data, dict):
        raise _fail(path, "does not hold a JSON object (is it a vllm bench serve result?)")
    return data


def _lists(path: Path, data: dict[str, Any]) -> tuple[dict[str, list[Any]], int]:
    """The per-request lists the file has (:data:`PER_REQUEST`), each of one entry per
    request, and how many requests there are."""
    missing = [k for k in ("input_lens", "output_lens", "ttfts") if data.get(k) is None]
    if missing:
        hint = " (save it with --save-result --save-detailed)" if "duration" in data else ""
        raise _fail(path, f"lacks the per-request lists {', '.join(missing)}{hint}")
    lists = {k: data[k] for k in PER_REQUEST if k in data and data[k] is not None}
    for key, value in lists.items():
        if not isinstance(value, list):
            raise _fail(path, f"{key} is not a list")
    n = len(lists["input_lens"])
    if n == 0:
        raise _fail(path, "has no requests")
    for key, value in lists.items():
        if len(value) != n:
            raise _fail(path, f"{key} has {len(value)} entries, input_lens {n}")
    return lists, n


def _itls(path: Path, itls: list[Any]) -> list[list[float]]:
    """Each request's inter-token latencies (seconds)."""
    out = []
    for i, gaps in enumerate(itls):
        if not isinstance(gaps, list):
            raise _fail(path, f"itls[{i}] is not a list")
        row = [_number(g) for g in gaps]
        if any(g is None or not math.isfinite(g) or g < 0 for g in row):
            raise _fail(path, f"itls[{i}] holds something other than finite numbers >= 0")
        out.append([float(g) for g in row if g is not None])
    return out


def _ends(
    path: Path, lists: dict[str, list[Any]], n: int, ttft: np.ndarray, itls: list[list[float]] | None
) -> np.ndarray:
    """Each request's end-to-end latency (seconds): as recorded, else its first token plus its gaps."""
    if "latencies" in lists:
        return _numbers(path, lists, "latencies", n)
    if itls is not None:
        return ttft + np.array([sum(g) for g in itls])
    raise _fail(path, "has neither latencies nor itls, so when each request ended is unknown")


def _arrivals(
    path: Path, data: dict[str, Any], lists: dict[str, list[Any]], n: int, seed: int, meta: dict[str, Any]
) -> np.ndarray:
    """When each request was sent (seconds from the first): its recorded ``start_times``, else
    drawn as the benchmark drew them; ``meta["arrivals"]`` says which."""
    if "start_times" not in lists:
        limit = data.get("max_concurrency")
        meta["arrivals"] = (
            ("issue times " if limit is not None else "")
            + f"drawn from request_rate {data.get('request_rate')!r}, burstiness "
            + f"{data.get('burstiness', 1.0)!r} (seed {seed}): the file has no start_times"
        )
        if limit is not None and data.get("request_rate") in ("inf", "Infinity"):
            meta["arrivals"] = f"all issued at 0, at most max_concurrency {limit!r} at once (a closed loop)"
        return _drawn_arrivals(path, data, n, seed)
    starts = np.empty(n)
    for i, v in enumerate(lists["start_times"]):
        x = _number(v)
        if x is None or not math.isfinite(x):
            raise _fail(path, f"start_times[{i}] is {v!r}, not a finite number")
        starts[i] = x
    meta["arrivals"] = "start_times"
    return starts - starts.min()


def _drawn_arrivals(path: Path, data: dict[str, Any], n: int, seed: int) -> np.ndarray:
    """Send times as ``vllm bench serve`` draws them: gamma gaps of mean ``1 / rate`` and shape
    ``burstiness`` (1: Poisson), rescaled so the last request goes at ``n / rate`` (the old
    script: the first at 0, no rescaling, :func:`legacy`); all at 0 for ``request_rate``
    inf. Only statistically like the real run's."""
    if data.get("ramp_up_strategy") is not None:
        raise _fail(path, "the request rate ramped up and the file has no start_times to replay it from")
    rate_raw = data.get("request_rate")
    if rate_raw is None:
        raise _fail(path, "has neither start_times nor request_rate, so the arrivals are unknown")
    rate = math.inf if rate_raw in ("inf", "Infinity") else _number(rate_raw)
    if rate is None or not rate > 0:
        raise _fail(path, f"request_rate is {rate_raw!r}, not a number > 0 or 'inf'")
    if math.isinf(rate):
        return np.zeros(n)
    burst = _number(data.get("burstiness", 1.0))
    if burst is None or not (burst > 0 and math.isfinite(burst)):
        raise _fail(path, f"burstiness is {data.get('burstiness')!r}, not a number > 0")
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape=burst, scale=1.0 / (rate * burst), size=n)
    if legacy(data):
        # benchmarks/benchmark_serving.py: sends, then sleeps a gap; no rescaling
        return np.concatenate(([0.0], np.cumsum(gaps[:-1])))
    delays = np.cumsum(gaps)
    if delays[-1] > 0:
        delays *= (n / rate) / delays[-1]
    return np.asarray(delays)


def legacy(data: dict[str, Any]) -> bool:
    """Whether the result is from the old ``benchmarks/benchmark_serving.py`` (no ``failed``,
    ``latencies`` or ``start_times``: see the module), whose ``get_request`` sends the first
    request at once and sleeps a drawn gap after each, without rescaling the gaps."""
    return not any(k in data for k in ("failed", "latencies", "start_times", "queue_times"))


def write_vllm_bench(frame: pd.DataFrame, path: Path, meta: dict[str, Any] | None = None) -> None:
    """Write per-request rows (the columns :func:`read_vllm_bench` returns) as a vllm bench result.

    ``start_times`` are the arrival times; ``duration`` spans the first arrival to the last
    completion; failed rows get ``output_lens`` 0, an error and zero times, as vLLM writes them.
    """
    ok = frame["success"].to_numpy(bool)
    out_lens = np.where(ok, frame["output_tokens"].to_numpy(), 0)
    ends = (frame["arrival_time"] + frame["e2e"])[ok]
    duration = float(ends.max() - frame["arrival_time"].min()) if ok.any() else 0.0
    completed = int(ok.sum())
    itl = [list(map(float, g)) if (s and g is not None) else [] for g, s in zip(frame["itl"], ok, strict=True)]
    data: dict[str, Any] = {
        "date": "",
        "backend": "vllm",
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": None,
        **(meta or {}),
        "duration": duration,
        "completed": completed,
        "failed": int((~ok).sum()),
        "total_input_tokens": int(frame["prompt_tokens"][ok].sum()),
        "total_output_tokens": int(out_lens.sum()),
        "request_throughput": completed / duration if duration else 0.0,
        "output_throughput": float(out_lens.sum()) / duration if duration else 0.0,
        "input_lens": [int(x) for x in frame["prompt_tokens"]],
        "output_lens": [int(x) for x in out_lens],
        "ttfts": [float(x) if s else 0.0 for x, s in zip(frame["ttft"], ok, strict=True)],
        "itls": itl,
        "latencies": [float(x) if s else 0.0 for x, s in zip(frame["e2e"], ok, strict=True)],
        "start_times": [float(x) for x in frame["arrival_time"]],
        "errors": ["" if s else "request failed" for s in ok],
    }
    path.write_text(json.dumps(data, indent=1) + "\n")
