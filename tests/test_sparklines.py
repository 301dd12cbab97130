"""The counts panel: a line per role and state, its current count and its curve."""

from __future__ import annotations

import asyncio

from textual.app import App, ComposeResult

from kmon.model import Connection, ProcessView, Role
from kmon.present.history import History
from kmon.widgets.sparklines import SERIES, CountSparklines


class PanelApp(App):
    def compose(self) -> ComposeResult:
        yield CountSparklines()


def connection(key: str, role: Role, state: str = "ESTABLISHED") -> Connection:
    return Connection(key=key, role=role, node_id=1, broker_id=1, client=None,
                      local="127.0.0.1:50000", remote="127.0.0.1:9092", state=state, idle_ms=0)


def test_each_line_shows_its_count_and_a_curve_that_rises_with_it():
    history = History(window=10)
    for second, brokers in enumerate((1, 1, 2, 3)):
        connections = [connection(f"b{n}", Role.BROKER) for n in range(brokers)]
        connections.append(connection("c", Role.COORDINATOR, state="CLOSE_WAIT"))
        history.observe(1_000 * (second + 1), [ProcessView(7, "p", "", connections=connections)],
                        1_000)

    async def scenario() -> None:
        app = PanelApp()
        async with app.run_test(size=(60, 10)) as pilot:
            panel = app.query_one(CountSparklines)
            panel.show(history)
            await pilot.pause()
            lines = {name: panel.render_line(y).text for y, (_, name) in enumerate(SERIES)}
            assert lines["broker"].startswith("broker          3 ")
            assert lines["coordinator"].startswith("coordinator     1 ")
            assert lines["CLOSE_WAIT"].startswith("CLOSE_WAIT      1 ")
            assert lines["ESTABLISHED"].startswith("ESTABLISHED     3 ")
            assert lines["bootstrap"].startswith("bootstrap       0 ")
            curve = lines["broker"][18:].strip()
            assert curve[0] == "▁" and curve[-1] == "█"  # from one broker socket to three
            assert set(lines["coordinator"][18:].strip()) == {"▁"}  # flat

    asyncio.run(scenario())
