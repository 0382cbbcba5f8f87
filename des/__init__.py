"""des: a discrete-event simulator of LLM inference serving.

>>> import des
>>> scenario = des.load_scenario()          # the embedded RTX 4090 + Qwen2.5-7B default
>>> result = des.simulate(scenario)         # doctest: +SKIP
>>> result.summary["ttft_p99"]              # doctest: +SKIP
"""

from importlib.metadata import version

from des.errors import ScenarioError
from des.metrics import Result
from des.scenario import Scenario, load_scenario
from des.simulation import simulate

__all__ = ["load_scenario", "simulate", "Scenario", "Result", "ScenarioError"]
__version__ = version("des")
