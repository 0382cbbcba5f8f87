"""The report's section on disaggregated prefill/decode serving (issue #9).

Reads the sweeps ``make run`` writes (``results/pd-compare``, ``pd-breakeven``,
``pd-split``, ``pd-interference``) with :func:`read` (and ``pd-hetero``, unlike GPUs
priced, through :mod:`analysis.pd_hetero`, whose part ends the section), draws their figures into the
report's folder with the pd_* scripts, and returns the section's Markdown:
analysis/templates/pd.md (the words) filled with :func:`facts` (the numbers, verdicts and
data-shaped tables and sentences, one small function per subsection). Every number in
it is read from those sweeps (or, for the link, from their scenarios).
:mod:`analysis.report` puts it into reports/README.md.

    python -m analysis.pd_report --results results --out reports   # the section alone, to stdout
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import des
from analysis import capacity, pd_breakeven, pd_capacity, pd_hetero, pd_interference, pd_latency
from analysis.common import CONFIG, RATE, SPLIT, Sweep, config_style, save
from analysis.markdown import join_and, render, rows
from analysis.pd_capacity import SLOS, capacity_table, curve_keys, fmt_capacity, verdict, with_gpus
from analysis.pd_interference import Trace
from des import catalog

PROMPT = pd_breakeven.PROMPT
#: The two-GPU pair the section weighs against each other throughout, and the workloads.
COLOCATED, PAIR = "continuous-x2", "1P+1D"
WORKLOADS = ("chat", "long")
#: A decode gap at least this long (s) is a stall.
STALL = 0.1


@dataclass
class Link:
    """The KV link of the split runs, and the catalog's NVLink links to set it against."""

    bandwidth: float  # bytes / s
    latency: float  # s
    kv_token: float  # the model's KV bytes per token
    fast: float  # the A100's and H100's NVLink, as a KV connector moves paged blocks
    ceilings: list[float]  # their raw copy ceilings, ascending


@dataclass
class Results:
    """What the section reads off the four sweeps."""

    compare: pd.DataFrame  # pd-compare's points, with their GPU counts
    caps: pd.DataFrame  # their capacity table (per GPU, both SLOs)
    split: pd.DataFrame  # pd-split's points, with their GPU counts
    split_caps: pd.DataFrame
    breakeven: pd.DataFrame  # pd_breakeven.breakeven_table of pd-breakeven
    studies: dict[str, dict[str, Any]]  # study_facts of pd-compare, pd-split and pd-breakeven
    link: Link
    colocated: Trace  # the request pd-interference follows, colocated
    disaggregated: Trace  # and split


def study_facts(study: Mapping[str, Any], runs: pd.DataFrame) -> dict[str, Any]:
    """A study's replications, load fractions, horizon per variant, runs and requests."""
    variants = study.get("variants") or {}
    return {
        "reps": int(study.get("replications", 1)),
        "fractions": ", ".join(f"{f:g}" for f in study["load"]["fractions"]),
        "top": max(study["load"]["fractions"]),
        "horizons": {v: (p.get("horizon") or {}).get("duration") for v, p in variants.items()},
        "runs": len(runs),
        "requests": int(runs["num_requests"].sum()),
    }


def read_link(sweep: Sweep) -> Link:
    """The link of one of the sweep's split runs, from its scenario, and the catalog's fast links."""
    runs = sweep.runs
    sc = des.load_scenario(sweep.scenario(runs[runs[CONFIG] == PAIR]["run_id"].iloc[0]))
    link = sc.layout.link
    assert link is not None
    links = [k for k in (catalog.gpu(name).kv_link for name in ("a100-80gb", "h100-80gb")) if k is not None]
    fast = min(k.bandwidth for k in links)
    ceilings = sorted(k.ceiling or k.bandwidth for k in links)
    return Link(link.bandwidth, link.latency, sc.model.kv_bytes_per_token(sc.precision.kv_bytes), fast, ceilings)


def read(res: Path) -> Results:
    """The sweeps ``make run`` writes into ``res`` (``pd-compare``, ``pd-split``,
    ``pd-breakeven``, ``pd-interference``), read."""
    compare_sweep, split_sweep, be_sweep = (Sweep(res / name) for name in ("pd-compare", "pd-split", "pd-breakeven"))
    compare, split = with_gpus(compare_sweep), with_gpus(split_sweep)
    traces, _ = pd_interference.traces_of(Sweep(res / "pd-interference"))
    return Results(
        compare=compare,
        caps=capacity_table(compare, curve_keys(compare_sweep)),
        split=split,
        split_caps=capacity_table(split, curve_keys(split_sweep)),
        breakeven=pd_breakeven.breakeven_table(capacity_table(with_gpus(be_sweep), curve_keys(be_sweep))),
        studies={
            name: study_facts(sweep.study, sweep.runs)
            for name, sweep in (("compare", compare_sweep), ("split", split_sweep), ("breakeven", be_sweep))
        },
        link=read_link(compare_sweep),
        colocated=next(t for t in traces if t.kind != "disaggregated"),
        disaggregated=next(t for t in traces if t.kind == "disaggregated"),
    )


