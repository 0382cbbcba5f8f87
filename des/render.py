"""Everything the ``des`` command shows: summaries, tables, progress bars and log lines.

Results go to stdout, progress bars and warnings to stderr. Bars appear only when
stderr is a terminal (pipes and logs get the same results without them); a stdout that
is not a terminal gets tables wide enough not to wrap. Nothing here computes a metric:
it formats what the library returns.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    import pandas as pd

    from des.catalog.memory import MemoryPlan
    from des.engine.layout import PoolLayout
    from des.metrics import Result
    from des.scenario import Scenario
    from des.study.capacity import CapacityAnswer, Evaluation
    from des.tools.bench import Measure
    from des.tools.calibrate import Fit
    from des.tools.compare import Comparison
    from des.tools.costmodel import CostReport
    from des.tools.network import NetworkFit

ERR = Console(stderr=True)
LATENCY_COLUMNS = ("mean", "p50", "p90", "p95", "p99")


def out() -> Console:
    """The stdout console; wide enough for the tables when not a terminal (pipes, logs)."""
    c = Console()
    return c if c.is_terminal else Console(width=160)


def fmt(v: Any) -> str:
    """A summary value for people: '-' for missing, yes/NO, thousands separators, 4 digits."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    if isinstance(v, int):
        return f"{v:,}"
    if abs(v) >= 100:
        return f"{v:,.1f}"
    return f"{v:.4g}"


def warning(note: str) -> None:
    ERR.print(f"[yellow]warning:[/] {note}", highlight=False)


# -- des run ---------------------------------------------------------------------------


def workload_line(sc: Scenario) -> str:
    """The arrivals, as configured; a trace with what its replay measures."""
    from des.workload.arrivals import Trace

    a = sc.workload.arrival
    if not isinstance(a, Trace):
        params = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in _fields(a).items())
        return f"{a.process}: {params}"
    st = a.stats()
    moved = (
        f"first arrival (recorded at {a.recorded_start}) moved to t = 0; absolute_times: true keeps the recorded clock"
        if a.offset
        else "times as recorded"
    )
    fmt = a.trace_format
    unit = f", times in {fmt.unit}" if a.time_scale is None and fmt.unit_seconds != 1.0 else ""
    scales = (("time_scale", a.time_scale), ("rate_scale", a.rate_scale))
    scale = "".join(f", {k} {v:g}" for k, v in scales if v is not None and v != 1.0)
    model = f", model {a.model}" if a.model is not None else ""
    rate = f"{st.rate:.3g} req/s" if st.rate is not None else "all at once"
    cv = f", gap cv {st.cv:.2f}" if st.cv is not None else ""
    return (
        f"trace {a.path.name} ({fmt.name}{unit}{model}; {moved}{scale}): "
        f"{st.requests:,} requests over {st.span:,.1f} s, {rate}{cv}"
    )


def _fields(config: Any) -> dict[str, Any]:
    return {k: v for k, v in config.model_dump(mode="json", exclude_none=True).items() if k != "process"}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f} %"


def utilisation_line(s: dict[str, Any]) -> str:
    """What share of the hardware the steps used (see :mod:`des.metrics.utilisation`)."""
    return (
        f"roofline {_pct(s['roofline_share'])} (compute {_pct(s['compute_utilization'])}, "
        f"bandwidth {_pct(s['bandwidth_utilization'])}), token budget {_pct(s.get('token_budget_use'))}, "
        f"batch slots {_pct(s.get('batch_occupancy'))}, KV {_pct(s.get('kv_use_mean'))} mean, "
        f"{_pct(s.get('kv_use_p99'))} p99, {_pct(s.get('kv_use_peak'))} peak"
    )


def prefix_cache_line(s: dict[str, Any]) -> str:
    """How much prompt the prefix cache saved (see :mod:`des.metrics.cache`)."""
    return (
        f"hit {_pct(s['prefix_cache_hit_rate'])} of prompt tokens: {s['prompt_tokens_computed']:,} computed "
        f"of {s['prompt_tokens_requested']:,} requested"
    )


def _pct_of(v: float) -> str:
    """A share as a percentage: to a tenth of a per cent below 10 %, else whole."""
    return f"{100 * v:.1f} %" if v < 0.1 else f"{100 * v:.0f} %"


def _closed_loop_parts(s: dict[str, Any], slo: dict[str, float] | None) -> list[str]:
    """What a closed loop's verdict means: nothing about latency; saturation; the SLO to judge it by."""
    parts = ["a closed loop: its fixed number of users cannot grow the backlog, so this says nothing about latency"]
    share = s.get("waiting_share")
    if share is not None:
        waited = f"{_pct_of(share)} of the requests in the system waited outside a running batch"
        parts.append(f"SATURATED: {waited}; more users only wait longer" if s.get("saturated") else waited)
    if slo:
        limits = ", ".join(f"{k} <= {v:g} s" for k, v in slo.items())
        met = s.get("slo_attainment")
        done = "no request measured" if met is None else f"{_pct_of(met)} of measured requests met it"
        parts.append(f"judge it by its SLO ({limits}): {done}")
    else:
        parts.append("no SLO to judge it by (scenario slo: {ttft, tpot, e2e})")
    return parts


