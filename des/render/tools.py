"""What the tools print: the fit of ``des calibrate`` (kernels and NCCL), the comparison
of ``des compare``, the timings of ``des bench`` and the roofline tables of ``des costmodel``."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table

from des.render.console import ERR, out
from des.render.run import factor_lines, memory_line

if TYPE_CHECKING:
    from des.tools.bench import Measure
    from des.tools.calibrate import Fit
    from des.tools.compare import Comparison
    from des.tools.costmodel import CostReport
    from des.tools.network import NetworkFit


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


# -- des calibrate -------------------------------------------------------------------------


def calibration(fit: Fit, out_path: Path, plot_path: Path) -> None:
    """The profile and spec sheet fitted, the fit per op group (and per model, for a profile
    of several), the factors kept beside it, the files written and how a scenario names
    the calibration file."""
    from des.tools.calibrate import ENGINE_CPU, VIDUR_GROUPS, fit_table, model_table, model_tp_table

    console, gpu = out(), fit.gpu
    meta = fit.profile.describe()
    vidur = meta.get("format") == "vidur"
    if vidur:
        what = f"Vidur, {meta['gpu']}, {len(meta['models'].split(', '))} models, tp {meta['tp']}"
        shapes = "the shapes in the profile"
    elif "models" in meta:  # LLMServingSim's tree: several models and TP degrees
        what = f"{meta.get('gpu', '?')}, {meta['models']}, tp {meta.get('tp', '?')}"
        what += f", vLLM {meta.get('vllm_version', '?')}"
        shapes = "the shapes of the catalog's models it names, each at its TP degree"
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
    per_tp = model_tp_table(fit)
    if per_tp:
        by_tp = Table(title="per model and TP degree", title_justify="left")
        for col in ("group", "model", "tp", "points", "median |err|", "max |err|"):
            by_tp.add_column(col, justify="left" if col in ("group", "model") else "right")
        for row in per_tp:
            by_tp.add_row(
                row["group"], row["model"], str(row["tp"]), f"{row['points']:,}", f"{row['median_abs_pct']:.1f} %",
                f"{row['max_abs_pct']:.0f} %",
            )  # fmt: skip
        console.print(by_tp)
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
    from des.tools.network import CATALOG, CATALOG_COLLECTIVES, CUSTOM_SD, network_table

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
    two_gpu = {gpu: Path(path).parent.name for gpu, path in CATALOG_COLLECTIVES.items()}
    for gpu, name in {**CATALOG, **two_gpu}.items():
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
    s = sc.layout.pools[0].policy  # the settings the engine ran (vLLM's defaults filling those left out)
    console.print(
        f"des       {sc.cluster.pools[0].instances} x {sc.cluster.pools[0].tp} x {sc.gpu.name}, {sc.model.name}, "
        f"{sc.scheduler.kind} batching "
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
    if cmp.from_log:
        console.print(
            f"settings  from the server's log (neither SCENARIO nor --set gives them): {cmp.from_log_text()}",
            highlight=False,
        )
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
