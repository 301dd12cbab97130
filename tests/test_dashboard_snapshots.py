"""Snapshot tests of stable dashboard screens, from recordings of real client processes.

``tests/data/*.jsonl`` were recorded side by side with ``kmon attach PID --json`` on
the demo's consumer and on its producer with ``connections.max.idle.ms=5000``.
Played back (``kmon.engine.playback``), they draw the same screen every time: each alone
in the attach screen, both together as the clients of the watch and host screens. Update
the stored screens with ``python -m pytest tests/test_dashboard_snapshots.py
--snapshot-update`` after a deliberate change, and look at them.
"""

from __future__ import annotations

import asyncio

from helpers import ReplayedClients, play_all, replayed, replayed_list, until, utc
from rich.text import Text

from kmon.model import Event
from kmon.present.dashboard_settings import DashboardSettings
from kmon.widgets.app import KmonApp
from kmon.widgets.connection_table import ConnectionTable
from kmon.widgets.host_screen import HostScreen

__all__ = ["utc"]  # the fixture: clock times in UTC

SIZE = (170, 48)
NARROW = (80, 24)  # a split pane, a serial console: every screen is drawn at this size too


def test_consumer_screen(snap_compare):
    app, screen, replay = replayed("consumer.jsonl")
    assert snap_compare(app, terminal_size=SIZE, run_before=play_all(screen, replay))


def test_consumer_screen_at_80x24(snap_compare):
    app, screen, replay = replayed("consumer.jsonl")
    assert snap_compare(app, terminal_size=NARROW, run_before=play_all(screen, replay))


def test_reaping_producer_screen(snap_compare):
    app, screen, replay = replayed("idle-producer.jsonl")
    assert snap_compare(app, terminal_size=SIZE, run_before=play_all(screen, replay))


def test_filtered_and_sorted(snap_compare):
    app, screen, replay = replayed("consumer.jsonl")
    play = play_all(screen, replay)

    async def run_before(pilot) -> None:
        await play(pilot)
        await pilot.press("f", *"role:broker", "enter", "s")

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_detail_pane(snap_compare):
    app, screen, replay = replayed("consumer.jsonl")
    play = play_all(screen, replay)

    async def run_before(pilot) -> None:
        await play(pilot)
        await pilot.press("enter")

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_watch_screen(snap_compare):
    app, _, play = replayed_list("watch")
    assert snap_compare(app, terminal_size=SIZE, run_before=play)


def test_host_screen(snap_compare):
    app, _, play = replayed_list("host")
    assert snap_compare(app, terminal_size=SIZE, run_before=play)


def test_watch_screen_at_80x24(snap_compare):
    app, _, play = replayed_list("watch")
    assert snap_compare(app, terminal_size=NARROW, run_before=play)


def test_host_screen_at_80x24(snap_compare):
    app, _, play = replayed_list("host")
    assert snap_compare(app, terminal_size=NARROW, run_before=play)


def test_a_refresh_sets_the_process_table_s_title_only_when_it_changes(monkeypatch):
    """Not a snapshot: setting a widget's border title draws all of it again, so a refresh
    that leaves the process table's title as it was does not set it; a new sort order
    does."""
    from textual.widget import Widget

    from kmon.widgets.process_table import ProcessTable

    titles: list[str] = []
    inner = Widget.__dict__["border_title"]

    class Counted:
        def __get__(self, obj, owner=None):
            return inner.__get__(obj, owner)

        def __set__(self, obj, value):
            if isinstance(obj, ProcessTable):
                titles.append(str(value))
            inner.__set__(obj, value)

    monkeypatch.setattr(Widget, "border_title", Counted())
    session = ReplayedClients()
    screen = HostScreen(session, DashboardSettings(interval_s=3600))

    async def drive() -> None:
        async with KmonApp(screen).run_test(size=SIZE) as pilot:
            await until(pilot, lambda: screen.snapshot is not None, "the first refresh")
            assert len(titles) == 1 and "sort: pid" in titles[0]
            for _ in range(3):
                screen.apply(*session.poll())
            await pilot.press("s")
            assert len(titles) == 2 and "sort: max idle" in titles[1]

    asyncio.run(drive())


def test_a_cursor_move_draws_only_the_lines_it_leaves_and_enters():
    """Not a snapshot: the connection table's cursor, kept within the rows, and a move of it
    draws again only the line it leaves and the line it enters."""
    app, screen, replay = replayed("consumer.jsonl")

    async def drive() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await play_all(screen, replay)(pilot)
            table = screen.query_one(ConnectionTable)
            assert table.row_count == 3 and table.cursor_row == 0
            drawn: list[int] = []
            render_line = table.render_line
            table.render_line = lambda y: drawn.append(y) or render_line(y)
            await pilot.press("down")
            await until(pilot, lambda: drawn, "a line drawn again")
            await pilot.pause()
            assert table.cursor_row == 1 and sorted(set(drawn)) == [1, 2]  # header is line 0
            table.cursor_row = 10**9  # validated: the last row
            assert table.cursor_row == table.row_count - 1
            table.cursor_row = -5
            assert table.cursor_row == 0

    asyncio.run(drive())