def _split_parts(s: dict[str, Any]) -> list[str]:
    """Which pool of a split is overloaded, or how often the decode pool held requests back."""
    from des.metrics.verdict import DECODE_FULL_NOTE

    full = s.get("decode_full_share")
    if full is None:
        return []
    if s.get("decode_overloaded"):
        return [
            f"the decode pool is overloaded: full {_pct_of(full)} of the window (KV transfers waiting for its "
            "blocks, or requests for its batch), and requests queued for prefill admission behind it"
        ]
    if s.get("prefill_overloaded"):
        return [f"the prefill pool is overloaded (the decode pool was full only {_pct_of(full)} of the window)"]
    if full >= DECODE_FULL_NOTE:
        wait, p99 = s.get("kv_block_wait_mean"), s.get("kv_block_wait_p99")
        waits = (
            f"; KV transfers waited for its blocks {wait:.2g} s mean, p99 {p99:.2g} s"
            if wait is not None and p99 is not None
            else ""
        )
        return [
            f"decode pool full {_pct_of(full)} of the window{waits}: that shows in TPOT (the first decode gap), "
            "not in the backlog"
        ]
    return []


def stability_line(s: dict[str, Any], slo: dict[str, float] | None = None) -> str:
    """The stability verdict and every flag behind it; what it means for a closed loop (judged
    against ``slo``, the scenario's per-request limits, when given) and for the pools of a split."""
    parts = _closed_loop_parts(s, slo) if s.get("closed_loop") else []
    parts.append(
        f"backlog grew by {s['backlog_growth']:.3f} of arrivals; queue by {s['backlog_growth_of_level']:.2f} "
        "of the backlog's level"
    )
    if s.get("backlog_trend_unreliable"):
        parts.append("trend unreliable: the clock cannot tell the window's instants apart")
    if s.get("drifting"):
        parts.append(f"latencies drifting (MSER-5 would drop {s['mser_truncation']:,} requests)")
    elif s.get("mser_truncation"):
        parts.append(f"warm-up short: MSER-5 would drop {s['mser_truncation']:,} more requests")
    else:
        parts.append("latencies settled")
    parts += _split_parts(s)
    if s.get("stationary") is False:
        return f"does not apply: the arrival rate follows a schedule, so the run has no steady state; {windows_line(s)}"
    if s["stable"] is None:
        return "unknown (no request arrived inside the arrival window to judge by)"
    verdict = "yes, by construction" if s["stable"] and s.get("closed_loop") else fmt(s["stable"])
    return f"{verdict} ({'; '.join(parts)})"


def windows_line(s: dict[str, Any]) -> str:
    """How the run's windows (windows.parquet) went against the SLO."""
    n, breached, first = s.get("windows"), s.get("windows_breached"), s.get("first_breach_time")
    if breached is None:
        return f"see windows.parquet ({n} windows; no SLO to judge them by)"
    since = f", the first from {first:,.6g} s" if first is not None else ""
    return f"SLO missed in {breached} of {n} windows{since} (windows.parquet)"


def _clock(seconds: float) -> str:
    """``h:mm`` from t = 0 (``d+h:mm`` past a day), or seconds under an hour's run."""
    minutes = int(round(seconds / 60))
    days, rest = divmod(minutes, 24 * 60)
    text = f"{rest // 60}:{rest % 60:02d}"
    return f"{days}d+{text}" if days else text


