"""KeyedTable, the one table of kmon's screens: its cursor stays on its row, a measured column
never narrows, and a click or ``enter`` selects a row (the message the screens attach on)."""

from __future__ import annotations

import asyncio

from rich.text import Text
from textual.app import App

from kmon.widgets.keyed_table import Column, KeyedTable


class Names(KeyedTable):
    COLUMNS = (Column("name", "name"), Column("size", "size", 6))


class Tables(App):
    def __init__(self) -> None:
        super().__init__()
        self.selected: list[str] = []

    def compose(self):
        yield Names()

    def on_keyed_table_row_selected(self, message: KeyedTable.RowSelected) -> None:
        self.selected.append(message.key)


def rows(*names: str) -> list[tuple[str, tuple]]:
    return [(name, (Text(name), "1 KiB")) for name in names]


def test_the_cursor_stays_on_its_row_and_a_measured_column_never_narrows():
    async def drive() -> None:
        async with Tables().run_test(size=(60, 10)) as pilot:
            table = pilot.app.query_one(Names)
            table.focus()
            table.show(rows("a", "b", "a-long-name"), lambda cells: cells)
            await pilot.press("down")
            assert table.selected_key == "b"
            table.show(rows("c", "a-long-name", "b"), lambda cells: cells)  # b moved
            assert (table.cursor_row, table.selected_key) == (2, "b")
            table.show(rows("c", "a"), lambda cells: cells)  # b gone: the cursor keeps its place
            assert table.selected_key == "a"
            await pilot.pause()
            assert table.render_line(0).text.startswith(" name" + " " * 9 + "size")
            assert table.row_text(1) == ["a", "1 KiB"]

    asyncio.run(drive())


def test_a_click_moves_the_cursor_and_a_click_on_it_or_enter_selects_its_row():
    async def drive() -> None:
        async with Tables().run_test(size=(60, 10)) as pilot:
            table = pilot.app.query_one(Names)
            table.focus()
            table.show(rows("a", "b", "c"), lambda cells: cells)
            await pilot.pause()
            await pilot.click(Names, offset=(2, 3))  # the header, then a, b, c
            assert table.selected_key == "c" and pilot.app.selected == []
            await pilot.click(Names, offset=(2, 3))
            await pilot.pause()
            assert pilot.app.selected == ["c"]
            await pilot.press("g", "enter")
            await pilot.pause()
            assert pilot.app.selected == ["c", "a"]

    asyncio.run(drive())


def test_only_the_rows_shown_are_made_and_a_wider_one_scrolled_into_view_widens_its_column():
    """500 rows in a 10-line table: a show makes the cells of the 9 rows in view alone (a host
    view of 500 processes each second), and a row scrolled into view widens its column."""
    made: list[str] = []

    def cells(name: str) -> tuple:
        made.append(name)
        return (Text(name), "1 KiB")

    names = [f"p{i}" for i in range(499)] + ["a-much-longer-name"]

    async def drive() -> None:
        async with Tables().run_test(size=(60, 10)) as pilot:
            table = pilot.app.query_one(Names)
            table.focus()
            await pilot.pause()
            table.show([(name, name) for name in names], cells)
            await pilot.pause()
            assert sorted(set(made)) == sorted(names[:9])
            assert "a-much-longer-name" not in table.render_line(0).text  # not measured yet
            await pilot.press("G")  # the last row
            await pilot.pause()
            assert len(set(made)) < 20
            assert table.render_line(0).text.startswith(" name" + " " * 16 + "size")
            assert "a-much-longer-name" in table.render_line(table.size.height - 1).text
            table.show([(name, name) for name in names], cells)  # a refresh: still as wide
            await pilot.pause()
            assert table.render_line(0).text.startswith(" name" + " " * 16 + "size")

    asyncio.run(drive())
