"""The dashboard's bounded memory of connections: marks, rates, labels, closes, counts."""

from __future__ import annotations

import asyncio

from kmon.model import Connection, ProcessView, Role
from kmon.present.history import History, Mark, Rates


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


def test_columns_are_fixed_to_the_refresh_count_newest_last():
    from kmon.widgets.timeline import column_marks

    idle, busy, absent = int(Mark.IDLE), int(Mark.BUSY), int(Mark.ABSENT)
    # refreshes 0..9 in columns of 4: [0-3] [4-7] [8-11]; the last column still filling
    marks = [idle, idle, busy, idle, idle, idle, idle, idle, idle, busy]
    assert column_marks(marks, latest=9, per_column=4, columns=4) == (absent, busy, idle, busy)
    # one refresh later the columns hold the same refreshes: only the last one can change
    assert column_marks(marks + [idle], latest=10, per_column=4, columns=4) == (
        absent, busy, idle, busy)
    # a connection that opened at refresh 6: nothing before it, busy at first
    assert column_marks([busy, idle, idle, idle, idle], latest=10, per_column=4,
                        columns=3) == (absent, busy, idle)
    assert column_marks([idle], latest=10, per_column=4, columns=3) == (absent, absent, idle)
    # past the window: only the newest columns
    assert column_marks([idle] * 8 + [busy] * 4, latest=99, per_column=4,
                        columns=2) == (idle, busy)


def test_a_refresh_draws_again_only_the_timeline_lines_that_changed():
    asyncio.run(_only_changed_lines_are_drawn())


async def _only_changed_lines_are_drawn() -> None:
    from textual.app import App

    from kmon.widgets.timeline import Timeline, TimelineRows

    class TimelineApp(App):
        def compose(self):
            yield Timeline()

    history = History(window=6)
    app = TimelineApp()
    async with app.run_test(size=(30, 8)) as pilot:  # room for 3 columns: 2 refreshes each
        timeline = app.query_one(Timeline)
        drawn: list[int] = []
        draw = timeline.render_line
        timeline.render_line = lambda y: (drawn.append(y), draw(y))[1]

        async def refresh(number: int, b_sent: int = 100) -> list[int]:
            rows = [row("a", sent=100 if number < 4 else 2_000), row("b", sent=b_sent)]
            history.observe(1_000 * number, [ProcessView(7, "p", "", connections=rows)], 1_000)
            drawn.clear()
            ticks = history.ticks
            timeline.show(TimelineRows(history, 7, rows, []), ticks[-1] - ticks[0],
                          history.refreshes - 1, len(ticks))
            await pilot.pause()
            return sorted(set(drawn))

        for number in range(7):  # the window fills ("a" busy at 4); the columns move at 6
            await refresh(number)
        assert await refresh(7) == []  # the same columns: nothing changed
        assert await refresh(8) == [1]  # a new column: "a"'s busy column moves, "b" is alike
        assert await refresh(9, b_sent=5_000) == [2]  # "b" moved data: its line only
