"""Every screen at 80×24 (a split pane, a serial console) and 100×30, and the keys k9s and htop
users press first: played from the recordings of real clients in ``tests/data`` (as
tests/test_dashboard_snapshots.py), driven with Textual's pilot, read as the terminal shows them.
"""

from __future__ import annotations

import asyncio

import pytest
from helpers import DATA, play_all, replayed, replayed_list, until, utc
from rich.text import Text

from kmon.engine.playback import Replay, read_recording
from kmon.engine.sessions import ProcessSession, SessionClosed
from kmon.model import Connection, Event, EventKind, ProcessView, Role
from kmon.widgets.app import KmonApp
from kmon.widgets.churn_board import ChurnBoard
from kmon.widgets.connection_table import ConnectionTable
from kmon.widgets.detail import DetailScreen
from kmon.widgets.filtering import parse_filter
from kmon.widgets.list_screen import Attached
from kmon.widgets.process_table import COLUMNS, ProcessTable

__all__ = ["utc"]  # the fixture: clock times in UTC

NARROW = (80, 24)


def screen_text(app: KmonApp) -> list[str]:
    """The terminal's lines as the app draws them now (modal screens over their parent)."""
    update = app.screen._compositor.render_update(
        full=True, screen_stack=app._background_screens)
    return ["".join(segment.text for segment in strip) for strip in update.strips]


def footer(app: KmonApp) -> str:
    return screen_text(app)[-1]


def rows_room(table) -> int:
    """How many rows a table shows at once: its content's height less its header."""
    return table.scrollable_content_region.height - 1


def test_the_attach_screen_at_80x24_keeps_its_rows_idle_and_reap_in_and_q_and_help():
    app, screen, replay = replayed("consumer.jsonl")

    async def drive() -> None:
        async with app.run_test(size=NARROW) as pilot:
            await play_all(screen, replay)(pilot)
            text = screen_text(app)
            table = screen.query_one(ConnectionTable)
            header = table.render_line(0).text
            assert "idle / limit" in header and "reap in" in header
            assert rows_room(table) >= 6  # the lifecycle and events gave way
            assert all(line in "\n".join(text) for line in ("coordinator", "broker"))
            assert "q quit" in footer(app) and "? help" in footer(app)
            assert "None" not in "\n".join(text)

    asyncio.run(drive())


@pytest.mark.parametrize("kind", ["watch", "host"])
def test_the_list_screens_at_80x24_keep_three_process_rows_max_idle_and_q_and_help(kind):
    app, screen, play = replayed_list(kind)

    async def drive() -> None:
        async with app.run_test(size=NARROW) as pilot:
            await play(pilot)
            table = screen.query_one(ProcessTable)
            assert rows_room(table) >= 3
            text = "\n".join(screen_text(app))
            assert "max idle" in table.render_line(0).text  # within the 80 columns
            assert "16172" in text and "16175" in text
            assert "q quit" in footer(app) and "? help" in footer(app)
            assert "None" not in text

    asyncio.run(drive())


def test_the_watch_screen_at_100x30_keeps_its_events_small():
    app, screen, play = replayed_list("watch")

    async def drive() -> None:
        async with app.run_test(size=(100, 30)) as pilot:
            await play(pilot)
            assert rows_room(screen.query_one(ProcessTable)) >= 3
            assert screen.query_one("#watch-events").region.height > 0
            assert "q quit" in footer(app)

    asyncio.run(drive())


def test_the_detail_pane_and_the_help_at_80x24_keep_q_or_escape():
    app, screen, replay = replayed("consumer.jsonl")

    async def drive() -> None:
        async with app.run_test(size=NARROW) as pilot:
            await play_all(screen, replay)(pilot)
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, DetailScreen), "the detail pane")
            await pilot.pause()
            assert "esc close" in footer(app)
            text = screen_text(app)
            assert any("role" in line and "coordinator" in line for line in text)
            # the pane owns the screen: nothing of the attach screen shows beside it
            assert text[0].startswith("█▀"), text[0]
            assert not any(word in line for line in text
                           for word in ("lifecycle", "connections:", "cluster:"))
            await pilot.press("escape", "question_mark")
            await until(pilot, lambda: not isinstance(app.screen, DetailScreen)
                        and app.screen is not screen, "the help")
            await pilot.pause()
            assert any("kmon keys" in line for line in screen_text(app))

    asyncio.run(drive())


