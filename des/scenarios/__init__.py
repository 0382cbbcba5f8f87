"""Scenarios embedded in the package (``default.yaml`` is what ``des run`` runs)."""