def breach_spans(windows: pd.DataFrame, limit: int = 6) -> str:
    """The stretches of consecutive windows missing the SLO, with their worst p99 TTFT and
    the instances serving: when the SLO broke and for how long ("" when it never did)."""
    missed = (windows["slo_met"] == False).to_numpy()  # noqa: E712 (True, False and None)
    if not missed.any():
        return ""
    spans, i = [], 0
    while i < len(windows):
        if not missed[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(windows) and missed[j + 1]:
            j += 1
        part = windows.iloc[i : j + 1]
        hourly = windows["end"].iloc[-1] >= 3600
        at = (
            f"{_clock(part['start'].iloc[0])}-{_clock(part['end'].iloc[-1])}"
            if hourly
            else f"{part['start'].iloc[0]:g}-{part['end'].iloc[-1]:g} s"
        )
        spans.append(
            f"{at} (p99 TTFT up to {fmt(part['ttft_p99'].max())} s, "
            f"{fmt(part['instances_serving'].min())}-{fmt(part['instances_serving'].max())} serving)"
        )
        i = j + 1
    more = f"; and {len(spans) - limit} more" if len(spans) > limit else ""
    return "; ".join(spans[:limit]) + more


def fleet_line(s: dict[str, Any]) -> str:
    """What the run paid for: GPU-hours, cost, and the autoscalers' moves."""
    cost = s.get("cost")
    paid = (
        f", ${cost:,.2f} (${fmt(s.get('cost_per_million_tokens'))} per million output tokens)"
        if cost is not None
        else ", no price known (prices: {GPU: USD per hour})"
    )
    moves = (
        f"; {s['scale_ups']} instances started, {s['scale_downs']} stopped"
        if s.get("scale_ups") or s.get("scale_downs")
        else ""
    )
    mean = fmt(s.get("instances_paying_mean"))
    return f"{s['gpu_hours']:,.4g} GPU-hours{paid}; {mean} instances paid for on average{moves}"


def load_line(s: dict[str, Any]) -> str:
    """Offered load and throughput over the arrival window (named), and what was served over the whole run."""
    start, end = s.get("arrival_window_start"), s.get("arrival_window_end")
    window = f"the arrival window [{start:,.4g}, {end:,.4g}] s" if start is not None and end is not None else ""
    if start is not None and end is not None and not end > start:
        window += " (empty: the warm-up lasts past the last arrival)"
    makespan = s.get("makespan")
    run = f"the whole run, to its last completion at {makespan:,.4g} s" if makespan else "the whole run"
    return (
        f"offered {fmt(s['offered_rps'])} req/s, throughput {fmt(s['throughput_rps'])} req/s, "
        f"{fmt(s['output_tokens_per_s'])} output tok/s over {window}; served {fmt(s.get('served_rps'))} req/s, "
        f"{fmt(s.get('served_tokens_per_s'))} output tok/s over {run}"
    )


def requests_line(s: dict[str, Any], rejected: dict[str, int]) -> str:
    why = f" ({', '.join(f'{n:,} {reason}' for reason, n in rejected.items())})" if rejected else ""
    return (
        f"{s['num_requests']:,} arrived: {s['num_completed']:,} completed, "
        f"{s['num_rejected']:,} rejected{why}, {s['num_unfinished']:,} unfinished"
    )


def hardware_line(sc: Scenario) -> str:
    """GPUs, model, batching, cost model and serving front-end: ``2 x 1 x rtx4090`` colocated, or the pools."""
    pools = sc.layout.pools

    def engines(p: PoolLayout) -> str:
        a = p.autoscaler
        return (
            str(p.engines)
            if a is None
            else f"{a.min_instances}-{a.max_instances} (autoscaled on {a.metric}, {p.engines} at t = 0)"
        )

    if len(pools) == 1:
        p0 = pools[0]
        gpus = f"{engines(p0)} x {p0.tp * p0.parallel.pp} x {p0.gpu.name}"
    else:
        gpus = " + ".join(f"{engines(p)} {p.role} x {p.tp} x {p.gpu.name}" for p in pools)
    behind = f", {sc.serving.frontend} front-end" if sc.serving is not None else ""
    spec = sc.speculative
    batching = f"{'disaggregated' if sc.cluster.split else sc.scheduler.kind} batching"
    if spec is not None and spec.active:
        proposer = f"{spec.method} {spec.model}" if spec.model else spec.method
        batching += (
            f" with speculative decoding ({proposer}, k {spec.num_speculative_tokens}, "
            f"acceptance {spec.acceptance_rate:g}: {spec.expected_tokens:.3g} tokens a step)"
        )
    return f"{gpus}, {sc.model.name}, {batching}, {sc.cost_model.kind} cost{behind}"


def memory_line(plan: MemoryPlan) -> str:
    """Where one instance's memory goes, as vLLM's profiler splits it (GiB): the budget,
    weights (with the rotary cache), the profile run's activation peak and which part of
    it sets the peak, the runtime reserve, the KV cache, and the CUDA graph pool, charged
    to the budget or captured beside it (vLLM 0.19's default)."""

    def gib(b: int) -> str:
        return f"{b / (1 << 30):.2f}"

    gpus = f" over {plan.tp} GPUs" if plan.tp > 1 else ""
    which = "sampler" if plan.sampler_peak >= plan.forward_peak else "forward"
    if plan.graph_pool == 0:
        graphs = "no CUDA graphs"
    else:
        graphs = f"CUDA graphs {gib(plan.graph_pool)} {'charged' if plan.graph_pool_charged else 'uncharged'}"
    return (
        f"{gib(plan.budget)} GiB{gpus}: weights {gib(plan.weights + plan.rope_cache)}, "
        f"activation peak {gib(plan.activations)} ({which}), runtime reserve {gib(plan.runtime_reserve)}, "
        f"KV {gib(plan.kv_bytes)} ({plan.kv_capacity_tokens:,} tokens); {graphs}"
    )


def factor_lines(sc: Scenario) -> list[str]:
    """Per GPU type of the run, where its step-time factors come from: fitted (to what),
    transferred (from what) or spec only, and their stated uncertainty."""
    return [source.describe() for source in sc.deployment.factors]


def summary_rows(sc: Scenario, result: Result) -> list[tuple[str, str]]:
    """The labelled lines above a run's latency table (``des run`` and the what-if page)."""
    from des.metrics.summary import rejections

    s = result.summary
    rows: list[tuple[str, str]] = []
    rows.append(("scenario", f"{sc.name}  (seed {sc.seed})"))
    rows.append(("hardware", hardware_line(sc)))
    rows.append(("workload", workload_line(sc)))
    rows.append(("requests", requests_line(s, rejections(result.requests))))
    rows.append(("load", load_line(s)))
    pools = sc.deployment.pools
    per = " per decode instance (each pool's below)" if len(pools) > 1 else ""
    rows.append(
        (
            "engine",
            f"GPU busy {fmt(s['gpu_busy_fraction'])}, mean batch {fmt(s['mean_batch_size'])}, "
            f"{s['preemptions']:,} preemptions, KV capacity {s['kv_capacity_tokens']:,} tokens{per}",
        )
    )
    for pool in pools:
        rows.append(("memory" if len(pools) == 1 else f"{pool.layout.role} memory", memory_line(pool.memory)))
    if s.get("roofline_share") is not None:
        rows.append(("utilisation", utilisation_line(s)))
    if s.get("prefix_cache_hit_tokens"):
        rows.append(("prefix cache", prefix_cache_line(s)))
    for role in ("prefill", "decode"):
        if s.get(f"{role}_busy_fraction") is not None:
            rows.append(
                (
                    role,
                    f"busy {fmt(s[f'{role}_busy_fraction'])}, mean batch {fmt(s[f'{role}_mean_batch_size'])}, "
                    f"KV use {_pct(s[f'{role}_kv_use'])}",
                )
            )
    if s.get("kv_transfer_time_mean") is not None:
        rows.append(
            (
                "kv transfer",
                f"{fmt(s['kv_transfer_time_mean'])} s mean, p99 {fmt(s['kv_transfer_time_p99'])} s; "
                f"waiting for decode blocks {fmt(s['kv_block_wait_mean'])} s mean, "
                f"for the link {fmt(s['kv_link_wait_mean'])} s mean",
            )
        )
    rows.append(("paid for", fleet_line(s)))
    rows.append(("stable", stability_line(s, sc.slo.limits() if sc.slo is not None else None)))
    if s.get("stationary") is not False and s.get("windows_breached"):
        rows.append(("windows", windows_line(s)))
    if result.windows is not None and s.get("windows_breached"):
        rows.append(("SLO missed", breach_spans(result.windows)))
    for i, line in enumerate(factor_lines(sc)):
        rows.append(("step times" if i == 0 else "", line))
    if result.draws is not None:
        rows.append(("model error", "drawn (model_uncertainty): " + "; ".join(result.draws.describe())))
    return rows


def run_summary(sc: Scenario, result: Result, wall: float, out_dir: Path, files: Sequence[str] = ()) -> None:
    s = result.summary
    console = out()
    head = Table.grid(padding=(0, 2))
    for label, text in summary_rows(sc, result):
        head.add_row(label, text)
    console.print(head)
    table = Table(title="latency (seconds)", title_justify="left")
    table.add_column("metric")
    for col in LATENCY_COLUMNS:
        table.add_column(col, justify="right")
    for name in ("ttft", "tpot", "itl", "second_token", "e2e", "queue_delay"):
        table.add_row(name, *(fmt(s.get(f"{name}_{c}")) for c in LATENCY_COLUMNS))
    console.print(table)
    names = (
        ", ".join(files) if files else "requests.parquet, steps.parquet, windows.parquet, summary.json, scenario.yaml"
    )
    console.print(f"wrote {out_dir}/ ({names}) in {wall:.2f} s", highlight=False)


# -- des sweep ---------------------------------------------------------------------------


def short_headers(keys: Sequence[str]) -> list[str]:
    """The shortest dotted suffix of each key that no other key ends with: rate, cv."""
    out = []
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            tail = ".".join(parts[-n:])
            if not any(other != key and (other == tail or other.endswith("." + tail)) for other in keys):
                break
        out.append(tail)
    return out


def _end(v: float) -> str:
    """An interval's end: '-' where the data leave it open (NaN or infinite)."""
    return f"{v:.3g}" if v == v and abs(v) != math.inf else "-"


def _with_ci(p: pd.Series, m: str) -> str:
    if p[m] != p[m]:
        return "-"
    if p[f"{m}_lo"] == p[f"{m}_lo"]:
        return f"{p[m]:.3g} [{_end(p[f'{m}_lo'])}, {_end(p[f'{m}_hi'])}]"
    return f"{p[m]:.3g}"


POINT_METRICS = (
    ("throughput_rps", "req/s"),
    ("ttft_p99", "ttft p99"),
    ("tpot_p50", "tpot p50"),
    ("e2e_p99", "e2e p99"),
)


def points_table(points: pd.DataFrame, grid_keys: Sequence[str]) -> None:
    title = "mean over replications [95 % interval]; latencies in seconds"
    methods = points["interval_method"].unique() if "interval_method" in points else []
    if len(methods) == 1:
        title += f"; intervals: {methods[0]}"
    table = Table(title=title, title_justify="left")
    table.add_column("variant", no_wrap=True)
    for head in short_headers(grid_keys):
        table.add_column(head, justify="right", no_wrap=True)
    for _, head in POINT_METRICS:
        table.add_column(head, justify="right", no_wrap=True)
    table.add_column("stable", no_wrap=True)
    for _, p in points.iterrows():
        table.add_row(
            str(p["variant"]),
            *(f"{p[k]:g}" if isinstance(p[k], float) else str(p[k]) for k in grid_keys),
            *(_with_ci(p, m) for m, _ in POINT_METRICS),
            stable_cell(p),
        )
    out().print(table)
    short_points(points, grid_keys)


def stable_cell(p: pd.Series) -> str:
    """A point's stability: yes, NO, or unsure where every unstable replication may only be
    filling up (its runs too short to tell, :mod:`des.study.adequacy`)."""
    if p["all_stable"]:
        return "yes"
    transient = int(p.get("unstable_transient") or 0)
    return "unsure" if transient and transient == int(p.get("unstable_runs") or 0) else "NO"


#: At most this many points' warm-up warnings are printed after a sweep's table.
SHORT_LINES = 8


def short_points(points: pd.DataFrame, grid_keys: Sequence[str]) -> None:
    """A warning per point whose runs are too short to judge (the first :data:`SHORT_LINES`)."""
    if "runs_short" not in points:
        return
    short = points[points["runs_short"] > 0]
    heads = short_headers(grid_keys)
    for i, (_, p) in enumerate(short.iterrows()):
        if i == SHORT_LINES:
            warning(f"and {len(short) - SHORT_LINES} more points (points.parquet: runs_short, adequacy)")
            break
        where = " ".join([str(p["variant"]), *(f"{h}={p[k]}" for h, k in zip(heads, grid_keys, strict=True))])
        replay = str(p.get("interval_method", "")).startswith("replay")
        fix = "a replay cannot be lengthened" if replay else "lengthen horizon.duration and warmup"
        warning(f"{where}: {p['adequacy']}; {fix}")


def sweep_done(runs: int, points: int, replications: int, seconds: float, out_dir: Path) -> None:
    out().print(
        f"{runs} runs ({points} points x {replications} replications) in {seconds:.1f} s; "
        f"wrote {out_dir}/runs.parquet and points.parquet",
        highlight=False,
    )


# -- des capacity --------------------------------------------------------------------------


def probe_line(param: str, ev: Evaluation) -> str:
    """One line per value a capacity search tried: its metrics and verdict, and why."""
    ms = ", ".join(f"{k} {v[0]:.3g} [{_end(v[1])}, {_end(v[2])}]" for k, v in ev.metrics.items())
    why = f" ({'; '.join(ev.why)})" if ev.why else ""
    notes = "".join(f"\n    note: {n}" for n in ev.notes)
    return f"{param} = {ev.value:g}: {ms}; {ev.verdict}{why}{notes}"


def capacity_answer(answer: CapacityAnswer) -> str:
    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.4g}"

    what = (
        f"fewest replicas carrying {answer.target_rate:g} req/s"
        if answer.target_rate is not None
        else f"capacity ({answer.param})"
    )
    methods = sorted({m for e in answer.evaluations for m in e.methods.values()})
    how = f"; SLO metrics' intervals: {', '.join(methods)}" if methods else ""
    return (
        f"{what} under {' and '.join(answer.slos)}: {f(answer.value)}  95 % CI [{f(answer.ci_low)}, "
        f"{f(answer.ci_high)}]  ({answer.replications} replications per value, {len(answer.evaluations)} values tried"
        f"{how})"
    )


