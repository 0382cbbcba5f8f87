"""The report's section on disaggregated prefill/decode serving (issue #9).

Reads the sweeps ``make run`` writes (``results/pd-compare``, ``pd-breakeven``,
``pd-split``, ``pd-interference``), draws their figures into the report's folder with
the pd_* scripts and returns the section's Markdown lines; every number in it is read
from those sweeps (or, for the link, from their scenarios). :mod:`analysis.report` puts
it into reports/README.md.

    python -m analysis.pd_report --results results --out reports   # the section alone, to stdout
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

import des
from analysis import pd_breakeven, pd_capacity, pd_interference, pd_latency
from analysis.common import CONFIG, RATE, SPLIT, Sweep, config_style, save
from analysis.pd_capacity import SLOS, capacity_table, curve_keys, fmt_capacity, verdict, with_gpus
from des import catalog

PROMPT = pd_breakeven.PROMPT


def _figures(
    res: Path, out: Path, compare: pd.DataFrame, split: pd.DataFrame, caps: pd.DataFrame, be: pd.DataFrame
) -> dict[str, Path]:
    """The section's figures, from the points (with GPU counts) and tables it has read."""
    return {
        "latency": save(pd_latency.draw(compare, exclude=("static-x2",)), out / "pd_latency.png"),
        "split_latency": save(pd_latency.draw(split), out / "pd_split_latency.png"),
        "capacity": save(pd_capacity.draw(caps), out / "pd_capacity.png"),
        "breakeven": save(pd_breakeven.draw(be), out / "pd_breakeven.png"),
        "interference": pd_interference.main([str(res / "pd-interference"), "--out", str(out / "pd_interference.png")]),
    }


def _cell(table: pd.DataFrame, variant: str, config: str, slo: str) -> Mapping:
    t = table[(table["variant"] == variant) & (table[CONFIG] == config) & (table["slo"] == slo)]
    return t.iloc[0].to_dict()


#: What the verdict of two capacity intervals says, in the report's words.
SAYS = {
    "colocated": "the colocated pair is ahead, the intervals apart",
    "split": "the split is ahead, the intervals apart",
    "tie": "the intervals overlap",
    "neither": "neither meets it at any load tried",
}


def _join(xs: list[int]) -> str:
    words = [f"{x:,}" for x in xs]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _name(config: str) -> str:
    return config_style(config)[0]


def _range_ms(values: np.ndarray) -> str:
    return f"{values.min() * 1e3:.0f}–{values.max() * 1e3:.0f} ms"


def _study_facts(sweep: Sweep) -> dict:
    study, runs = sweep.study, sweep.runs
    variants = study.get("variants") or {}
    return {
        "reps": int(study.get("replications", 1)),
        "fractions": ", ".join(f"{f:g}" for f in study["load"]["fractions"]),
        "top": max(study["load"]["fractions"]),
        "horizons": {v: (p.get("horizon") or {}).get("duration") for v, p in variants.items()},
        "runs": len(runs),
        "requests": int(runs["num_requests"].sum()),
    }


