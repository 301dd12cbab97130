"""What the user chose for the dashboard, as one plain value (no Textual needed to read it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kmon.model import Thresholds


@dataclass(frozen=True)
class DashboardSettings:
    """What the user chose for the dashboard (command line and config file)."""

    interval_s: float = 1.0
    thresholds: Thresholds = Thresholds()
    record_dir: Path = Path("kmon-sessions")
    history: int = 600  # refreshes kept for the timeline and sparklines
