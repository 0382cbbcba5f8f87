"""The figures des draws, a module per subject.

:mod:`~des.figures.tools`: the fit of ``des calibrate``, the CDFs of ``des compare`` and the
roofline of ``des costmodel``; :mod:`~des.figures.plan`: the cost against the SLO metrics
of ``des plan``'s candidates; :mod:`~des.figures.load`: latency against load with the
capacity marked (the report's headline figure and the what-if page's sweep).
:mod:`~des.figures.style` and :mod:`~des.figures.axes` hold what the figures share: the
backend and style, the colours, plain log axes, SLO lines and saving. Nothing is imported
here.
"""
