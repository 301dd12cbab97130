"""Rich tables of snapshots for the terminal (headless `kmon attach`, `kmon demo`)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from rich.console import Group
from rich.table import Table
from rich.text import Text

from kmon.model import Event, ProcessView, Snapshot

ROLE_STYLE = {"bootstrap": "yellow", "coordinator": "magenta", "broker": "green",
              "unknown": "dim"}
STATE_STYLE = {"ESTABLISHED": "", "CLOSE_WAIT": "bold red", "SYN_SENT": "bold yellow"}


def _ms(value: int | None) -> str:
    if value is None:
        return "?"
    return f"{value / 1000:.1f}s" if value < 60_000 else f"{value / 60_000:.1f}m"


def _num(value: int | float | None) -> str:
    return "?" if value is None else f"{value:,}"


def _id(value: int | None) -> str:
    return "?" if value is None else str(value)


def _clock(ts_ms: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts_ms / 1000))


def process_table(view: ProcessView, label: str = "") -> Table:
    """One row per connection of one process."""
    clients = ", ".join(f"{c.name} ({c.type}, client.id={c.client_id})" for c in view.clients)
    name = f"{label} — " if label else ""
    table = Table(title=f"{name}PID {view.pid} {view.name} — {clients or 'no client metrics'}",
                  title_justify="left", expand=False)
    for column in ("role", "node", "broker", "client", "local", "remote", "state", "idle",
                   "limit", "reap in", "sent B", "recv B", "req", "evidence", "conf"):
        table.add_column(column, justify="right" if column in {"node", "broker", "idle",
                                                               "limit", "reap in", "sent B",
                                                               "recv B", "req", "conf"}
                         else "left")
    for c in view.connections:
        table.add_row(
            Text(c.role.value, style=ROLE_STYLE[c.role.value]),
            _id(c.node_id), _id(c.broker_id), c.client or "-", c.local or "-",
            c.remote or "-", Text(c.state, style=STATE_STYLE.get(c.state, "")),
            _ms(c.idle_ms), _ms(c.idle_limit_ms), _ms(c.reap_in_ms),
            _num(c.bytes_sent), _num(c.bytes_received), _num(c.requests_sent),
            f"{c.evidence.get('role', '?')}/{c.evidence.get('idle', '?')}",
            f"{c.confidence:.2f}",
        )
    return table


def snapshot_renderable(snapshot: Snapshot, events: Iterable[Event], title: str = "",
                        labels: dict[int, str] | None = None) -> Group:
    """Tables for every process, notices, and the latest events."""
    parts: list = [Text(title, style="bold")] if title else []
    for view in snapshot.processes:
        parts.append(process_table(view, (labels or {}).get(view.pid, "")))
        parts.extend(Text(f"! {notice}", style="yellow") for notice in view.notices)
    recent = list(events)[-10:]
    if recent:
        parts.append(Text("events:", style="bold"))
        parts.extend(Text(f"  {_clock(e.ts_ms)} {e.kind.value:<12} pid {e.pid} "
                          f"{e.remote or ''} {e.detail}") for e in recent)
    return Group(*parts)
