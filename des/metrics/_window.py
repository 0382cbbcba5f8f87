"""What the metrics share: finite values for JSON, and the part of intervals inside a window."""

from __future__ import annotations

import math

import numpy as np


def finite(x: float) -> float | None:
    """``x`` as a float, or None (JSON null) when it is NaN or infinite."""
    return float(x) if math.isfinite(x) else None


def overlap(start: np.ndarray, stop: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """How long each interval ``[start, stop]`` lies inside the window ``[lo, hi]`` (seconds, >= 0)."""
    return np.clip(np.minimum(stop, hi) - np.maximum(start, lo), 0.0, None)
