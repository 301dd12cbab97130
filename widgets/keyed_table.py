"""A keyed table drawn line by line on Textual's public API (the Line API, as Textual's ``Log``):
the table of processes and the table of connections are both one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from rich.cells import cell_len, set_cell_size
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

from kmon.widgets.line_view import ChangedLinesView

SORTED_MARK = {False: " ▲", True: " ▼"}  # beside the heading of the column rows are sorted by


@dataclass(frozen=True)
class Column:
    """A column: its key, its heading, and its width in cells (0: as wide as its widest cell
    or heading has been, so it never narrows while rows come and go)."""

    key: str
    heading: str
    width: int = 0


def row_width(widths: tuple[int, ...]) -> int:
    """The cells a row of columns ``widths`` takes: a space, then each column and the gap
    between it and the next."""
    return 1 + sum(width + 2 for width in widths) - 2


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


class KeyedTable(ChangedLinesView, can_focus=True):
    """The rows given to ``show()`` under a header of ``COLUMNS``, drawn line by line for the
    visible rows only.

    A row's cells are made only when it is visible, its line is kept until one of its cells or
    its look changes, and a refresh draws again only the lines whose row, cells or look
    changed, so a refresh costs at most a screenful of rows however many there are. A column
    of width 0 is measured on the rows shown (at each ``show``, scroll and resize): it widens
    as wider rows come into view, and never narrows. The cursor stays on its row (by key)
    while rows come, go and move; a move of it draws again only the line it leaves and the
    line it enters. Even and odd rows, the cursor's and the header take the look of the
    component classes ``keyed-table--even``, ``--odd``, ``--cursor`` and ``--header``.
    """

    COLUMNS: tuple[Column, ...] = ()

    cursor_row: reactive[int] = reactive(0, repaint=False, init=False)

    BINDINGS = [
        Binding("up,k", "cursor(-1)", show=False), Binding("down,j", "cursor(1)", show=False),
        Binding("pageup", "page(-1)", show=False), Binding("pagedown", "page(1)", show=False),
        Binding("home,g", "first", show=False), Binding("end,G", "last", show=False),
        Binding("enter", "select", show=False),
    ]
    DEFAULT_CSS = """
    KeyedTable { background: $surface; }
    KeyedTable > .keyed-table--header { text-style: bold; background: $panel; }
    """
    COMPONENT_CLASSES = {"keyed-table--header", "keyed-table--cursor", "keyed-table--even",
                         "keyed-table--odd"}

    class RowSelected(Message):
        """``enter`` (or a click on the selected row) on the row ``key``."""

        def __init__(self, table: KeyedTable, key: str) -> None:
            super().__init__()
            self.table, self.key = table, key

        @property
        def control(self) -> KeyedTable:
            return self.table

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._keys: list[str] = []
        self._rows: dict[str, object] = {}
        self._cells_of: Callable[[object], tuple] = lambda row: ()
        self._cells: dict[str, tuple] = {}  # the cells made since the last show()
        # key -> (cells drawn and their styles, how (row style, scroll, width), the line)
        self._lines: dict[str, tuple] = {}
        self._row_styles: dict[str, Style] = {}
        self._cursor_key: str | None = None
        self._natural = [column.width or cell_len(column.heading) for column in self.COLUMNS]
        self._columns = tuple(range(len(self.COLUMNS)))  # the shown ones (``fit``)
        self._widths = tuple(self._natural)  # of the shown ones
        self._width = row_width(self._widths)
        self._sorted_by: tuple[str, bool] = ("", False)  # (column key, descending)

    # -- data -------------------------------------------------------------------------------

    def show(self, rows: list[tuple[str, object]], cells_of: Callable[[object], tuple]) -> None:
        """Hold exactly ``rows`` ((row key, row)), in this order; ``cells_of(row)`` makes a
        row's cells (in COLUMNS order) when it is visible or measured."""
        self._keys = [key for key, _ in rows]
        self._rows, self._cells_of, self._cells = dict(rows), cells_of, {}
        self._row_styles.clear()
        for key in [k for k in self._lines if k not in self._rows]:
            del self._lines[key]
        self._measure()
        self.cursor_row = (self._keys.index(self._cursor_key) if self._cursor_key in self._rows
                           else self.home_row())  # validated: within the rows
        self._cursor_key = self._keys[self.cursor_row] if self._keys else None
        self.virtual_size = Size(self._width, len(self._keys) + 1)
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        self.refresh_changed({y: self._line_state(y, scroll_x, scroll_y, width)
                              for y in range(1, self.size.height)})

    def home_row(self) -> int:
        """Where the cursor goes when its row is gone (or on the first rows): it keeps its
        place."""
        return self.cursor_row

    @property
    def row_count(self) -> int:
        return len(self._keys)

    @property
    def row_keys(self) -> list[str]:
        """The keys of the rows, in order."""
        return list(self._keys)

    def row_text(self, index: int) -> list[str]:
        """The plain text of each cell of the row at ``index`` (in COLUMNS order)."""
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

    def on_mount(self) -> None:
        self.watch(self, "scroll_y", self._measure, init=False)

    def _measure(self) -> None:
        """Widen each column of width 0 to its widest cell in the rows shown (the heading's
        mark included); lay the columns out again where one widened."""
        measured = [i for i, column in enumerate(self.COLUMNS) if not column.width]
        if not measured:
            return
        natural = list(self._natural)
        first = round(self.scroll_y)
        for key in self._keys[first : first + max(0, self.size.height - 1)]:
            cells = self._cells_at(key)
            for i in measured:
                natural[i] = max(natural[i], cell_len(str(cells[i])))
        if natural != self._natural:
            self._natural = natural
            self._lay_out()

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
            if isinstance(cell, Text) and (cell.style or cell.spans):
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
            return line.adjust_cell_length(width, row_style)
        if width > drawn:
            segments.append(Segment(" " * (width - drawn), row_style))
        return Strip(segments, width)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        width = self.size.width
        if y == 0:
            style = self._row_style("header")
            header = Strip([Segment(f" {self._headings()}", style)])
            return header.crop(scroll_x, scroll_x + width).adjust_cell_length(width, style)
        state = self.drawn(y, self._line_state(y, scroll_x, scroll_y, width))
        if state is None:
            return Strip.blank(width, self.rich_style)
        key, cells, _, look = state
        drawn = self._lines.get(key)
        # an unchanged row keeps its line while it stays put (cursor, stripe, scroll, width)
        if drawn is None or drawn[0] != state[1:3] or drawn[1] != look:
            line = self._line(cells, look[0], scroll_x, width)
            drawn = self._lines[key] = (state[1:3], look, line)
        return drawn[2]

    def _headings(self) -> str:
        """The header's text: each shown column's heading, the sorted one marked."""
        column, descending = self._sorted_by
        return "".join(
            set_cell_size(c.heading + (SORTED_MARK[descending] if c.key == column else ""), w)
            + "  " for c, w in zip((self.COLUMNS[i] for i in self._columns), self._widths,
                                   strict=True))

    def sort_by(self, column: str, descending: bool) -> None:
        """Mark the column the rows are sorted by (its key in COLUMNS) in the header."""
        if (column, descending) != self._sorted_by:
            self._sorted_by = (column, descending)
            for i, c in enumerate(self.COLUMNS):  # a measured column makes room for the mark
                if not c.width and c.key == column:
                    mark = cell_len(c.heading + SORTED_MARK[descending])
                    if mark > self._natural[i]:
                        self._natural[i] = mark
                        self._lay_out()
            self.refresh(Region(0, 0, self.size.width, 1))

    def _line_state(self, y: int, scroll_x: int, scroll_y: int, width: int) -> tuple | None:
        """What row line ``y`` shows, scrolled to (``scroll_x``, ``scroll_y``) in ``width``:
        (row key, its cells, their styles (a Text compares none), how: row style, scroll,
        width)."""
        index = y - 1 + scroll_y
        if index >= len(self._keys):
            return None
        key = self._keys[index]
        cells = self._cells_at(key)
        style = self._row_style("cursor" if index == self.cursor_row
                                else ("odd" if index % 2 else "even"))
        return (key, cells, tuple(getattr(cell, "style", None) for cell in cells),
                (style, scroll_x, width))

    def _row_style(self, variant: str) -> Style:
        """The style of the header or of a row (under its cells' own): "header", "cursor",
        "odd" or "even"; worked out once a refresh."""
        styles = self._row_styles
        if not styles:
            base = self.rich_style
            styles.update({name: base + self.get_component_rich_style(f"keyed-table--{name}")
                           for name in ("header", "cursor", "odd", "even")})
        return styles[variant]

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._row_styles.clear()

    # -- columns ----------------------------------------------------------------------------

    def fit(self, room: int, widths: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The columns a table ``room`` cells wide shows (indices into COLUMNS, in order) and
        their widths, given each column's own ``widths``: all of them, as they are (scrolled
        sideways where they do not fit)."""
        return tuple(range(len(widths))), widths

    def _lay_out(self) -> None:
        room = self.size.width - self.styles.scrollbar_size_vertical  # a scrollbar may come
        columns, widths = self.fit(room, tuple(self._natural))
        if (columns, widths) != (self._columns, self._widths):
            self._columns, self._widths, self._width = columns, widths, row_width(widths)
            self._lines.clear()
            self.virtual_size = Size(self._width, len(self._keys) + 1)
            self.refresh()

    def on_resize(self) -> None:
        self._measure()
        self._lay_out()

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

    def move_to(self, row: int) -> None:
        """Put the cursor on the row at ``row`` (within the rows), scrolled into view."""
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
        self.move_to(self.cursor_row + step)

    def action_page(self, pages: int) -> None:
        self.move_to(self.cursor_row + pages * max(1, self.size.height - 2))

    def action_first(self) -> None:
        self.move_to(0)

    def action_last(self) -> None:
        self.move_to(len(self._keys) - 1)

    def action_select(self) -> None:
        if self._cursor_key is not None:
            self.post_message(self.RowSelected(self, self._cursor_key))

    def on_click(self, event: events.Click) -> None:
        row = event.y - 1 + self.scroll_offset.y
        if event.y >= 1 and row < len(self._keys):
            if row == self.cursor_row:
                self.action_select()
            self.move_to(row)