def _figures(res: Path, out: Path, r: Results) -> dict[str, Path]:
    """The section's figures, from the points (with GPU counts) and tables it has read."""
    both = pd.concat([r.caps.assign(study="pd-compare"), r.split_caps.assign(study="pd-split")], ignore_index=True)
    return {
        "latency": save(pd_latency.draw(r.compare, exclude=("static-x2",)), out / "pd_latency.png"),
        "split_latency": save(pd_latency.draw(r.split), out / "pd_split_latency.png"),
        "capacity": save(pd_capacity.draw(both), out / "pd_capacity.png"),
        "breakeven": save(pd_breakeven.draw(r.breakeven), out / "pd_breakeven.png"),
        "interference": pd_interference.main([str(res / "pd-interference"), "--out", str(out / "pd_interference.png")]),
    }


def _cell(table: pd.DataFrame, variant: str, config: str, slo: str) -> Mapping:
    t = table[(table["variant"] == variant) & (table[CONFIG] == config) & (table["slo"] == slo)]
    return t.iloc[0].to_dict()


def _capacity(table: pd.DataFrame, variant: str, config: str, slo: str) -> float:
    """One number for a capacity: the estimate, or the middle of the bracket the grid puts it in."""
    return capacity.middle(_cell(table, variant, config, slo))


def _said(row: Mapping) -> str:
    """A capacity in a sentence: ``7.00``, ``between 9.10 and 9.58`` (bracketed by the grid), ``0.00`` (none)."""
    return capacity.said(row) or "0.00"


def _label(row: Mapping) -> str:
    """A capacity in brackets: ``7.00``, ``9.10–9.58``, ``0.00`` (none)."""
    return capacity.estimate(row) or "0.00"


#: What the verdict of two capacity intervals says, in the report's words.
SAYS = {
    "colocated": "the colocated pair is ahead, the intervals apart",
    "split": "the split is ahead, the intervals apart",
    "tie": "the intervals overlap",
    "neither": "neither meets it at any load tried",
}


def _name(config: str) -> str:
    return config_style(config)[0]


def _range_ms(values: np.ndarray) -> str:
    return f"{values.min() * 1e3:.0f}–{values.max() * 1e3:.0f} ms"


def _key(slo: str) -> str:
    """``default`` and ``tight`` (for ``tight TPOT``): an SLO's part of a fact's name."""
    return slo.split()[0]


def vs(caps: pd.DataFrame, workload: str, slo: str, says: str) -> str:
    """The split's capacity against the colocated pair's, and the verdict of their intervals."""
    a, b = _cell(caps, workload, PAIR, slo), _cell(caps, workload, COLOCATED, slo)
    if a["capacity"] != a["capacity"] and b["capacity"] != b["capacity"]:
        return SAYS["neither"]
    return f"split {_said(a)} against colocated {_said(b)} per GPU; {SAYS[says]}"


def side_facts(caps: pd.DataFrame) -> dict[str, Any]:
    """The three schedulers on two GPUs: the table's rows, the verdict of the pair's
    capacity intervals per workload and SLO (``verdict_chat_tight``...) and what they say."""
    table = []
    for config in ("static-x2", COLOCATED, PAIR):
        cells = []
        for w in WORKLOADS:
            cells.append(f"{_cell(caps, w, config, 'default')['saturation']:.2f}")
            cells += [fmt_capacity(_cell(caps, w, config, s), short=True) for s in SLOS]
        table.append([_name(config), *cells])
    out: dict[str, Any] = {"side_table": rows(table)}
    for w in WORKLOADS:
        for s in SLOS:
            says = verdict(_cell(caps, w, COLOCATED, s), _cell(caps, w, PAIR, s), ("colocated", "split"))
            out[f"verdict_{w}_{_key(s)}"] = says
            out[f"vs_{w}_{_key(s)}"] = vs(caps, w, s, says)
    out["long_ratio"] = _capacity(caps, "long", COLOCATED, "default") / _capacity(caps, "long", PAIR, "default")
    out["chat_default_says"] = "ties with" if out["verdict_chat_default"] == "tie" else "is not ahead of"
    out["long_default_says"] = "loses clearly" if out["verdict_long_default"] == "colocated" else "does not win"
    return out


