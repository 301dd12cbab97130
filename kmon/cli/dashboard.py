"""What the dashboard commands share: the theme check and the dashboard's settings."""

from __future__ import annotations

from pathlib import Path

from kmon.cli.config import Config, ConfigError
from kmon.errors import UserError
from kmon.present.dashboard_settings import DashboardSettings


def dashboard_settings(config: Config, interval_s: float | None,
                       record_dir: Path) -> DashboardSettings:
    """The command line's choices over the config file's, over kmon's defaults."""
    return DashboardSettings(interval_s=interval_s or config.dashboard.interval_s or 1.0,
                             thresholds=config.thresholds, record_dir=record_dir)


def checked_theme(config: Config, theme: str | None) -> str | None:
    """The theme to use; a UserError for one Textual does not have."""
    name = theme or config.dashboard.theme
    if name is None:
        return None
    from textual.theme import BUILTIN_THEMES  # only to check a name: a second's import

    if name not in BUILTIN_THEMES:
        error = ConfigError if theme is None else UserError
        raise error(f"unknown theme {name!r}; choose one of {', '.join(sorted(BUILTIN_THEMES))}")
    return name
