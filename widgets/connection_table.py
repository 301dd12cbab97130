"""The connection table: one row per connection, updated in place between refreshes.

Rows are keyed by process and connection key, so the cursor and the scroll
position stay on the same connection while rows come, go and change order.
Only cells whose text changed are rewritten.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text
from textual.widgets import DataTable

from kmon.model import Connection
from kmon.timeline import Track
from widgets import format as fmt

ROLE_RANK = {"bootstrap": 0, "coordinator": 1, "broker": 2, "unknown": 3}

# key, heading, width
COLUMNS = (
    ("role", "role", 11), ("node", "node id", 10), ("broker", "broker", 6),
    ("remote", "address", 21), ("local", "lport", 5), ("state", "TCP state", 11),
    ("idle", "idle / limit", 15), ("reap", "reaped in", 9), ("client", "client", 14),
    ("sent", "out/s", 7), ("recv", "in/s", 7), ("req", "req/s", 5), ("rtt", "rtt", 7),
    ("evidence", "evidence", 10),
)


@dataclass(frozen=True)
class SortOrder:
    """One way to order the rows: its name, a key over (connection, track), direction."""

    name: str
    key: Callable[[Connection, Track | None], object]
    descending: bool = False


def _rate_total(track: Track | None) -> float:
    if track is None:
        return 0.0
    return (track.rates.sent or 0.0) + (track.rates.received or 0.0)


def _missing_last(value: int | None) -> int:
    return (1 << 62) if value is None else value


SORT_ORDERS = (
    SortOrder("role", lambda c, t: (ROLE_RANK[c.role.value], c.client or "",
                                    _missing_last(c.node_id), c.remote or "", c.key)),
    SortOrder("idle", lambda c, t: (-1 if c.idle_ms is None else c.idle_ms), descending=True),
    SortOrder("reaped in", lambda c, t: _missing_last(c.reap_in_ms)),
    SortOrder("state", lambda c, t: (c.state != "CLOSE_WAIT", c.state, c.key)),
    SortOrder("broker", lambda c, t: (_missing_last(c.broker_id), ROLE_RANK[c.role.value])),
    SortOrder("traffic", lambda c, t: _rate_total(t), descending=True),
    SortOrder("client", lambda c, t: (c.client or "~", ROLE_RANK[c.role.value])),
)


@dataclass(frozen=True)
class RowStyle:
    """Thresholds that colour rows (from the config file)."""

    idle_warning: float = 0.8
    close_wait_alert_ms: int = 5000


def connection_cells(conn: Connection, track: Track | None, client_ids: dict[str, str],
                     style: RowStyle, now_ms: int) -> tuple:
    """The cells of one connection's row, in COLUMNS order."""
    rates = track.rates if track else None
    in_close_wait_ms = now_ms - track.state_since_ms if track else 0
    alert = conn.state == "CLOSE_WAIT" and in_close_wait_ms >= style.close_wait_alert_ms
    local_port = conn.local.rsplit(":", 1)[-1] if conn.local else "-"
    evidence = f"{conn.evidence.get('role', '?')} {conn.confidence:.2f}"
    return (
        fmt.role(conn.role.value),
        fmt.node(conn.node_id),
        fmt.node(conn.broker_id),
        conn.remote or "-",
        local_port,
        fmt.state(conn.state, alert),
        fmt.idle_bar(conn.idle_ms, conn.idle_limit_ms, style.idle_warning),
        fmt.duration(conn.reap_in_ms) if conn.reap_in_ms is not None else "never",
        client_ids.get(conn.client or "", conn.client or "-"),
        fmt.rate(rates.sent if rates else None),
        fmt.rate(rates.received if rates else None),
        "" if not rates or not rates.requests else f"{rates.requests:.0f}",
        "?" if conn.rtt_ms is None and conn.tcp_rtt_ms is None
        else f"{conn.rtt_ms if conn.rtt_ms is not None else conn.tcp_rtt_ms:.1f}ms",
        Text(evidence, style="dim" if conn.confidence >= 0.9 else "yellow"),
    )


class ConnectionTable(DataTable):
    """A DataTable whose rows are replaced by ``show()`` without losing the cursor."""

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self._cells: dict[str, tuple] = {}
        self._order: list[str] = []
        self._ranks: dict[int, int] = {}

    def on_mount(self) -> None:
        for key, heading, width in COLUMNS:
            self.add_column(heading, width=width, key=key)

    def show(self, rows: list[tuple[str, tuple]]) -> None:
        """Make the table hold exactly ``rows`` ((row key, cells)), in this order."""
        wanted = {key for key, _ in rows}
        for key in [k for k in self._cells if k not in wanted]:
            self.remove_row(key)
            del self._cells[key]
        for key, cells in rows:
            stored = self._cells.get(key)
            if stored is None:
                self.add_row(*cells, key=key)
                self._cells[key] = cells
                continue
            merged = list(stored)
            for index, (column, _, _) in enumerate(COLUMNS):
                if cells[index] != stored[index]:
                    self.update_cell(key, column, cells[index])
                    merged[index] = cells[index]
            self._cells[key] = tuple(merged)
        order = [key for key, _ in rows]
        if order != self._order:
            self._order = order
            # The role cell object of each row identifies it to DataTable.sort.
            self._ranks = {id(self._cells[key][0]): rank for rank, key in enumerate(order)}
            self.sort("role", key=lambda cell: self._ranks[id(cell)])

    @property
    def selected_key(self) -> str | None:
        """The row key under the cursor."""
        if not self.row_count:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
