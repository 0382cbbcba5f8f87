"""des: a discrete-event simulator of LLM inference serving.

>>> import des
>>> scenario = des.load_scenario()          # the embedded RTX 4090 + Qwen2.5-7B default
>>> result = des.simulate(scenario)         # doctest: +SKIP
>>> result.summary["ttft_p99"]              # doctest: +SKIP

The names below are imported on first use, so that ``import des`` (and the ``des``
command) starts without loading what a given use does not need.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from des.errors import ScenarioError
    from des.metrics import Result
    from des.scenario import Scenario, load_scenario
    from des.simulation import simulate

__all__ = ["load_scenario", "simulate", "Scenario", "Result", "ScenarioError"]

_HOME = {
    "load_scenario": "des.scenario",
    "Scenario": "des.scenario",
    "simulate": "des.simulation",
    "Result": "des.metrics",
    "ScenarioError": "des.errors",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":  # importlib.metadata takes ~50 ms to import: only when asked
        from importlib.metadata import version

        return version("des")
    if name in _HOME:
        value = getattr(import_module(_HOME[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'des' has no attribute {name!r}")