# -- des costmodel -------------------------------------------------------------------------


def cost_report(rep: CostReport) -> None:
    from des.catalog.quantization import compute_dtype
    from des.cost.uncertainty import factor_source

    gpu, model, precision, tp = rep.gpu, rep.model, rep.precision, rep.tp
    facts = rep.facts()
    console = out()
    gib = 1 << 30
    head = Table.grid(padding=(0, 2))
    head.add_row(
        "model",
        f"{model.name}: {facts['params'] / 1e9:.2f} B parameters"
        + (f" ({facts['active_params'] / 1e9:.2f} B active per token)" if model.is_moe else "")
        + (
            f", weights ({precision.weights} experts, bf16 rest) "
            if precision.quantized_layers == "experts"
            else f", {precision.weights} weights "
        )
        + f"{facts['weight_bytes'] / gib:.2f} GiB, "
        f"KV {facts['kv_bytes_per_token']:,} bytes/token ({precision.kv_cache_dtype})",
    )
    head.add_row(
        "gpu",
        f"{tp} x {gpu.name}: {gpu.sustained_flops(compute_dtype(gpu, precision)) / 1e12:.1f} TFLOP/s "
        f"{compute_dtype(gpu, precision)}, {gpu.memory_bandwidth / 1e9:.0f} GB/s, {gpu.memory_bytes / gib:.1f} GiB; "
        f"GEMMs at {gpu.efficiency.gemm_compute:.2f} of peak, weights at {gpu.efficiency.weight_bandwidth:.2f} "
        f"of bandwidth (knee {gpu.efficiency.gemm_knee:.2f}), CPU {gpu.efficiency.step_overhead * 1e3:.2g} ms/step",
    )
    head.add_row("factors", factor_source(gpu).describe())
    head.add_row("ridge", f"{facts['ridge_tokens']:.0f} tokens per step (compute overtakes weight reads)")
    head.add_row(
        "kv",
        f"{facts['kv_tokens_0.90']:,} tokens at gpu_memory_utilization 0.90, {facts['kv_tokens_0.92']:,} at 0.92 "
        f"({rep.memory_settings()})",
    )
    head.add_row("memory", f"at 0.90: {memory_line(rep.memory_plan(0.90))}")
    console.print(head)
    contexts = (512, 2048, 8192)
    dec = Table(title="decode step (ms) and output tokens/s, by batch size and context", title_justify="left")
    dec.add_column("batch", justify="right")
    for c in contexts:
        dec.add_column(f"ms @{c}", justify="right")
        dec.add_column(f"tok/s @{c}", justify="right")
    for row in rep.decode_table():
        cells = [str(row["batch"])]
        for c in contexts:
            cells += [f"{row[f'ms@{c}']:.2f}", f"{row[f'tok/s@{c}']:,.0f}"]
        dec.add_row(*cells)
    console.print(dec)
    pre = Table(title="prefill of one prompt in one step", title_justify="left")
    for col in ("prompt tokens", "ms", "tok/s"):
        pre.add_column(col, justify="right")
    for row in rep.prefill_table():
        pre.add_row(f"{row['prompt']:,}", f"{row['ms']:.1f}", f"{row['tok/s']:,.0f}")
    console.print(pre)
    comm_table(rep)


