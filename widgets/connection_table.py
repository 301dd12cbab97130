"""The connection table: one row per connection, and the cells of each row.

Rows are keyed by connection, so the cursor and the scroll position stay on the
same connection while rows come, go and change order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kmon.model import ROLE_RANK, ClientInstance, Connection, Role, Thresholds
from kmon.present import format as fmt
from kmon.present.columns import CONNECTION_COLUMNS
from kmon.present.history import Track
from kmon.tcp_state import TcpState
from kmon.widgets.keyed_table import Column, KeyedTable, row_width

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


class ConnectionTable(KeyedTable):
    """One row per connection (``show()`` with ``connection_cells``), its columns fitted to
    the width (``shown_columns``), the client column grown into a wide terminal's room."""

    COLUMNS = tuple(Column(key, heading, width) for key, heading, width in COLUMNS)
    DEFAULT_CSS = """
    ConnectionTable > .keyed-table--cursor { background: $block-cursor-background;
                                             color: $block-cursor-foreground; }
    ConnectionTable > .keyed-table--odd { background: $surface-lighten-1; }
    """

    def fit(self, room: int, widths: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The columns the width has room for (``shown_columns``), the client column given
        the room a wide terminal has to spare (up to CLIENT_MAX)."""
        columns = shown_columns(room)
        base = row_width(tuple(widths[i] for i in columns))
        spare = max(0, min(room - base, CLIENT_MAX - CLIENT_MIN))
        return columns, tuple(widths[i] + spare if COLUMNS[i][0] == "client" else widths[i]
                              for i in columns)
