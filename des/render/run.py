"""What ``des run`` prints: the labelled lines of a run's summary (also the what-if
page's, :func:`summary_rows`), its latency table and the files it wrote."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from des.render.console import fmt, out

if TYPE_CHECKING:
    import pandas as pd

    from des.catalog.memory import MemoryPlan
    from des.engine.layout import PoolLayout
    from des.metrics import Result
    from des.scenario import Scenario

#: The latency table's rows and columns (its statistics).
LATENCY_ROWS = ("ttft", "tpot", "itl", "second_token", "e2e", "queue_delay")
LATENCY_COLUMNS = ("mean", "p50", "p90", "p95", "p99")


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
        f"; {s['scale_ups']} scale-ups, {s['scale_downs']} scale-downs"
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
    engine, *rest = summary_only_rows(s, sc.slo.limits() if sc.slo is not None else None, split=len(pools) > 1)
    rows.append(engine)
    for pool in pools:
        rows.append(("memory" if len(pools) == 1 else f"{pool.layout.role} memory", memory_line(pool.memory)))
    if sc.deployment.engine_defaults != "none":
        rows.append(("defaults", sc.deployment.engine_defaults))
    rows += rest
    if result.windows is not None and s.get("windows_breached"):
        rows.append(("SLO missed", breach_spans(result.windows)))
    for i, line in enumerate(factor_lines(sc)):
        rows.append(("step times" if i == 0 else "", line))
    if result.draws is not None:
        rows.append(("model error", "drawn (model_uncertainty): " + "; ".join(result.draws.describe())))
    return rows


def summary_only_rows(s: dict[str, Any], slo: dict[str, float] | None, split: bool) -> list[tuple[str, str]]:
    """The lines of :func:`summary_rows` that a run's summary (``summary.json``) holds all
    of, from the engine's to the windows': what the what-if page's results browser shows of
    a run folder (``slo``: the scenario's per-request limits, seconds; ``split``: whether it
    ran prefill and decode pools)."""
    rows: list[tuple[str, str]] = []
    per = " per decode instance (each pool's below)" if split else ""
    rows.append(
        (
            "engine",
            f"GPU busy {fmt(s['gpu_busy_fraction'])}, mean batch {fmt(s['mean_batch_size'])}, "
            f"{s['preemptions']:,} preemptions, KV capacity {s['kv_capacity_tokens']:,} tokens{per}",
        )
    )
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
    rows.append(("stable", stability_line(s, slo)))
    if s.get("stationary") is not False and s.get("windows_breached"):
        rows.append(("windows", windows_line(s)))
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
    for name in LATENCY_ROWS:
        table.add_row(name, *(fmt(s.get(f"{name}_{c}")) for c in LATENCY_COLUMNS))
    console.print(table)
    names = (
        ", ".join(files) if files else "requests.parquet, steps.parquet, windows.parquet, summary.json, scenario.yaml"
    )
    console.print(f"wrote {out_dir}/ ({names}) in {wall:.2f} s", highlight=False)
