"""The watch screen: one cluster, its brokers and groups, and every local client of it."""

from __future__ import annotations

from collections import Counter

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Footer, Static

from kmon.dashboard_settings import DashboardSettings
from kmon.engine.facade import (
    AttachFailed,
    ClusterSession,
    ClusterView,
    ProcessSession,
    broker_connection_counts,
    groups_coordinated,
    groups_view,
)
from kmon.model import Event, ProcessView, Role, Snapshot
from kmon.plain_text import plain
from kmon.widgets import format as fmt
from kmon.widgets.attach_screen import AttachScreen
from kmon.widgets.churn_board import ChurnBoard
from kmon.widgets.event_log import EventLog
from kmon.widgets.polling import PollingScreen

ROLES = (Role.BOOTSTRAP, Role.COORDINATOR, Role.BROKER, Role.UNKNOWN)


class Attached(Message):
    """A session of the selected process is ready (opened in a worker)."""

    def __init__(self, pid: int, session: ProcessSession, past_events: list[Event]) -> None:
        super().__init__()
        self.pid, self.session, self.past_events = pid, session, past_events


class AttachRefused(Message):
    """The selected process cannot be attached to; ``text`` says why."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class ClusterRefreshed(Message):
    """The cluster's metadata was fetched again (in a worker)."""


def process_cells(view: ProcessView, label: str, churn: ChurnBoard, now_ms: int) -> tuple:
    roles = Counter(c.role for c in view.connections)
    opened, closed = churn.per_process(view)
    pattern = churn.pattern(view.pid, now_ms)
    close_wait = sum(c.state == "CLOSE_WAIT" for c in view.connections)
    idles = [c.idle_ms for c in view.connections if c.idle_ms is not None]
    clients = ", ".join(sorted({c.client_id for c in view.clients})) or "(no client metrics)"
    return (str(view.pid), plain(label or view.name), plain(clients),
            *(str(roles[r]) if roles[r] else "" for r in ROLES),
            fmt.state("CLOSE_WAIT") if close_wait else "",
            fmt.duration(max(idles)) if idles else "?",
            f"{opened}/{closed}" if opened or closed else "",
            Text(pattern, style="bold red") if pattern else "",
            Text(view.notices[0][:60], style="yellow") if view.notices else "")


