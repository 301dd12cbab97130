"""A refresh of the connection table draws again only the lines whose content changed."""

from __future__ import annotations

import asyncio

from textual.app import App, ComposeResult
from textual.geometry import Region

from kmon.widgets.connection_table import COLUMNS, ConnectionTable


class TableApp(App):
    def compose(self) -> ComposeResult:
        yield ConnectionTable()


def cells(row: dict) -> tuple:
    return (row["role"], *["-"] * (len(COLUMNS) - 2), row["idle"])


def test_only_changed_lines_are_drawn_again_in_runs_of_adjacent_lines():
    async def scenario() -> None:
        app = TableApp()
        async with app.run_test(size=(200, 30)) as pilot:
            table = app.query_one(ConnectionTable)
            rows = [{"role": "broker", "idle": f"{n}s"} for n in range(100)]
            table.show([(f"conn{n}", row) for n, row in enumerate(rows)], cells)
            await pilot.pause()
            marked: list[Region | str] = []
            draw_again = table.refresh

            def noted(*regions: Region, **kwargs) -> object:  # records, then does the real work
                marked.extend(regions or ["the whole table"])
                return draw_again(*regions, **kwargs)

            table.refresh = noted
            table.show([(f"conn{n}", row) for n, row in enumerate(rows)], cells)
            assert marked == []  # nothing changed: nothing drawn again
            for n in (3, 4, 5, 9):  # rows 3-5 and 9 are on lines 4-6 and 10 (under the header)
                rows[n] = {**rows[n], "idle": "changed"}
            table.show([(f"conn{n}", row) for n, row in enumerate(rows)], cells)
            width = table.size.width
            assert marked == [Region(0, 4, width, 3), Region(0, 10, width, 1)]
            await pilot.pause()
            assert "changed" in "".join(table.row_text(3))

    asyncio.run(scenario())