def comm_table(rep: CostReport) -> None:
    """The share of a decode and a prefill step spent in all-reduces, per TP degree, and the link behind it."""
    from des.tools.costmodel import COMM_DECODE, COMM_PREFILL

    console, link = out(), rep.gpu.link
    basis = f": {link.basis}" if link.basis else ""
    console.print(
        f"link     {link.kind}, all-reduce cost {link.provenance}{basis}; "
        f"uncertainty {link.uncertainty:g} (sd of ln true/predicted)",
        highlight=False,
    )
    n, c = COMM_DECODE
    table = Table(
        title=f"all-reduces per TP degree: decode of {n} sequences at {c:,} context, prefill of {COMM_PREFILL:,} "
        "tokens (runs: vllm = its own all-reduce, nccl)",
        title_justify="left",
    )
    for col in ("tp", "decode ms", "all-reduce ms", "share", "runs", "prefill ms", "all-reduce ms ", "share ", "runs "):
        table.add_column(col, justify="left" if col.startswith("runs") else "right")
    for row in rep.comm_table():
        cells = [str(row["tp"])]
        for kind in ("decode", "prefill"):
            cells += [
                f"{row[f'{kind}_ms']:.2f}",
                f"{row[f'{kind}_comm_ms']:.2f}",
                f"{100 * row[f'{kind}_share']:.1f} %",
                row[f"{kind}_runs"],
            ]
        table.add_row(*cells)
    console.print(table)


