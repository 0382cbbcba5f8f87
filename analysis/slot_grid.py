"""The continuous-batching lesson's slot grid (section 2), redrawn from the simulation.

Reads a sweep of the lesson's 12 requests on 4 slots (``results/lesson-grid``, study
``scenarios/lesson-grid.yaml``: variants ``static`` and ``continuous``, unit-cost steps,
``keep_tables: true``) and draws one panel per variant, static on top: x is the step
(1..N, numbered from ``steps.parquet``), y the batch slots. Each request occupies a slot
from the step it is scheduled in to the step before its ``finish_time``; under static
batching it keeps the slot until its whole batch ends. The cells where it emits a token
(one per step: ``output_tokens`` steps from its first) are coloured and labelled with
its name (R0..R11); the reserved cells after its last token are hatched grey (padding,
wasted GPU). Requests get slots greedily, in ``request_id`` order, the lowest slot free
at admission. Each panel states its makespan (steps) and slot utilisation (useful
slot-steps / slots x steps), both computed from the tables, and the figure checks that
the useful cells of every step add up to that step's ``batch_size``.

    python -m analysis.slot_grid results/lesson-grid --out reports/slot_grid.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.patches import Patch, Rectangle

from analysis.common import PALETTE, Sweep, save, style

ORDER = ("static", "continuous")
IDLE = "0.85"


def step_index(steps: pd.DataFrame, t) -> np.ndarray:
    """0-based index of the first step starting at or after time ``t``."""
    starts = np.sort(steps["start"].to_numpy(float))
    return np.searchsorted(starts, np.asarray(t, dtype=float) - 1e-9, side="left")


def occupancy(requests: pd.DataFrame, steps: pd.DataFrame, static: bool) -> pd.DataFrame:
    """Per request: ``first`` step, ``last_useful`` and ``last`` occupied step (1-based, inclusive).

    A request starts in the step that begins at its ``scheduled_time``, emits one token
    per step for ``output_tokens`` steps, and holds its slot until its ``finish_time``
    (under static batching until the latest finish of the requests scheduled with it).
    """
    r = requests.sort_values("request_id").reset_index(drop=True)
    first = step_index(steps, r["scheduled_time"])
    end = step_index(steps, r["finish_time"])  # exclusive, 0-based
    if static:
        end = pd.Series(end).groupby(r["scheduled_time"].to_numpy()).transform("max").to_numpy()
    n = r["output_tokens"].to_numpy(int)
    return pd.DataFrame(
        {
            "request_id": r["request_id"].to_numpy(),
            "name": [f"R{i}" for i in r["request_id"]],
            "first": first + 1,
            "last_useful": np.minimum(first + n, end),
            "last": end,
        }
    )


def assign_slots(occ: pd.DataFrame, slots: int | None = None) -> pd.DataFrame:
    """Add a ``slot`` column: in request_id order, the lowest slot free at the request's first step."""
    free_from: list[int] = []  # per slot, the first step at which it is free again
    out = []
    for row in occ.sort_values("request_id").itertuples(index=False):
        slot = next((k for k, f in enumerate(free_from) if f <= row.first), None)
        if slot is None:
            slot = len(free_from)
            free_from.append(0)
        free_from[slot] = row.last + 1
        out.append(slot)
    occ = occ.sort_values("request_id").assign(slot=out)
    if slots is not None and occ["slot"].max() >= slots:
        raise ValueError(f"the requests need {occ['slot'].max() + 1} slots, more than the {slots} configured")
    return occ


def grid_stats(occ: pd.DataFrame, n_steps: int, slots: int) -> dict:
    """Makespan (steps), useful and total slot-steps, and slot utilisation of one grid."""
    useful = int((occ["last_useful"] - occ["first"] + 1).clip(lower=0).sum())
    reserved = int((occ["last"] - occ["first"] + 1).clip(lower=0).sum())
    total = n_steps * slots
    return {
        "makespan": n_steps,
        "slots": slots,
        "useful": useful,
        "reserved": reserved,
        "total": total,
        "utilisation": useful / total,
    }


