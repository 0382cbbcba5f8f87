"""Studies: sweeps over variants, grids and replications, with confidence intervals,
and capacity search under SLOs. Execution is local (a process pool) or on dask.

The names below are imported on first use (statistics and tables load scipy and pandas).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from des.study.spec import RunSpec, Study, StudySpec, load_study, replication_seed
    from des.study.sweep import sweep

__all__ = ["RunSpec", "Study", "StudySpec", "load_study", "replication_seed", "sweep"]

_HOME = {name: "des.study.spec" for name in __all__[:-1]} | {"sweep": "des.study.sweep"}


def __getattr__(name: str) -> Any:
    if name in _HOME:
        value = getattr(import_module(_HOME[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'des.study' has no attribute {name!r}")
