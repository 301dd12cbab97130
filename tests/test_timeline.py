"""The dashboard's bounded memory of connections: marks, rates, labels, closes, counts."""

from __future__ import annotations

from kmon.model import Connection, ProcessView, Role
from kmon.timeline import History, Mark, Rates


def row(key: str, role: Role = Role.BROKER, node_id: int | None = 1, state: str = "ESTABLISHED",
        idle_ms: int = 5_000, sent: int = 100, received: int = 100) -> Connection:
    return Connection(key=key, role=role, node_id=node_id, broker_id=node_id, client=None,
                      local="127.0.0.1:50000", remote="127.0.0.1:9092", state=state,
                      idle_ms=idle_ms, bytes_sent=sent, bytes_received=received)


def test_marks_rates_labels_and_counts_follow_each_refresh():
    history = History(window=5)
    history.observe(1_000, [ProcessView(7, "p", "", connections=[row("a"), row("b")])], 1_000)
    history.observe(2_000, [ProcessView(7, "p", "", connections=[
        row("a", sent=2_100), row("b", role=Role.COORDINATOR, node_id=2147483646)])], 1_000)
    history.observe(3_000, [ProcessView(7, "p", "", connections=[
        row("a", sent=2_100), row("b", role=Role.COORDINATOR, node_id=2147483646,
                                   state="CLOSE_WAIT")])], 1_000)
    busy, waiting = history.track(7, "a"), history.track(7, "b")
    assert list(busy.marks) == [Mark.IDLE, Mark.BUSY, Mark.IDLE]
    assert busy.rates == Rates(0.0, 0.0)  # at rest in the last refresh
    assert busy.opened_ms is None  # there before the first look
    assert waiting.label == "coord 2147483646 :9092"
    assert (waiting.state, waiting.state_since_ms) == ("CLOSE_WAIT", 3_000)
    assert list(waiting.marks)[-1] == Mark.CLOSE_WAIT
    assert list(history.by_role["broker"]) == [2, 1, 1]
    assert list(history.by_role["coordinator"]) == [0, 1, 1]
    assert list(history.by_state["CLOSE_WAIT"]) == [0, 0, 1]


def test_a_closed_connection_stays_until_it_leaves_the_window_and_a_new_one_is_dated():
    history = History(window=3)
    history.observe(1_000, [ProcessView(7, "p", "", connections=[row("a")])], 1_000)
    history.observe(2_000, [ProcessView(7, "p", "", connections=[row("b")])], 1_000)
    assert history.track(7, "a").closed_ms == 2_000
    assert history.track(7, "b").opened_ms == 2_000
    assert list(history.track(7, "b").marks) == [Mark.ABSENT, Mark.IDLE]
    assert [key for key, _ in history.closed(7)] == [(7, "a")]
    for ts in (3_000, 4_000):
        history.observe(ts, [ProcessView(7, "p", "", connections=[row("b")])], 1_000)
    assert history.track(7, "a") is None  # its strip is all absent: forgotten
