"""One-shot views settle: polled until every verdict is sure, or the settle time is up."""

from __future__ import annotations

import argparse

import pytest

from kmon.cli.settle import settle_arg, settled_look
from kmon.model import Connection, Event, EventKind, ProcessView, Role, Snapshot


def snapshot(*confidences: float) -> Snapshot:
    rows = [Connection(f"sock:{i}", Role.BROKER, 1, 1, None, "127.0.0.1:5000",
                       "127.0.0.1:9092", "ESTABLISHED", confidence=c)
            for i, c in enumerate(confidences)]
    return Snapshot(0, "h", [ProcessView(1, "p", "p", connections=rows)])


def polls(*snapshots: Snapshot):
    """Each call the next snapshot (the last one again once they run out), with an event."""
    left = list(snapshots)

    def poll():
        shot = left.pop(0) if len(left) > 1 else left[0]
        return shot, [Event(0, EventKind.OPENED, 1, shot.processes[0].connections[0].key)]

    return poll


def test_the_look_stops_at_the_first_poll_where_every_verdict_is_sure():
    sure = snapshot(1.0, 0.95)
    found, events = settled_look(polls(snapshot(0.6, 1.0), sure, snapshot(0.6)), 30.0,
                                 [Event(0, EventKind.OPENED, 1, "earlier")])
    assert found is sure and [e.key for e in events] == ["earlier", "sock:0", "sock:0"]


def test_what_is_still_unsure_when_the_time_is_up_is_shown_as_it_is():
    unsure = snapshot(0.6)
    found, _ = settled_look(polls(unsure), 0.0)  # 0: one look
    assert found is unsure


def test_the_settle_time_is_zero_to_a_minute():
    assert settle_arg("0") == 0.0 and settle_arg("3s") == 3.0
    for bad in ("2m", "soon", "-1s"):
        with pytest.raises(argparse.ArgumentTypeError):
            settle_arg(bad)
