"""The host view: every Kafka client process on this host, grouped by the cluster it uses.

What ``kmon`` shows with no arguments. It is the watch screen without one
cluster's metadata: the same process table (a cluster column first, its rows in
cluster order), the same event log and keys; ``enter`` attaches.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import DataTable, Footer, Static

from kmon.dashboard_settings import DashboardSettings
from kmon.engine.facade import UNKNOWN_CLUSTER, HostSession
from kmon.model import Event, Snapshot
from kmon.plain_text import plain
from kmon.widgets.event_log import EventLog
from kmon.widgets.watch_screen import ROLES, WatchScreen, process_cells


class HostScreen(WatchScreen):
    """Live list of the host's Kafka client processes, by cluster."""

    def __init__(self, session: HostSession, settings: DashboardSettings) -> None:
        super().__init__(session.host, session, settings)
        self.clusters: dict[int, str] = {}

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        yield Static(id="notice")
        yield DataTable(id="processes", cursor_type="row", zebra_stripes=True)
        yield EventLog(show_pid=True, id="watch-events")
        yield Footer()

    def add_columns(self) -> None:
        table = self.query_one("#processes", DataTable)
        table.border_title = "Kafka client processes on this host, by cluster (enter: attach)"
        table.add_columns("cluster", "pid", "process", "client ids", *(r.value for r in ROLES),
                          "CLOSE_WAIT", "max idle", "opened/closed 1m", "churn", "notice")

    def tick(self) -> None:
        """Refresh the processes in a worker thread (there is no cluster to fetch)."""
        super(WatchScreen, self).tick()

    def apply(self, snapshot: Snapshot, events: list[Event]) -> None:
        self.clusters = self.session.cluster_labels(snapshot)
        super().apply(snapshot, events)

    def cluster_of(self, pid: int) -> str:
        return self.clusters.get(pid, UNKNOWN_CLUSTER)

    def redraw(self) -> None:
        processes = self.snapshot.processes if self.snapshot else []
        header = Text(f"kmon · {self.cluster_name}", style="bold")
        clusters = len(set(self.clusters.values()))
        header.append(f"\n{len(processes)} Kafka client process{'es' * (len(processes) != 1)}"
                      f" · {clusters} cluster{'s' * (clusters != 1)} · every "
                      f"{self.interval:g}s · ")
        header.append("❚❚ PAUSED" if self.paused else "● LIVE",
                      style="bold yellow" if self.paused else "bold green")
        self.query_one("#header", Static).update(header)
        now_ms = self.snapshot.ts_ms if self.snapshot else 0
        storm = self.churn.storm_banner(now_ms)
        notices = ([storm] if storm else []) + self.session.notices + (
            [self.failure] if self.failure else [])
        notice = self.query_one("#notice", Static)
        notice.update(plain("\n".join(f"! {n}" for n in notices)))
        notice.set_class(bool(notices), "shown")
        notice.set_class(bool(storm), "storm")
        self._draw_processes()

    def _draw_processes(self) -> None:
        """All rows again in cluster order, the cursor kept on its process."""
        table = self.query_one("#processes", DataTable)
        views = {str(v.pid): v for v in self.snapshot.processes} if self.snapshot else {}
        selected = (table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
                    if table.row_count else None)
        table.clear()
        for key, view in sorted(views.items(),
                                key=lambda kv: (self.cluster_of(kv[1].pid), kv[1].pid)):
            table.add_row(plain(self.cluster_of(view.pid)),
                          *process_cells(view, "", self.churn, self.snapshot.ts_ms), key=key)
        if selected in views:
            table.move_cursor(row=table.get_row_index(selected))
