"""One-shot views (``attach --once``, ``ps``): a bounded look, polled until every socket's
verdict is as sure as the live view's would be, so that one look never answers otherwise."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from kmon.model import Event, Snapshot
from kmon.units import duration_arg

SETTLE_S = 3.0  # a consumer heartbeats every 3 s by default: its coordinator on the wire
POLL_S = 0.25
SURE = 0.9  # a verdict this sure needs no more looking
MAX_SETTLE_S = 60.0


def settle_arg(text: str) -> float:
    """A settle time for argparse: 0 (one look) up to a minute."""
    if text.strip() in ("0", "0s"):
        return 0.0
    seconds = duration_arg(text)
    if seconds > MAX_SETTLE_S:
        raise argparse.ArgumentTypeError(f"{text!r} is longer than {MAX_SETTLE_S:g}s")
    return seconds


def option(parser: argparse.ArgumentParser) -> None:
    """``--settle DURATION``: how long a one-shot view may watch for the evidence it needs."""
    parser.add_argument("--settle", type=settle_arg, default=SETTLE_S, metavar="DURATION",
                        help="watch up to this long for what each socket's role needs (a "
                             "heartbeat on the wire) before answering; what is still unsure "
                             f"is shown at its low confidence (default {SETTLE_S:g}s, at most 1m; "
                             "0: one look)")


def unsure(snapshot: Snapshot) -> int:
    """How many connections have a verdict less sure than SURE."""
    return sum(c.confidence < SURE for view in snapshot.processes for c in view.connections)


def settled_look(poll: Callable[[], tuple[Snapshot, list[Event]]], settle_s: float,
                 events: list[Event] | None = None) -> tuple[Snapshot, list[Event]]:
    """Poll until no verdict is unsure or ``settle_s`` has passed: the last snapshot, and
    every event on the way (after ``events``, those of earlier polls)."""
    ends = time.monotonic() + settle_s
    events = list(events or ())
    while True:
        started = time.monotonic()
        snapshot, new = poll()
        events += new
        if not unsure(snapshot) or started >= ends:
            return snapshot, events
        time.sleep(max(0.0, min(POLL_S - (time.monotonic() - started), ends - started)))
