"""One-shot views settle: polled until every verdict is sure, or the settle time is up."""

from __future__ import annotations

import argparse

import pytest

from kmon.cli import settle
from kmon.cli.settle import QUIET_S, SETTLE_S, settle_arg, settled_look
from kmon.model import Connection, Event, EventKind, ProcessView, Role, Snapshot


def snapshot(*confidences: float, idle_ms: int | None = None) -> Snapshot:
    rows = [Connection(f"sock:{i}", Role.BROKER, 1, 1, None, "127.0.0.1:5000",
                       "127.0.0.1:9092", "ESTABLISHED", confidence=c, idle_ms=idle_ms)
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


class Clock:
    """A fake clock for the look, its sleeps advancing it: when a real member's heartbeat
    falls within a look is not something a real client gives on demand."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_default_look_waits_a_kip848_heartbeat_for_a_socket_that_speaks(monkeypatch):
    """A KIP-848 member heartbeats every 5 s: its coordinator socket, unsure but carrying
    data, is looked at until its next heartbeat names it."""
    clock = Clock()
    monkeypatch.setattr(settle, "time", clock)
    speaking, named = snapshot(0.6, idle_ms=1000), snapshot(1.0)
    found, _ = settled_look(lambda: (named if clock.now >= 4.8 else speaking, []), SETTLE_S)
    assert found is named


def test_sockets_silent_longer_than_a_heartbeat_are_looked_at_for_the_quiet_time(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(settle, "time", clock)
    silent = snapshot(0.6, idle_ms=60_000)
    found, _ = settled_look(lambda: (silent, []), SETTLE_S)
    assert found is silent and QUIET_S <= clock.now < QUIET_S + 1


def test_a_settled_look_polls_on_while_it_is_still_asking_at_most_its_wait(monkeypatch):
    """``ps``: every verdict is sure, but kmon's own query of a process's brokers, which names
    its cluster, is under way: the look polls on until it has answered (ps had answered with
    the broker's address, and a second ``ps`` had to start from nothing), and no longer than
    its wait when the answer never comes."""
    clock = Clock()
    monkeypatch.setattr(settle, "time", clock)
    sure = snapshot(1.0)
    found, _ = settled_look(lambda: (sure, []), SETTLE_S, waiting=lambda _: clock.now < 1.0,
                            wait_s=2.5)
    assert found is sure and 1.0 <= clock.now < 1.0 + settle.POLL_S
    clock.now = 0.0
    settled_look(lambda: (sure, []), SETTLE_S, waiting=lambda _: True, wait_s=2.5)
    assert 2.5 <= clock.now < 2.5 + settle.POLL_S
