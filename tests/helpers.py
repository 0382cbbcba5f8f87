"""Paths shared by the tests (imported explicitly; pytest advises against importing conftest)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"
