"""Workloads: arrival processes, token-length distributions, traces, shared content and
the SimPy processes that turn them into requests. Each component draws from its own
seeded ``numpy.random.Generator``; nothing here touches global random state.

Import what you need from its module (``des.workload.arrivals``, ``des.workload.lengths``,
...): the package itself loads nothing, so that a module needing one piece (say the
request specs) does not pay for the readers of trace files.
"""
