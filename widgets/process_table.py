"""The process table of the watch and host screens: one row per client process, optionally
under one heading row per cluster; sorted, filtered and idle-hidden by the screen."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

from kmon.model import ProcessView, Role
from kmon.present import format as fmt
from kmon.present.columns import PROCESS_COLUMNS
from kmon.present.plain_text import plain
from kmon.tcp_state import TcpState
from kmon.widgets.churn_board import ChurnBoard

ROLES = (Role.BOOTSTRAP, Role.COORDINATOR, Role.BROKER, Role.UNKNOWN)
WORDS = {c.key: c.header for c in PROCESS_COLUMNS}  # the headers of kmon ps
# the columns a short width shows first come first: the process, how long it has been idle and
# its connections by role; then which clients, and the churn
COLUMNS = (*(WORDS[key] for key in ("pid", "command", "max_idle_ms")),
           *(WORDS[r.value] for r in ROLES), *(WORDS[key] for key in ("close_wait", "client_ids")),
           "opened/closed 1m", WORDS["churn"], "notice")
SORTED_MARK = {False: " ▲", True: " ▼"}  # beside the heading of the column rows are sorted by
HIDE_IDLE_AFTER_MS = 10_000  # as the attach screen's ``i``: no traffic for this long
HEADING = "cluster:"  # row keys of the heading rows start with it
CELL_DRAWINGS_KEPT = 2_000  # DataTable keeps 10,000


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
    """The cells of one process's row, in COLUMNS order: each a Text, drawn as it is (a
    string cell is parsed as markup each time its row is drawn)."""
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


class ProcessTable(DataTable):
    """Rows of processes, keyed by pid; with ``grouped``, each cluster's rows follow a
    heading row naming its brokers (in the command column, the pid left blank). The cursor
    stays on its process while rows move, and starts on the first process. ``j``/``k`` move
    it as down/up, ``g``/``G`` to the first/last process; the heading of the column the rows
    are sorted by is marked (``sort_by``)."""

    BINDINGS = [Binding("j", "cursor_down", show=False), Binding("k", "cursor_up", show=False),
                Binding("g", "first", show=False), Binding("G", "last", show=False)]

    def __init__(self, grouped: bool = False, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.grouped = grouped
        # what a screen of rows draws, in a few states: ``_put`` looks through it each refresh
        self._cell_render_cache.maxsize = CELL_DRAWINGS_KEPT

    def on_mount(self) -> None:
        self.add_columns(*COLUMNS)

    def sort_by(self, column: str, descending: bool) -> None:
        """Mark the heading of ``column`` (one of COLUMNS) with the direction of the sort; a
        new mark sets the columns anew, and the next ``show`` the rows."""
        headings = [h + (SORTED_MARK[descending] if h == column else "") for h in COLUMNS]
        if headings != [str(c.label) for c in self.columns.values()]:
            rows = [(row.key.value, self.get_row(row.key)) for row in self.ordered_rows]
            selected = self._selected_key()
            self.clear(columns=True)
            self.add_columns(*headings)
            self._fill(rows, selected)

    def _selected_key(self) -> str | None:
        """The key of the row under the cursor (None in an empty table)."""
        if not self.row_count:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value

    def _fill(self, wanted: list[tuple[str, tuple]], selected: str | None) -> None:
        """Add the rows ``wanted`` ((key, cells)) to the empty table, the cursor on the row
        ``selected`` where it is a process's, else on the first process."""
        keys = [key for key, _ in wanted]
        for key, cells in wanted:
            self.add_row(*cells, key=key)
        if selected not in keys or selected.startswith(HEADING):
            selected = next((k for k in keys if not k.startswith(HEADING)), None)
        if selected is not None:
            self.move_cursor(row=keys.index(selected), animate=False)

    def action_first(self) -> None:
        """The cursor to the first process (below its cluster's heading when grouped)."""
        self.move_cursor(row=min(int(self.grouped), self.row_count - 1))

    def action_last(self) -> None:
        self.move_cursor(row=self.row_count - 1)

    @property
    def selected_pid(self) -> int | None:
        """The pid of the row under the cursor (None on a heading row or an empty table)."""
        key = self._selected_key()
        return None if key is None or key.startswith(HEADING) else int(key)

    def show(self, groups: list[tuple[str, str, list[tuple]]]) -> None:
        """Hold exactly ``groups``: (cluster, its heading, rows of cells with the pid first),
        in order; the heading is drawn only when ``grouped``."""
        wanted = []
        for cluster, heading, rows in groups:
            if self.grouped:
                blanks = (Text() for _ in COLUMNS[2:])
                wanted.append((f"{HEADING}{cluster}",
                               (Text(), Text(heading, style="bold"), *blanks)))
            wanted += [(str(cells[0]), cells) for cells in rows]
        keys = [key for key, _ in wanted]
        current = [row.key.value for row in self.ordered_rows]
        changed = [] if keys != current else [
            (RowKey(key), column, value) for key, cells in wanted
            for column, shown, value in zip(self.columns, self.get_row(key), cells, strict=True)
            if not _same(shown, value)]
        if keys != current or any(cell_len(str(value)) > self.columns[column].content_width
                                  for _, column, value in changed):
            # rows came, went or moved, or a cell is wider than its column (``_put`` sets
            # cells, not widths): all again, the cursor kept
            selected = self._selected_key()
            self.clear()
            self._fill(wanted, selected)
            return
        self._put(changed)

    def _put(self, changed: list[tuple[RowKey, ColumnKey, object]]) -> None:
        """Set the ``changed`` cells and draw only them again, into their rows' drawings:
        after ``update_cell`` a refresh draws every cell anew (its caches are keyed by an
        update count), and a process's idle age changes each second. Relies on how DataTable
        keeps its caches in Textual 8 (tests/test_dashboard_snapshots.py checks the table
        drawn, styles included)."""
        if not changed:
            return
        columns: dict[RowKey, list[ColumnKey]] = {}
        for row, column, value in changed:
            self._data[row][column] = value
            columns.setdefault(row, []).append(column)
        cells = {(row, column) for row, column, _ in changed}
        indices = {self._row_locations.get(row) for row in columns}
        lines = self._lines_of(columns)
        for cache, stale in ((self._cell_render_cache, lambda key: key[:2] in cells),
                             (self._line_cache, lambda key: key[0] in lines)):
            for key in list(filter(stale, cache.keys())):
                cache.discard(key)
        self._put_renderables(changed)
        rows = self._row_render_cache
        for key in [key for key in list(rows.keys()) if key[0] in columns]:
            if key[5:] == self._row_state(key[5]):
                self._redraw_cells(key, rows.get(key)[1], columns[key[0]])
            else:  # drawn in another state (focus, cursor shown): drawn whole when asked
                rows.discard(key)
        for index in indices:
            self.refresh_row(index)

    def _put_renderables(self, changed: list[tuple[RowKey, ColumnKey, object]]) -> None:
        """Put the changed cells into their rows' kept renderables (DataTable keeps a Text
        cell as it is, an empty one aside), or drop a row's where a cell is anything else."""
        cache, count = self._row_renderable_cache, self._update_count
        for row, column, value in changed:
            key = (count, self._row_locations.get(row))
            kept = cache.get(key)
            if kept is not None and isinstance(value, Text) and value:
                kept.cells[self._column_locations.get(column)] = value
            elif kept is not None:
                cache.discard(key)

    def _row_state(self, cursor_type: str) -> tuple:
        """The end of a row drawing's cache key in DataTable now: what its cells' drawings
        are keyed by besides their place."""
        return (cursor_type, self.show_cursor, self._show_hover_cursor, self._update_count,
                self._pseudo_class_state)

    def _redraw_cells(self, key: tuple, drawn: list, columns: list[ColumnKey]) -> None:
        """Put the ``columns`` cells' new drawing into one line of a row's cached drawing,
        as DataTable._render_line_in_row draws each (no fixed columns or row labels here)."""
        row_key, line_no, base_style, cursor, hover, cursor_type = key[:6]
        row_index = self._row_locations.get(row_key)
        row_style = self._get_row_style(row_index, base_style)
        for column_key in columns:
            index = self._column_locations.get(column_key)
            place = Coordinate(row_index, index)
            width = self.columns[column_key].get_render_width(self)
            flags = {"cursor": self._should_highlight(cursor, place, cursor_type),
                     "hover": self._should_highlight(hover, place, cursor_type)}
            one_line = line_no == 0 and self.rows[row_key].height == 1
            line = self._plain_line(self._data[row_key][column_key], row_index, index,
                                    row_style, width, **flags) if one_line else None
            drawn[index] = line if line is not None else self._render_cell(
                row_index, index, row_style, width, **flags)[line_no]

    def _plain_line(self, cell: object, row_index: int, index: int, row_style: Style,
                    width: int, cursor: bool, hover: bool) -> list[Segment] | None:
        """The line of a cell of unstyled text that fits on one line (of a one-line row), as
        ``_render_cell`` draws it (the text padded, over the row's style, the cursor's and
        the cell's place as meta) without Rich's render pipeline, which costs ten times as
        much; None for any other cell."""
        pad = self.cell_padding
        if not (isinstance(cell, Text) and not cell.style and not cell.spans
                and cell.justify is None):
            return None
        text = cell.plain
        length = cell_len(text)
        if "\n" in text or length > width - 2 * pad:
            return None
        component, post = self._get_styles_to_render_cell(
            False, False, False, hover, cursor, self.show_cursor, self._show_hover_cursor,
            self.cursor_foreground_priority == "css", self.cursor_background_priority == "css")
        style = row_style + Style.from_meta({"row": row_index, "column": index}) + component
        return [Segment(" " * pad + text + " " * (width - pad - length), style + post)]

    def _lines_of(self, rows: Collection[RowKey]) -> set[int]:
        """The lines of the table (as DataTable counts them: the header first) that draw
        ``rows``."""
        first = self.header_height if self.show_header else 0
        return {first + y for y, (row, _) in enumerate(self._y_offsets) if row in rows}

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        """New rows measured: every cell drawn before a column widened is stale (``_put``
        keeps the others' renders)."""
        widths = [column.content_width for column in self.columns.values()]
        super()._update_dimensions(new_rows)
        if widths != [column.content_width for column in self.columns.values()]:
            self._update_count += 1
            self.refresh()


def _same(shown: object, value: object) -> bool:
    """True when a cell shows ``value`` already (rich's Text compares no style: this does)."""
    return (type(shown) is type(value) and shown == value
            and getattr(shown, "style", None) == getattr(value, "style", None))
