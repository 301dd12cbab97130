"""Lifecycle timeline: one strip per connection over the remembered window.

Each column is one or more refreshes; it shows the worst thing that happened
in them: busy (data moved), idle, connecting, CLOSE_WAIT, or not open. Only the
visible lines are drawn, so thousands of connections cost no more than a
screenful.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from itertools import groupby

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from kmon.model import Connection
from kmon.timeline import History, Mark, Track
from kmon.widgets import format as fmt

LABEL_WIDTH = 26
GLYPHS = {
    Mark.ABSENT: (" ", Style()),
    Mark.IDLE: ("─", Style(color="grey50")),
    Mark.BUSY: ("█", Style(color="green")),
    Mark.CONNECTING: ("▒", Style(color="yellow")),
    Mark.CLOSE_WAIT: ("█", Style(color="red")),
}
LEGEND = "█ busy  ─ idle  ▒ connecting  █ CLOSE_WAIT (red)  blank: not open"


def strip_marks(marks: list[int], width: int) -> list[Mark]:
    """``marks`` squeezed into at most ``width`` columns, the worst mark of each kept."""
    if width <= 0 or not marks:
        return []
    per_column = -(-len(marks) // width)  # ceiling division
    return [Mark(max(marks[i:i + per_column])) for i in range(0, len(marks), per_column)]


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


class Timeline(ScrollView):
    """Strips for the connections given to ``show()``, newest refresh on the right."""

    DEFAULT_CSS = "Timeline { height: 1fr; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._rows: Sequence[tuple[str, Track]] = []
        self._span_ms = 0

    def show(self, rows: Sequence[tuple[str, Track]], span_ms: int) -> None:
        """Draw ``rows`` ((label, track), looked up only when drawn); ``span_ms`` is the time
        the window covers."""
        self._rows = rows
        self._span_ms = span_ms
        self.virtual_size = Size(self.size.width, len(rows) + 1)
        self.refresh()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        strip_width = max(0, width - LABEL_WIDTH - 1)
        if y == 0:
            axis = f"-{fmt.duration(self._span_ms)}".ljust(max(0, strip_width - 3)) + "now"
            return Strip([Segment("connection".ljust(LABEL_WIDTH + 1), Style(bold=True)),
                          Segment(axis[:strip_width], Style(dim=True))])
        index = y - 1 + self.scroll_offset.y
        if index >= len(self._rows):
            return Strip.blank(width)
        label, track = self._rows[index]
        marks = strip_marks(list(track.marks), strip_width)
        style = Style(dim=track.closed_ms is not None)
        name = label[:LABEL_WIDTH].ljust(LABEL_WIDTH + 1)
        segments = [Segment(name, style)]
        for mark, run in groupby(marks):  # one segment per run of equal marks
            glyph, mark_style = GLYPHS[mark]
            segments.append(Segment(glyph * len(list(run)), mark_style))
        drawn = cell_len(name) + len(marks)  # a label may hold wide characters
        if drawn > width:  # narrower than the label
            return Strip(segments, drawn).adjust_cell_length(width)
        segments.append(Segment(" " * (width - drawn)))
        return Strip(segments, width)  # one strip: padding another would make a second