def latency_facts(compare: pd.DataFrame) -> dict[str, Any]:
    """TTFT and TPOT of the pair over the loads at which both are stable, and the unloaded
    decode step (the median TPOT at the lightest chat load)."""

    def stable(config: str, variant: str) -> pd.DataFrame:
        g = compare[(compare["variant"] == variant) & (compare[CONFIG] == config) & compare["all_stable"]]
        return g[g["load"] <= 1].sort_values(RATE)

    long_c, long_s = stable(COLOCATED, "long"), stable(PAIR, "long")
    chat_c, chat_s = stable(COLOCATED, "chat"), stable(PAIR, "chat")
    light = long_s.iloc[0]
    step = float(chat_c.iloc[0]["tpot_p50"])
    return {
        "max_load": max(compare["load"]),
        "step_ms": step * 1e3,
        "tight_over_step": 0.04 / step,
        "chat_split_ttft_max": chat_s["ttft_p99"].max(),
        "chat_colocated_ttft_max": chat_c["ttft_p99"].max(),
        "long_split_tpot_p50": _range_ms(long_s["tpot_p50"].to_numpy()),
        "long_split_tpot_p99": _range_ms(long_s["tpot_p99"].to_numpy()),
        "long_colocated_tpot_p50": _range_ms(long_c["tpot_p50"].to_numpy()),
        "long_colocated_tpot_p99": _range_ms(long_c["tpot_p99"].to_numpy()),
        "light_tpot_p50_ms": light["tpot_p50"] * 1e3,
        "light_tpot_p90_ms": light["tpot_p90"] * 1e3,
        "light_transfer_mean_ms": light["kv_transfer_time_mean"] * 1e3,
        "light_transfer_p99_ms": light["kv_transfer_time_p99"] * 1e3,
        "light_itl_p99_ms": light.get("itl_p99", math.nan) * 1e3,
        "light_second_p99_ms": light.get("second_token_p99", math.nan) * 1e3,
        "long_colocated_itl_p99": _range_ms(long_c["itl_p99"].to_numpy()) if "itl_p99" in long_c else "—",
        "chat_colocated_itl_p99": _range_ms(chat_c["itl_p99"].to_numpy()) if "itl_p99" in chat_c else "—",
        "chat_split_itl_p99": _range_ms(chat_s["itl_p99"].to_numpy()) if "itl_p99" in chat_s else "—",
    }


def _breakeven_rows(be: pd.DataFrame, lengths: list) -> str:
    """Per SLO and prompt length: the verdict, and the split's capacity over the colocated pair's."""
    table = [["SLO", *(f"{int(x):,} tokens" for x in lengths)]]
    for slo in SLOS:
        g = be[be["slo"] == slo].set_index(PROMPT)
        cells = []
        for x in lengths:
            r = g.loc[x]
            ratio = "—" if not np.isfinite(r["ratio"]) else f"{r['ratio']:.2f}"
            cells.append(f"{r['verdict']} ({ratio})")
        table.append([slo, *cells])
    return rows(table[:1]) + "\n|---|" + "---|" * len(lengths) + "\n" + rows(table[1:])


def _separation(split_ahead: list[int], split_sure: list[int], reps: int) -> str:
    """Where the split's lead under the tight SLO is a verdict (its interval above), and where a lead."""
    if not split_sure:
        return f"But with {reps} replications the intervals overlap at every length: a lead, not a verdict."
    overlap = [x for x in split_ahead if x not in split_sure]
    return f"The intervals separate at {join_and(split_sure)} tokens" + (
        f"; at {join_and(overlap)} they overlap." if overlap else "."
    )


