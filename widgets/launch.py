"""Start the dashboard: the attach screen for one process, the watch screen for a cluster,
the host view for every Kafka client on this host."""

from __future__ import annotations

from kmon.engine.facade import ClusterSession, HostSession, ProcessSession, settle_heap
from kmon.present.dashboard_settings import DashboardSettings
from kmon.widgets.app import KmonApp
from kmon.widgets.attach_screen import AttachScreen
from kmon.widgets.host_screen import HostScreen
from kmon.widgets.watch_screen import WatchScreen


def run_attach(pid: int, session: ProcessSession, settings: DashboardSettings,
               theme: str | None, cluster: str = "") -> int:
    """The attach dashboard of ``pid`` until the user quits."""
    _run(KmonApp(AttachScreen(pid, session, settings, cluster=cluster), theme))
    return 0


def run_watch(name: str, session: ClusterSession, settings: DashboardSettings,
              theme: str | None, labels: dict[int, str] | None = None,
              exit_after_s: float | None = None) -> int:
    """The watch dashboard of one cluster until the user quits (or ``exit_after_s``)."""
    _run(KmonApp(WatchScreen(name, session, settings, labels), theme, exit_after_s))
    return 0


def run_host(session: HostSession, settings: DashboardSettings, theme: str | None) -> int:
    """The host view until the user quits."""
    _run(KmonApp(HostScreen(session, settings), theme))
    return 0


def _run(app: KmonApp) -> None:
    settle_heap()
    app.run()
