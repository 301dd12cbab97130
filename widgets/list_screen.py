"""What the watch and host screens share: a table of local client processes, their events and
churn, the keys that sort, filter and hide them, and ``enter`` to attach to one."""

from __future__ import annotations

from textual import on, work
from textual.binding import Binding
from textual.message import Message
from textual.reactive import var
from textual.widgets import Input

from kmon.engine.facade import AttachFailed, ProcessSession
from kmon.model import Event, ProcessView, Snapshot
from kmon.present import format as fmt
from kmon.present.dashboard_settings import DashboardSettings
from kmon.present.plain_text import plain
from kmon.widgets.attach_screen import AttachScreen
from kmon.widgets.churn_board import ChurnBoard
from kmon.widgets.event_log import EventLog
from kmon.widgets.filter_input import FilterInput
from kmon.widgets.help import PROCESS_NOTES
from kmon.widgets.process_table import (
    COLUMNS,
    PROCESS_ORDERS,
    ProcessTable,
    is_idle,
    matches,
    process_cells,
)
from kmon.widgets.table_screen import TableScreen, table_keys


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


class ProcessListScreen(TableScreen):
    """A live table of local client processes; subclasses add what they know of clusters
    (``redraw``, ``cluster_of``) and say what heads the screen (``heading``)."""

    filter_text: var[str] = var("", init=False)

    ORDERS = PROCESS_ORDERS
    COLUMN_KEYS = COLUMNS
    BINDINGS = table_keys(
        Binding("enter", "attach", "attach", tooltip="attach to the selected process"),
        "processes", PROCESS_ORDERS,
        hide_idle="hide processes with no traffic on any connection for 10 s",
        record="start / stop recording every listed process to Parquet")
    HELP_NOTES = PROCESS_NOTES
    TABLE_NAME = "local client processes"

    def __init__(self, name: str, session, settings: DashboardSettings,
                 labels: dict[int, str] | None = None) -> None:
        super().__init__(session, settings.interval_s, settings.record_dir)
        self.cluster_name, self.session, self.settings = name, session, settings
        self.labels = dict(labels or {})
        self.snapshot: Snapshot | None = None
        self.failure = ""
        self.churn = ChurnBoard()
        self.shown_title = ""  # the process table's title as last set

    def process_panels(self, grouped: bool):
        """The process table, the event log and the filter line (yield from compose)."""
        yield ProcessTable(grouped, id="processes")
        yield EventLog(show_pid=True, id="watch-events")
        yield FilterInput("filter: words in the pid, command, client ids or cluster "
                          "(enter applies, escape closes)", id="filter")

    def on_mount(self) -> None:
        table = self.query_one(ProcessTable)
        self.title_table()
        self.query_one("#watch-events").border_title = "events"
        table.focus()
        self.start_polling()
        self.redraw()

    def table_title(self) -> str:
        order = PROCESS_ORDERS[self.sort_index]
        return (f"{self.TABLE_NAME} · sort: {order.name} {'▼' if order.descending else '▲'}"
                + (f" · filter: {self.filter_text}" if self.filter_text else "")
                + (" · idle hidden" if self.hide_idle else "") + " (enter: attach)")

    # -- refresh loop -----------------------------------------------------------------------

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

    def cluster_of(self, pid: int) -> str:
        """The cluster a listed process talks to."""
        return self.cluster_name

    def show_notices(self, cluster_notices: list[str]) -> None:
        """A live storm (loud), ``cluster_notices``, the search's problems and the last failed
        poll, in the notice bar; the processes' findings in the findings bar."""
        storm = self.churn.storm_banner(self.snapshot.ts_ms if self.snapshot else 0)
        self.storm = bool(storm)
        self.notices = tuple(([storm] if storm else []) + cluster_notices
                             + self.session.notices + ([self.failure] if self.failure else []))
        self.findings = fmt.finding_lines(self.snapshot.processes if self.snapshot else [],
                                          with_pid=True)

    def draw_processes(self) -> None:
        """The shown processes: filtered, idle ones hidden, sorted, in cluster order."""
        views = self.snapshot.processes if self.snapshot else []
        words = self.filter_text.lower().split()
        shown = [v for v in views if not (self.hide_idle and is_idle(v))
                 and matches(v, words, self.cluster_of(v.pid))]
        order = PROCESS_ORDERS[self.sort_index]
        shown.sort(key=order.key, reverse=order.descending)
        clusters: dict[str, list[ProcessView]] = {}
        for view in sorted(shown, key=lambda v: self.cluster_of(v.pid)):  # stable: sorted
            clusters.setdefault(self.cluster_of(view.pid), []).append(view)
        now_ms = self.snapshot.ts_ms if self.snapshot else 0
        table = self.query_one(ProcessTable)
        table.sort_by(order.column, order.descending)
        labels, churn = dict(self.labels), self.churn  # the cells are made as rows show
        table.show_groups([(cluster, self.group_heading(cluster, members), members)
                           for cluster, members in clusters.items()],
                          lambda v: process_cells(v, labels.get(v.pid, ""), churn, now_ms),
                          lambda v: v.pid)
        self.title_table()

    def title_table(self) -> None:
        """Set the process table's title where it changed (setting one draws the whole
        table again)."""
        title = self.table_title()
        if title != self.shown_title:
            self.shown_title = title
            self.query_one(ProcessTable).border_title = plain(title)  # the filter: no markup

    def group_heading(self, cluster: str, members: list[ProcessView]) -> str:
        """The heading of a cluster's rows (drawn by a grouped table only)."""
        return cluster

    # -- keys -------------------------------------------------------------------------------

    def watch_filter_text(self) -> None:
        self.redraw()

    def action_filter(self) -> None:
        self.query_one(FilterInput).open(self.filter_text, self.query_one(ProcessTable))

    def action_clear_filter(self) -> None:
        self.filter_text = ""

    def on_input_submitted(self, message: Input.Submitted) -> None:
        self.filter_text = message.value.strip()
        self.query_one(FilterInput).action_close()

    def action_attach(self) -> None:
        pid = self.query_one(ProcessTable).selected_pid
        if pid is not None:
            self._open(pid)

    def on_keyed_table_row_selected(self, message: ProcessTable.RowSelected) -> None:
        if isinstance(message.table, ProcessTable):
            self.action_attach()

    @work(thread=True, group="attach", exclusive=True, exit_on_error=False)
    def _open(self, pid: int) -> None:
        try:
            self.post_message(Attached(pid, self.session.attach(pid),
                                       self.session.events_of(pid)))
        except AttachFailed as err:
            self.post_message(AttachRefused(str(err)))

    @on(Attached)
    def _attached(self, message: Attached) -> None:
        if self.app.screen is not self:  # the user moved on (help, another attach, quit)
            message.session.close()
            return
        pid = message.pid
        self.app.push_screen(AttachScreen(
            pid, message.session, self.settings, cluster=self.cluster_of(pid),
            label=self.labels.get(pid, ""), can_go_back=True,
            past_events=message.past_events))

    @on(AttachRefused)
    def _attach_refused(self, message: AttachRefused) -> None:
        self.notify(message.text, title="attach", severity="error", markup=False)

    # -- lifetime ---------------------------------------------------------------------------

    def on_unmount(self) -> None:
        self.session.close()

    def on_screen_suspend(self) -> None:
        if self._timer is not None:
            self._timer.pause()

    def on_screen_resume(self) -> None:
        if self._timer is not None and not self.paused:
            self._timer.resume()
