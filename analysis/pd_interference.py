"""Interference: one decoding request's token times while long prompts arrive, colocated
against disaggregated serving.

des records steps and requests, not tokens; a request's token times follow from them.
A step that starts at ``t`` and lasts ``d`` emits, at ``t + d``, one token for every
sequence in it that decodes (DESIGN.md), and a sequence takes part in at most one step
at a time, so a decoding request emits at most one token per step of the instance it
decodes on. The requests table dates tokens at the client: a token reaches it the
serving front-end's way out (:attr:`des.cost.frontend.FrontendSpec.egress`, ``egress``
here: :func:`way_out` reads it off the run's scenario) after the end of the step that
emitted it, so ``first_token_time`` and ``finish_time`` are step ends plus ``egress``, and
the token times below are too. Its first token comes at ``first_token_time`` (the end
of the step that completed its prompt, on the prefill instance when disaggregated, plus
``egress``); its other ``output_tokens - 1`` tokens come at ends of steps of its decode
instance (plus ``egress``) that start at or after

- ``first_token_time - egress`` when colocated (the next step of the same instance), or
- ``transfer_end`` when disaggregated (a transferred request joins the decode batch at
  the next step boundary after its KV has arrived; under async scheduling, when a step
  was running as it arrived, the batch after that step was already formed, and it joins
  the one after: that first step is not its),

and end at or before ``finish_time - egress``. When exactly ``output_tokens - 1`` such steps
exist, the request emitted a token at the end of each of them, and those ends are its
token times. That is what the continuous scheduler does for a request that is never
preempted (checked against des.engine.schedulers.continuous): running requests are
served first, in admission order, each getting the tokens it needs, and a request is
admitted only from the budget left once everyone ahead of it got theirs, so no
prefilling request ahead of a decoding one can take the whole budget; a long prompt
admitted later takes what its chunk can of the budget the decodes leave, and every
decode still gets its token, in a step that lasts as long as the chunk makes it. When
KV blocks run out the newest request is preempted and recomputes (its step count no
longer matches), so :func:`token_times` refuses a preempted request, and any whose
count does not match, rather than guess which steps it sat out.

Reads a sweep kept whole (``keep_tables: true``; ``scenarios/pd-interference.yaml``: a
trace on two RTX 4090s with one request of 800 output tokens decoding while 8k-token
prompts arrive every 2 s, run colocated and as 1 prefill + 1 decode) and draws the
request's gaps between consecutive tokens and its tokens against time, in both runs,
with the long prompts' arrivals marked (filled: sent to the instance the request
decodes on).

    python -m analysis.pd_interference results/pd-interference --out reports/pd_interference.png
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

import des
from analysis.common import PALETTE, Sweep, config_style, num_gpus, save, style
from des.engine.deployment import serving_kind

#: Prompts at least this long count as "long prompts" in the figure.
LONG_PROMPT = 4096
#: Steps computing at least this many prompt tokens are shaded as prefill-heavy.
HEAVY_PREFILL = 1024
EPS = 1e-9


def way_out(scenario: dict) -> float:
    """Seconds from the end of a token's step to its client in a run of ``scenario`` (a run
    folder's resolved scenario): its serving front-end's egress, 0 without one."""
    frontend = des.load_scenario(scenario).frontend
    return frontend.egress if frontend is not None else 0.0


def token_times(request: pd.Series, steps: pd.DataFrame, egress: float = 0.0) -> np.ndarray:
    """The times at which ``request``'s tokens reached its client (first token first), from
    its run's steps table and ``egress``, the run's :func:`way_out`; ValueError when they
    cannot be told from the tables (see the module docstring): the request was preempted,
    starved of a step, or not completed."""
    rid = int(request["request_id"])
    if request["status"] != "completed":
        raise ValueError(f"request {rid} did not complete ({request['status']})")
    if request["preemptions"]:
        raise ValueError(f"request {rid} was preempted {int(request['preemptions'])} times and recomputed")
    split = int(request.get("decode_instance", -1)) >= 0 and np.isfinite(request.get("transfer_end", np.nan))
    instance = int(request["decode_instance"] if split else request["instance"])
    start = float(request["transfer_end"] if split else request["first_token_time"] - egress)
    finish = float(request["finish_time"]) - egress
    own = steps[steps["instance"] == instance]
    ends = (own["start"] + own["duration"]).to_numpy(float)
    sel = (own["start"].to_numpy(float) >= start - EPS) & (ends <= finish + EPS)
    later = np.sort(ends[sel])
    need = int(request["output_tokens"]) - 1
    if split and later.size == need + 1:
        # under async scheduling the batch after the step running as the KV arrived was
        # formed before it arrived, so that step is not the request's (a decode sits out
        # no other step: it is never starved)
        starts = own["start"].to_numpy(float)
        running = (starts < start - EPS) & (ends >= start - EPS)
        if running.any() and abs(ends[running].max() - starts[sel].min()) < EPS:
            later = later[1:]
    if later.size != need:
        raise ValueError(
            f"request {rid}: {later.size} steps of instance {instance} in its decode span for its "
            f"{need} tokens after the first: it sat some out, so its token times are not in the tables"
        )
    return np.concatenate([[float(request["first_token_time"])], later + egress])


@dataclass
class Trace:
    """One run's view of the followed request: its token times (at the client, ``egress``
    after the ends of the steps that emitted them) and the long prompts."""

    label: str
    kind: str
    times: np.ndarray
    instance: int
    long_prompts: pd.DataFrame  # arrival_time, instance they were sent to (the first they visited)
    heavy: np.ndarray  # (start, end) of the steps of its instance computing >= HEAVY_PREFILL prompt tokens
    egress: float = 0.0  # seconds from a step's end to its tokens' client (the run's way_out)

    @property
    def gaps(self) -> np.ndarray:
        return np.diff(self.times)

    @property
    def tpot(self) -> float:
        return float((self.times[-1] - self.times[0]) / (len(self.times) - 1))


def follow(
    requests: pd.DataFrame, steps: pd.DataFrame, request_id: int, label: str, kind: str, egress: float = 0.0
) -> Trace:
    """The followed request's tokens in one run (its way out ``egress``), and where that run
    sent the long prompts."""
    req = requests.set_index("request_id", drop=False).loc[request_id]
    times = token_times(req, steps, egress)
    split = int(req.get("decode_instance", -1)) >= 0
    longs = requests[requests["prompt_tokens"] >= LONG_PROMPT]
    first = longs["prefill_instance"].where(longs["prefill_instance"] >= 0, longs["instance"])
    lp = pd.DataFrame({"arrival_time": longs["arrival_time"].to_numpy(), "instance": first.to_numpy()})
    instance = int(req["decode_instance"] if split else req["instance"])
    own = steps[(steps["instance"] == instance) & (steps["prefill_tokens"] >= HEAVY_PREFILL)]
    heavy = np.column_stack([own["start"], own["start"] + own["duration"]]).astype(float)
    return Trace(label, kind, times, instance, lp, heavy, egress)


def default_request(requests: pd.DataFrame) -> int:
    """The request to follow by default: the one with the most output tokens."""
    return int(requests.sort_values(["output_tokens", "request_id"], ascending=[False, True]).iloc[0]["request_id"])


def draw(traces: list[Trace], request_id: int, title: str = ""):
    style()
    fig, (ax_gap, ax_tok) = plt.subplots(2, 1, figsize=(12, 8), sharex=True, height_ratios=(3, 2))
    t0 = min(tr.times[0] for tr in traces)
    end = max(tr.times[-1] for tr in traces) - t0
    colo = next((tr for tr in traces if tr.kind != "disaggregated"), traces[0])
    colo_color = PALETTE.get(colo.kind, "0.3")
    # the colocated instance's prefill-heavy steps, under the gaps they cause
    for a, b in colo.heavy:
        if b - t0 > 0 and a - t0 < end:
            ax_gap.axvspan(a - t0, b - t0, color=colo_color, alpha=0.12, lw=0)
    for tr in traces:
        color = PALETTE.get(tr.kind, "0.3")
        ax_gap.step(tr.times[1:] - t0, tr.gaps * 1e3, where="pre", color=color, lw=1.3)
        label = f"{tr.label}: TPOT {tr.tpot * 1e3:.1f} ms, longest gap {tr.gaps.max() * 1e3:.0f} ms"
        ax_tok.plot(tr.times - t0, np.arange(1, len(tr.times) + 1), color=color, lw=1.6, label=label)
    # long prompts' arrivals: filled when sent to the instance the followed request decodes
    # on in the colocated run
    lp = colo.long_prompts[(colo.long_prompts["arrival_time"] - t0).between(-5, end)]
    ymax = max(float(tr.gaps.max()) for tr in traces) * 1e3
    for _, row in lp.iterrows():
        x = row["arrival_time"] - t0
        mine = int(row["instance"]) == colo.instance
        for ax in (ax_gap, ax_tok):
            ax.axvline(x, color="0.35", lw=0.8, ls="--" if mine else ":", alpha=0.8)
        face = colo_color if mine else "white"
        ax_gap.plot([x], [ymax * 1.08], marker="v", ms=8, color=colo_color, markerfacecolor=face, clip_on=False)
    handles, _ = ax_tok.get_legend_handles_labels()
    handles += [
        Line2D([], [], color=colo_color, lw=0, marker="v", markerfacecolor=colo_color,
               label=f"a prompt of ≥ {LONG_PROMPT:,} tokens arrives, sent to the followed request's instance"),
        Line2D([], [], color=colo_color, lw=0, marker="v", markerfacecolor="white",
               label="… sent to the other colocated instance (colocated run)"),
        Patch(color=colo_color, alpha=0.12,
              label=f"a step of its colocated instance computing ≥ {HEAVY_PREFILL:,} prompt tokens"),
    ]  # fmt: skip
    ax_tok.legend(handles=handles, loc="lower right", fontsize=8.5, framealpha=0.95)
    ax_gap.set_ylim(0, ymax * 1.15)
    ax_gap.set_ylabel("gap since the previous token (ms)")
    ax_tok.set_ylabel("tokens emitted")
    ax_tok.set_xlabel(f"seconds since the followed request's first token (request {request_id})")
    ax_tok.set_ylim(bottom=0)
    ax_tok.set_xlim(0, end * 1.01)
    fig.suptitle(title or f"Token times of request {request_id}, colocated against disaggregated", fontsize=11)
    fig.tight_layout()
    return fig


def _label(kind: str, sc: dict) -> str:
    if kind == "disaggregated":
        prefill, decode = sc["cluster"]["pools"]
        return config_style(f"{prefill['instances']}P+{decode['instances']}D")[0]
    return f"{config_style(f'{kind}-x{num_gpus(sc)}')[0]} (colocated)"


def traces_of(sweep: Sweep, request_id: int | None = None) -> tuple[list[Trace], int]:
    """Every run of the sweep (replication 0) following one request, colocated runs first."""
    runs = sweep.runs
    runs = runs[runs["replication"] == 0] if "replication" in runs else runs
    loaded = []
    for rid in runs["run_id"]:
        sc = sweep.scenario(rid)
        loaded.append((serving_kind(sc), sc, sweep.table(rid, "requests"), sweep.table(rid, "steps")))
    loaded.sort(key=lambda x: x[0] == "disaggregated")
    if request_id is None:
        request_id = default_request(loaded[0][2])
    traces = [follow(req, st, request_id, _label(kind, sc), kind, way_out(sc)) for kind, sc, req, st in loaded]
    return traces, request_id


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, help="a sweep kept whole (keep_tables: true), e.g. results/pd-interference")
    ap.add_argument("--request", type=int, default=None, help="request id (default: the most output tokens)")
    ap.add_argument("--out", type=Path, default=Path("reports/pd_interference.png"))
    args = ap.parse_args(argv)
    sweep = Sweep(args.results)
    traces, rid = traces_of(sweep, args.request)
    sc = sweep.scenario(str(sweep.runs["run_id"].iloc[0]))
    req = sweep.table(str(sweep.runs["run_id"].iloc[0]), "requests").set_index("request_id").loc[rid]
    title = (
        f"Token times of one request (id {rid}: prompt {int(req['prompt_tokens']):,}, "
        f"{int(req['output_tokens']):,} output tokens) while long prompts arrive — "
        f"{num_gpus(sc)} × {sc['gpu']['name']} serving {sc['model']['name']}"
    )
    return save(draw(traces, rid, title), args.out)


if __name__ == "__main__":
    print(main())
