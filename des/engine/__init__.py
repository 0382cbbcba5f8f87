"""The simulation engine: requests, KV blocks, schedulers, instances, routers, clusters.

Uses SimPy; owns no statistics (see :mod:`des.metrics`).
"""

from des.engine.cluster import Cluster
from des.engine.kvcache import BlockManager
from des.engine.request import Request
from des.engine.router import ROUTERS
from des.engine.schedulers import SCHEDULERS

__all__ = ["Cluster", "BlockManager", "Request", "ROUTERS", "SCHEDULERS"]
