"""Lifecycle timeline: one strip per connection over the remembered window.

Each column is one or more refreshes (as many as the remembered ones need to fit
the width); it shows the worst thing that happened in them: busy (data moved),
idle, connecting, CLOSE_WAIT, or not open. Columns are fixed to the refresh
count, so a column keeps its refreshes from one refresh to the next: a strip
grows to the right until the window is full, then moves one column left each
time a new column starts. A line changes only when its connection does or a
column starts, and only changed lines are drawn again. Only the visible lines
are drawn, so thousands of connections cost no more than a screenful.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from itertools import groupby

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.strip import Strip

from kmon.model import Connection
from kmon.present import format as fmt
from kmon.present.history import History, Mark, Track
from kmon.widgets.line_view import ChangedLinesView

LABEL_WIDTH = 26
GLYPHS = {
    Mark.ABSENT: (" ", Style()),
    Mark.IDLE: ("─", Style(color="grey50")),
    Mark.BUSY: ("█", Style(color="green")),
    Mark.CONNECTING: ("▒", Style(color="yellow")),
    Mark.CLOSE_WAIT: ("█", Style(color="red")),
}
LEGEND = "█ busy  ─ idle  ▒ connecting  █ CLOSE_WAIT (red)  blank: not open"
_ABSENT = int(Mark.ABSENT)
_MISSING = object()


def column_marks(marks: Sequence[int], latest: int, per_column: int,
                 columns: int) -> tuple[int, ...]:
    """``marks`` (one per refresh, the last of refresh number ``latest``) in ``columns``
    columns of ``per_column`` refreshes each, the newest column last: column k holds
    refreshes k * per_column to (k + 1) * per_column - 1, and the worst mark among them
    (ABSENT where no mark is)."""
    first = latest - len(marks) + 1  # the refresh of marks[0]
    start_column = latest // per_column - columns + 1
    empty = min(columns, max(0, first // per_column - start_column))  # wholly before marks[0]
    out = [_ABSENT] * empty
    if per_column == 1:  # a column per refresh: the newest marks as they are
        return (*out, *marks[len(marks) - (columns - empty):])
    for column in range(start_column + empty, start_column + columns):
        begin = max(0, column * per_column - first)
        out.append(max(marks[begin:column * per_column + per_column - first]))
    return tuple(out)


class TimelineRows(Sequence):
    """The timeline's rows, each made when drawn: the shown connections' tracks, then the
    closed ones (2,000 rows a refresh, of which a screenful is drawn)."""

    def __init__(self, history: History, pid: int, rows: list[Connection],
                 closed: list[Track]) -> None:
        self.history, self.pid, self.rows, self.closed = history, pid, rows, closed

    def __len__(self) -> int:
        return len(self.rows) + len(self.closed)

    def __getitem__(self, index: int) -> tuple[str, Track]:
        if not 0 <= index < len(self):
            raise IndexError(index)
        if index >= len(self.rows):
            track = self.closed[index - len(self.rows)]
            return f"{track.label} (closed)", track
        conn = self.rows[index]
        track = self.history.track(self.pid, conn.key) or Track(deque(), conn.key, None)
        return track.label, track


class Timeline(ChangedLinesView):
    """Strips for the connections given to ``show()``, newest refresh on the right."""

    DEFAULT_CSS = "Timeline { height: 1fr; overflow-x: hidden; }"  # it fits the width

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._rows: Sequence[tuple[str, Track]] = []
        self._span_ms, self._latest, self._remembered = 0, 0, 0
        # what each line is to show, as worked out by the last show(), at (scroll, width)
        self._shown: dict[int, object] = {}
        self._shown_at: tuple[int, int] = (-1, -1)

    def show(self, rows: Sequence[tuple[str, Track]], span_ms: int, latest: int,
             remembered: int) -> None:
        """Draw ``rows`` ((label, track), looked up only when drawn) as of refresh number
        ``latest``, ``remembered`` refreshes back, which took ``span_ms``. Only the lines
        whose content changed are drawn again."""
        self._rows, self._span_ms = rows, span_ms
        self._latest, self._remembered = latest, remembered
        self.virtual_size = Size(self.size.width, len(rows) + 1)
        self._shown_at = (self.scroll_offset.y, self.scrollable_content_region.width)
        layout = self._layout()
        self._shown = {y: self._content(y, layout) for y in range(self.size.height)}
        self.refresh_changed(self._shown)

    def _layout(self) -> tuple[int, int, int, int]:
        """(refreshes per column, columns, room for them, first row shown) at the current
        width and scroll, worked out once for all the lines drawn together."""
        room = max(1, self.scrollable_content_region.width - LABEL_WIDTH - 1)  # no scrollbar
        per_column = max(1, -(-self._remembered // room))  # ceiling division
        last = self._latest // per_column
        first = max((self._latest - self._remembered + 1) // per_column, last - room + 1)
        return per_column, last - first + 1, room, self.scroll_offset.y

    def _content(self, y: int, layout: tuple[int, int, int, int]) -> object:
        """What line ``y`` shows in ``layout`` (``_layout()``): the axis, a (label, closed,
        columns) row, or None."""
        per_column, columns, room, scroll_y = layout
        if y == 0:
            return f"-{fmt.duration(self._span_ms)}".ljust(max(0, room - 3)) + "now"
        index = y - 1 + scroll_y
        if index >= len(self._rows):
            return None
        label, track = self._rows[index]
        return (label, track.closed_ms is not None,
                column_marks(list(track.marks), self._latest, per_column, columns))

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        shown = (self._shown.get(y, _MISSING)
                 if self._shown_at == (self.scroll_offset.y, self.scrollable_content_region.width)
                 else _MISSING)
        content = self.drawn(y, self._content(y, self._layout()) if shown is _MISSING else shown)
        if content is None:
            return Strip.blank(width)
        if y == 0:
            segments = [Segment("connection".ljust(LABEL_WIDTH + 1), Style(bold=True)),
                        Segment(content, Style(dim=True))]
            return Strip(segments).adjust_cell_length(width)
        label, closed, marks = content
        name = label[:LABEL_WIDTH].ljust(LABEL_WIDTH + 1)
        segments = [Segment(name, Style(dim=closed))]
        for mark, run in groupby(marks):  # one segment per run of equal marks
            glyph, mark_style = GLYPHS[mark]
            segments.append(Segment(glyph * len(list(run)), mark_style))
        drawn = cell_len(name) + len(marks)  # a label may hold wide characters
        if drawn > width:  # narrower than the label
            return Strip(segments, drawn).adjust_cell_length(width)
        segments.append(Segment(" " * (width - drawn)))
        return Strip(segments, width)  # one strip: padding another would make a second