def wrote(path: Path) -> None:
    out().print(f"wrote {path}", highlight=False)


# -- des calibrate -------------------------------------------------------------------------


def calibration(fit: Fit, out_path: Path, plot_path: Path) -> None:
    """The profile and spec sheet fitted, the fit per op group (and per model, for a profile
    of several), the factors kept beside it, the files written and how a scenario names
    the calibration file."""
    from des.tools.calibrate import ENGINE_CPU, VIDUR_GROUPS, fit_table, model_table

    console, gpu = out(), fit.gpu
    meta = fit.profile.describe()
    vidur = meta.get("format") == "vidur"
    if vidur:
        what = f"Vidur, {meta['gpu']}, {len(meta['models'].split(', '))} models, tp {meta['tp']}"
        shapes = "the shapes in the profile"
    else:
        what = f"{meta.get('gpu', '?')}, {meta.get('model', '?')}, vLLM {meta.get('vllm_version', '?')}"
        shapes = f"the shapes of {fit.models}"
    clock = gpu.clocks
    peak = f"{gpu.sustained_flops('bf16') / 1e12:.1f} TFLOP/s bf16"
    if clock is not None and clock.sustained_ratio != 1.0:
        peak += f" at the sustained {clock.sustained_mhz:g} MHz (spec sheet: {clock.boost_mhz:g} MHz boost)"
    console.print(
        f"profile  {fit.profile.path}: {what}"
        f"\nfitted   {gpu.name} ({gpu.architecture}; {peak}) with {shapes}, least squares in log time per group",
        highlight=False,
    )
    table = Table(title="fit per op group (errors of predicted against measured time)", title_justify="left")
    for col in ("group", "points", "median |err|", "max |err|", "factors"):
        table.add_column(col, justify="left" if col in ("group", "factors") else "right")
    for row in fit_table(fit):
        table.add_row(
            row["group"], f"{row['points']:,}", f"{row['median_abs_pct']:.1f} %", f"{row['max_abs_pct']:.0f} %",
            row["factors"],
        )  # fmt: skip
    console.print(table)
    per_model = model_table(fit)
    if per_model:
        by = Table(title="per model", title_justify="left")
        for col in ("group", "model", "points", "median |err|", "max |err|"):
            by.add_column(col, justify="left" if col in ("group", "model") else "right")
        for row in per_model:
            by.add_row(
                row["group"], row["model"], f"{row['points']:,}", f"{row['median_abs_pct']:.1f} %",
                f"{row['max_abs_pct']:.0f} %",
            )  # fmt: skip
        console.print(by)
    sd = ", ".join(f"{k} {v:.3f}" for k, v in fit.efficiency.uncertainty.items())
    kept = (
        f"not in the profile, kept from the catalog's {gpu.name}: every factor but the "
        f"{' and '.join(VIDUR_GROUPS)} groups'\n"
        if vidur
        else ""
    )
    engine = (
        " (des/tools/calibrate.py: ENGINE_CPU)" if fit.efficiency.step_overhead == ENGINE_CPU["step_overhead"] else ""
    )
    console.print(
        f"uncertainty (sd of ln measured/predicted): {sd}\n{kept}"
        f"CPU time (not in a kernel profile): {fit.efficiency.step_overhead * 1e3:g} ms per step + "
        f"{fit.efficiency.seq_overhead * 1e6:g} us per sequence{engine}\n"
        f"wrote {out_path} and {plot_path}; use it from a scenario as\n"
        f"  gpu: {{base: {gpu.name}, calibration: {out_path}}}",
        highlight=False,
    )


