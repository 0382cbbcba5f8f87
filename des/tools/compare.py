"""``des compare``: replay a measured serving run through des and put the two side by side.

The measured run is read as it was written, its format told from its content
(:func:`detect_format`; ``--format`` overrides):

- ``vllm-bench``: a ``vllm bench serve --save-result --save-detailed`` JSON
  (:mod:`des.workload.formats.vllm_bench`);
- ``vllm-records``: vLLM's own request records, JSON lines of ``RequestStateStats``
  on their two clocks, and ``otel``: its ``llm_request`` OpenTelemetry spans in
  OTLP/JSON or as Jaeger exports them (:mod:`des.workload.formats.vllm_records`);
- ``csv``, ``jsonl``: a per-request table (:mod:`des.workload.formats.request_log`).

Its successful requests are replayed with their arrival times and token counts (a
``trace`` workload; with the benchmark's ``max_concurrency``, at most that many at once:
a closed loop when all were issued at once) on the engine of a scenario (the embedded
default, or a file, with ``--set`` overrides as in ``des run``; without a file, the GPU
and model the log names, when the catalog has them), the run drained to the last
request. A GPU or model the log names that the catalog lacks is an error unless ``--set``
or the SCENARIO gives the one to replay on (:func:`check_unnamed`); where the replay's GPU
or model is not the log's (the default's, or the SCENARIO's in place of an unknown name),
the command warns (:func:`engine_notes`). Measured and simulated are then summarised the same way:

- throughput: completed requests and output tokens per second over the span from the
  first arrival to the last completion;
- TTFT, TPOT (``(e2e - ttft) / (output_tokens - 1)``, requests of 2+ tokens) and
  end-to-end latency: mean, p50, p90, p99 (numpy's linear-interpolation percentiles, as
  vLLM's benchmark computes them);
- queue delay (arrival to first scheduling), when the log has it (vLLM's request
  records: its frontend's input processing counts as queueing there, as des has none);
- ITL, when the measured run has inter-token gaps: the simulated ITLs are each request's
  mean gap repeated for its ``output_tokens - 1`` gaps (des records when a request's
  first and last tokens come out, not every token's), so the mean is like for like and the
  percentiles are a per-request view;

each with its error ``(simulated - measured) / measured``. A des run written out in either
format compares to itself with zero error; scaling the measured latencies by ``k`` shows
as ``1 / k - 1`` on every latency statistic.

Beside the latencies, :class:`Engine` facts of both sides: preemptions (des's count; the
log's where it has them: ``num_preemptions`` of request records, a ``--metadata
num_preemptions=N`` of the benchmark, or the server's log / ``/metrics``) and KV capacity
per instance in tokens and blocks (des's memory plan; the server's ``GPU KV cache size``
line, ``cache_config_info`` or ``--metadata``). These are compared, never fitted to:
nothing in a measured run feeds des's parameters.

What the server was started with is configuration, not a measurement: the engine settings
its log states (``--server-log``: ``max_model_len``, ``max_num_seqs``,
``max_num_batched_tokens``, ``gpu_memory_utilization``, ``block_size``,
``enable_prefix_caching``, ``enable_chunked_prefill``;
:meth:`~des.workload.formats.vllm_server_log.ServerFacts.settings`) are the replay's where
neither the SCENARIO nor ``--set`` gives them (:func:`log_settings`), so a server started
with ``--max-model-len 32768`` is replayed with that context, not refused for the model's
own; the command says which it took (:attr:`Comparison.from_log`). The log's
``tensor_parallel_size`` is only checked against the replay's GPUs per instance: a
mismatch is a warning, the deployment stays the scenario's.

:func:`compare` returns a :class:`Comparison`; :func:`write_comparison` writes its files
with the figure the command draws (:func:`des.figures.tools.plot_cdfs`), and the command
shows it (:func:`des.render.tools.comparison`).
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from des.errors import ScenarioError
from des.workload.formats.files import NestedTooDeep, data_suffix, json_value, user_bytes
from des.workload.formats.request_log import read_request_log
from des.workload.formats.vllm_bench import read_vllm_bench
from des.workload.formats.vllm_records import looks_like_records, looks_like_spans, read_otel_spans, read_vllm_records
from des.workload.formats.vllm_server_log import SETTINGS, ServerFacts, read_server_log

ARG = "RESULT"
FORMATS = ("auto", "vllm-bench", "vllm-records", "otel", "csv", "jsonl")
LATENCIES = ("ttft", "tpot", "itl", "e2e")
STATS = ("mean", "p50", "p90", "p99")
#: The engine's facts compared beside the latencies (per instance).
ENGINE_METRICS = ("preemptions", "kv_capacity_tokens", "kv_capacity_blocks")
#: Scenario fields the measured run decides; ``--set`` may not change them.
FROM_RESULT = ("workload", "horizon", "warmup")


@dataclass
class Measured:
    """A measured run's per-request rows and where they came from."""

    path: Path
    format: str
    rows: pd.DataFrame
    meta: dict[str, Any] = field(default_factory=dict)
    has_itl: bool = False
    server: ServerFacts | None = None

    @property
    def max_concurrency(self) -> int | None:
        """The benchmark client's limit on requests in flight (None: none)."""
        limit = self.meta.get("max_concurrency")
        return limit if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1 else None

    def engine(self) -> dict[str, float]:
        """Preemptions and KV capacity (tokens, blocks) as the log states them; NaN where it does not.

        Preemptions: the requests' ``preemptions`` summed (request records), else the server
        log's count, else ``--metadata num_preemptions``. KV capacity: the server log's, else
        ``--metadata kv_cache_tokens`` / ``num_gpu_blocks`` (and ``block_size``).
        """
        server = self.server or ServerFacts()
        if "preemptions" in self.rows:
            preemptions = float(self.rows["preemptions"].sum())
        else:
            preemptions = _first(server.preemptions, _meta_count(self.meta, "num_preemptions"))
        tokens = _first(server.kv_capacity_tokens, _meta_count(self.meta, "kv_cache_tokens"))
        blocks = _first(server.kv_blocks, _meta_count(self.meta, "num_gpu_blocks"))
        size = _first(server.block_size, _meta_count(self.meta, "block_size"))
        if math.isnan(tokens):
            tokens = blocks * size  # NaN unless both are known
        if math.isnan(blocks):
            blocks = tokens / size
        return {"preemptions": preemptions, "kv_capacity_tokens": tokens, "kv_capacity_blocks": blocks}

    @property
    def completed(self) -> pd.DataFrame:
        return self.rows[self.rows["success"]]

    @property
    def failed(self) -> int:
        """Requests that did not succeed (not replayed)."""
        return int((~self.rows["success"]).sum())