def test_the_footer_says_what_a_key_does_now():
    app, screen, play = replayed_list("host")

    async def drive() -> None:
        async with app.run_test(size=(160, 40)) as pilot:
            await play(pilot)
            assert "p pause" in footer(app) and "i hide idle" in footer(app)
            await pilot.press("p", "i")
            await pilot.pause()
            assert "p resume" in footer(app) and "i show idle" in footer(app)
            await pilot.press("p")
            await pilot.pause()
            assert "p pause" in footer(app)

    asyncio.run(drive())


def test_j_k_g_and_shift_g_move_the_cursor_in_both_tables():
    app, screen, replay = replayed("consumer.jsonl")

    async def drive() -> None:
        async with app.run_test(size=NARROW) as pilot:
            await play_all(screen, replay)(pilot)
            table = screen.query_one(ConnectionTable)
            assert table.row_count == 3 and table.cursor_row == 0
            await pilot.press("j", "j")
            assert table.cursor_row == 2
            await pilot.press("k")
            assert table.cursor_row == 1
            await pilot.press("G")
            assert table.cursor_row == 2
            await pilot.press("g")
            assert table.cursor_row == 0

    asyncio.run(drive())
    app, screen, play = replayed_list("host")

    async def drive_list() -> None:
        async with app.run_test(size=NARROW) as pilot:
            await play(pilot)
            table = screen.query_one(ProcessTable)
            assert table.selected_pid == 16172  # below the cluster's heading
            await pilot.press("j")
            assert table.selected_pid == 16175
            await pilot.press("k", "k")
            assert table.cursor_row == 0  # the heading
            await pilot.press("G")
            assert table.selected_pid == 16175
            await pilot.press("g")
            assert table.selected_pid == 16172

    asyncio.run(drive_list())


def test_less_and_greater_pick_the_sort_column_and_its_heading_shows_the_arrow():
    app, screen, replay = replayed("consumer.jsonl")

    async def drive() -> None:
        async with app.run_test(size=NARROW) as pilot:
            await play_all(screen, replay)(pilot)
            table = screen.query_one(ConnectionTable)
            assert table.render_line(0).text.startswith(" role ▲")
            await pilot.press("greater_than_sign")  # role -> node → broker: by broker
            await pilot.pause()
            assert "node → broker ▲" in table.render_line(0).text
            assert "sort: broker" in str(table.border_title)
            await pilot.press("greater_than_sign", "greater_than_sign")  # state, then idle
            await pilot.pause()
            assert "idle / limit ▼" in table.render_line(0).text
            await pilot.press("less_than_sign")
            await pilot.pause()
            assert "state ▲" in table.render_line(0).text

    asyncio.run(drive())
    app, screen, play = replayed_list("host")

    async def drive_list() -> None:
        async with app.run_test(size=(160, 40)) as pilot:
            await play(pilot)
            table = screen.query_one(ProcessTable)
            assert table.render_line(0).text.split()[:2] == ["pid", "▲"]
            await pilot.press("j")
            assert table.selected_pid == 16175
            await pilot.press("greater_than_sign", "greater_than_sign")  # command, max idle
            await pilot.pause()
            assert "max idle ▼" in table.render_line(0).text
            assert table.selected_pid == 16175  # the cursor stays on its process
            assert [table.row_text(i)[0] for i in range(1, 3)] == [
                "16172", "16175"]  # 28 s idle, then 2.7 s

    asyncio.run(drive_list())


def test_replay_says_its_recording_ended_not_live():
    app, screen, replay = replayed("idle-producer.jsonl")

    async def drive() -> None:
        async with app.run_test(size=NARROW) as pilot:
            await play_all(screen, replay)(pilot)
            text = "\n".join(screen_text(app))
            assert "RECORDING ENDED" in text and "LIVE" not in text

    asyncio.run(drive())


def test_a_field_filter_matches_its_value_whole():
    conn = Connection(key="a", role=Role.BROKER, node_id=12, broker_id=12, client="p#1",
                      local="127.0.0.1:1", remote="127.0.0.2:9092", state="ESTABLISHED")
    ids = {"p#1": "orders-reader-a"}
    assert not parse_filter("broker:2").matches(conn, 7, ids)  # 12, and an address with 2s
    assert parse_filter("broker:12").matches(conn, 7, ids)
    assert parse_filter("broker:127.0.0.2:9092").matches(conn, 7, ids)
    assert not parse_filter("client:orders").matches(conn, 7, ids)
    assert parse_filter("client:orders-reader-a").matches(conn, 7, ids)
    assert parse_filter("orders").matches(conn, 7, ids)  # a bare word: anywhere
    assert parse_filter("role:bro").matches(conn, 7, ids)  # a role may be shortened