def useful_per_step(occ: pd.DataFrame, n_steps: int) -> np.ndarray:
    """Number of requests emitting a token in each step (1..n_steps)."""
    count = np.zeros(n_steps + 2, dtype=int)
    for row in occ.itertuples(index=False):
        if row.last_useful >= row.first:
            count[row.first] += 1
            count[row.last_useful + 1] -= 1
    return np.cumsum(count)[1 : n_steps + 1]


def slot_count(scenario: dict, steps: pd.DataFrame) -> int:
    sch = scenario.get("scheduler") or {}
    n = sch.get("max_batch_size") if sch.get("kind") == "static" else sch.get("max_num_seqs")
    return int(n or steps["batch_width"].max())


def build(requests: pd.DataFrame, steps: pd.DataFrame, scenario: dict) -> tuple[pd.DataFrame, dict]:
    """Slot assignment and statistics of one run; checks them against ``steps.batch_size``."""
    static = (scenario.get("scheduler") or {}).get("kind") == "static"
    slots = slot_count(scenario, steps)
    occ = assign_slots(occupancy(requests, steps, static), slots)
    n_steps = len(steps)
    stats = grid_stats(occ, n_steps, slots)
    per_step = useful_per_step(occ, n_steps)
    batch = steps.sort_values("start")["batch_size"].to_numpy(int)
    if not np.array_equal(per_step, batch):
        bad = np.flatnonzero(per_step != batch)[:5] + 1
        raise ValueError(f"useful cells disagree with steps.batch_size at steps {list(bad)}")
    return occ, stats


def lesson_numbers(folder: str | Path) -> dict[str, dict]:
    """Per variant of a lesson-grid sweep: the grid statistics (makespan, utilisation, ...)."""
    sweep = Sweep(folder)
    out = {}
    for run_id, variant in zip(sweep.runs["run_id"], sweep.runs["variant"], strict=True):
        _, stats = build(sweep.table(run_id, "requests"), sweep.table(run_id, "steps"), sweep.scenario(run_id))
        out[variant] = stats
    return out


