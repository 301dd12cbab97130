"""The connection table: one row per connection, and the cells of each row.

Rows are keyed by connection, so the cursor and the scroll position stay on the
same connection while rows come, go and change order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from rich.cells import set_cell_size
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Span, Text
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip

from kmon.model import ROLE_RANK, ClientInstance, Connection, Role, Thresholds
from kmon.present import format as fmt
from kmon.present.columns import CONNECTION_COLUMNS
from kmon.present.history import Track
from kmon.tcp_state import TcpState
from kmon.widgets.line_view import ChangedLinesView

CLIENT_MIN, CLIENT_MAX = 14, 40  # the client column grows into a wide terminal's spare room
WORDS = {c.key: c.header for c in CONNECTION_COLUMNS}  # the headers of kmon's text output
# key, heading, width
COLUMNS = (
    ("role", WORDS["role"], 11), ("node", f"{WORDS['node_id']} → {WORDS['broker_id']}", 18),
    ("remote", WORDS["remote"], 21), ("state", WORDS["state"], 11),
    ("idle", f"{WORDS['idle_ms']} / {WORDS['idle_limit_ms']}", 19),
    ("reap", WORDS["reap_in_ms"], 9), ("client", WORDS["client"], CLIENT_MIN),
    ("sent", "out/s", 7), ("recv", "in/s", 7), ("rtt", WORDS["rtt_ms"], 11),
    ("evidence", "evidence", 15),
)
# the columns shown where the width is short, most wanted first: the first five always (they
# fit 80 columns), each of the others where it fits (the detail pane shows them all)
PRIORITY = ("role", "node", "state", "idle", "reap", "client", "remote", "sent", "recv", "rtt",
            "evidence")
SORTED_MARK = {False: " ▲", True: " ▼"}  # beside the heading of the column rows are sorted by


def shown_columns(width: int) -> tuple[int, ...]:
    """The indices into COLUMNS of the columns a table ``width`` cells wide shows, in order:
    PRIORITY's first five, then each other that still fits (the last column needs no gap)."""
    keys = [key for key, _, _ in COLUMNS]
    used, shown = 1, set()
    for rank, key in enumerate(PRIORITY):
        column_width = COLUMNS[keys.index(key)][2]
        if rank < 5 or used + column_width <= width:
            used += column_width + 2
            shown.add(keys.index(key))
    return tuple(sorted(shown))


def row_width(widths: tuple[int, ...]) -> int:
    """The cells a row of columns ``widths`` takes: a space, then each column and the gap
    between it and the next."""
    return 1 + sum(width + 2 for width in widths) - 2


@dataclass(frozen=True)
class SortOrder:
    """One way to order the rows: its name, a key over (connection, track), direction, the
    column it sorts by. No key: the order the engine gives them in
    (``Connection.display_order``)."""

    name: str
    key: Callable[[Connection, Track | None], object] | None
    descending: bool = False
    uses_track: bool = False  # the key reads the track (else it is given None)
    column: str = ""  # the key of its column in COLUMNS


def _rate_total(track: Track | None) -> float:
    if track is None:
        return 0.0
    return (track.rates.sent or 0.0) + (track.rates.received or 0.0)


def _missing_last(value: int | None) -> int:
    return (1 << 62) if value is None else value


SORT_ORDERS = (
    SortOrder("role", None, column="role"),
    SortOrder("idle", lambda c, t: (-1 if c.idle_ms is None else c.idle_ms), descending=True,
              column="idle"),
    SortOrder(WORDS["reap_in_ms"], lambda c, t: _missing_last(c.reap_in_ms), column="reap"),
    SortOrder("state", lambda c, t: (c.state != TcpState.CLOSE_WAIT, c.state, c.key),
              column="state"),
    SortOrder("broker", lambda c, t: (_missing_last(c.broker_id), ROLE_RANK[c.role]),
              column="node"),
    SortOrder("traffic", lambda c, t: _rate_total(t), descending=True, uses_track=True,
              column="sent"),
    SortOrder("client", lambda c, t: (c.client or "~", ROLE_RANK[c.role]), column="client"),
)


