"""Analysis: scripts that read results folders (``des sweep`` or ``des run``) and draw
figures and reports; they never simulate. Run each as a module from the project root,
e.g. ``python -m analysis.latency_vs_load results/headline``.

Figures are written to files, never shown: the package selects matplotlib's
non-interactive Agg backend before any script imports pyplot.

The reports (``analysis.report`` with its sections ``analysis.pd_report`` and
``analysis.caching``, and ``analysis.calibration``) read as numbers, then template, then
Markdown: each section's ``facts()`` reads its numbers and verdicts, and
:func:`analysis.markdown.render` fills its template in ``analysis/templates/``.
"""

import matplotlib

matplotlib.use("Agg")