def network_fit(fits: list[NetworkFit]) -> None:
    """NCCL's all-reduce fitted per profile and TP degree, with its errors, and which catalog GPU carries which."""
    from des.tools.network import CATALOG, CUSTOM_SD, network_table

    console = out()
    console.print(
        "fitted   latency + 2 (n-1)/n x bytes / bus_bandwidth per TP degree n, least squares in log time "
        "(rows within one node)",
        highlight=False,
    )
    table = Table(title="NCCL all-reduce fit (errors of predicted against measured time)", title_justify="left")
    for col in ("profile", "tp", "points", "latency", "bus bandwidth", "median |err|", "max |err|", "sd ln"):
        table.add_column(col, justify="left" if col == "profile" else "right")
    for row in network_table(fits):
        table.add_row(
            str(row["profile"]), str(row["tp"]), f"{row['points']:,}", f"{row['latency_us']:.1f} us",
            f"{row['bus_gb_s']:.1f} GB/s", f"{row['median_abs_pct']:.1f} %", f"{row['max_abs_pct']:.0f} %",
            f"{row['log_sd']:.3f}",
        )  # fmt: skip
    console.print(table)
    carried = {f.name: f for f in fits}
    for gpu, name in CATALOG.items():
        if name in carried:
            f = carried[name]
            console.print(
                f"{gpu}: carries {name}'s fit; uncertainty {f.uncertainty:g} (sd ln: {f.pooled_log_sd:.3f} of the "
                f"fit, {CUSTOM_SD:g} for vLLM's own all-reduce below its size limit)",
                highlight=False,
            )


# -- des compare ---------------------------------------------------------------------------