def breakeven_facts(be: pd.DataFrame, reps: int) -> dict[str, Any]:
    """The break-even over prompt length (``be``: pd_breakeven.breakeven_table, ``reps``
    replications per point): where each configuration leads under each SLO, and by how much."""
    lengths = sorted(be[PROMPT].unique())
    tight, default = be[be["slo"] == "tight TPOT"], be[be["slo"] == "default"]
    ahead = tight[tight["ratio"] > 1.2]
    split_ahead = [int(x) for x in ahead[PROMPT]]
    split_sure = [int(x) for x in tight[tight["verdict"] == "split"][PROMPT]]
    default_colo = [int(x) for x in default[default["verdict"] == "colocated"][PROMPT]]
    default_split = [int(x) for x in default[default["verdict"] == "split"][PROMPT]]
    far = tight[tight[PROMPT] >= 4096]
    return {
        "lengths": ", ".join(f"{x:,}" for x in lengths),
        "breakeven_table": _breakeven_rows(be, lengths),
        "default_colocated_ahead": join_and(default_colo) if default_colo else "no prompt length",
        "default_split_ahead": f"does at {join_and(default_split)} tokens." if default_split else "never does.",
        "tight_split_ahead": join_and(split_ahead) if split_ahead else "no prompt length",
        "most": float(ahead["ratio"].max()) if len(ahead) else math.nan,
        "most_at": int(ahead.loc[ahead["ratio"].idxmax(), PROMPT]) if len(ahead) else None,
        "separation": _separation(split_ahead, split_sure, reps),
        "far_capacity": float(far[["colocated", "split"]].to_numpy().max()) if len(far) else math.nan,
        "split_prompts": " to ".join(dict.fromkeys(f"{x:,}" for x in split_ahead[:1] + split_ahead[-1:]))
        if split_ahead
        else "a few thousand",
        "confirm": ". Confirm with"
        if split_sure
        else f", though with {reps} replications the intervals overlap. Run the study with",
        "ten_replications_times": 10 / reps,
    }


def _best_split(split_caps: pd.DataFrame, workload: str, colocated: str) -> str:
    """Under the default SLO, the best and the worst split of four GPUs against the colocated replicas."""
    d = split_caps[(split_caps["variant"] == workload) & (split_caps["slo"] == "default")]
    d = d[d[CONFIG].map(lambda c: bool(SPLIT.match(c)))]
    d = d.assign(middle=[capacity.middle(r) for _, r in d.iterrows()]).sort_values("middle", ascending=False)
    best, worst = d.iloc[0], d.iloc[-1]
    base = _cell(split_caps, workload, colocated, "default")
    against = {
        "colocated": f"behind {_name(colocated)} ({_label(base)}), the intervals apart",
        "split": f"ahead of {_name(colocated)} ({_label(base)}), the intervals apart",
        "tie": f"level with {_name(colocated)} ({_label(base)}) within the intervals",
        "neither": "—",
    }[verdict(base, best, ("colocated", "split"))]
    return (
        f"- **{workload.capitalize()}**: {best[CONFIG]} is the best split, {_said(best)} per GPU, {against};"
        f" {worst[CONFIG]} the worst, {1 - worst['middle'] / capacity.middle(base):.0%} below it."
    )


def four_gpu_facts(split_caps: pd.DataFrame) -> dict[str, Any]:
    """Four GPUs: every configuration's capacity per GPU, and the best and worst split per workload."""
    configs = list(dict.fromkeys(split_caps[CONFIG]))
    table = [
        [_name(c), *(fmt_capacity(_cell(split_caps, w, c, s), short=True) for w in WORKLOADS for s in SLOS)]
        for c in configs
    ]
    colocated = next(c for c in configs if not SPLIT.match(c))
    return {
        "four_table": rows(table),
        "four_text": "\n".join(_best_split(split_caps, w, colocated) for w in WORKLOADS),
    }


#: The workloads in a sentence.
WORDS = {"long": "long prompts"}
#: What the verdict of two and four colocated replicas' capacity intervals says, per GPU.
POOLING = {
    "four": "four carry more, the intervals apart",
    "two": "two carry more, the intervals apart",
    "tie": "the intervals overlap",
    "neither": "neither meets the SLO at any load tried",
}


def pooling_facts(
    caps: pd.DataFrame, split_caps: pd.DataFrame, compare: pd.DataFrame, split: pd.DataFrame
) -> dict[str, Any]:
    """Two colocated replicas (pd-compare) against four (pd-split), per GPU under the
    default SLO, and their p99 TTFT at the highest load both studies ran below saturation."""
    two_name = COLOCATED
    four_name = next(c for c in dict.fromkeys(split_caps[CONFIG]) if not SPLIT.match(c))
    lines, apart = [], []
    for w in WORKLOADS:
        two, four = _cell(caps, w, two_name, "default"), _cell(split_caps, w, four_name, "default")
        says = verdict(four, two, ("four", "two"))
        carry = f"four colocated replicas carry {_said(four)} req/s per GPU, two {_said(two)}"
        lines.append(f"on {WORDS.get(w, w)}, {carry} ({POOLING[says]})")
        if says == "two":
            apart.append(w)
    top = min(float(compare["load"].max()), float(split["load"].max()), 1.0)

    def ttft(points: pd.DataFrame, config: str) -> float:
        g = points[(points["variant"] == "chat") & (points[CONFIG] == config) & (points["load"] == top)]
        return float(g["ttft_p99"].iloc[0]) if len(g) else math.nan

    text = f"Under the default SLO, {'; '.join(lines)}."
    if apart:
        text += (
            f" On {' and '.join(apart)} two replicas carry more per GPU than four, against the pooling lesson above"
            " (a larger cluster smooths its queues): a capacity at a grid's edge, or runs short enough for the"
            " stability check to misjudge a heavily loaded run, can do that; run it longer before buying on it."
        )
    return {
        "pooling_text": text,
        "pooling_top": top,
        "pooling_ttft_four": ttft(split, four_name),
        "pooling_ttft_two": ttft(compare, two_name),
    }