class WatchScreen(PollingScreen):
    """Live dashboard of one cluster's brokers, groups and local client processes."""

    BINDINGS = [
        Binding("enter", "attach", "attach"),
        Binding("p", "pause", "pause"),
        Binding("space", "refresh_now", "refresh"),
        Binding("plus,equals_sign", "faster", "faster"),
        Binding("minus", "slower", "slower"),
        Binding("question_mark", "help", "help"),
    ]

    def __init__(self, cluster_name: str, session: ClusterSession,
                 settings: DashboardSettings, labels: dict[int, str] | None = None) -> None:
        super().__init__(session, settings.interval_s)
        self.cluster_name, self.session = cluster_name, session
        self.settings = settings
        self.labels = dict(labels or {})
        self.snapshot: Snapshot | None = None
        self.failure = ""
        self.churn = ChurnBoard()

    @property
    def watcher(self) -> ClusterSession:
        """What the screen knows of the cluster: its view and when it is retried."""
        return self.session

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        yield Static(id="notice")
        yield DataTable(id="brokers", cursor_type="none")
        yield DataTable(id="groups", cursor_type="none")
        yield DataTable(id="processes", cursor_type="row", zebra_stripes=True)
        yield EventLog(show_pid=True, id="watch-events")
        yield Footer()

    def on_mount(self) -> None:
        self.add_columns()
        self.query_one("#watch-events").border_title = "events"
        self.query_one("#processes", DataTable).focus()
        self.start_polling()
        self.redraw()

    def add_columns(self) -> None:
        """Name the tables and their columns."""
        brokers = self.query_one("#brokers", DataTable)
        brokers.border_title = "brokers (cluster metadata)"
        brokers.add_columns("id", "address", "rack", "controller", "groups coordinated",
                            "local bootstrap", "local coordinator", "local broker",
                            "opened 1m", "broker closed 1m")
        groups = self.query_one("#groups", DataTable)
        groups.border_title = "consumer groups"
        groups.add_columns("group", "state", "join state", "coordinator", "members",
                           "local members", "from")
        table = self.query_one("#processes", DataTable)
        table.border_title = "local client processes (enter: attach)"
        table.add_columns("pid", "process", "client ids", *(r.value for r in ROLES),
                          "CLOSE_WAIT", "max idle", "opened/closed 1m", "churn", "notice")

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

    def show_failure(self, message: str) -> None:
        self.failure = message
        self.redraw()

    def apply(self, snapshot: Snapshot, events: list[Event]) -> None:
        """Take in one refresh of the local clients."""
        self.snapshot = snapshot
        self.failure = ""
        self.query_one(EventLog).add(events)
        self.churn.add(events)
        self.churn.forget(snapshot.ts_ms)
        self.redraw()

    # -- drawing ----------------------------------------------------------------------------

    def redraw(self) -> None:
        view = self.session.view
        self.query_one("#header", Static).update(self._header(view))
        now_ms = self.snapshot.ts_ms if self.snapshot else 0
        storm = self.churn.storm_banner(now_ms)
        notices = (([storm] if storm else []) + ([self._unreachable(view)] if view.error else [])
                   + self.session.notices + ([self.failure] if self.failure else []))
        notice = self.query_one("#notice", Static)
        notice.update(plain("\n".join(f"! {n}" for n in notices)))
        notice.set_class(bool(notices), "shown")
        notice.set_class(bool(storm), "storm")
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
        self._draw_processes()

    def _header(self, view: ClusterView) -> Text:
        header = Text(f"kmon watch {self.cluster_name}", style="bold")
        if self.cluster_name != view.bootstrap:
            header.append(f"  ({view.bootstrap})", style="dim")
        ids = {b.broker_id for b in view.brokers}
        controller = (fmt.node(view.controller_id) if view.controller_id in ids
                      else "not named by the cluster")
        header.append(f"\n{len(view.brokers)} brokers · controller {controller} · ")
        header.append("metadata " + (f"from {fmt.clock(view.fetched_at)}" if view.fetched_at
                                     else "not yet fetched"))
        watched = len(self.snapshot.processes) if self.snapshot else 0
        header.append(f" · {watched} local client processes · every "
                      f"{fmt.duration(self.interval * 1000)} · ")
        header.append("❚❚ PAUSED" if self.paused else "● LIVE",
                      style="bold yellow" if self.paused else "bold green")
        return header

    def _unreachable(self, view: ClusterView) -> str:
        retry = self.session.next_retry_in_s
        when = f"retrying in {retry:.0f}s" if retry is not None else "retrying"
        return (f"cluster unreachable: {view.error} ({when}; {view.failures} failed "
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
                          "★" if b.broker_id == view.controller_id else "",
                          str(coordinated[b.broker_id]),
                          *(str(local[r]) for r in (Role.BOOTSTRAP, Role.COORDINATOR,
                                                    Role.BROKER)),
                          str(opened) if opened else "",
                          Text(str(dropped), style="bold red") if dropped else "")

    def _draw_processes(self) -> None:
        table = self.query_one("#processes", DataTable)
        views = {str(v.pid): v for v in self.snapshot.processes} if self.snapshot else {}
        for key in [row.value for row in table.rows if row.value not in views]:
            table.remove_row(key)
        for key, view in sorted(views.items(), key=lambda kv: int(kv[0])):
            cells = process_cells(view, self.labels.get(view.pid, ""), self.churn,
                                   self.snapshot.ts_ms)
            if key in table.rows:
                for column, value in zip(table.columns, cells, strict=True):
                    table.update_cell(key, column, value)
            else:
                table.add_row(*cells, key=key)

    # -- actions ----------------------------------------------------------------------------

    def action_attach(self) -> None:
        table = self.query_one("#processes", DataTable)
        if not table.row_count:
            return
        self._open(int(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value))

    @work(thread=True, group="attach", exclusive=True, exit_on_error=False)
    def _open(self, pid: int) -> None:
        try:
            self.post_message(Attached(pid, self.session.attach(pid),
                                       self.session.events_of(pid)))
        except AttachFailed as err:
            self.post_message(AttachRefused(str(err)))

    @on(Attached)
    def _attached(self, message: Attached) -> None:
        pid = message.pid
        self.app.push_screen(AttachScreen(
            pid, message.session, self.settings, cluster=self.cluster_of(pid),
            label=self.labels.get(pid, ""), can_go_back=True,
            past_events=message.past_events))

    def cluster_of(self, pid: int) -> str:
        """The cluster a watched process talks to."""
        return self.cluster_name

    @on(AttachRefused)
    def _attach_refused(self, message: AttachRefused) -> None:
        self.notify(message.text, title="attach", severity="error", markup=False)

    def on_data_table_row_selected(self, message: DataTable.RowSelected) -> None:
        if message.data_table.id == "processes":
            self.action_attach()

    def on_unmount(self) -> None:
        self.session.close()

    def on_screen_suspend(self) -> None:
        if self._timer is not None:
            self._timer.pause()

    def on_screen_resume(self) -> None:
        if self._timer is not None and not self.paused:
            self._timer.resume()
