"""Writing a run's results folder: requests.parquet, steps.parquet, summary.json, scenario.yaml.

Each file is written to a temporary name in the folder and moved into place, so an
interrupted write never leaves a truncated file and a failed run leaves earlier
results untouched. Same scenario and seed give byte-identical files.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from des.metrics import Result


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _atomic_write(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_parquet(frame, path: Path) -> None:
    """A DataFrame as Parquet without the pandas index or creation metadata that varies."""
    table = pa.Table.from_pandas(frame, preserve_index=False)
    _atomic_write(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))


def json_ready(summary: dict[str, Any]) -> dict[str, Any]:
    """NaN and infinities as null, numpy scalars as Python numbers."""
    out = {}
    for k, v in summary.items():
        if hasattr(v, "item"):
            v = v.item()
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        out[k] = v
    return out


def write_json(data: dict[str, Any], path: Path) -> None:
    text = json.dumps(json_ready(data), indent=2, allow_nan=False) + "\n"
    _atomic_write(path, lambda tmp: tmp.write_text(text))


def write_result(result: Result, out_dir: Path) -> list[Path]:
    """Write the four files of ``result`` into ``out_dir`` (created if missing)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / n for n in ("requests.parquet", "steps.parquet", "summary.json", "scenario.yaml")]
    write_parquet(result.requests, paths[0])
    write_parquet(result.steps, paths[1])
    write_json(result.summary, paths[2])
    text = yaml.safe_dump(result.scenario.resolved(), sort_keys=False)
    _atomic_write(paths[3], lambda tmp: tmp.write_text(text))
    return paths
