"""The process table of the watch and host screens: one row per client process, optionally
under one heading row per cluster; sorted, filtered and idle-hidden by the screen."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from rich.text import Text

from kmon.model import ProcessView, Role
from kmon.present import format as fmt
from kmon.present.columns import PROCESS_COLUMNS
from kmon.present.plain_text import plain
from kmon.tcp_state import TcpState
from kmon.widgets.churn_board import ChurnBoard
from kmon.widgets.keyed_table import Column, KeyedTable

ROLES = (Role.BOOTSTRAP, Role.COORDINATOR, Role.BROKER, Role.UNKNOWN)
WORDS = {c.key: c.header for c in PROCESS_COLUMNS}  # the headers of kmon ps
# the columns a short width shows first come first: the process, how long it has been idle and
# its connections by role; then which clients, and the churn
COLUMNS = (*(WORDS[key] for key in ("pid", "command", "max_idle_ms")),
           *(WORDS[r.value] for r in ROLES), *(WORDS[key] for key in ("close_wait", "client_ids")),
           "opened/closed 1m", WORDS["churn"], "notice")
HIDE_IDLE_AFTER_MS = 10_000  # as the attach screen's ``i``: no traffic for this long
HEADING = "cluster:"  # row keys of the heading rows start with it


def _max_idle(view: ProcessView) -> int:
    idle = view.summary.max_idle_ms
    return -1 if idle is None else idle


@dataclass(frozen=True)
class ProcessOrder:
    """One way to order the processes: its name, a key over a process, direction, and the
    heading of its column ('' for an order of no one column)."""

    name: str
    key: Callable[[ProcessView], object]
    descending: bool = False
    column: str = ""


PROCESS_ORDERS = (
    ProcessOrder("pid", lambda v: v.pid, column=WORDS["pid"]),
    ProcessOrder("max idle", _max_idle, descending=True, column=WORDS["max_idle_ms"]),
    ProcessOrder("connections", lambda v: len(v.connections), descending=True),
    ProcessOrder("command", lambda v: (v.short_command, v.pid), column=WORDS["command"]),
)


def is_idle(view: ProcessView) -> bool:
    """True when none of its connections carried a byte for HIDE_IDLE_AFTER_MS."""
    summary = view.summary
    return not summary.count or (summary.min_idle_ms is not None
                                 and summary.min_idle_ms >= HIDE_IDLE_AFTER_MS)


def matches(view: ProcessView, words: list[str], cluster: str) -> bool:
    """True when every word is in its pid, command, client ids or cluster."""
    if not words:
        return True
    haystack = " ".join((str(view.pid), view.cmdline, view.name, cluster,
                         *(c.client_id for c in view.clients))).lower()
    return all(word in haystack for word in words)


def process_cells(view: ProcessView, label: str, churn: ChurnBoard, now_ms: int) -> tuple:
    """The cells of one process's row, in COLUMNS order: each a Text."""
    roles = view.summary.roles
    opened, closed = churn.per_process(view)
    pattern = churn.pattern(view.pid, now_ms)
    idle = _max_idle(view)
    clients = ", ".join(sorted({c.client_id for c in view.clients})) or "(no client metrics)"
    return (plain(view.pid), plain(label or view.short_command),
            plain(fmt.duration(idle) if idle >= 0 else "?"),
            *(plain(roles[r]) if roles[r] else Text() for r in ROLES),
            fmt.state(TcpState.CLOSE_WAIT) if view.summary.close_wait else Text(),
            plain(clients), plain(f"{opened}/{closed}") if opened or closed else Text(),
            Text(pattern, style="bold red") if pattern else Text(),
            Text(view.notices[0][:60], style="yellow") if view.notices else Text())


def cluster_heading(views: list[ProcessView]) -> str:
    """'3 brokers: 127.0.0.1:33305, …': the brokers these processes are connected to."""
    brokers = sorted(set().union(*(v.summary.brokers for v in views)))
    if not brokers:
        return "brokers not known yet"
    more = ", …" if len(brokers) > 1 else ""
    return f"{len(brokers)} broker{'s' * (len(brokers) > 1)}: {brokers[0]}{more}"


class _Heading(NamedTuple):
    """A cluster's heading row: its cells."""

    cells: tuple


def _own_cells(row: tuple) -> tuple:
    return row


def _first_cell(row: tuple) -> object:
    return row[0]


class ProcessTable(KeyedTable):
    """Rows of processes, keyed by pid; with ``grouped``, each cluster's rows follow a
    heading row naming its brokers (in the command column, the pid left blank). Columns are
    as wide as their widest cell. The cursor stays on its process while rows move, and starts
    on the first process (as it goes back to when its process is gone); ``g``/``G`` move it
    to the first/last process; the heading of the column the rows are sorted by is marked
    (``sort_by``)."""

    COLUMNS = tuple(Column(heading, heading) for heading in COLUMNS)
    DEFAULT_CSS = """
    ProcessTable {
        color: $foreground;
        &:focus {
            background-tint: $foreground 5%;
            & > .keyed-table--cursor { background: $block-cursor-background;
                                       color: $block-cursor-foreground;
                                       text-style: $block-cursor-text-style; }
            & > .keyed-table--header { background-tint: $foreground 5%; }
        }
        & > .keyed-table--header { color: $foreground; }
        & > .keyed-table--even { background: $surface-lighten-1 50%; }
        &:dark > .keyed-table--even { background: $surface-darken-1 40%; }
        & > .keyed-table--cursor { background: $block-cursor-blurred-background;
                                   color: $block-cursor-blurred-foreground;
                                   text-style: $block-cursor-blurred-text-style; }
    }
    """

    def __init__(self, grouped: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.grouped = grouped

    def show_groups(self, groups: list[tuple[str, str, list]],
                    cells_of: Callable[[Any], tuple] = _own_cells,
                    pid_of: Callable[[Any], object] = _first_cell) -> None:
        """Hold exactly ``groups``: (cluster, its heading, its rows), in order; ``cells_of``
        makes a row's cells (in COLUMNS order) when the row is shown, ``pid_of`` gives its
        pid (by default each row is its cells, the pid first); the heading is drawn only
        when ``grouped``."""
        rows: list[tuple[str, object]] = []
        for cluster, heading, members in groups:
            if self.grouped:
                blanks = (Text() for _ in COLUMNS[2:])
                rows.append((f"{HEADING}{cluster}",
                             _Heading((Text(), Text(heading, style="bold"), *blanks))))
            rows += [(str(pid_of(row)), row) for row in members]
        self.show(rows, lambda row: row.cells if isinstance(row, _Heading) else cells_of(row))

    def home_row(self) -> int:
        """The first process's row (below its cluster's heading when grouped)."""
        return next((i for i, key in enumerate(self.row_keys) if not key.startswith(HEADING)),
                    0)

    def action_first(self) -> None:
        self.move_to(self.home_row())

    @property
    def selected_pid(self) -> int | None:
        """The pid of the row under the cursor (None on a heading row or an empty table)."""
        key = self.selected_key
        return None if key is None or key.startswith(HEADING) else int(key)
