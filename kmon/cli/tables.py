"""Rich tables of snapshots for the terminal (headless `kmon attach`, `kmon demo`)."""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Group
from rich.table import Table
from rich.text import Text

from kmon.model import Event, ProcessView, Snapshot
from kmon.present.format import (
    ROLE_STYLE,
    STATE_STYLE,
    clock,
    duration,
    finding_line,
    node,
    number,
)
from kmon.present.plain_text import WithoutControls, plain


def process_table(view: ProcessView, label: str = "") -> Table:
    """One row per connection of one process."""
    clients = ", ".join(f"{c.name} ({c.type}, client.id={c.client_id})" for c in view.clients)
    name = f"{label} — " if label else ""
    table = Table(title=plain(f"{name}PID {view.pid} {view.name} — "
                              f"{clients or 'no client metrics'}"),
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
            node(c.node_id), node(c.broker_id), plain(c.client or "-"), plain(c.local or "-"),
            plain(c.remote or "-"), plain(c.state, STATE_STYLE.get(c.state, "")),
            duration(c.idle_ms), duration(c.idle_limit_ms), duration(c.reap_in_ms),
            number(c.bytes_sent), number(c.bytes_received), number(c.requests_sent),
            plain(f"{c.evidence.get('role', '?')}/{c.evidence.get('idle', '?')}"),
            f"{c.confidence:.2f}",
        )
    return table


def snapshot_renderable(snapshot: Snapshot, events: Iterable[Event], title: str = "",
                        labels: dict[int, str] | None = None) -> WithoutControls:
    """Tables for every process, notices and findings, and the latest events (without the control
    characters a watched process may have put in its strings)."""
    parts: list = [Text(title, style="bold")] if title else []
    for view in snapshot.processes:
        parts.append(process_table(view, (labels or {}).get(view.pid, "")))
        parts.extend(Text(f"! {notice}", style="yellow") for notice in view.notices)
        parts.extend(Text(f"▲ {finding_line(f)}", style="bold red") for f in view.findings)
    recent = list(events)[-10:]
    if recent:
        parts.append(Text("events:", style="bold"))
        parts.extend(Text(f"  {clock(e.ts_ms)} {e.kind.value:<12} pid {e.pid} "
                          f"{e.remote or ''} {e.detail}") for e in recent)
    return WithoutControls(Group(*parts))