def comparison(cmp: Comparison, out_dir: Path) -> None:
    """What was measured and what des ran, then measured against des metric by metric."""
    measured, sc = cmp.measured, cmp.scenario
    console = out()
    m = measured.meta
    failed = measured.failed
    console.print(
        f"measured  {measured.path} ({measured.format}): {len(measured.completed):,} requests completed"
        + (f", {failed:,} failed (not replayed)" if failed else "")
        + (f"; model {m['model_id']}" if "model_id" in m else "")
        + f"; arrivals from {m.get('arrivals', '?')}",
        highlight=False,
    )
    s = sc.scheduler
    console.print(
        f"des       {sc.cluster.pools[0].instances} x {sc.cluster.pools[0].tp} x {sc.gpu.name}, {sc.model.name}, "
        f"{s.kind} batching "
        f"(max {s.max_batch} sequences, {s.profile_tokens:,}-token budget), {sc.cost_model.kind} cost"
        + (f"; {cmp.rejected:,} requests rejected" if cmp.rejected else ""),
        highlight=False,
    )
    if measured.max_concurrency is not None:
        console.print(
            f"client    at most {measured.max_concurrency:,} requests in flight (max_concurrency), replayed so",
            highlight=False,
        )
    if measured.server is not None:
        console.print(f"server    {measured.server.source}: KV cache size and preemptions as it states them")
    console.print("\n".join(f"factors   {line}" for line in factor_lines(sc)), highlight=False)
    table = Table(title="measured against des (error = des / measured - 1)", title_justify="left")
    for col in ("metric", "measured", "des", "error"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    for row in _comparison_rows(cmp):
        table.add_row(*row)
    engine = _engine_rows(cmp)
    if engine:
        table.add_section()
        for row in engine:
            table.add_row(*row)
    console.print(table)
    if measured.has_itl:
        console.print("itl (des): each request's mean gap between tokens, as des records first and last tokens only")
    if engine and any(r[1] == "-" for r in engine):
        console.print(
            "engine (-): neither the log nor the server's states it (a /metrics scrape has both)"
            if measured.server is not None
            else "engine (-): the log does not state it; pass the server's log or a /metrics scrape with --server-log",
            highlight=False,
        )
    console.print(f"wrote {out_dir}/ (comparison.json, cdf.png, requests.parquet, trace.csv, scenario.yaml)")
    scenario_file = out_dir / "scenario.yaml"
    console.print(f"scenario  {scenario_file} (rerun or edit it: des run {scenario_file})", highlight=False)


def _engine_rows(cmp: Comparison) -> list[tuple[str, str, str, str]]:
    """(fact, measured, simulated, error) of preemptions and KV capacity, as counts."""
    names = {
        "preemptions": "preemptions",
        "kv_capacity_tokens": "KV capacity, tokens",
        "kv_capacity_blocks": "KV capacity, blocks",
    }
    rows = []
    for r in cmp.engine.itertuples(index=False):
        m, s, e = float(r.measured), float(r.simulated), float(r.error)
        rows.append(
            (
                names.get(str(r.metric), str(r.metric)),
                f"{m:,.0f}" if math.isfinite(m) else "-",
                f"{s:,.0f}" if math.isfinite(s) else "-",
                f"{100 * e:+.1f} %" if math.isfinite(e) else "-",
            )
        )
    return rows


def _comparison_rows(cmp: Comparison) -> list[tuple[str, str, str, str]]:
    """(metric, measured, simulated, error) as printed: seconds as ms, rates as given."""
    rows = []
    for r in cmp.table.itertuples(index=False):
        metric = str(r.metric)
        scale, unit = (1.0, "") if metric.startswith(("throughput", "output")) else (1e3, " ms")
        m, s, e = float(r.measured), float(r.simulated), float(r.error)
        rows.append(
            (
                metric,
                f"{m * scale:,.2f}{unit}" if math.isfinite(m) else "-",
                f"{s * scale:,.2f}{unit}" if math.isfinite(s) else "-",
                f"{100 * e:+.1f} %" if math.isfinite(e) else "-",
            )
        )
    return rows


def comparison_json(cmp: Comparison) -> None:
    """The table and the engine facts as JSON, ``{metric: {measured, simulated, error}}`` with NaN
    as null (for scripts)."""
    rows = {
        str(r.metric): {
            c: (float(v) if math.isfinite(float(v)) else None)
            for c, v in (("measured", r.measured), ("simulated", r.simulated), ("error", r.error))
        }
        for r in (*cmp.table.itertuples(index=False), *cmp.engine.itertuples(index=False))
    }
    print(json.dumps(rows, indent=2))


# -- des bench ----------------------------------------------------------------------------


def bench_line(m: Measure) -> None:
    """One line per measured case as it finishes (to stderr: the table goes to stdout)."""
    ERR.print(f"  {m.case} ({m.engine}): {m.wall:.2f} s, {m.requests:,} requests", highlight=False)


def bench_table(measures: Sequence[Measure]) -> None:
    table = Table(title="des bench: whole process, median of the repeats", title_justify="left")
    for col in ("case", "engine", "requests", "steps", "wall s", "requests/s", "steps/s", "peak MB", "speed-up"):
        table.add_column(col, justify="left" if col in ("case", "engine") else "right")
    fast = {m.case: m.wall for m in measures if m.engine == "fast"}
    for m in measures:
        r = m.row()
        speedup = f"{m.wall / fast[m.case]:.1f}x" if m.engine == "reference" and m.case in fast else ""
        table.add_row(
            m.case, m.engine, f"{m.requests:,}", f"{m.steps:,}", f"{m.wall:.2f}", f"{r['requests_per_s']:,.0f}",
            f"{r['steps_per_s']:,.0f}", f"{r['peak_mb']:,.0f}", speedup,
        )  # fmt: skip
    out().print(table)


# -- progress bars -----------------------------------------------------------------------

Callback = Callable[..., None]


#: Wall seconds between two progress lines of a run whose stderr is not a terminal.
HEARTBEAT = 10.0


def _heartbeat() -> Callback:
    """A run's progress as a line on stderr every :data:`HEARTBEAT` wall seconds (the first after as many)."""
    import time

    due = time.monotonic() + HEARTBEAT

    def beat(p: Any) -> None:
        nonlocal due
        now = time.monotonic()
        if now < due:
            return
        due = now + HEARTBEAT
        of = f" of {p.horizon:,.0f}" if p.horizon else ""
        state = f"draining, {p.in_system:,} left" if p.draining else f"{p.in_system:,} in system"
        ERR.print(f"simulating: {p.now:,.1f}{of} s simulated, {p.arrived:,} requests, {state}", highlight=False)

    return beat


def _sweep_heartbeat(label: str) -> Callback:
    """A sweep's progress as a line on stderr every :data:`HEARTBEAT` wall seconds (the first after as many)."""
    import time

    due = time.monotonic() + HEARTBEAT

    def beat(done: int, total: int, reused: int) -> None:
        nonlocal due
        now = time.monotonic()
        if now < due:
            return
        due = now + HEARTBEAT
        ERR.print(f"{label}: {done:,} of {total:,} runs done ({reused:,} reused)", highlight=False)

    return beat


def progress(
    kind: str, quiet: bool = False, label: str = "sweeping"
) -> tuple[Callback | None, AbstractContextManager[Any]]:
    """A transient progress bar on stderr when it is a terminal: ``(callback, context)``.

    ``kind`` ``"run"``: the callback takes a :class:`des.simulation.RunProgress` (share of
    the arrival horizon simulated, then the requests left while the run drains).
    ``"sweep"``: it takes ``(runs done, runs in all, runs reused)``. Without a terminal
    there is no bar; a run or sweep then prints a line every :data:`HEARTBEAT` seconds
    once it has taken that long (a short one prints none). ``label`` names a sweep's
    bar and lines. ``quiet``: nothing, and no callback.
    """
    if quiet:
        return None, nullcontext()
    if not ERR.is_terminal:
        return (_heartbeat() if kind == "run" else _sweep_heartbeat(label)), nullcontext()
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    if kind == "run":
        columns: Iterable[Any] = (
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[now]:>10,.1f} s simulated"),
            TextColumn("{task.fields[n]:>8,} requests"),
            TextColumn("{task.fields[note]}"),
            TimeElapsedColumn(),
        )
    else:
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("runs"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        )
    bar = Progress(*columns, console=ERR, transient=True)
    task = bar.add_task("simulating" if kind == "run" else label, total=None, now=0.0, n=0, note="")

    def run_update(p: Any) -> None:
        if p.draining:
            bar.update(task, description="draining", completed=1.0, total=1.0, now=p.now, n=p.arrived)
            bar.update(task, note=f"{p.in_system:,} left")
        else:
            frac = p.fraction
            total = None if frac is None else 1.0
            bar.update(
                task, completed=frac or 0.0, total=total, now=p.now, n=p.arrived, note=f"{p.in_system:,} in system"
            )

    def sweep_update(done: int, total: int, reused: int) -> None:
        bar.update(task, completed=done, total=total)

    return (run_update if kind == "run" else sweep_update), bar