def connection_cells(conn: Connection, track: Track | None, clients: dict[str, ClientInstance],
                     style: Thresholds, now_ms: int) -> tuple:
    """The cells of one connection's row, in COLUMNS order; ``clients``: the process's client
    instances by name."""
    rates = track.rates if track else None
    in_close_wait_ms = now_ms - track.state_since_ms if track else 0
    alert = conn.state == TcpState.CLOSE_WAIT and in_close_wait_ms >= style.close_wait_alert_ms
    evidence = f"{conn.evidence.get('role', '?')} conf {conn.confidence:.2f}"
    client = clients.get(conn.client or "")
    # a consumer's fetches wait at the broker for data (fetch.max.wait.ms): their round trip
    # is that long-poll, not the network
    long_poll = conn.role is Role.BROKER and client is not None and client.type == "consumer"
    return (
        fmt.role(conn.role.value),
        fmt.node_and_broker(conn.node_id, conn.broker_id, conn.role is Role.COORDINATOR),
        conn.remote or "-",
        fmt.state(conn.state, alert),
        fmt.idle_bar(conn.idle_ms, conn.idle_limit_ms, style.idle_warning),
        fmt.duration(conn.reap_in_ms) if conn.reap_in_ms is not None else "never",
        client.client_id if client is not None else conn.client or "-",
        fmt.rate(rates.sent if rates else None),
        fmt.rate(rates.received if rates else None),
        fmt.round_trip(conn.rtt_ms, conn.tcp_rtt_ms, long_poll),
        fmt.styled(evidence, "dim" if conn.confidence >= 0.9 else "yellow"),
    )


@lru_cache(maxsize=4096)
def _styled_cell(console: Console, plain: str, spans: tuple[Span, ...], style: str | Style,
                 row_style: Style, width: int) -> tuple[Segment, ...]:
    """A styled cell's segments over ``row_style``: cut to ``width``, then the padding and the
    two-space gap in the cell's own style (so no run of text starts blank). Cached: the same
    few cells (roles, states, idle bars) recur row after row."""
    cell_style = row_style + console.get_style(style) if style else row_style
    if not spans:
        return (Segment(set_cell_size(plain, width) + "  ", cell_style),)
    text = Text(plain, style=style, spans=list(spans))
    rendered = list(Segment.apply_style(text.render(console, end=""), cell_style))
    rendered = Segment.adjust_line_length(rendered, width, pad=False)
    gap = width - Segment.get_line_length(rendered) + 2
    return (*rendered, Segment(" " * gap, cell_style))


