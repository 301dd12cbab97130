"""The attach screen: one client process, its connections, their lives and events."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.reactive import var
from textual.widgets import Input

from kmon.engine.facade import ProcessSession
from kmon.model import ClientInstance, Connection, Event, EventKind, ProcessView, Snapshot
from kmon.present import format as fmt
from kmon.present.dashboard_settings import DashboardSettings
from kmon.present.history import History
from kmon.present.plain_text import plain
from kmon.tcp_state import CLOSING_STATES
from kmon.widgets.connection_table import (
    COLUMNS,
    SORT_ORDERS,
    ConnectionTable,
    connection_cells,
)
from kmon.widgets.detail import DetailScreen
from kmon.widgets.event_log import EventLog
from kmon.widgets.filter_input import FilterInput
from kmon.widgets.filtering import FilterError, RowFilter, parse_filter
from kmon.widgets.footer import PriorityFooter
from kmon.widgets.help import CONNECTION_NOTES
from kmon.widgets.sparklines import CountSparklines
from kmon.widgets.table_screen import TableScreen, table_keys
from kmon.widgets.timeline import Timeline, TimelineRows

HIDE_IDLE_AFTER_MS = 10_000


def _shown(conn: Connection, hide_idle: bool) -> bool:
    if not hide_idle:
        return True
    if conn.state in CLOSING_STATES:
        return False
    return conn.idle_ms is None or conn.idle_ms < HIDE_IDLE_AFTER_MS


def _client_line(client: ClientInstance) -> str:
    group = f" group {client.config['group.id']}" if "group.id" in client.config else ""
    return f"{client.name} ({client.type}, client.id={client.client_id}{group})"


class AttachScreen(TableScreen):
    """Live dashboard of one Kafka client process."""

    row_filter: var[RowFilter] = var(RowFilter, init=False, always_update=True)

    ORDERS = SORT_ORDERS
    COLUMN_KEYS = [key for key, _, _ in COLUMNS]
    BINDINGS = table_keys(
        Binding("enter", "details", "details", tooltip="details of the selected connection"),
        "connections", SORT_ORDERS,
        hide_idle="hide idle rows (no traffic for 10 s) and closing sockets",
        record="start / stop recording this session to Parquet",
        back=[Binding("escape,q", "back", "back", tooltip="back to the list of processes")])
    HELP_NOTES = CONNECTION_NOTES

    def __init__(self, pid: int, session: ProcessSession, settings: DashboardSettings,
                 cluster: str = "", label: str = "", can_go_back: bool = False,
                 past_events: list[Event] | None = None) -> None:
        super().__init__(session, settings.interval_s, settings.record_dir)
        self.session = session
        self.pid, self.settings = pid, settings
        self.cluster, self.label, self.can_go_back = cluster, label, can_go_back
        self.history = History(settings.history)
        self.view: ProcessView | None = None
        self.last_ts_ms = 0
        self.events: list[Event] = list(past_events or [])[-1000:]  # this process's, bounded
        self.exit_notice = ""
        self.error_notice = ""
        self.table_title = ""

    # -- layout -----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield from self.status_bars()
        yield ConnectionTable(id="connections")
        with Horizontal(id="lower"):
            yield Timeline(id="timeline")
            with Vertical(id="side"):
                yield CountSparklines(id="sparklines")
                yield EventLog(id="events")
        yield FilterInput("filter: role:coordinator state:CLOSE_WAIT broker:1 client:… "
                          "(enter applies, escape closes)", id="filter")
        yield PriorityFooter()

    def on_mount(self) -> None:
        self.query_one("#timeline").border_title = "lifecycle"
        self.query_one("#sparklines").border_title = "connections by role and state"
        self.query_one("#events").border_title = "events"
        self.query_one(ConnectionTable).focus()
        self.query_one(EventLog).add(self.events)
        self.start_polling()
        self.redraw()

    # -- refresh loop -----------------------------------------------------------------------

    def polling_wanted(self) -> bool:
        # an exited process is not polled again, nor a replay past its recording's end
        return not self.exit_notice and not self.session.finished

    def show_failure(self, message: str) -> None:
        self.error_notice = message
        self.redraw()

    def apply(self, snapshot: Snapshot, events: list[Event]) -> None:
        """Take in one refresh: history, recording, events, then redraw."""
        self.error_notice = ""
        mine = [e for e in events if e.pid == self.pid]
        views = [v for v in snapshot.processes if v.pid == self.pid]
        if views:
            self.view = views[0]
            self.last_ts_ms = snapshot.ts_ms
            self.history.observe(snapshot.ts_ms, views, int(self.interval * 1000))
        gone = [e for e in mine if e.kind in (EventKind.PROCESS_EXIT, EventKind.PROCESS_ERROR)]
        if gone:
            self.exit_notice = (f"{gone[0].detail} at {fmt.clock(gone[0].ts_ms)}: showing its "
                                "last state")
            self.stop_polling()
        self.events = (self.events + mine)[-1000:]
        self.query_one(EventLog).add(mine)
        self.redraw()

    # -- drawing ----------------------------------------------------------------------------

    @property
    def client_ids(self) -> dict[str, str]:
        """``client.id`` of each client instance of the process, by instance name."""
        return {c.name: c.client_id for c in self.view.clients} if self.view else {}

    def visible_connections(self) -> list[Connection]:
        """The rows the table shows: filtered, hidden-idle removed, sorted."""
        if self.view is None:
            return []
        client_ids, hide_idle, row_filter, pid = (self.client_ids, self.hide_idle,
                                                  self.row_filter, self.pid)
        if hide_idle or row_filter.text:
            rows = [c for c in self.view.connections
                    if _shown(c, hide_idle) and row_filter.matches(c, pid, client_ids)]
        else:
            rows = list(self.view.connections)
        order, track = SORT_ORDERS[self.sort_index], self.history.track
        if order.uses_track:
            rows.sort(key=lambda c: order.key(c, track(pid, c.key)), reverse=order.descending)
        elif order.key is not None:  # else they stay in the engine's order
            rows.sort(key=lambda c: order.key(c, None), reverse=order.descending)
        return rows

    def redraw(self) -> None:
        """Draw every panel from the latest refresh."""
        rows = self.visible_connections()
        pid, now_ms = self.pid, self.last_ts_ms
        clients = {c.name: c for c in self.view.clients} if self.view else {}
        history, thresholds = self.history, self.settings.thresholds
        table = self.query_one(ConnectionTable)
        table.show([(c.key, c) for c in rows],
                   lambda c: connection_cells(c, history.track(pid, c.key), clients,
                                              thresholds, now_ms))
        total = len(self.view.connections) if self.view else 0
        order = SORT_ORDERS[self.sort_index]
        title = (f"connections: {len(rows)} shown of {total} · sort: {order.name} "
                 f"{'▼' if order.descending else '▲'}"
                 + (f" · filter: {self.row_filter.text}" if self.row_filter.text else "")
                 + (" · idle hidden" if self.hide_idle else ""))
        if title != self.table_title:
            self.table_title = title
            table.border_title = plain(title)  # the filter's text is no markup
        table.sort_by(order.column, order.descending)
        self._draw_timeline(rows)
        self.query_one(CountSparklines).show(self.history)
        self.heading, self.trailer = self._header()
        self.ended = ("EXITED" if self.exit_notice
                      else "RECORDING ENDED" if self.session.finished else "")
        self.notices = self._notice()
        self.findings = fmt.finding_lines([self.view] if self.view else [], with_pid=False)
        if isinstance(self.app.screen, DetailScreen):
            self.app.screen.update_view()

    def watch_row_filter(self) -> None:
        self.redraw()

    def _draw_timeline(self, rows: list[Connection]) -> None:
        closed = sorted(self.history.closed(self.pid), key=lambda kt: kt[1].closed_ms or 0,
                        reverse=True)
        history, ticks = self.history, self.history.ticks
        span = ticks[-1] - ticks[0] if len(ticks) > 1 else 0
        self.query_one(Timeline).show(
            TimelineRows(history, self.pid, rows, [t for _, t in closed]), span,
            history.refreshes - 1, len(ticks))

    def _header(self) -> tuple[Text, Text]:
        """The header's text before and after its "every 1 s · LIVE"."""
        view = self.view
        header, trailer = Text(), Text()
        name = f"{self.label} — " if self.label else ""
        if view is None:
            header.append(f"{name}PID {self.pid}: waiting for the first refresh…\n",
                          style="bold")
            return header, trailer
        header.append(f"{name}PID {view.pid} {view.name}", style="bold")
        header.append(f"  {view.cmdline[:120]}\n", style="dim")
        clients = "; ".join(_client_line(c) for c in view.clients) or "no client metrics " \
            "(kernel sockets only; run the client under `kmon run` for roles from its metrics)"
        header.append(f"clients: {clients}\n")
        servers = {c.config.get("bootstrap.servers") for c in view.clients} - {None}
        cluster = self.cluster or ", ".join(sorted(servers)) or "unknown"
        header.append(f"cluster: {cluster}  ·  ")
        trailer.append(f"  ·  updated {fmt.clock(self.last_ts_ms)}")
        trailer.append_text(self.recording_words())
        return header, trailer

    def _notice(self) -> tuple[str, ...]:
        return tuple(([self.exit_notice] if self.exit_notice else [])
                     + ([self.error_notice] if self.error_notice else [])
                     + (self.view.notices if self.view else []))

    # -- actions ----------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "back":
            return self.can_go_back
        return super().check_action(action, parameters)

    def action_filter(self) -> None:
        self.query_one(FilterInput).open(self.row_filter.text, self.query_one(ConnectionTable))

    def on_input_submitted(self, message: Input.Submitted) -> None:
        try:
            self.row_filter = parse_filter(message.value)
        except FilterError as err:
            self.notify(str(err), title="filter", severity="error", markup=False)
            return
        self.query_one(FilterInput).action_close()

    def action_clear_filter(self) -> None:
        self.row_filter = RowFilter()

    def action_details(self) -> None:
        key = self.query_one(ConnectionTable).selected_key
        if key is None:
            return
        self.app.push_screen(DetailScreen(f"PID {self.pid} connection {key}",
                                          lambda: self.details_of(key)))

    def on_keyed_table_row_selected(self, message: ConnectionTable.RowSelected) -> None:
        self.action_details()

    def details_of(self, key: str) -> tuple:
        """The detail pane's view of connection ``key``."""
        conns = {c.key: c for c in self.view.connections} if self.view else {}
        conn = conns.get(key)
        track = self.history.track(self.pid, key)
        client_name = conn.client if conn else (track.last.client if track and track.last
                                                else None)
        client = next((c for c in self.view.clients if c.name == client_name), None) \
            if self.view else None
        return conn, track, [e for e in self.events if e.key == key], client

    def on_unmount(self) -> None:
        self.session.close()

    def action_back(self) -> None:
        if self.can_go_back:
            self.dismiss()
