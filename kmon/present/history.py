"""What the dashboard remembers between refreshes, bounded however long it runs.

Per connection: a strip of activity marks (one per refresh, over a fixed
window), its traffic rates, when it opened and closed. Per refresh: counts of
connections by role and by TCP state, for the sparklines. Nothing grows with
runtime: marks live in fixed-size rings and a closed connection is forgotten
once it has left the window.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from enum import IntEnum
from operator import attrgetter
from typing import NamedTuple

from kmon.model import Connection, ProcessView, Role
from kmon.tcp_state import TcpState


class Mark(IntEnum):
    """A connection's condition during one refresh, worst first when merged."""

    ABSENT = 0
    IDLE = 1
    BUSY = 2
    CONNECTING = 3
    CLOSE_WAIT = 4


_CLOSE_WAIT, _CONNECTING, _BUSY, _IDLE, _ABSENT = (
    int(Mark.CLOSE_WAIT), int(Mark.CONNECTING), int(Mark.BUSY), int(Mark.IDLE), int(Mark.ABSENT))


def _mark_of(state: str, idle_ms: int | None, interval_ms: int, traffic: bool) -> int:
    """How a connection looked over the last refresh interval (a Mark's value)."""
    if state == TcpState.CLOSE_WAIT:
        return _CLOSE_WAIT
    if state == TcpState.SYN_SENT:
        return _CONNECTING
    if traffic:
        return _BUSY
    return _BUSY if idle_ms is not None and idle_ms < interval_ms else _IDLE


class Rates(NamedTuple):
    """Per-second traffic of one connection over the last refresh."""

    sent: float | None = None
    received: float | None = None
    requests: float | None = None


_ROLE_OF, _STATE_OF = attrgetter("role"), attrgetter("state")
_NO_RATES, _AT_REST, _AT_REST_NO_REQUESTS = Rates(), Rates(0.0, 0.0, 0.0), Rates(0.0, 0.0)


@dataclass
class Track:
    """The remembered life of one connection."""

    marks: deque[int]  # one Mark per refresh, newest last, aligned with History.ticks
    label: str
    opened_ms: int | None  # None: it existed before kmon first looked
    closed_ms: int | None = None
    state_since_ms: int = 0  # when it entered its current TCP state
    state: str = ""
    last: Connection | None = field(default=None, repr=False)
    rates: Rates = _NO_RATES
    seen: int = -1  # the last refresh (History.refreshes - 1 then) it was seen at


def track_label(conn: Connection) -> str:
    """A short name for a connection: role, node id and port, e.g. ``coord 2147483646 :9092``."""
    role = {Role.BOOTSTRAP: "boot", Role.COORDINATOR: "coord", Role.BROKER: "broker",
            Role.UNKNOWN: "?"}[conn.role]
    node = "" if conn.node_id is None else f" {conn.node_id}"
    port = f" :{conn.remote.rsplit(':', 1)[-1]}" if conn.remote else ""
    return f"{role}{node}{port}"


def _delta_rate(now: int | None, before: int | None, seconds: float) -> float | None:
    if now is None or before is None or seconds <= 0 or now < before:
        return None
    return (now - before) / seconds


def _rates(conn: Connection, before: Connection, seconds: float) -> Rates:
    """Traffic since ``before``; a shared value for the common case, a connection at rest."""
    sent, received, requests = conn.bytes_sent, conn.bytes_received, conn.requests_sent
    if (seconds > 0 and sent is not None and received is not None and sent == before.bytes_sent
            and received == before.bytes_received and requests == before.requests_sent):
        return _AT_REST if requests is not None else _AT_REST_NO_REQUESTS
    return Rates(_delta_rate(sent, before.bytes_sent, seconds),
                 _delta_rate(received, before.bytes_received, seconds),
                 _delta_rate(requests, before.requests_sent, seconds))


class History:
    """Bounded memory of the connections of the watched processes.

    ``window`` refreshes are kept: the timeline strips, the counts by role and
    state, and closed connections until they scroll out of the window.
    """

    def __init__(self, window: int = 600) -> None:
        self.window = window
        self.refreshes = 0  # observed so far: the latest is number refreshes - 1
        self.ticks: deque[int] = deque(maxlen=window)  # epoch ms of each refresh
        self.tracks: dict[tuple[int, str], Track] = {}
        self.by_role: dict[str, deque[int]] = {r.value: deque(maxlen=window) for r in Role}
        self.by_state: dict[str, deque[int]] = {
            s: deque(maxlen=window)
            for s in (TcpState.ESTABLISHED.value, TcpState.CLOSE_WAIT.value, "other")}

    def observe(self, ts_ms: int, views: list[ProcessView], interval_ms: int) -> None:
        """Record one refresh of ``views``; ``interval_ms`` counts until there is a last one."""
        first = not self.ticks
        previous_ts = self.ticks[-1] if self.ticks else None
        if previous_ts is not None and ts_ms > previous_ts:
            interval_ms = ts_ms - previous_ts
        seconds = None if previous_ts is None else (ts_ms - previous_ts) / 1000
        self.ticks.append(ts_ms)
        refresh = self.refreshes
        self.refreshes += 1
        tracks = self.tracks
        roles: Counter[Role] = Counter()
        states: Counter[str] = Counter()
        for view in views:
            pid = view.pid
            # one pass per connection, the track's update written out (2,000 a refresh)
            for conn in view.connections:
                key = (pid, conn.key)
                track = tracks.get(key)
                if track is None or track.closed_ms is not None:
                    track = tracks[key] = self._new_track(conn, ts_ms, first)
                track.seen = refresh
                before, traffic, state = track.last, False, conn.state
                if before is not None:
                    if seconds is not None:
                        rates = track.rates = _rates(conn, before, seconds)
                        traffic = bool(rates.sent or rates.received)
                    if conn.role is not before.role or conn.node_id != before.node_id:
                        track.label = track_label(conn)
                if state != track.state:
                    track.state, track.state_since_ms = state, ts_ms
                track.last = conn
                track.marks.append(_mark_of(state, conn.idle_ms, interval_ms, traffic))
            roles.update(map(_ROLE_OF, view.connections))
            states.update(map(_STATE_OF, view.connections))
        for role, series in self.by_role.items():
            series.append(roles[Role(role)])
        for state, series in self.by_state.items():
            series.append(states[state] if state != "other"
                          else sum(n for s, n in states.items() if s not in self.by_state))
        self._age(refresh, ts_ms)

    def _new_track(self, conn: Connection, ts_ms: int, first: bool) -> Track:
        marks = deque([_ABSENT] * (len(self.ticks) - 1), maxlen=self.window)
        return Track(marks, track_label(conn), None if first else ts_ms,
                     state_since_ms=ts_ms, state=conn.state)

    def _age(self, refresh: int, ts_ms: int) -> None:
        """Mark connections not seen at ``refresh`` closed; forget those whose strip is all
        absent."""
        for key, track in [(k, t) for k, t in self.tracks.items() if t.seen != refresh]:
            if track.closed_ms is None:
                track.closed_ms = ts_ms
                track.rates = _NO_RATES
            track.marks.append(_ABSENT)
            if not any(track.marks):
                del self.tracks[key]

    def track(self, pid: int, key: str) -> Track | None:
        """The remembered life of one connection, if it is still in the window."""
        return self.tracks.get((pid, key))

    def closed(self, pid: int | None = None) -> list[tuple[tuple[int, str], Track]]:
        """Connections that closed within the window (of ``pid``, or of every process)."""
        return [(key, t) for key, t in self.tracks.items()
                if t.closed_ms is not None and (pid is None or key[0] == pid)]