class ConnectionTable(ChangedLinesView, can_focus=True):
    """The rows given to ``show()``, drawn line by line for the visible rows only.

    A row's cells are made only when it is visible, its line is rebuilt only when
    one of its cells changed, and a refresh draws again only the lines whose row,
    cells or look changed, so a refresh costs at most a screenful of rows however
    many connections there are. The cursor stays on its connection (by row key)
    while rows come, go and move; a move of it draws again only the line it leaves
    and the line it enters.
    """

    cursor_row: reactive[int] = reactive(0, repaint=False, init=False)

    BINDINGS = [
        Binding("up,k", "cursor(-1)", show=False), Binding("down,j", "cursor(1)", show=False),
        Binding("pageup", "page(-1)", show=False), Binding("pagedown", "page(1)", show=False),
        Binding("home,g", "cursor(-1000000000)", show=False),
        Binding("end,G", "cursor(1000000000)", show=False),
        Binding("enter", "select", show=False),
    ]
    DEFAULT_CSS = """
    ConnectionTable { background: $surface; }
    ConnectionTable > .connection-table--header { text-style: bold; background: $panel; }
    ConnectionTable > .connection-table--cursor { background: $block-cursor-background;
                                                  color: $block-cursor-foreground; }
    ConnectionTable > .connection-table--stripe { background: $surface-lighten-1; }
    """
    COMPONENT_CLASSES = {"connection-table--header", "connection-table--cursor",
                         "connection-table--stripe"}

    class RowSelected(Message):
        """``enter`` (or a click on the selected row) on the row ``key``."""

        def __init__(self, key: str) -> None:
            super().__init__()
            self.key = key

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._keys: list[str] = []
        self._rows: dict[str, object] = {}
        self._cells_of: Callable[[object], tuple] = lambda row: ()
        self._cells: dict[str, tuple] = {}  # the cells made since the last show()
        # key -> (cells drawn, how (row style, scroll, width), the line)
        self._lines: dict[str, tuple] = {}
        self._row_styles: dict[str | int, Style] = {}
        self._cursor_key: str | None = None
        self._columns = tuple(range(len(COLUMNS)))  # the shown ones (shown_columns)
        self._widths = tuple(width for _, _, width in COLUMNS)  # of the shown ones
        self._width = row_width(self._widths)
        self._sorted_by: tuple[str, bool] = ("", False)  # (column key, descending)

    # -- data -------------------------------------------------------------------------------

    def show(self, rows: list[tuple[str, object]], cells_of: Callable[[object], tuple]) -> None:
        """Hold exactly ``rows`` ((row key, row)), in this order; ``cells_of(row)`` makes a
        row's cells (in COLUMNS order) when it is visible."""
        self._keys = [key for key, _ in rows]
        self._rows, self._cells_of, self._cells = dict(rows), cells_of, {}
        self._row_styles.clear()
        for key in [k for k in self._lines if k not in self._rows]:
            del self._lines[key]
        self.cursor_row = (self._keys.index(self._cursor_key) if self._cursor_key in self._rows
                           else self.cursor_row)  # validated: within the rows
        self._cursor_key = self._keys[self.cursor_row] if self._keys else None
        self.virtual_size = Size(self._width, len(self._keys) + 1)
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        self.refresh_changed({y: self._line_state(y, scroll_x, scroll_y, width)
                              for y in range(1, self.size.height)})

    @property
    def row_count(self) -> int:
        return len(self._keys)

    def row_text(self, index: int) -> list[str]:
        """The plain text of each cell of the row at ``index`` (in display order)."""
        return [str(cell) for cell in self._cells_at(self._keys[index])]

    def _cells_at(self, key: str) -> tuple:
        cells = self._cells.get(key)
        if cells is None:
            cells = self._cells[key] = self._cells_of(self._rows[key])
        return cells

    @property
    def selected_key(self) -> str | None:
        """The row key under the cursor."""
        return self._cursor_key

    # -- drawing ----------------------------------------------------------------------------

    def _line(self, cells: tuple, row_style: Style, scroll_x: int, width: int) -> Strip:
        """A row's line as drawn: its cells over ``row_style``, cut to the visible ``width``.

        Built as one strip (Textual's strips are costly objects: styling, cropping and
        padding one would make three more per row per refresh)."""
        console = self.app.console
        segments: list[Segment] = []
        plain: list[str] = [" "]  # plain cells in a row share one segment in the row's style
        for index, cell_width in zip(self._columns, self._widths, strict=True):
            cell = cells[index]
            if isinstance(cell, Text):
                if plain:
                    segments.append(Segment("".join(plain), row_style))
                    plain = []
                segments.extend(_styled_cell(console, cell.plain, tuple(cell.spans), cell.style,
                                             row_style, cell_width))
            else:  # padded or cut to the column, the gap included
                plain.append(set_cell_size(str(cell), cell_width) + "  ")
        if plain:
            segments.append(Segment("".join(plain), row_style))
        drawn = self._width + 2  # the last column's gap drawn too
        if scroll_x or drawn > width:  # scrolled sideways, or wider than the view
            line = Strip(segments, drawn).crop(scroll_x, scroll_x + width)
            return line.adjust_cell_length(width, self._row_style(0))
        if width > drawn:
            segments.append(Segment(" " * (width - drawn), self._row_style(0)))
        return Strip(segments, width)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        if y == 0:
            header = Strip([Segment(f" {self._headings()}")])
            header = header.apply_style(self.get_component_rich_style("connection-table--header"))
            return header.crop(scroll_x, scroll_x + width).adjust_cell_length(width,
                                                                              self.rich_style)
        state = self.drawn(y, self._line_state(y, scroll_x, scroll_y, width))
        if state is None:
            return Strip.blank(width, self.rich_style)
        key, cells, look = state
        drawn = self._lines.get(key)
        # an unchanged row keeps its line while it stays put (cursor, stripe, scroll, width)
        if drawn is None or drawn[0] != cells or drawn[1] != look:
            line = self._line(cells, look[0], scroll_x, width)
            drawn = self._lines[key] = (cells, look, line)
        return drawn[2]

    def _headings(self) -> str:
        """The header's text: each shown column's heading, the sorted one marked."""
        column, descending = self._sorted_by
        return "".join(
            set_cell_size(heading + (SORTED_MARK[descending] if key == column else ""), w) + "  "
            for (key, heading, _), w in zip((COLUMNS[i] for i in self._columns), self._widths,
                                            strict=True))

    def sort_by(self, column: str, descending: bool) -> None:
        """Mark the column the rows are sorted by (its key in COLUMNS) in the header."""
        if (column, descending) != self._sorted_by:
            self._sorted_by = (column, descending)
            self.refresh(Region(0, 0, self.size.width, 1))

    def _line_state(self, y: int, scroll_x: int, scroll_y: int, width: int) -> tuple | None:
        """What row line ``y`` shows, scrolled to (``scroll_x``, ``scroll_y``) in ``width``:
        (row key, its cells, how: row style, scroll, width)."""
        index = y - 1 + scroll_y
        if index >= len(self._keys):
            return None
        key = self._keys[index]
        style = self._row_style("cursor" if index == self.cursor_row else index % 2)
        return key, self._cells_at(key), (style, scroll_x, width)

    def _row_style(self, variant: str | int) -> Style:
        """The style under a row's own: at the cursor (``variant`` "cursor"), odd rows (1)
        or even rows (0); worked out once a refresh."""
        styles = self._row_styles
        if not styles:
            base = self.rich_style
            styles.update({
                "cursor": base + self.get_component_rich_style("connection-table--cursor"),
                1: base + self.get_component_rich_style("connection-table--stripe"),
                0: base})
        return styles[variant]

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._row_styles.clear()

    def on_resize(self) -> None:
        """Show the columns the width has room for (``shown_columns``), and give the client
        column the room a wide terminal has to spare (up to CLIENT_MAX)."""
        room = self.size.width - self.styles.scrollbar_size_vertical  # a scrollbar may come
        columns = shown_columns(room)
        base = row_width(tuple(COLUMNS[i][2] for i in columns))
        spare = max(0, min(room - base, CLIENT_MAX - CLIENT_MIN))
        widths = tuple(width + spare if key == "client" else width
                       for key, _, width in (COLUMNS[i] for i in columns))
        if (columns, widths) != (self._columns, self._widths):
            self._columns, self._widths, self._width = columns, widths, base + spare
            self._lines.clear()
            self.virtual_size = Size(self._width, len(self._keys) + 1)
            self.refresh()

    # -- keys and mouse ---------------------------------------------------------------------

    def validate_cursor_row(self, row: int) -> int:
        return max(0, min(row, len(self._keys) - 1))

    def watch_cursor_row(self, left: int, entered: int) -> None:
        """Draw again the line the cursor left and the one it entered, where visible."""
        scroll_y, width, height = self.scroll_offset.y, self.size.width, self.size.height
        for row in (left, entered):
            y = row - scroll_y + 1  # below the header
            if 1 <= y < height:
                self.refresh(Region(0, y, width, 1))

    def _move_to(self, row: int) -> None:
        if not self._keys:
            return
        self.cursor_row = row
        self._cursor_key = self._keys[self.cursor_row]
        visible = self.size.height - 1  # below the header
        if self.cursor_row < self.scroll_offset.y:
            self.scroll_to(y=self.cursor_row, animate=False)
        elif self.cursor_row >= self.scroll_offset.y + visible:
            self.scroll_to(y=self.cursor_row - visible + 1, animate=False)

    def action_cursor(self, step: int) -> None:
        self._move_to(self.cursor_row + step)

    def action_page(self, pages: int) -> None:
        self._move_to(self.cursor_row + pages * max(1, self.size.height - 2))

    def action_select(self) -> None:
        if self._cursor_key is not None:
            self.post_message(self.RowSelected(self._cursor_key))

    def on_click(self, event: events.Click) -> None:
        row = event.y - 1 + self.scroll_offset.y
        if event.y >= 1 and row < len(self._keys):
            if row == self.cursor_row:
                self.action_select()
            self._move_to(row)
