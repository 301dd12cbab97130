"""Text output of a polled Monitor: JSON lines, or Rich tables (redrawn in place on a terminal)."""

from __future__ import annotations

import sys
import time

from kmon.engine.heap import settle_heap
from kmon.engine.monitor import Monitor
from kmon.errors import UserError
from kmon.json_lines import json_line


def print_snapshots(monitor: Monitor, interval: float, json_lines: bool, once: bool = False,
                    duration: float | None = None, title: str = "",
                    labels: dict[int, str] | None = None, live_screen: bool = True) -> int:
    """Poll ``monitor`` every ``interval`` until ``once``, ``duration``, or every process exits.

    Prints JSON lines, or a Rich view (redrawn in place on a terminal unless
    ``live_screen`` is off). Exits with an error once no watched process is left.
    """
    from rich.console import Console
    from rich.live import Live

    from kmon.cli.tables import snapshot_renderable

    console = Console()
    live = None
    if live_screen and not json_lines and not once and console.is_terminal:
        live = Live(console=console, auto_refresh=False, transient=False)
        live.start()
    ends = time.monotonic() + duration if duration else None
    first = True
    if not once:
        settle_heap()
    try:
        while True:
            started = time.monotonic()
            snapshot, events = monitor.poll()
            if monitor.all_exited and first:
                raise UserError(monitor.last_loss)  # nothing was ever shown: just say why
            first = False
            if json_lines:
                record = snapshot.to_dict()
                record["events"] = [e.to_dict() for e in events]
                sys.stdout.buffer.write(json_line(record))
                sys.stdout.flush()
            elif snapshot.processes:
                view = snapshot_renderable(snapshot, monitor.events, title, labels)
                live.update(view, refresh=True) if live else console.print(view)
            if monitor.all_exited:
                raise UserError(monitor.last_loss)
            if once or (ends is not None and time.monotonic() >= ends):
                return 0
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
    finally:
        if live:
            live.stop()
