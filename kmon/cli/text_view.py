"""Text output of a polled session: JSON lines, rows for pipes (``-o table|wide|tsv``), or
Rich tables (redrawn in place on a terminal)."""

from __future__ import annotations

import sys
import time

from kmon.cli.json_lines import json_line
from kmon.cli.settle import settled_look
from kmon.engine.facade import LiveSession, settle_heap
from kmon.errors import UserError
from kmon.model import EventKind
from kmon.present.plain_text import one_line


def print_snapshots(session: LiveSession, interval: float, output: str | None,
                    once: float | None = None,
                    duration: float | None = None, title: str = "",
                    labels: dict[int, str] | None = None, live_screen: bool = True) -> int:
    """Poll ``session`` every ``interval`` until ``duration`` or every process exits; or,
    with ``once`` (seconds to settle), print one settled snapshot (kmon.cli.settle).

    ``output`` is ``json`` (JSON lines), ``table``, ``wide`` or ``tsv`` (one row per
    connection; notices on stderr), or None: on a terminal a Rich view (redrawn in
    place unless ``live_screen`` is off), else ``table``. Exits with an error once no watched
    process is left.
    """
    from rich.console import Console
    from rich.live import Live

    from kmon.cli.tables import snapshot_renderable

    console = Console()
    if output is None and not console.is_terminal:
        output = "table"  # a pipe or a file: as kmon ps prints, whole (kmon.cli.text_table)
    json_lines = output == "json"
    live = None
    if live_screen and output is None and once is None and console.is_terminal:
        live = Live(console=console, auto_refresh=False, transient=False)
        live.start()
    ends = time.monotonic() + duration if duration else None
    first = True
    if once is None:
        settle_heap()
    try:
        while True:
            started = time.monotonic()
            snapshot, events = (session.poll() if once is None
                                else settled_look(session.poll, once))
            if session.all_exited and first:
                raise UserError(session.last_loss)  # nothing was ever shown: just say why
            first_frame, first = first, False
            if json_lines:
                record = snapshot.to_dict()
                record["events"] = [e.to_dict() for e in events]
                sys.stdout.buffer.write(json_line(record))
                sys.stdout.flush()
            elif output is not None:
                _print_rows(snapshot, output, first_frame)
            elif snapshot.processes:
                view = snapshot_renderable(snapshot, session.events, title, labels)
                live.update(view, refresh=True) if live else console.print(view)
            if session.all_exited:
                return _ended(session, events)
            if once is not None or (ends is not None and time.monotonic() >= ends):
                return 0
            time.sleep(max(0.0, interval - (time.monotonic() - started)))
    finally:
        if live:
            live.stop()


def _print_rows(snapshot, output: str, first_frame: bool) -> None:
    """One row per connection of every process, in ``output``; its notices and findings on
    stderr. A tsv stream has one header; table and wide repeat theirs, a blank line between
    frames."""
    from kmon.cli.text_table import render
    from kmon.present.columns import CONNECTION_COLUMNS

    rows = [{"pid": view.pid, **c.to_dict()} for view in snapshot.processes
            for c in view.connections]
    lines = render(rows, CONNECTION_COLUMNS, output, header=first_frame or output != "tsv")
    if not first_frame and output != "tsv":
        lines.insert(0, "")
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    sys.stdout.flush()
    for view in snapshot.processes:
        for notice in view.notices:
            print(f"kmon: pid {view.pid}: {one_line(notice)}", file=sys.stderr)
        for finding in view.findings:
            print(f"kmon: pid {view.pid}: {one_line(finding.words())}", file=sys.stderr)


def _ended(session: LiveSession, events: list) -> int:
    """Every watched process has gone: exit 0 when they exited (said on stderr), an error
    when kmon lost sight of one."""
    if any(e.kind is EventKind.PROCESS_ERROR for e in events):
        raise UserError(session.last_loss)
    print(f"kmon: {one_line(session.last_loss)}; nothing left to watch", file=sys.stderr)
    return 0
