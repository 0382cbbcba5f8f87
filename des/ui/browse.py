"""The what-if page's results browser: the folders ``des run``, ``des sweep`` and
``des plan`` wrote under one root, their tables and their figures.

Only what lies inside the root is ever read (a path that leads out of it is refused), and
only files of the kinds the page shows (:data:`SHOWN`).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pandas as pd

#: The files that make a folder a result of each kind, in the order they are recognised.
MARKERS = (("plan", "plan.json"), ("sweep", "points.parquet"), ("run", "summary.json"))
#: The kinds of file the browser serves.
SHOWN = {".png": "image/png", ".svg": "image/svg+xml", ".yaml": "text/plain", ".json": "application/json"}
#: How deep under the root result folders are looked for.
DEPTH = 4
#: The most rows of a table the page is sent.
MAX_ROWS = 200
#: The columns of a sweep's points the page shows (those present), after its grid's.
POINT_COLUMNS = (
    "offered_rps", "throughput_rps", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_p99", "all_stable",
)  # fmt: skip


class NotFound(LookupError):
    """A path that is not a result folder or file under the root."""


def kind_of(folder: Path) -> str | None:
    """run, sweep or plan; None for a folder that is none of them (or cannot be read)."""
    for kind, marker in MARKERS:
        try:
            if (folder / marker).is_file():
                return kind
        except OSError:  # cannot be looked at (permission, a name too long): not a result
            return None
    return None


def entries(root: Path) -> list[dict[str, Any]]:
    """Every result folder under ``root`` (not the runs inside a sweep or a plan), newest
    first. An entry the server cannot list or look at (a folder it may not read, a link it
    cannot follow) is left out: the rest are still listed."""
    found: list[dict[str, Any]] = []
    if not root.is_dir():
        return found

    def walk(folder: Path, depth: int) -> None:
        kind = kind_of(folder)
        if kind is not None:
            rel = folder.relative_to(root).as_posix()
            try:
                modified = (folder / dict(MARKERS)[kind]).stat().st_mtime
            except OSError:
                return
            found.append({"path": rel, "kind": kind, "modified": modified})
            return  # a sweep's or a plan's runs are parts of it
        if depth == 0:
            return
        try:
            children = sorted(folder.iterdir())
        except OSError:
            return
        for child in children:
            try:
                shown = child.is_dir() and not child.name.startswith(".")
            except OSError:
                continue
            if shown:
                walk(child, depth - 1)

    walk(root, DEPTH)
    return sorted(found, key=lambda e: (-e["modified"], e["path"]))


def inside(root: Path, rel: str) -> Path:
    """``root / rel``, refused (:class:`NotFound`) when ``rel`` is absolute or climbs out
    with ``..``. The check is on the path as written: a link the user put in the folder
    (to a sweep kept elsewhere) is followed, as the listing follows it."""
    parts = Path(rel).parts
    if Path(rel).is_absolute() or ".." in parts or "\0" in rel:
        raise NotFound(rel)
    return root.joinpath(*parts)


def _is(path: Path, test: Any) -> bool:
    """``test(path)`` (``Path.is_dir``, ``Path.is_file``), False where it cannot be looked at."""
    try:
        return bool(test(path))
    except OSError:
        return False


def table(frame: pd.DataFrame, title: str) -> dict[str, Any]:
    """A table for the page: its columns and at most :data:`MAX_ROWS` rows of plain values."""
    rows = [[plain(v) for v in row] for row in frame.head(MAX_ROWS).itertuples(index=False)]
    return {"title": title, "columns": [str(c) for c in frame.columns], "rows": rows, "total": len(frame)}


def plain(v: Any) -> Any:
    """A value for JSON: Python numbers (not numpy's), None for NaN, text for anything else."""
    v = v.item() if hasattr(v, "item") else v
    if isinstance(v, float) and v != v:
        return None
    return v if isinstance(v, str | int | float | bool) or v is None else str(v)


def view(root: Path, rel: str) -> dict[str, Any]:
    """One result folder: its kind, tables, texts (YAML) and figures (paths under the root)."""
    folder = inside(root, rel)
    kind = kind_of(folder) if _is(folder, Path.is_dir) else None
    if kind is None:
        raise NotFound(rel)
    tables: list[dict[str, Any]] = []
    texts: list[dict[str, str]] = []
    if kind == "run":
        summary = json.loads((folder / "summary.json").read_text())
        tables += run_tables(summary, _slo(folder / "scenario.yaml"))
        if (folder / "windows.parquet").is_file():
            caption = "windows (metrics.window seconds each; an idle stretch is one row from its start to its end)"
            tables.append(table(pd.read_parquet(folder / "windows.parquet"), caption))
    elif kind == "sweep":
        points = pd.read_parquet(folder / "points.parquet")
        lead = [c for c in points.columns if c in ("variant", "load") or "." in c]
        tables.append(table(points[lead + [c for c in POINT_COLUMNS if c in points]], "points (mean of replications)"))
    else:
        plan = json.loads((folder / "plan.json").read_text())
        winner = plan.get("winner") if isinstance(plan.get("winner"), dict) else {}
        flat = {k: v for k, v in plan.items() if not isinstance(v, dict | list)}
        flat.update({f"winner.{k}": v for k, v in winner.items() if not isinstance(v, dict | list)})
        tables.append(table(pd.DataFrame({"key": list(flat), "value": [shown(v) for v in flat.values()]}), "plan"))
        if (folder / "candidates.parquet").is_file():
            tables.append(table(pd.read_parquet(folder / "candidates.parquet"), "candidates"))
    for name in ("scenario.yaml", "study.yaml", "winner.yaml"):
        if (folder / name).is_file():
            texts.append({"title": name, "text": (folder / name).read_text()})
    figures = [p.relative_to(root).as_posix() for p in sorted(folder.iterdir()) if p.suffix in (".png", ".svg")]
    return {"path": rel, "kind": kind, "tables": tables, "texts": texts, "figures": figures}


def shown(v: Any) -> str:
    """A value of a summary for people, as ``des run`` prints it (:func:`des.render.console.fmt`:
    4 significant digits, thousands separated, yes/NO, '-' for none); text as it is."""
    from des.render.console import fmt

    if isinstance(v, str):
        return v
    if isinstance(v, dict | list):
        return json.dumps(v)
    return fmt(v)


def run_tables(summary: dict[str, Any], slo: dict[str, float] | None) -> list[dict[str, Any]]:
    """A run folder's summary as the page shows it: the lines ``des run`` prints of it
    (:func:`des.render.run.summary_only_rows`), its latency table (seconds), and every value
    of ``summary.json``, formatted, in a table the page folds."""
    from des.render.run import LATENCY_COLUMNS, LATENCY_ROWS, load_line, requests_line, summary_only_rows

    s = summary
    try:
        rows = [("requests", requests_line(s, {})), ("load", load_line(s))]
        rows += summary_only_rows(s, slo, split=s.get("prefill_busy_fraction") is not None)
    except (KeyError, TypeError, ValueError):  # a summary of another version of des: its values alone
        rows = []
    latency = [[name, *(shown(s.get(f"{name}_{c}")) for c in LATENCY_COLUMNS)] for name in LATENCY_ROWS]
    out = []
    if rows:
        out.append(table(pd.DataFrame(rows, columns=["", "summary"]), "summary"))
    out.append(table(pd.DataFrame(latency, columns=["latency (s)", *LATENCY_COLUMNS]), "latency (seconds)"))
    every = pd.DataFrame({"key": list(s), "value": [shown(v) for v in s.values()]})
    out.append({**table(every, "every value of summary.json"), "folded": True})
    return out


def _slo(path: Path) -> dict[str, float] | None:
    """The per-request SLO limits (seconds) a run's ``scenario.yaml`` states, if any."""
    from des.config import load_yaml

    try:
        doc = load_yaml(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    slo = doc.get("slo") if isinstance(doc, dict) else None
    if not isinstance(slo, dict):
        return None
    limits = {k: v for k in ("ttft", "tpot", "e2e") if isinstance(v := slo.get(k), int | float)}
    return limits or None


def file(root: Path, rel: str) -> tuple[Path, str]:
    """A file under ``root`` the browser may serve, and its media type."""
    path = inside(root, rel)
    if not _is(path, Path.is_file) or path.suffix not in SHOWN:
        raise NotFound(rel)
    return path, SHOWN[path.suffix]


_DRAWING = threading.Lock()


def sweep_figure(root: Path, rel: str, fmt: str) -> bytes:
    """A sweep's latency against load (p50/p90/p99 of TTFT, TPOT and end-to-end latency,
    95 % bands, its study's SLO) as ``fmt`` (png or svg); :class:`NotFound` when the
    folder is not a sweep over the arrival rate."""
    import io

    import yaml

    from des.figures.load import latency_against_load
    from des.study.spec import RATE

    folder = inside(root, rel)
    if kind_of(folder) != "sweep":
        raise NotFound(rel)
    points = pd.read_parquet(folder / "points.parquet")
    if RATE not in points:
        raise NotFound(rel)
    study = yaml.safe_load((folder / "study.yaml").read_text()) if (folder / "study.yaml").is_file() else {}
    slo = (study.get("set") or {}).get("slo")
    buf = io.BytesIO()
    with _DRAWING:  # matplotlib's state is the process's
        import matplotlib.pyplot as plt

        fig = latency_against_load(points, slo if isinstance(slo, dict) else None, title=folder.name)
        fig.savefig(buf, format=fmt, dpi=110, bbox_inches="tight")
        plt.close(fig)
    return buf.getvalue()
