"""Analysis: scripts that read results folders (``des sweep`` or ``des run``) and draw
figures and reports; they never simulate. Run each as a module from the project root,
e.g. ``python -m analysis.latency_vs_load results/headline``.

Figures are written to files, never shown: the package selects matplotlib's
non-interactive Agg backend before any script imports pyplot.
"""

import matplotlib

matplotlib.use("Agg")