def _meta_count(meta: dict[str, Any], key: str) -> float:
    """A whole number >= 0 the benchmark's ``--metadata`` gave (written as text), else NaN."""
    value = meta.get(key)
    try:
        x = float(str(value).replace(",", "")) if value is not None and not isinstance(value, bool) else math.nan
    except ValueError:
        return math.nan
    return x if math.isfinite(x) and x >= 0 and x == round(x) else math.nan


def _first(stated: int | None, fallback: float) -> float:
    """What the server stated, else the fallback (NaN: unknown)."""
    return float(stated) if stated is not None else fallback


class UnknownFormat(ValueError):
    """A measured run's content fits none of the formats (a problem of ``--format``)."""


def detect_format(path: Path) -> str:
    """The format of the measured run at ``path``, told from what it holds (its name only
    when the content leaves it open): a JSON object with ``input_lens`` is a vllm bench
    result, one with ``resourceSpans`` (or Jaeger's ``data``) OpenTelemetry spans; JSON lines with
    ``arrival_time``, ``first_token_ts``, ``last_token_ts`` are vLLM request records,
    other JSON lines a jsonl table; anything else a CSV table. ValueError when the file
    cannot be read or is none of these."""
    data = user_bytes(path, "result file")
    head = data.lstrip()
    if not head:
        raise ValueError(f"{str(path)!r}: is empty")
    if head[:1] == b"{":
        lines = False
        try:
            value = json_value(head)  # one JSON object: a bench result, or spans
        except (json.JSONDecodeError, NestedTooDeep):
            lines = True  # JSON lines, or broken JSON (its reader says where)
            try:
                value = json_value(head.split(b"\n", 1)[0])
            except (json.JSONDecodeError, NestedTooDeep):
                value = None
        if looks_like_spans(value):
            return "otel"
        if looks_like_records(value):
            return "vllm-records"
        if lines and value is not None:
            return "jsonl"
        if not lines and isinstance(value, dict) and "arrival_time" in value:
            return "jsonl"  # a table of one request
        return "jsonl" if data_suffix(path) in (".jsonl", ".ndjson") else "vllm-bench"
    if head[:1] == b"[":  # not any format's, but a .json is meant as a bench result: its reader says why not
        return {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv"}.get(data_suffix(path), "vllm-bench")
    header = next((ln for ln in head.splitlines() if ln.strip() and not ln.startswith(b"#")), b"")
    if b"arrival_time" in header or data_suffix(path) == ".csv":
        return "csv"
    raise UnknownFormat(
        f"cannot tell what {str(path)!r} holds: not a vllm bench serve result (a JSON object with input_lens), "
        "vLLM request records (JSON lines with arrival_time, first_token_ts, last_token_ts), OpenTelemetry spans "
        "(resourceSpans), nor a table of requests (a CSV header or JSON lines with arrival_time); give one of "
        + ", ".join(FORMATS[1:])
    )


READERS = {
    "vllm-records": read_vllm_records,
    "otel": read_otel_spans,
}


def read_measured(path: Path, fmt: str = "auto", seed: int = 0, server_log: Path | None = None) -> Measured:
    """The measured run at ``path`` (and the server's facts from ``server_log``); problems as
    ScenarioError naming ``RESULT`` (``--server-log``)."""
    try:
        if fmt == "auto":
            fmt = detect_format(path)
    except UnknownFormat as exc:
        raise ScenarioError(("--format", str(exc))) from None
    except ValueError as exc:
        raise ScenarioError((ARG, str(exc))) from None
    try:
        if fmt == "vllm-bench":
            rows = read_vllm_bench(path, seed)
        elif fmt in READERS:
            rows = READERS[fmt](path)
        else:
            rows = read_request_log(path, jsonl=fmt == "jsonl")
    except ValueError as exc:
        raise ScenarioError((ARG, str(exc))) from None
    if not rows["success"].any():
        raise ScenarioError((ARG, f"{str(path)!r}: no request succeeded, so there is nothing to compare"))
    server = None
    if server_log is not None:
        try:
            server = read_server_log(server_log)
        except ValueError as exc:
            raise ScenarioError(("--server-log", str(exc))) from None
    meta = dict(rows.attrs.get("meta", {}))
    return Measured(path, fmt, rows, meta, bool(rows.attrs.get("has_itl", False)), server)


# -- statistics ------------------------------------------------------------------------------


def _stats(values: np.ndarray) -> dict[str, float]:
    v = values[np.isfinite(values)]
    if v.size == 0:
        return {s: math.nan for s in STATS}
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {"mean": float(v.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99)}


def itls(rows: pd.DataFrame, measured: bool) -> np.ndarray:
    """Inter-token gaps (seconds): of a measured run, as recorded; of a des run, each
    request's mean gap (its TPOT) repeated for its ``output_tokens - 1`` gaps."""
    if measured:
        return np.array([g for gaps in rows["itl"] if gaps is not None for g in gaps], dtype=float)
    multi = rows[rows["output_tokens"] > 1]
    return np.repeat(multi["tpot"].to_numpy(float), (multi["output_tokens"] - 1).to_numpy())


def summarize(rows: pd.DataFrame, measured: bool, itl: bool, queue: bool = False) -> dict[str, float]:
    """Throughput and latency statistics of completed requests (columns as the readers return);
    with ``queue``, also of ``queue_delay`` (arrival to first scheduling)."""
    span = float((rows["arrival_time"] + rows["e2e"]).max() - rows["arrival_time"].min())
    out: dict[str, float] = {
        "requests": float(len(rows)),
        "throughput_rps": len(rows) / span if span > 0 else math.nan,
        "output_tokens_per_s": float(rows["output_tokens"].sum()) / span if span > 0 else math.nan,
    }
    for name in LATENCIES:
        if name == "itl" and not itl:
            continue
        values = itls(rows, measured) if name == "itl" else rows[name].to_numpy(float)
        for stat, v in _stats(values).items():
            out[f"{name}_{stat}"] = v
    if queue:
        for stat, v in _stats(rows["queue_delay"].to_numpy(float)).items():
            out[f"queue_delay_{stat}"] = v
    return out


def error(simulated: float, measured: float) -> float:
    """``(simulated - measured) / measured``; 0 when both are 0; NaN when undefined."""
    if not (math.isfinite(simulated) and math.isfinite(measured)):
        return math.nan
    if measured == 0:
        return 0.0 if simulated == 0 else math.nan
    return simulated / measured - 1.0


@dataclass
class Comparison:
    """Measured against simulated, metric by metric (seconds, requests/s, tokens/s)."""

    measured: Measured
    simulated: pd.DataFrame  # the replay's completed requests, same columns as measured
    rejected: int
    table: pd.DataFrame  # metric, measured, simulated, error
    scenario: Any
    engine: pd.DataFrame = field(default_factory=pd.DataFrame)  # preemptions, KV capacity: same columns
    notes: list[str] = field(default_factory=list)  # what the replay's GPU and model rest on (engine_notes)
    from_log: dict[str, Any] = field(default_factory=dict)  # engine settings the replay took from --server-log

    def errors(self) -> dict[str, float]:
        """The latency and throughput errors by metric (the engine facts: :meth:`engine_facts`)."""
        return dict(zip(self.table["metric"], self.table["error"], strict=True))

    def engine_facts(self) -> dict[str, dict[str, float]]:
        """``{metric: {measured, simulated, error}}`` of preemptions and KV capacity (NaN: unknown)."""
        return {
            str(r.metric): {"measured": r.measured, "simulated": r.simulated, "error": r.error}
            for r in self.engine.itertuples(index=False)
        }

    def as_dict(self) -> dict[str, Any]:
        """Both runs' facts and the table as flat keys (``ttft_p99_measured``, ``..._simulated``,
        ``..._error``): what ``comparison.json`` holds."""
        facts = {
            "result": str(self.measured.path),
            "format": self.measured.format,
            "measured_requests": len(self.measured.rows),
            "measured_failed": self.measured.failed,
            "simulated_completed": len(self.simulated),
            "simulated_rejected": self.rejected,
            **{f"meta_{k}": v for k, v in self.measured.meta.items() if isinstance(v, str | int | float | bool)},
            **({"settings_from_server_log": self.from_log_text()} if self.from_log else {}),
        }
        rows = [*self.table.itertuples(index=False), *self.engine.itertuples(index=False)]
        table = {f"{r.metric}_{col}": getattr(r, col) for r in rows for col in
                 ("measured", "simulated", "error")}  # fmt: skip
        return {**facts, **table}

    def from_log_text(self) -> str:
        """The settings taken from the server's log, ``key value`` comma-separated ('' if none)."""
        return ", ".join(f"{k} {v:,}" if type(v) is int else f"{k} {v}" for k, v in self.from_log.items())

    def trace_csv(self) -> str:
        """The replayed requests as a trace (:func:`trace_csv`)."""
        return trace_csv(self.measured)

    def rerun_scenario(self, trace: str = "trace.csv") -> dict[str, Any]:
        """The replay's scenario, resolved, reading its requests from ``trace``: ``des run`` on it
        reruns the replay."""
        scenario = self.scenario.resolved()
        scenario["workload"]["arrival"]["path"] = trace
        return scenario


def simulated_rows(requests: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """A des run's completed requests in the readers' columns, and how many were rejected."""
    done = requests[requests["status"] == "completed"]
    rows = pd.DataFrame(
        {
            "arrival_time": done["arrival_time"].to_numpy(float),
            "prompt_tokens": done["prompt_tokens"].to_numpy(np.int64),
            "output_tokens": done["output_tokens"].to_numpy(np.int64),
            "ttft": done["ttft"].to_numpy(float),
            "e2e": done["e2e"].to_numpy(float),
            "tpot": done["tpot"].to_numpy(float),
            "queue_delay": done["queue_delay"].to_numpy(float),
            "success": True,
        }
    )
    rows["itl"] = [
        [float(t)] * (int(n) - 1) if n > 1 else [] for t, n in zip(rows["tpot"], rows["output_tokens"], strict=True)
    ]
    return rows, int((requests["status"] != "completed").sum())


def trace_csv(measured: Measured) -> str:
    """The measured run's completed requests, by arrival, as a csv trace
    (``arrival_time,prompt_tokens,output_tokens``; times to the last bit). Under a
    ``max_concurrency`` the times are when the benchmark issued each request (``issue_time``):
    the replay holds them back as its client did."""
    done = measured.completed
    when = "issue_time" if "issue_time" in done else "arrival_time"
    done = done.sort_values(when, kind="stable")
    lines = ["arrival_time,prompt_tokens,output_tokens"]
    lines += [
        f"{float(a)!r},{int(p)},{int(o)}"
        for a, p, o in zip(done[when], done["prompt_tokens"], done["output_tokens"], strict=True)
    ]
    return "\n".join(lines) + "\n"


#: The engine fields a measured run may name (scenario key -> where a log names it, what it is).
ENGINE_NAMES = {"gpu": ("gpu (--metadata gpu=NAME)", "GPU"), "model": ("model_id", "model")}


def named_engine(measured: Measured) -> list[tuple[str, str]]:
    """The catalog GPU and model the log names (``model_id``; ``gpu`` given with ``--metadata``),
    as scenario overrides; a name the catalog lacks is left out (:func:`unnamed` says which)."""
    from des.catalog import gpu_names

    out = []
    gpu = measured.meta.get("gpu")
    if isinstance(gpu, str) and gpu.strip().lower() in gpu_names():
        out.append(("gpu", gpu.strip().lower()))
    model = catalog_model(measured.meta.get("model_id"))
    if model is not None:
        out.append(("model", model))
    return out


def unnamed(measured: Measured) -> dict[str, str]:
    """The GPU and model names the log gives that name no catalog entry (scenario key -> the
    name as the log writes it): :func:`named_engine` leaves them out."""
    named = dict(named_engine(measured))
    given = {"gpu": measured.meta.get("gpu"), "model": measured.meta.get("model_id")}
    return {k: v.strip() for k, v in given.items() if isinstance(v, str) and v.strip() and k not in named}


def _asked(scenario: Path | None, overrides: Iterable[str]) -> tuple[set[str], set[str]]:
    """The engine keys (``gpu``, ``model``) the user decided: by ``--set``, and by the SCENARIO file."""
    from des.scenario import parse_override, read_yaml

    chosen = {parse_override(text)[0].split(".")[0] for text in overrides}
    stated = set(read_yaml(scenario)) if scenario is not None else set()
    return chosen & set(ENGINE_NAMES), stated & set(ENGINE_NAMES)


def check_unnamed(measured: Measured, scenario: Path | None, overrides: Iterable[str]) -> None:
    """A GPU or model the log names but the catalog lacks is replaced only when asked to: by
    ``--set`` or by a SCENARIO that names one. ScenarioError naming ``RESULT`` otherwise (des
    would replay the run on the default's, and report that engine's errors as the run's)."""
    from des.catalog import gpu_names, model_names

    chosen, stated = _asked(scenario, overrides)
    problems = []
    for key, name in unnamed(measured).items():
        if key in chosen | stated:
            continue
        where, kind = ENGINE_NAMES[key]
        names = gpu_names() if key == "gpu" else model_names()
        problems.append(
            (
                ARG,
                f"{str(measured.path)!r}: its {where} {name!r} is no catalog {kind}, and des does not replay "
                f"a run on another {kind} unasked: give the one to replay on with --set {key}=NAME "
                f"({', '.join(names)}) or a SCENARIO that names one",
            )
        )
    if problems:
        raise ScenarioError(problems)


def engine_notes(measured: Measured, scenario: Path | None, overrides: Iterable[str], sc: Any) -> list[str]:
    """What the replay's GPU and model rest on when the log does not decide them, one warning
    each (the command prints them): without a SCENARIO, a GPU or model the log does not name
    and no ``--set`` gives is the embedded default's; with one, a name the log gives that the
    catalog lacks is replaced by the SCENARIO's. A catalog name the log gives needs no note."""
    chosen, stated = _asked(scenario, overrides)
    actual = {"gpu": sc.gpu.name, "model": sc.model.name}
    lacking = unnamed(measured)
    if scenario is not None:
        return [
            f"the log's {ENGINE_NAMES[k][0].split(' ')[0]} {name!r} is no catalog {ENGINE_NAMES[k][1]}; "
            f"replaying on SCENARIO's {actual[k]}"
            for k, name in lacking.items()
            if k in stated and k not in chosen
        ]
    named = dict(named_engine(measured))
    missing = [k for k in ENGINE_NAMES if k not in named and k not in chosen and k not in lacking]
    if not missing:
        return []
    what = " and no ".join(ENGINE_NAMES[k][1] for k in missing)
    used = " and ".join(actual[k] for k in missing)
    sets = " ".join(f"--set {k}=NAME" for k in missing)
    return [
        f"the log names no {what}; comparing against the default scenario's {used}: "
        f"give what it ran on with {sets}, or a SCENARIO"
    ]


def catalog_model(model_id: object) -> str | None:
    """The catalog model a Hugging Face id names (``Qwen/Qwen2.5-7B-Instruct`` -> ``qwen2.5-7b``):
    the entry whose ``source`` is that repository, else whose name is the id's last part
    without an ``-Instruct``-like tail; None if none is."""
    from des.catalog import model_names, resolve

    if not isinstance(model_id, str) or not model_id.strip():
        return None
    wanted = model_id.strip().lower()
    base = wanted.rsplit("/", 1)[-1]
    table = {name: resolve("models", name) for name in model_names()}
    for name, entry in table.items():
        source = str(entry.get("source", "")).lower()
        if f"huggingface.co/{wanted}/" in source or str(entry.get("description", "")).lower() == wanted:
            return name
    for name in table:
        if base == name or base.startswith(name + "-") and base[len(name) + 1 :].split("-")[0] in ("instruct", "hf"):
            return name
    return None


def _keys(value: Any) -> set[str]:
    """Every key of the mappings in ``value``, however deep (lists walked too)."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keys(v)}
    return set()


def _given_settings(measured: Measured, scenario: Path | None, overrides: Iterable[str]) -> tuple[set[str], str, Any]:
    """What the user decided of the engine: the batching settings the SCENARIO (its
    ``scheduler`` or any pool's) or ``--set`` (any key ending in one, or a mapping holding it)
    gives; the scheduler kind; and the model the replay runs (as the scenario names it)."""
    from des.scenario import default_scenario_path, parse_override, read_yaml

    data = read_yaml(scenario) if scenario is not None else {}
    given = _keys(data.get("scheduler")) | _keys(data.get("cluster"))
    base = data if scenario is not None else read_yaml(default_scenario_path())
    sched = base.get("scheduler")
    kind = sched.get("kind", "continuous") if isinstance(sched, dict) else "continuous"
    model = base.get("model") if scenario is not None else dict(named_engine(measured)).get("model", base.get("model"))
    for text in overrides:
        key, value = parse_override(text)
        parts = key.split(".")
        if parts[0] in ("scheduler", "cluster"):
            given |= {parts[-1]} | _keys(value)
        if key == "scheduler.kind" or (key == "scheduler" and isinstance(value, dict) and "kind" in value):
            kind = value if key == "scheduler.kind" else value["kind"]
        if key == "model":
            model = value
    return given, str(kind), model


def log_settings(
    measured: Measured, scenario: Path | None, overrides: Iterable[str]
) -> tuple[dict[str, Any], list[str]]:
    """The engine settings of the server's log (``--server-log``) the replay takes: those the
    SCENARIO and ``--set`` leave out (a value the user gives wins), of the scheduler kind the
    replay runs (static batching has no ``max_num_seqs``...); and a note for each the replay
    cannot take (a context beyond the model's: the server ran another model)."""
    from des.catalog import resolve
    from des.engine.schedulers import SCHEDULERS

    stated = measured.server.settings() if measured.server is not None else {}
    if not stated:
        return {}, []
    overrides = list(overrides)
    given, kind, model = _given_settings(measured, scenario, overrides)
    try:
        fields = set(cast(Any, SCHEDULERS.get(kind)).model_fields)
    except (KeyError, ValueError):
        return {}, []  # an unknown kind: the scenario's validation says so
    taken = {k: v for k, v in stated.items() if k not in given and k in fields}
    notes = []
    limit = taken.get("max_model_len")
    if limit is not None and isinstance(model, str):
        try:
            context = resolve("models", model).get("max_model_len")
        except ValueError:
            context = None  # an unknown model: the scenario's validation says so
        if isinstance(context, int) and limit > context:
            del taken["max_model_len"]
            notes.append(
                f"the server log's max_model_len {limit:,} is longer than {model}'s {context:,}-token context, "
                "so the replay keeps its own (did the server run another model?)"
            )
    return {k: taken[k] for k in SETTINGS if k in taken}, notes


def tp_notes(measured: Measured, sc: Any) -> list[str]:
    """A warning when the server's log states another GPU count per engine
    (``tensor_parallel_size``) than the replay's pools run: des keeps the scenario's deployment."""
    tp = measured.server.tensor_parallel_size if measured.server is not None else None
    if tp is None:
        return []
    ran = sorted({p.tp for p in sc.cluster.pools})
    if ran == [tp]:
        return []
    return [
        f"the server log states tensor_parallel_size {tp}, the replay runs {' and '.join(map(str, ran))} GPU(s) "
        f"per instance (kept: give the server's with --set cluster.pools.0.tp={tp}, or a SCENARIO)"
    ]


def replay_scenario(
    measured: Measured,
    scenario: Path | None,
    overrides: Iterable[str],
    trace: Path,
    settings: dict[str, Any] | None = None,
) -> Any:
    """The scenario that replays the measured requests (written to ``trace``) on the given engine:
    ``scenario`` (or, without one, the embedded default on the GPU and model the log names),
    with ``settings`` (the server log's, :func:`log_settings`) as its ``scheduler``'s, then
    ``overrides``."""
    from des.scenario import load_scenario, parse_override

    check_unnamed(measured, scenario, overrides)
    items: list[str | tuple[str, Any]] = []
    if scenario is None:
        items += [("name", f"replay of {measured.path.name}"), *named_engine(measured)]
    items += [(f"scheduler.{k}", v) for k, v in (settings or {}).items()]
    for text in overrides:
        key, value = parse_override(text)
        if key.split(".")[0] in FROM_RESULT:
            raise ScenarioError(("--set", f"{key} comes from RESULT (its requests and arrivals); set the engine only"))
        items.append((key, value))
    trace.write_text(trace_csv(measured))
    arrival: dict[str, Any] = {"process": "trace", "path": str(trace)}
    if measured.max_concurrency is not None:
        arrival["max_concurrency"] = measured.max_concurrency
    items += [
        ("workload", {"arrival": arrival}),
        ("horizon", {"drain": True}),
        ("warmup", 0.0),
    ]
    return load_scenario(scenario, items)


def compare(
    measured: Measured, scenario: Path | None = None, overrides: Iterable[str] = (), seed: int | None = None
) -> Comparison:
    """Replay ``measured`` on the engine of ``scenario`` (with ``overrides``) and compare."""
    from des.simulation import simulate

    with tempfile.TemporaryDirectory(prefix="des-compare-") as tmp:
        items = list(overrides)
        if seed is not None:
            items.append(f"seed={seed}")
        check_unnamed(measured, scenario, items)
        taken, notes = log_settings(measured, scenario, items)
        sc = replay_scenario(measured, scenario, items, Path(tmp) / "requests.csv", taken)
        notes = engine_notes(measured, scenario, items, sc) + notes + tp_notes(measured, sc)
        result = simulate(sc)
    sim, rejected = simulated_rows(result.requests)
    engine = engine_table(measured, result.summary, sc)
    itl = measured.has_itl
    queue = "queue_delay" in measured.rows
    meas_stats = summarize(measured.completed, measured=True, itl=itl, queue=queue)
    sim_stats = summarize(sim, measured=False, itl=itl, queue=queue) if len(sim) else {k: math.nan for k in meas_stats}
    if "duration" in measured.meta and measured.meta.get("arrivals") != "start_times":
        # without send times the measured span is not known; the benchmark's own duration is
        duration = measured.meta["duration"]
        if isinstance(duration, int | float) and duration > 0:
            meas_stats["throughput_rps"] = len(measured.completed) / duration
            meas_stats["output_tokens_per_s"] = float(measured.completed["output_tokens"].sum()) / duration
    rows = [
        {"metric": k, "measured": meas_stats[k], "simulated": sim_stats.get(k, math.nan)}
        for k in meas_stats
        if k != "requests"
    ]
    table = pd.DataFrame(rows)
    table["error"] = [error(s, m) for s, m in zip(table["simulated"], table["measured"], strict=True)]
    return Comparison(measured, sim, rejected, table, sc, engine, notes, taken)


def engine_table(measured: Measured, summary: dict[str, Any], scenario: Any) -> pd.DataFrame:
    """Preemptions and KV capacity per instance (tokens, blocks) of the log and of des's run,
    with the error where both are known (``metric, measured, simulated, error``)."""
    tokens = float(summary.get("kv_capacity_tokens") or math.nan)
    block = getattr(scenario.scheduler, "block_size", None)
    simulated = {
        "preemptions": float(summary.get("preemptions", math.nan)),
        "kv_capacity_tokens": tokens,
        "kv_capacity_blocks": tokens / block if block else math.nan,
    }
    logged = measured.engine()
    table = pd.DataFrame([{"metric": k, "measured": logged[k], "simulated": simulated[k]} for k in ENGINE_METRICS])
    table["error"] = [error(s, m) for s, m in zip(table["simulated"], table["measured"], strict=True)]
    return table


def write_comparison(cmp: Comparison, out_dir: Path, plot_cdfs: Callable[[Comparison, Path], None]) -> list[Path]:
    """Write the files of ``cmp`` into ``out_dir`` (created if missing), together:
    ``comparison.json`` (the table and both runs' facts), ``cdf.png`` (drawn by ``plot_cdfs``:
    the command passes :func:`des.figures.tools.plot_cdfs`, as the tools draw nothing), the
    simulated ``requests.parquet``, the replayed ``trace.csv`` and the ``scenario.yaml`` that
    reruns the replay (``des run scenario.yaml``). Returns the files written."""
    import yaml

    from des.output import Staged, json_text, parquet_writer

    out_dir.mkdir(parents=True, exist_ok=True)
    facts, trace = json_text(cmp.as_dict()), cmp.trace_csv()
    scenario_text = yaml.safe_dump(cmp.rerun_scenario("trace.csv"), sort_keys=False)
    staged = Staged(out_dir)
    try:
        staged.write("comparison.json", lambda tmp: tmp.write_text(facts))
        staged.write("cdf.png", lambda tmp: plot_cdfs(cmp, tmp))
        staged.write("requests.parquet", parquet_writer(cmp.simulated.drop(columns=["itl"])))
        staged.write("trace.csv", lambda tmp: tmp.write_text(trace))
        staged.write("scenario.yaml", lambda tmp: tmp.write_text(scenario_text))
    except BaseException:
        staged.discard()
        raise
    return staged.commit()