def interference_facts(colocated: Trace, split: Trace) -> dict[str, Any]:
    """The followed request's stalls colocated (gaps of at least :data:`STALL`), the long
    prompts that caused them, and its TPOT both ways."""
    span = (colocated.times[0], colocated.times[-1])
    longs = colocated.long_prompts[colocated.long_prompts["arrival_time"].between(*span)]
    mine = int((longs["instance"] == colocated.instance).sum())
    stalls = colocated.gaps[colocated.gaps >= STALL]
    ends = colocated.times[1:][colocated.gaps >= STALL]
    heavy = colocated.heavy
    in_heavy = sum(bool(((heavy[:, 1] >= e - 1e-9) & (heavy[:, 0] < e)).any()) for e in ends)
    return {
        "tokens": len(colocated.times),
        "long_prompts": len(longs),
        "long_prompts_on_its_instance": mine,
        "stalls": len(stalls),
        "stall_each": stalls.sum() / max(mine, 1),
        "stall_min_ms": stalls.min() * 1e3,
        "stall_max_ms": stalls.max() * 1e3,
        "stalls_in_prefill": "each" if in_heavy == len(stalls) else f"{in_heavy} of them",
        "colocated_tpot_ms": colocated.tpot * 1e3,
        "split_tpot_ms": split.tpot * 1e3,
        "split_longest_gap_ms": split.gaps.max() * 1e3,
    }


#: KV connectors measured far below the host path on boxes without RDMA (bytes/s): vLLM's
#: default (pull) NIXL connector where CUDA IPC falls back to TCP (vllm#52607), and NIXL on
#: one host not using NVLink (vllm#34054).
PATHOLOGIES = (0.5e9, 1.8e9)


def link_facts(link: Link) -> dict[str, Any]:
    """The KV link: its bandwidth and latency, a 4,096-token prompt's transfer, how much
    faster NVLink servers' connectors move it (and their copy ceilings would), and how slow
    the connector pathologies measured on boxes like this one are."""
    kv_4k = 4096 * link.kv_token
    return {
        "link_gbps": link.bandwidth / 1e9,
        "link_ms": link.latency * 1e3,
        "transfer_4k_ms": (kv_4k / link.bandwidth + link.latency) * 1e3,
        "kv_4k_mb": kv_4k / 1e6,
        "nvlink_gbps": link.fast / 1e9,
        "nvlink_times": link.fast / link.bandwidth,
        "ceiling_low": link.ceilings[0] / link.bandwidth,
        "ceiling_high": link.ceilings[-1] / link.bandwidth,
        "slow_low_gbps": PATHOLOGIES[0] / 1e9,
        "slow_high_gbps": PATHOLOGIES[1] / 1e9,
        "slow_4k_s": (kv_4k / PATHOLOGIES[1] + link.latency, kv_4k / PATHOLOGIES[0] + link.latency),
    }


def facts(r: Results) -> dict[str, Any]:
    """Every number, verdict and data-shaped table or sentence of analysis/templates/pd.md."""
    return (
        r.studies
        | link_facts(r.link)
        | side_facts(r.caps)
        | latency_facts(r.compare)
        | breakeven_facts(r.breakeven, r.studies["breakeven"]["reps"])
        | four_gpu_facts(r.split_caps)
        | pooling_facts(r.caps, r.split_caps, r.compare, r.split)
        | interference_facts(r.colocated, r.disaggregated)
    )


def section(res: Path, out: Path) -> tuple[str, dict[str, Path]]:
    """The section (Markdown) and the figures drawn for it."""
    results = read(res)
    figures = _figures(res, out, results)
    hetero, hetero_figures = pd_hetero.section(res, out)
    return render("pd", facts(results)) + hetero, figures | hetero_figures


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=Path("results"))
    ap.add_argument("--out", type=Path, default=Path("reports"))
    args = ap.parse_args(argv)
    text, _ = section(args.results, args.out)
    print(text)


if __name__ == "__main__":
    main()