def test_a_process_table_draws_anew_only_the_rows_that_changed():
    """Not a snapshot: a refresh that changes some processes' cells (one of them only in
    style) draws their rows' lines again and no other, keeps every other row's line as it
    was drawn, and the table then draws as one built from scratch with the new rows (a column
    widened by a new row included), styles and all, focused or not."""
    from textual.app import App

    from kmon.widgets.process_table import COLUMNS, ProcessTable

    def row(pid: int, idle: str, command: str = "producer.py", notice: str = "") -> tuple:
        return (*map(Text, (str(pid), command, idle, "", "", "3", "", "", "orders", "", "")),
                Text(notice, style="yellow" if pid == 13 else "red"))  # as process_cells

    assert len(row(1, "")) == len(COLUMNS)

    class Tables(App):
        def compose(self):
            yield ProcessTable(grouped=True, id="updated")
            yield ProcessTable(grouped=True, id="fresh")

    def lines(table: ProcessTable) -> list[str]:
        return [table.render_line(y).text for y in range(table.size.height)]

    def styled(table: ProcessTable) -> list[list]:
        return [list(table.render_line(y)) for y in range(table.size.height)]

    async def drive() -> None:
        async with Tables().run_test(size=(150, 20)) as pilot:
            updated, fresh = pilot.app.query(ProcessTable)
            pilot.app.set_focus(updated)  # as on a screen: the cursor drawn as focused
            updated.show_groups([("c", "1 broker", [row(11, "2.0 s"), row(12, "5.0 s")])])
            await pilot.pause()
            updated.show_groups([("c", "1 broker", [row(11, "2.0 s"), row(12, "5.0 s"),
                                             row(13, "1.0 s", "a-much-longer-command.py", "!"),
                                             row(14, "1.0 s")])])
            await pilot.pause()
            later = [row(11, "3.0 s"), row(12, "6.0 s"),  # the cursor's row and another
                     row(13, "1.0 s", "a-much-longer-command.py", "!"),
                     row(14, "1.0 s", notice="!")]
            updated.show_groups([("c", "1 broker", later)])
            await pilot.pause()
            drawn: list[int] = []
            render_line = updated.render_line
            updated.render_line = lambda y: drawn.append(y) or render_line(y)
            later[3] = later[3][:-1] + (Text("!", style="yellow"),)  # only its style changed
            updated.show_groups([("c", "1 broker", later)])
            await until(pilot, lambda: drawn, "the changed row drawn")
            await pilot.pause()
            assert set(drawn) == {5}  # the header, the heading, then pids 11 to 14
            before = [render_line(y) for y in range(updated.size.height)]
            drawn.clear()
            later[0], later[1] = row(11, "4.0 s"), row(12, "7.0 s")
            updated.show_groups([("c", "1 broker", later)])
            fresh.show_groups([("c", "1 broker", later)])
            await until(pilot, lambda: drawn, "the changed rows drawn")
            await pilot.pause()
            assert set(drawn) == {2, 3}
            after = [render_line(y) for y in range(updated.size.height)]
            assert all(after[y] is before[y] for y in (1, 4, 5))  # their lines kept
            assert "4.0 s" in lines(updated)[2] and "7.0 s" in lines(updated)[3]
            assert "a-much-longer-command.py" in lines(fresh)[4]
            focused = styled(updated)
            pilot.app.set_focus(fresh)
            await pilot.pause()
            assert styled(fresh) == focused and styled(updated) != focused
            pilot.app.set_focus(None)
            await pilot.pause()
            assert styled(updated) == styled(fresh)

    asyncio.run(drive())


def test_the_churn_board_counts_each_process_s_last_minute_without_the_kernel_s_counts():
    """Not a snapshot: the polls' opened and closed events, counted per process over the
    window, and forgotten with it (the kernel's exact counts win where they run)."""
    from kmon.model import EventKind, ProcessView
    from kmon.widgets.churn_board import ChurnBoard

    board = ChurnBoard()
    board.add([Event(0, EventKind.OPENED, 1, "a"), Event(0, EventKind.CLOSED, 1, "a"),
               Event(0, EventKind.ROLE_CHANGE, 1, "b"), Event(30_000, EventKind.OPENED, 2, "c"),
               Event(30_000, EventKind.OPENED, 1, "d")])
    assert board.per_process(ProcessView(1, "p", "p")) == (2, 1)
    board.forget(61_000)
    assert board.per_process(ProcessView(1, "p", "p")) == (1, 0)
    assert board.per_process(ProcessView(2, "p", "p", opened_1m=7, closed_1m=5)) == (7, 5)
    board.forget(100_000)
    assert not board.recent and not board.counts
