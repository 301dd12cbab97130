"""The event log: opened, closed, CLOSE_WAIT, near reap, role change, process exit."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import RichLog

from kmon.model import Event, EventKind
from kmon.present import format as fmt

KIND_STYLE = {
    EventKind.OPENED: "green", EventKind.CLOSED: "grey62", EventKind.STATE_CHANGE: "cyan",
    EventKind.CLOSE_WAIT: "bold red", EventKind.NEAR_REAP: "yellow",
    EventKind.ROLE_CHANGE: "magenta", EventKind.PROCESS_EXIT: "bold red",
    EventKind.PROCESS_ERROR: "bold red", EventKind.CHURN: "bold yellow",
}


def event_line(event: Event, show_pid: bool) -> Text:
    """One event as a line of the log: when, what, then the answer (who closed it and why,
    the pattern, ...), then the connection it is about."""
    line = Text(fmt.clock(event.ts_ms) + " ", style="dim")
    line.append(f"{event.kind.value:<12}", style=KIND_STYLE[event.kind])
    if show_pid:
        line.append(f" pid {event.pid}")
    if event.detail:
        line.append(f" {event.detail}")
    if event.role is not None:
        line.append(" · ", style="dim")
        line.append_text(fmt.role(event.role.value))
        if event.node_id is not None:
            line.append(f" {event.node_id}", style="dim")
    if event.remote:
        line.append(f" {event.remote}", style="dim")
    return line


class EventLog(RichLog):
    """Newest events at the bottom, wrapped to the panel's width (never cut off); the oldest
    scroll away past ``max_lines``."""

    def __init__(self, show_pid: bool = False, **kwargs) -> None:
        super().__init__(max_lines=1000, wrap=True, min_width=20, markup=False, **kwargs)
        self.show_pid = show_pid

    def add(self, events: list[Event]) -> None:
        """Append ``events``' lines, in one write: each write re-slices and scrolls the log."""
        if not events:
            return
        width = self.scrollable_content_region.width  # 0 before the first layout
        lines = Text("\n").join(event_line(event, self.show_pid) for event in events)
        self.write(lines, width=width or None)
