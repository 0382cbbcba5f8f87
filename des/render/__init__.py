"""Everything the ``des`` command shows: summaries, tables, progress bars and log lines,
a module per command.

:mod:`~des.render.console` holds the two consoles and the number format they share;
:mod:`~des.render.run` the summary of ``des run`` (and of the what-if page's run);
:mod:`~des.render.study` the points of ``des sweep``, the probes and answer of ``des
capacity`` and a capacity read off a sweep's grid; :mod:`~des.render.plan` the answer of
``des plan``; :mod:`~des.render.tools` the reports of ``des calibrate``, ``des compare``,
``des bench`` and ``des costmodel``; :mod:`~des.render.progress` the bars and heartbeats
of long runs and sweeps.

Results go to stdout, progress bars and warnings to stderr. Bars appear only when
stderr is a terminal (pipes and logs get the same results without them); a stdout that
is not a terminal gets tables wide enough not to wrap. Nothing here computes a metric:
it formats what the library returns. Nothing is imported here: import the module of
the command.
"""