def test_a_notice_that_comes_later_is_shown_whole():
    """A cell set in place (no row came or went) wider than its column widens it."""
    from textual.app import App

    def row(notice: str) -> tuple:
        return tuple(map(Text, ("11", "producer.py", "2 s", "", "", "3", "", "", "orders", "",
                                "", notice)))

    assert len(row("")) == len(COLUMNS)
    notice = "connections.max.idle.ms is above the broker's: the broker reaps first"

    class Tables(App):
        def compose(self):
            yield ProcessTable()

    async def drive() -> None:
        async with Tables().run_test(size=(250, 10)) as pilot:
            table = pilot.app.query_one(ProcessTable)
            table.show_groups([("c", "", [row("")])])
            await pilot.pause()
            table.show_groups([("c", "", [row(notice)])])
            await pilot.pause()
            assert notice in table.render_line(1).text

    asyncio.run(drive())


def test_a_churn_pattern_says_what_its_rate_counts_and_where():
    board = ChurnBoard()
    from kmon.model import Churn
    board.add([Event(1_000, EventKind.CHURN, 9, None, detail="idle_reap_cycle: broker 2 …",
                     broker_id=2, churn=Churn("idle_reap_cycle", 2.1, 60))])
    assert board.pattern(9, 2_000) == "idle reap cycle: 2.1 reaps/min (broker 2)"
    assert board.per_process(ProcessView(9, "p", "p")) == (0, 0)


def test_a_long_connection_table_at_80_columns_keeps_reap_in_beside_its_scrollbar():
    """More rows than fit: the vertical scrollbar comes, and idle / limit and reap in stay
    in view with no sideways scrolling."""
    from textual.screen import Screen

    class Connections(Screen):
        def compose(self):
            yield ConnectionTable()

    cells = ("broker", "1", "127.0.0.1:9092", "ESTABLISHED", "··· 44 s / 10 m", "9 m 16 s",
             "orders-reader-a", "", "", "", "")

    async def drive() -> None:
        screen = Connections()
        async with KmonApp(screen).run_test(size=NARROW) as pilot:
            await until(pilot, lambda: pilot.app.screen is screen, "the screen")
            table = screen.query_one(ConnectionTable)
            table.show([(str(i), i) for i in range(50)], lambda row: cells)
            await pilot.pause()
            assert table.show_vertical_scrollbar and not table.show_horizontal_scrollbar
            assert "reap in" in table.render_line(0).text
            assert "9 m 16 s" in table.render_line(1).text

    asyncio.run(drive())


def test_a_terminal_shrunk_to_80x24_is_laid_out_as_one_that_started_there():
    def layout(screen) -> tuple[int, int]:
        return (screen.query_one("#header").region.height,
                rows_room(screen.query_one(ConnectionTable)))

    async def started(size: tuple[int, int], then: tuple[int, int] | None) -> tuple[int, int]:
        app, screen, replay = replayed("consumer.jsonl")
        async with app.run_test(size=size) as pilot:
            await play_all(screen, replay)(pilot)
            if then is not None:
                await pilot.resize_terminal(*then)
                await pilot.pause()
                await pilot.pause()
            return layout(screen)

    assert asyncio.run(started((170, 48), NARROW)) == asyncio.run(started(NARROW, None))


def test_an_attach_that_opens_after_the_user_moved_on_is_closed_not_shown():
    """Attaching opens its session in a worker: where it is ready only once the user left the
    list (the help, another attach, or quitting), no screen is pushed over theirs (one pushed
    while the app ends is torn down before its widgets exist) and the session is released."""
    app, screen, play = replayed_list("host")
    replay = Replay(read_recording(DATA / "consumer.jsonl"))
    late = ProcessSession(replay)

    async def drive() -> None:
        async with app.run_test(size=NARROW) as pilot:
            await play(pilot)
            await pilot.press("question_mark")
            await until(pilot, lambda: app.screen is not screen, "the help")
            helping = app.screen
            screen.post_message(Attached(next(iter(replay.recording.pids)), late, []))
            await pilot.pause()
            assert app.screen is helping
            with pytest.raises(SessionClosed):
                late.poll()

    asyncio.run(drive())
