"""The detail pane of one connection: every field, its history, the client's view of it."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from kmon.model import ClientInstance, Connection, Event
from kmon.present import format as fmt
from kmon.present.history import Mark, Track
from kmon.present.plain_text import plain
from kmon.widgets.event_log import event_line
from kmon.widgets.footer import PriorityFooter

# What the detail pane needs at each refresh: the connection (None once it has
# closed), its remembered life, its events and the client instance that owns it.
DetailSource = Callable[[], tuple[Connection | None, Track | None, list[Event],
                                  ClientInstance | None]]


def _fields(conn: Connection) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for name, value in conn.to_dict().items():
        if name == "claims" or name in ("idle_limits", "idle_limit_by") and not value:
            continue  # claims: a section of their own; limits: shown only when known
        if name == "idle_limits":
            value = ", ".join(f"{by} {fmt.duration(ms)}" for by, ms in value.items()) + (
                f" ({conn.idle_limit_by} reaps first)" if conn.idle_limit_by else "")
        if name == "evidence":
            value = ", ".join(f"{fact}: {source}" for fact, source in value.items())
        elif name.endswith("_ms") and isinstance(value, int):
            value = f"{value} ({fmt.duration(value)})"
        table.add_row(name, plain("-" if value is None else value))
    return table


def _claims(conn: Connection) -> Table:
    """Why the row says what it says: every source's claim, the one that decided first."""
    table = Table(box=None, padding=(0, 2), show_edge=False)
    for heading in ("source", "role", "node id", "broker", "confidence", "what decided"):
        table.add_column(heading, style="bold" if heading == "source" else None)
    for claim in conn.claims:
        table.add_row(plain(claim["source"]), plain(claim["role"] or "-"),
                      fmt.node(claim["node_id"]), fmt.node(claim["broker_id"]),
                      f"{claim['confidence']:.2f}", plain(claim.get("detail", "")))
    return table


def _life(track: Track | None) -> Text:
    if track is None:
        return Text("no history yet", style="dim")
    marks = list(track.marks)
    seen = [m for m in marks if m != Mark.ABSENT]
    busy = sum(m == Mark.BUSY for m in seen)
    opened = "before kmon looked" if track.opened_ms is None else fmt.clock(track.opened_ms)
    text = Text(f"opened {opened}; ")
    if track.closed_ms is not None:
        text.append(f"closed {fmt.clock(track.closed_ms)}; ", style="bold")
    text.append(f"{track.state} since {fmt.clock(track.state_since_ms)}; ")
    text.append(f"busy in {busy} of the {len(seen)} refreshes it was open")
    return text


def _client(client: ClientInstance | None) -> Table | Text:
    if client is None:
        return Text("no client metrics for this connection (socket seen by the kernel only)",
                    style="dim")
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for name, value in client.to_dict().items():
        if name == "config":
            for key, setting in value.items():
                table.add_row(plain(key), plain(setting))
        elif value is not None:
            table.add_row(name, plain(value))
    return table


class DetailScreen(ModalScreen):
    """Every field of one connection, refreshed while it is open; it takes the whole screen,
    so nothing the screen below draws (its bars, sparklines, lifecycle) shows beside or
    through its text."""

    BINDINGS = [Binding("escape,enter,q", "dismiss", "close")]
    DEFAULT_CSS = """
    DetailScreen VerticalScroll { width: 100%; height: 1fr; border: thick $accent;
                                  background: $surface; padding: 0 1; }
    """

    def __init__(self, title: str, source: DetailSource) -> None:
        super().__init__()
        self.title_text = title
        self.source = source

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="detail")
        yield PriorityFooter()

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).border_title = plain(self.title_text)
        self.update_view()

    def update_view(self) -> None:
        """Redraw from the latest refresh (the attach screen calls this after each one)."""
        conn, track, events, client = self.source()
        parts: list = []
        if conn is None:
            parts.append(Text("this connection has closed; its last state:", style="bold red"))
            conn = track.last if track else None
        if conn is not None:
            parts += [Text("connection", style="bold underline"), _fields(conn)]
            if conn.claims:
                parts += [Text("\nwhat each source claims", style="bold underline"),
                          _claims(conn)]
        parts += [Text("\nlife", style="bold underline"), _life(track),
                  Text("\nevents", style="bold underline")]
        parts += [event_line(e, show_pid=False) for e in events[-20:]] or [
            Text("none yet", style="dim")]
        parts += [Text("\nwhat the client's metrics say", style="bold underline"),
                  _client(client)]
        self.query_one("#detail", Static).update(Group(*parts))