def _colors(names) -> dict:
    cmap = plt.get_cmap("tab20")
    return {n: cmap((2 * i) % 20 + (i // 10) % 2) for i, n in enumerate(names)}


def draw_panel(ax, occ: pd.DataFrame, stats: dict, variant: str, n_max: int, colors: dict) -> None:
    slots = stats["slots"]
    for s in range(slots):  # empty cells: a free slot (nothing scheduled in it)
        for k in range(1, n_max + 1):
            inside = k <= stats["makespan"]
            ax.add_patch(
                Rectangle(
                    (k - 0.5, s - 0.5),
                    1,
                    1,
                    facecolor="white",
                    edgecolor="0.8" if inside else "0.93",
                    lw=0.6,
                    ls="-" if inside else ":",
                )
            )
    for row in occ.itertuples(index=False):
        c = colors[row.name]
        if row.last_useful >= row.first:
            ax.add_patch(
                Rectangle(
                    (row.first - 0.5, row.slot - 0.45),
                    row.last_useful - row.first + 1,
                    0.9,
                    facecolor=c,
                    edgecolor="black",
                    lw=0.8,
                )
            )
            for k in range(row.first, row.last_useful + 1):  # cell separators
                ax.plot([k + 0.5, k + 0.5], [row.slot - 0.45, row.slot + 0.45], color="white", lw=0.6, alpha=0.7)
            ax.text(
                (row.first + row.last_useful) / 2,
                row.slot,
                row.name,
                ha="center",
                va="center",
                fontsize=9,
                fontweight="bold",
                color="black",
            )
        if row.last > row.last_useful:
            ax.add_patch(
                Rectangle(
                    (row.last_useful + 0.5, row.slot - 0.45),
                    row.last - row.last_useful,
                    0.9,
                    facecolor=IDLE,
                    edgecolor=c,
                    hatch="///",
                    lw=1.0,
                )
            )
    mk = stats["makespan"]
    ax.axvline(mk + 0.5, color=PALETTE.get(variant, "black"), lw=2)
    if mk < n_max:  # room to the right of the last step: say where the run ends
        ax.annotate(
            f"← all {len(occ)} requests done after step {mk}",
            (mk + 0.5, (slots - 1) / 2),
            xytext=(6, 0),
            textcoords="offset points",
            ha="left",
            va="center",
            fontsize=10,
            color=PALETTE.get(variant, "black"),
            fontweight="bold",
        )
    ax.set_title(
        f"{variant} batching — makespan {mk} steps · slot utilisation "
        f"{stats['useful']}/{stats['total']} = {100 * stats['utilisation']:.1f} %  "
        f"({stats['reserved'] - stats['useful']} reserved-idle, "
        f"{stats['total'] - stats['reserved']} free slot-steps)",
        loc="left",
        fontsize=11,
        color=PALETTE.get(variant, "black"),
    )
    ax.set_xlim(0.5, n_max + 0.5)
    ax.set_ylim(slots - 0.5, -0.5)  # slot 0 on top, as in the lesson
    ax.set_yticks(range(slots), [f"slot {s}" for s in range(slots)])
    ax.set_xticks(range(1, n_max + 1))
    ax.tick_params(axis="x", labelsize=8)
    ax.grid(False)
    ax.set_ylabel("batch slot")


def draw(panels: list[tuple[str, pd.DataFrame, dict]], title: str = ""):
    """Stacked panels from (variant, slot assignment, stats) triples, on a common step axis."""
    style()
    n_max = max(st["makespan"] for _, _, st in panels)
    names = sorted({n for _, occ, _ in panels for n in occ["name"]}, key=lambda n: int(n[1:]))
    colors = _colors(names)
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(max(10, 0.42 * n_max + 2), 2.2 + 2.1 * len(panels)), sharex=True, squeeze=False
    )
    for ax, (variant, occ, stats) in zip(axes[:, 0], panels, strict=True):
        draw_panel(ax, occ, stats, variant, n_max, colors)
    axes[-1, 0].set_xlabel("step (one forward pass; unit cost, so also simulated time)")
    handles = [
        Patch(facecolor=colors[names[0]], edgecolor="black", label="slot doing useful work (emits a token)"),
        Patch(facecolor=IDLE, edgecolor="0.4", hatch="///", label="reserved but idle (padded until the batch ends)"),
        Patch(facecolor="white", edgecolor="0.6", label="free slot (nothing left to admit)"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=9, frameon=False, bbox_to_anchor=(0.5, -0.01))
    if title:
        fig.suptitle(title, fontsize=12)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return fig


def main(argv=None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="sweep folder of the lesson grid (keep_tables: true)")
    ap.add_argument("--out", default="reports/slot_grid.png")
    a = ap.parse_args(argv)
    sweep = Sweep(a.results)
    runs = sweep.runs
    variants = sorted(runs["variant"].unique(), key=lambda v: (ORDER.index(v) if v in ORDER else len(ORDER), v))
    panels = []
    for v in variants:
        rid = runs.loc[runs["variant"] == v].sort_values("replication")["run_id"].iloc[0]
        occ, stats = build(sweep.table(rid, "requests"), sweep.table(rid, "steps"), sweep.scenario(rid))
        panels.append((v, occ, stats))
    n_req = len(panels[0][1])
    title = (
        f"The lesson's {n_req} requests on {panels[0][2]['slots']} slots, from the simulated steps: "
        "same useful work, " + " vs ".join(f"{st['makespan']} steps" for _, _, st in panels)
    )
    return save(draw(panels, title), a.out)


if __name__ == "__main__":
    print(main())