def section(res: Path, out: Path) -> tuple[list[str], dict[str, Path]]:
    """The section's lines and the figures drawn for it."""
    compare_sweep = Sweep(res / "pd-compare")
    compare = with_gpus(compare_sweep)
    caps = capacity_table(compare, curve_keys(compare_sweep))
    split_sweep = Sweep(res / "pd-split")
    split = with_gpus(split_sweep)
    split_caps = capacity_table(split, curve_keys(split_sweep))
    be_sweep = Sweep(res / "pd-breakeven")
    be = pd_breakeven.breakeven_table(capacity_table(with_gpus(be_sweep), curve_keys(be_sweep)))
    both = pd.concat([caps.assign(study="pd-compare"), split_caps.assign(study="pd-split")], ignore_index=True)
    figures = _figures(res, out, compare, split, both, be)
    facts = _study_facts(compare_sweep)
    split_facts = _study_facts(split_sweep)
    be_facts = _study_facts(be_sweep)

    # the link, from a split run's scenario
    runs = compare_sweep.runs
    split_run = runs[runs[CONFIG] == "1P+1D"]["run_id"].iloc[0]
    sc = des.load_scenario(compare_sweep.scenario(split_run))
    link = sc.plan().link
    assert link is not None
    kv_token = sc.model.kv_bytes_per_token(sc.precision.kv_bytes)
    links = [catalog.gpu(name).kv_link for name in ("a100-80gb", "h100-80gb")]
    fast = sorted(k.bandwidth for k in links if k is not None)
    t4k = 4096 * kv_token / link.bandwidth + link.latency

    colo, pd11 = "continuous-x2", "1P+1D"
    v = {
        (w, s): verdict(_cell(caps, w, colo, s), _cell(caps, w, pd11, s), ("colocated", "split"))
        for w in ("chat", "long")
        for s in SLOS
    }

    def cap(w: str, c: str, s: str, table: pd.DataFrame = caps) -> float:
        return float(_cell(table, w, c, s)["capacity"])

    def vs(w: str, s: str) -> str:
        """The split's capacity against the colocated pair's, and the verdict of their intervals."""
        a, b = cap(w, pd11, s), cap(w, colo, s)
        if a != a and b != b:
            return SAYS["neither"]
        a, b = (0.0 if x != x else x for x in (a, b))
        return f"split {a:.2f} against colocated {b:.2f} per GPU; {SAYS[v[(w, s)]]}"

    # the three schedulers side by side, per GPU
    side = [
        "| 2 × RTX 4090 | chat: saturation | chat: default SLO | chat: tight TPOT | long: saturation "
        "| long: default SLO | long: tight TPOT |",
        "|---|---|---|---|---|---|---|",
    ]
    for config in ("static-x2", colo, pd11):
        cells = []
        for w in ("chat", "long"):
            cells.append(f"{_cell(caps, w, config, 'default')['saturation']:.2f}")
            cells += [fmt_capacity(_cell(caps, w, config, s), short=True) for s in SLOS]
        side.append(f"| {_name(config)} | " + " | ".join(cells) + " |")

    # latencies: long prompts' TPOT, colocated against split, over the loads both are stable at
    def stable(config: str, variant: str) -> pd.DataFrame:
        g = compare[(compare["variant"] == variant) & (compare[CONFIG] == config) & compare["all_stable"]]
        return g[g["load"] <= 1].sort_values(RATE)

    long_c, long_s = stable(colo, "long"), stable(pd11, "long")
    chat_c, chat_s = stable(colo, "chat"), stable(pd11, "chat")
    light = long_s.iloc[0]
    step = float(chat_c.iloc[0]["tpot_p50"])

    # the break-even, per prompt length
    lengths = sorted(be[PROMPT].unique())
    be_rows = [
        "| SLO | " + " | ".join(f"{int(x):,} tokens" for x in lengths) + " |",
        "|---|" + "---|" * len(lengths),
    ]
    for slo in SLOS:
        g = be[be["slo"] == slo].set_index(PROMPT)
        cells = []
        for x in lengths:
            r = g.loc[x]
            ratio = "—" if not np.isfinite(r["ratio"]) else f"{r['ratio']:.2f}"
            cells.append(f"{r['verdict']} ({ratio})")
        be_rows.append(f"| {slo} | " + " | ".join(cells) + " |")
    tight = be[be["slo"] == "tight TPOT"]
    ahead = tight[tight["ratio"] > 1.2]
    split_ahead = [int(x) for x in ahead[PROMPT]]
    most = float(ahead["ratio"].max()) if len(ahead) else math.nan
    far = tight[tight[PROMPT] >= 4096]
    far_cap = float(far[["colocated", "split"]].to_numpy().max()) if len(far) else math.nan
    split_sure = [int(x) for x in tight[tight["verdict"] == "split"][PROMPT]]
    default = be[be["slo"] == "default"]
    default_colo = [int(x) for x in default[default["verdict"] == "colocated"][PROMPT]]
    default_split = [int(x) for x in default[default["verdict"] == "split"][PROMPT]]

    # four GPUs
    split_configs = list(dict.fromkeys(split_caps[CONFIG]))
    four = [
        "| 4 × RTX 4090 | chat: default SLO | chat: tight TPOT | long: default SLO | long: tight TPOT |",
        "|---|---|---|---|---|",
    ]
    for config in split_configs:
        cells = [fmt_capacity(_cell(split_caps, w, config, s), short=True) for w in ("chat", "long") for s in SLOS]
        four.append(f"| {_name(config)} | " + " | ".join(cells) + " |")
    colo4 = next(c for c in split_configs if not SPLIT.match(c))
    four_text = []
    for w in ("chat", "long"):
        d = split_caps[(split_caps["variant"] == w) & (split_caps["slo"] == "default")]
        d = d[d[CONFIG].map(lambda c: bool(SPLIT.match(c)))].sort_values("capacity", ascending=False)
        best, worst = d.iloc[0], d.iloc[-1]
        base4 = _cell(split_caps, w, colo4, "default")
        against = {
            "colocated": f"behind {_name(colo4)} ({base4['capacity']:.2f}), the intervals apart",
            "split": f"ahead of {_name(colo4)} ({base4['capacity']:.2f}), the intervals apart",
            "tie": f"level with {_name(colo4)} ({base4['capacity']:.2f}) within the intervals",
            "neither": "—",
        }[verdict(base4, best, ("colocated", "split"))]
        four_text.append(
            f"- **{w.capitalize()}**: {best[CONFIG]} is the best split, {best['capacity']:.2f} per GPU, {against};"
            f" {worst[CONFIG]} the worst, {1 - worst['capacity'] / base4['capacity']:.0%} below it."
        )

    # interference
    traces, rid = pd_interference.traces_of(Sweep(res / "pd-interference"))
    colo_t = next(t for t in traces if t.kind != "disaggregated")
    split_t = next(t for t in traces if t.kind == "disaggregated")
    span = (colo_t.times[0], colo_t.times[-1])
    longs = colo_t.long_prompts[colo_t.long_prompts["arrival_time"].between(*span)]
    mine = int((longs["instance"] == colo_t.instance).sum())
    stalls = colo_t.gaps[colo_t.gaps >= 0.1]
    ends = colo_t.times[1:][colo_t.gaps >= 0.1]
    in_heavy = sum(bool(((colo_t.heavy[:, 1] >= e - 1e-9) & (colo_t.heavy[:, 0] < e)).any()) for e in ends)

    long_ratio = cap("long", colo, "default") / cap("long", pd11, "default")
    lines = [
        "## Disaggregated prefill/decode serving, at equal GPU count",
        "",
        "A prefill/decode split runs prompts on some GPUs and generation on others, so that a long",
        "prefill never stalls the decodes running beside it, at the price of moving each prompt's KV",
        "cache between GPUs and of sizing the two pools. `scenarios/pd-compare.yaml` puts the three",
        "schedulers side by side on **two RTX 4090s** serving Qwen2.5-7B: two static-batching replicas",
        "(as above), two colocated continuous-batching replicas behind a least-outstanding router, and",
        "one prefill plus one decode instance (`scheduler: {kind: disaggregated}`), with the default",
        "scenario's engine settings on every GPU (128 sequences, 2,048-token budget, chunked prefill,",
        "prefix caching). The KV cache crosses over the catalog's link for GeForce cards, which have no",
        f"peer-to-peer: through host memory at {link.bandwidth / 1e9:g} GB/s plus {link.latency * 1e3:g} ms per"
        f" transfer, {t4k * 1e3:.0f} ms for a",
        f"4,096-token prompt ({4096 * kv_token / 1e6:.0f} MB). Two workloads: **chat** (prompts lognormal with mean"
        " 512 tokens, sigma",
        "0.6; outputs geometric, mean 256) and **long** (prompts mean 4,096, sigma 0.3, so 99 % stay under",
        "~7,900 tokens and a 2 s TTFT is within one GPU's reach; outputs mean 128). Each configuration",
        f"runs at {facts['fractions']} of its own saturation throughput; {facts['reps']} replications per point of",
        f"{facts['horizons'].get('chat'):g} s (chat) and {facts['horizons'].get('long'):g} s (long), common random"
        f" numbers: {facts['runs']} runs,",
        f"{facts['requests']:,} simulated requests. All rates below are **per GPU**.",
        "",
        "**Two SLOs.** The default one (p99 TTFT ≤ 2 s, median TPOT ≤ 100 ms) cannot see a decode stalled",
        "behind a prefill: the median request streams fine. The **tight-TPOT SLO** keeps the TTFT limit and",
        "asks p99 TPOT ≤ 40 ms: 99 % of requests stream at 25 tokens/s or faster, about "
        f"{0.04 / step:.1f} times the 4090's",
        f"unloaded decode step for this model ({step * 1e3:.0f} ms, the median TPOT at the lightest chat load). That"
        " tail is",
        "what a split is built to protect: the published evidence (DistServe, Splitwise) is that it wins on",
        "long prompts under a tight TPOT SLO, and loses or ties on chat on small PCIe-only boxes. des's TPOT",
        "is a request's mean gap between tokens after the first, so a short answer's TPOT is its few gaps.",
        "",
        "### The three schedulers side by side",
        "",
        "Saturation throughput (every batch full, closed-loop probe) and SLO capacity per GPU, with 95 %",
        "intervals (read off each configuration's load curve as above; — : an end the grid does not pin;",
        f"≥ : the SLO held at every load tried, up to {max(compare['load']):g} of saturation, which ends the"
        " interval):",
        "",
        *side,
        "",
        f"- **Chat.** Default SLO: {vs('chat', 'default')}.",
        f"  Tight TPOT SLO: {vs('chat', 'tight TPOT')}.",
        f"- **Long prompts.** Default SLO: {vs('long', 'default')}. The colocated pair's estimate is",
        f"  {long_ratio:.1f} times the split's: the split puts all the prefill, most of the work for 4k-token",
        "  prompts, on one GPU of two, whose TTFT tail reaches 2 s first. Tight TPOT SLO:",
        f"  {vs('long', 'tight TPOT')}.",
        "- Static batching meets neither SLO at any load, as on one GPU.",
        "",
        "![TTFT and TPOT against load, two GPUs](pd_latency.png)",
        "",
        "The split pays for its smooth decode with its TTFT: one GPU prefills everything, so its p99 TTFT",
        f"on chat rises to {chat_s['ttft_p99'].max():.2f} s before saturation against"
        f" {chat_c['ttft_p99'].max():.2f} s for the colocated pair. On long",
        f"prompts its median TPOT stays at {_range_ms(long_s['tpot_p50'].to_numpy())} at every load while the"
        " colocated pair's",
        f"climbs through {_range_ms(long_c['tpot_p50'].to_numpy())} and its p99 through"
        f" {_range_ms(long_c['tpot_p99'].to_numpy())}: each 2,048-token chunk of a",
        "prompt makes a step of the GPU it lands on ~0.2 s long, and every decode there waits it out.",
        f"Yet the split's own p99 TPOT on long prompts is {_range_ms(long_s['tpot_p99'].to_numpy())} from the"
        " lightest load on, around the",
        f"tight SLO's limit, though its median is {light['tpot_p50'] * 1e3:.0f} ms and its p90"
        f" {light['tpot_p90'] * 1e3:.0f} ms at light load: the p99 is set by",
        "answers of two or three tokens, whose one or two gaps include the prompt's KV transfer",
        f"({light['kv_transfer_time_mean'] * 1e3:.0f} ms on average, {light['kv_transfer_time_p99'] * 1e3:.0f} ms"
        " at p99, over the GeForce link) and a decode step. des",
        "counts it, dating the first token at the prefill's end as DistServe does.",
        "",
        "![capacity per GPU](pd_capacity.png)",
        "",
        "### Break-even over prompt length",
        "",
        "`scenarios/pd-breakeven.yaml` runs the same two configurations on two GPUs at mean prompt lengths",
        f"of {', '.join(f'{x:,}' for x in lengths)} tokens (the long workload's shape and outputs), each from"
        f" light load to {be_facts['top']:g} of its own saturation ({be_facts['reps']} replications",
        f"per point, {be_facts['runs']} runs). Each configuration meets the SLO below its capacity curve; the map"
        " shades where",
        "only one of them does. Per prompt length, the verdict of the two capacity intervals and, in",
        "brackets, the split's capacity over the colocated pair's:",
        "",
        *be_rows,
        "",
        "![break-even over prompt length and load](pd_breakeven.png)",
        "",
        "Under the default SLO the colocated pair carries more at "
        + (_join(default_colo) if default_colo else "no prompt length")
        + " tokens; the split"
        + (" never does." if not default_split else f" does at {_join(default_split)} tokens."),
        "Under the tight-TPOT SLO the split's estimate leads by more than 20 % at "
        + (_join(split_ahead) if split_ahead else "no prompt length")
        + " tokens",
        f"(up to {most:.1f} times, at {int(ahead.loc[ahead['ratio'].idxmax(), PROMPT]):,} tokens): a colocated GPU's"
        " prefill chunks stall the decodes beside them,",
        "a split's decode GPU never computes a prompt, and up to a few thousand tokens one prefill GPU",
        "keeps up and the KV transfer stays short. "
        + (
            f"The intervals separate at {_join(split_sure)} tokens"
            + (
                f"; at {_join([x for x in split_ahead if x not in split_sure])} they overlap."
                if [x for x in split_ahead if x not in split_sure]
                else "."
            )
            if split_sure
            else f"But with {be_facts['reps']} replications the intervals overlap at every length: a lead, not a"
            " verdict."
        ),
        f"From 4,096 tokens on, neither carries more than {far_cap:.2f} req/s per GPU under the tight SLO.",
        "",
        "### Four GPUs: the prefill/decode split as a grid key",
        "",
        "`scenarios/pd-split.yaml` runs four colocated replicas against splits of 1:3, 2:2 and 3:1",
        "instances (a grid axis of named levels, each setting both pools' sizes), for both workloads",
        f"({split_facts['reps']} replications of {split_facts['horizons'].get('chat'):g} s for chat and"
        f" {split_facts['horizons'].get('long'):g} s for long per point, {split_facts['runs']} runs). Capacity per"
        " GPU:",
        "",
        *four,
        "",
        "Under the default SLO:",
        "",
        *four_text,
        "",
        "A split must match the workload's prefill:decode work (long prompts are mostly prefill); one",
        "sized for one workload serves the other badly, where colocated replicas need no sizing.",
        "",
        "![TTFT and TPOT against load, four GPUs](pd_split_latency.png)",
        "",
        "### Interference: one request's tokens while long prompts arrive",
        "",
        "`scenarios/pd-interference.yaml` replays a trace on two GPUs, colocated and split: a request of",
        f"{len(colo_t.times):,} output tokens decodes while 8,192-token prompts arrive every 2 s over a chat"
        " background. Its token",
        "times are the ends of the steps of the instance it decodes on (`analysis/pd_interference.py`",
        "says why, and checks every request's count). Colocated, "
        f"{mine} of the {len(longs)} long prompts that arrive while it",
        f"decodes land on its instance and stall it, {stalls.sum() / max(mine, 1):.1f} s each: it has"
        f" {len(stalls)} gaps of {stalls.min() * 1e3:.0f}–{stalls.max() * 1e3:.0f} ms,",
        ("each" if in_heavy == len(stalls) else f"{in_heavy} of them")
        + " a step of its instance computing ≥ 1,024 prompt tokens (an 8k prompt takes four 2,048-token",
        f"chunks). Its TPOT is {colo_t.tpot * 1e3:.1f} ms colocated against {split_t.tpot * 1e3:.1f} ms split,"
        f" where its longest gap is {split_t.gaps.max() * 1e3:.0f} ms",
        "(the first: the KV transfer). A request's mean hides the stall; a tight p99 does not.",
        "",
        "![token times of one request, colocated against split](pd_interference.png)",
        "",
        "### What a planner should take from this",
        "",
        "- On a box of GeForce cards (PCIe, no peer-to-peer), under the usual SLO, a prefill/decode split",
        f"  {'ties with' if v[('chat', 'default')] == 'tie' else 'is not ahead of'} colocated replicas on chat and"
        f" {'loses clearly' if v[('long', 'default')] == 'colocated' else 'does not win'} on long prompts:"
        " colocated",
        "  replicas share the prefill work across every GPU, a split gives it to a fixed part of them.",
        "- A split buys a smooth decode. If your SLO is a tight TPOT tail and your prompts are around",
        f"  {' to '.join(f'{x:,}' for x in split_ahead[:1] + split_ahead[-1:]) if split_ahead else 'a few thousand'}"
        f" tokens, test one: there des gives it up to {most:.1f} times the colocated capacity"
        + (
            f", though with {be_facts['reps']} replications the intervals overlap. Run the study with"
            if not split_sure
            else ". Confirm with"
        ),
        f"  more replications (`replications: 10` in the study file, about {10 / be_facts['reps']:.0f} times the"
        " time) before",
        "  buying on it.",
        "- A split must be sized for the workload (prefill:decode work), and re-sized when it changes;",
        "  colocated replicas adapt by themselves.",
        "",
        "**Where the model may flatter or wrong a split.**",
        "",
        f"- *The link.* {link.bandwidth / 1e9:g} GB/s and {link.latency * 1e3:g} ms per transfer is the GeForce path"
        " through host",
        f"  memory; NVLink servers move the same KV {fast[0] / link.bandwidth:.0f}–{fast[1] / link.bandwidth:.0f}"
        " times faster (the catalog's A100 and H100",
        "  links), which takes most of the transfer out of a short answer's TPOT, and with it what",
        "  holds the split's p99 TPOT at the tight SLO's limit. Pessimistic for a split in general, but it",
        "  is the link a 4090 box has.",
        "- *Shared host bandwidth.* Each prefill instance's link is modelled on its own; two or three",
        "  prefill GPUs sending through the same host memory and PCIe root would share it. Optimistic",
        "  for the 2P and 3P splits.",
        "- *Whole-prompt transfers.* The KV moves after the prompt completes; systems that stream it layer",
        "  by layer during the prefill hide most of it. Pessimistic for the split.",
        "- *The first token.* des dates it at the prefill's end (`first_token_from: prefill`, as DistServe",
        "  counts); a client served from the decode instance sees the transfer too (`first_token_from:",
        "  decode`). When the decode pool is overloaded, TTFT stays low while the first gap grows: watch",
        "  the TPOT tail, not the TTFT, for a split's overload.",
        "- *Untuned pools.* Both pools run the colocated engine settings. A prefill pool with a larger",
        "  token budget, a decode pool with more sequences, or colocated replicas with a smaller chunk",
        "  (shorter stalls, longer TTFT) each move these numbers; des runs any of them with `--set`.",
        "- *Overload.* The capacity readout counts points past a configuration's saturation as failing,",
        "  whatever a finite run's stability check says. (The check counts a split's requests waiting",
        "  between the pools as queued, so a slow overload of its decode pool is flagged too.)",
        "",
    ]
    return lines, figures


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=Path("results"))
    ap.add_argument("--out", type=Path, default=Path("reports"))
    args = ap.parse_args(argv)
    lines, _ = section(args.results, args.out)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
