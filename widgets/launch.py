"""Start the dashboard: the attach screen for one process, the watch screen for a cluster."""

from __future__ import annotations

from pathlib import Path

from textual.theme import BUILTIN_THEMES

from kmon.cluster_watch import ClusterWatcher
from kmon.config import Config, ConfigError
from kmon.errors import UserError
from kmon.monitor import Monitor
from kmon.sampler import SamplerSettings
from kmon.sources.sockets import open_socket_reader
from widgets.app import KmonApp
from widgets.attach_screen import AttachScreen, DashboardSettings
from widgets.connection_table import RowStyle
from widgets.watch_screen import ProcessWatch, WatchScreen


def dashboard_settings(config: Config, interval_s: float | None,
                       record_dir: Path) -> DashboardSettings:
    """The command line's choices over the config file's, over kmon's defaults."""
    style = RowStyle(idle_warning=config.thresholds.idle_warning,
                     close_wait_alert_ms=config.thresholds.close_wait_alert_ms)
    return DashboardSettings(interval_s=interval_s or config.dashboard.interval_s or 1.0,
                             row_style=style, record_dir=record_dir)


def checked_theme(config: Config, theme: str | None) -> str | None:
    """The theme to use; a UserError for one Textual does not have."""
    name = theme or config.dashboard.theme
    if name is not None and name not in BUILTIN_THEMES:
        error = ConfigError if theme is None else UserError
        raise error(f"unknown theme {name!r}; choose one of {', '.join(sorted(BUILTIN_THEMES))}")
    return name


def run_attach(pid: int, monitor: Monitor, settings: DashboardSettings, theme: str | None,
               cluster: str = "") -> int:
    """The attach dashboard of ``pid`` until the user quits."""
    KmonApp(AttachScreen(pid, monitor, settings, cluster=cluster), theme).run()
    return 0


def run_watch(name: str, watcher: ClusterWatcher, sampler_settings: SamplerSettings,
              settings: DashboardSettings, theme: str | None, pids: list[int] | None = None,
              labels: dict[int, str] | None = None, exit_after_s: float | None = None) -> int:
    """The watch dashboard of one cluster until the user quits (or ``exit_after_s``)."""
    processes = ProcessWatch(watcher, open_socket_reader(), sampler_settings, pids or [])
    KmonApp(WatchScreen(name, watcher, processes, settings, labels), theme, exit_after_s).run()
    return 0
