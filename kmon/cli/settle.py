"""One-shot views (``attach --once``, ``ps``): a bounded look, polled until every socket's
verdict is as sure as the live view's would be, so that one look never answers otherwise."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

from kmon.model import Event, Snapshot
from kmon.units import duration_arg

# A group member heartbeats to its coordinator every 3 s by default with the classic
# protocol, every 5 s in a KIP-848 group (the broker's group.consumer.heartbeat.interval.ms):
# an unsure socket that carried data within that interval may be named on the wire yet.
HEARTBEAT_MS = 5000
SETTLE_S = 5.5  # the look's bound: a KIP-848 heartbeat interval, and a margin
QUIET_S = 3.0  # how long sockets that have not spoken within it are looked at
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


def speaking(snapshot: Snapshot) -> bool:
    """Whether an unsure connection carried data within a heartbeat interval (a member's
    coordinator speaks again within it; one silent longer will not be named by looking)."""
    return any(c.confidence < SURE and c.idle_ms is not None and c.idle_ms <= HEARTBEAT_MS
               for view in snapshot.processes for c in view.connections)


def settled_look(poll: Callable[[], tuple[Snapshot, list[Event]]], settle_s: float,
                 events: list[Event] | None = None,
                 waiting: Callable[[Snapshot], bool] | None = None,
                 wait_s: float = 0.0) -> tuple[Snapshot, list[Event]]:
    """Poll until no verdict is unsure or ``settle_s`` has passed (``QUIET_S`` when no
    unsure socket is ``speaking``), and from then on while ``waiting(snapshot)`` (for what
    the look is still asking), at most ``wait_s`` more: the last snapshot, and every event on
    the way (after ``events``, those of earlier polls)."""
    begun = time.monotonic()
    ends, quiet_ends = begun + settle_s, begun + min(settle_s, QUIET_S)
    settled_at: float | None = None
    events = list(events or ())
    while True:
        started = time.monotonic()
        snapshot, new = poll()
        events += new
        if settled_at is None and (not unsure(snapshot) or started >= ends
                                   or (started >= quiet_ends and not speaking(snapshot))):
            settled_at = started
        if settled_at is not None and (waiting is None or started >= settled_at + wait_s
                                       or not waiting(snapshot)):
            return snapshot, events
        until = ends if settled_at is None else settled_at + wait_s
        time.sleep(max(0.0, min(POLL_S - (time.monotonic() - started), until - started)))
