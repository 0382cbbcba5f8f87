"""Studies: sweeps over variants, grids and replications, with confidence intervals,
and capacity search under SLOs. Execution is local (a process pool) or on dask."""

from des.study.spec import RunSpec, Study, StudySpec, load_study, replication_seed
from des.study.sweep import sweep

__all__ = ["RunSpec", "Study", "StudySpec", "load_study", "replication_seed", "sweep"]
