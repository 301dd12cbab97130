"""The watch screen: one cluster, its brokers and groups, and every local client of it."""

from __future__ import annotations

from collections import Counter

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.message import Message
from textual.widgets import DataTable

from kmon.engine.facade import (
    ClusterSession,
    ClusterView,
    broker_connection_counts,
    groups_coordinated,
    groups_view,
)
from kmon.model import Role
from kmon.present import format as fmt
from kmon.present.dashboard_settings import DashboardSettings
from kmon.present.plain_text import plain
from kmon.widgets.footer import PriorityFooter
from kmon.widgets.list_screen import ProcessListScreen


class ClusterRefreshed(Message):
    """The cluster's metadata was fetched again (in a worker)."""


class WatchScreen(ProcessListScreen):
    """Live dashboard of one cluster's brokers, groups and local client processes."""

    def __init__(self, cluster_name: str, session: ClusterSession,
                 settings: DashboardSettings, labels: dict[int, str] | None = None) -> None:
        super().__init__(cluster_name, session, settings, labels)

    @property
    def watcher(self) -> ClusterSession:
        """What the screen knows of the cluster: its view and when it is retried."""
        return self.session

    def compose(self) -> ComposeResult:
        yield from self.status_bars()
        yield DataTable(id="brokers", cursor_type="none")
        yield DataTable(id="groups", cursor_type="none")
        yield from self.process_panels(grouped=False)
        yield PriorityFooter()

    def on_mount(self) -> None:
        """Name the cluster's tables and their columns."""
        brokers = self.query_one("#brokers", DataTable)
        # short headings, so 80 columns show every local count; the title says what they are
        brokers.border_title = ("brokers (cluster metadata): the groups each coordinates, "
                                "local connections by role")
        brokers.add_columns("id", "address", "rack", "groups", "bootstrap", "coordinator",
                            "broker", "opened 1m", "broker closed 1m")
        groups = self.query_one("#groups", DataTable)
        groups.border_title = "consumer groups"
        groups.add_columns("group", "state", "join state", "coordinator", "members",
                           "local members", "from")  # then ProcessListScreen's: it polls

    # -- refresh loop -----------------------------------------------------------------------

    def tick(self) -> None:
        """Refresh the cluster when due, and the processes, each in a worker thread."""
        if self.session.cluster_due():
            self._refresh_cluster()
        super().tick()

    @work(thread=True, group="cluster", exit_on_error=False)
    def _refresh_cluster(self) -> None:
        self.session.refresh_cluster()
        self.post_message(ClusterRefreshed())

    @on(ClusterRefreshed)
    def _cluster_refreshed(self) -> None:
        if not self.paused:  # else drawn with the next poll applied
            self.redraw()

    # -- drawing ----------------------------------------------------------------------------

    def redraw(self) -> None:
        view = self.session.view
        self.heading = self._heading(view)
        self.trailer = self.recording_words()
        self.show_notices([self._unreachable(view)] if view.error else [])
        group_rows = groups_view(view, self.snapshot)
        self._draw_brokers(view, groups_coordinated(group_rows))
        groups = self.query_one("#groups", DataTable)
        groups.clear()
        for g in group_rows:
            groups.add_row(plain(g.group_id), plain(g.state or "?"), plain(g.join_state or "-"),
                           fmt.node(g.coordinator_id),
                           Text("not described", style="dim") if g.members is None
                           else str(g.members),
                           str(g.local_members), plain(g.source))
        groups.border_title = plain("consumer groups" + (
            f" ({view.groups_error}; from local clients)" if view.groups_error else ""))
        self.draw_processes()

    def _heading(self, view: ClusterView) -> Text:
        header = Text(f"kmon watch {self.cluster_name}", style="bold")
        if self.cluster_name != view.bootstrap:
            header.append(f"  ({view.bootstrap})", style="dim")
        header.append(f"\n{len(view.brokers)} brokers · ")
        header.append("metadata " + (fmt.clock(view.fetched_at) if view.fetched_at
                                     else "not yet fetched"))
        watched = len(self.snapshot.processes) if self.snapshot else 0
        header.append(f" · {watched} local client{'s' * (watched != 1)} · ")
        return header

    def _unreachable(self, view: ClusterView) -> str:
        retry = self.session.next_retry_in_s
        when = f"retrying in {retry:.0f}s" if retry is not None else "retrying"
        return (f"{view.error} ({when}; {view.failures} failed "
                f"attempt{'s' if view.failures != 1 else ''})")

    def _draw_brokers(self, view: ClusterView, coordinated: Counter[int]) -> None:
        table = self.query_one("#brokers", DataTable)
        counts = broker_connection_counts(self.snapshot) if self.snapshot else {}
        churn = self.churn.per_broker()
        table.clear()
        for b in view.brokers:
            local = counts.get(b.broker_id, Counter())
            opened, dropped = churn.get(b.broker_id, (0, 0))
            table.add_row(str(b.broker_id), plain(b.address), plain(b.rack or "-"),
                          str(coordinated[b.broker_id]),
                          *(str(local[r]) for r in (Role.BOOTSTRAP, Role.COORDINATOR,
                                                    Role.BROKER)),
                          str(opened) if opened else "",
                          Text(str(dropped), style="bold red") if dropped else "")

