"""The attach dashboard, driven with Textual's pilot against real client processes."""

from __future__ import annotations

import asyncio
import threading

import pyarrow.parquet as pq
import pytest
from helpers import GatedMonitor, attach_app, process_session, table_rows, until
from textual.screen import Screen

from kmon.engine.facade import ProcessSession
from kmon.engine.monitor import Monitor
from kmon.engine.sampler import ProcessSampler, SamplerSettings
from kmon.present.dashboard_settings import DashboardSettings
from kmon.sources.kernel.socket_readers import open_socket_reader
from kmon.widgets.app import KmonApp
from kmon.widgets.attach_screen import AttachScreen
from kmon.widgets.connection_table import ConnectionTable
from kmon.widgets.detail import DetailScreen
from kmon.widgets.help import HelpScreen
from kmon.widgets.status import StatusHeader

pytestmark = pytest.mark.integration  # real processes, a cluster or Spark

MAX_INT = 2147483647


class GatedSession:
    """A real ProcessSession whose poll, once ``hold()`` is called, waits for ``release()``.

    A fake only of timing: it lets a test press ``p`` while a poll is certainly under way,
    which a real poll (a few milliseconds) cannot be made to do on demand.
    """

    def __init__(self, session: ProcessSession) -> None:
        self.session = session
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.returned: list[int] = []  # ts_ms of each poll the gate let through

    def __getattr__(self, name: str):
        return getattr(self.session, name)

    def hold(self) -> None:
        self.entered.clear()
        self.gate.clear()

    def release(self) -> None:
        self.gate.set()

    def poll(self):
        self.entered.set()
        self.gate.wait(60)
        snapshot, events = self.session.poll()
        self.returned.append(snapshot.ts_ms)
        return snapshot, events


def coordinator_broker(consumer) -> int:
    stats = consumer.own_stats()
    nodename = stats["brokers"]["GroupCoordinator"]["nodename"]
    return next(b["nodeid"] for b in stats["brokers"].values()
                if b["source"] == "learned" and b["nodename"] == nodename)


@pytest.fixture(scope="module")
def consumer(start_module_client):
    """A consumer in its group that the module's dashboards only watch."""
    return start_module_client("consumer")


def test_consumer_coordinator_row_filter_sort_pause_details(consumer):
    broker = coordinator_broker(consumer)
    app, screen = attach_app(consumer.pid)

    async def drive() -> None:
        async with app.run_test(size=(180, 50)) as pilot:
            await until(pilot, lambda: any(r[0] == "coordinator" for r in table_rows(screen)),
                        "a coordinator row")
            coordinator = next(r for r in table_rows(screen) if r[0] == "coordinator")
            assert coordinator[1] == f"{MAX_INT - broker} coord→{broker}"
            assert coordinator[-1].startswith("stats conf ")  # the confidence, labelled
            # idle / the limit that reaps it; a fetch's round trip is its long-poll wait
            await until(pilot, lambda: any(r[0] == "broker" and r[-2].endswith(" poll")
                                           for r in table_rows(screen)), "a fetch's rtt")
            assert all(" / " in r[4] for r in table_rows(screen))
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
            assert [what for _, what in app.screen.rows] == [
                b.tooltip for b in screen.BINDINGS if b.action != "back"] + ["quit"]
            await pilot.press("escape")

            await pilot.press("f")
            await pilot.press(*"role:coordinator", "enter")
            await until(pilot, lambda: len(table_rows(screen)) == 1, "only the coordinator")
            assert table_rows(screen)[0][0] == "coordinator"
            await pilot.press("c")
            await until(pilot, lambda: len(table_rows(screen)) > 1, "every row again")

            before = [r[0] for r in table_rows(screen)]
            assert before == sorted(before, key=["bootstrap", "coordinator", "broker",
                                                 "unknown"].index)
            for _ in range(4):  # role -> idle -> reap in -> state -> broker
                await pilot.press("s")
            assert "sort: broker" in str(screen.query_one(ConnectionTable).border_title)
            brokers = [int(r[1].split("→")[-1]) for r in table_rows(screen)
                       if "→" in r[1] or r[0] == "broker"]
            assert brokers == sorted(brokers)

            await pilot.press("p")
            assert screen.paused
            frozen = screen.last_ts_ms
            await pilot.pause(1.0)
            assert screen.last_ts_ms == frozen
            await pilot.press("p")
            await until(pilot, lambda: screen.last_ts_ms > frozen, "a refresh after resuming")

            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, DetailScreen), "the detail pane")
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is screen, "the table again")

    asyncio.run(drive())


def test_a_poll_under_way_at_pause_is_held_until_resume(start_client):
    client = start_client("producer")
    session = GatedSession(process_session(client.pid))
    # a long interval: the timer does not poll during the test, only the keys do
    screen = AttachScreen(client.pid, session, DashboardSettings(interval_s=30.0))
    app = KmonApp(screen)

    async def drive() -> None:
        async with app.run_test(size=(160, 45)) as pilot:
            await until(pilot, lambda: table_rows(screen) and not screen.polling,
                        "rows, the first poll done")  # space during a poll is no new poll
            session.hold()
            await pilot.press("space")  # a poll starts and waits at the gate
            await until(pilot, session.entered.is_set, "the poll under way")
            await pilot.press("p")
            header_of = screen.query_one(StatusHeader).render
            frozen, header = screen.last_ts_ms, header_of().plain
            assert "PAUSED" in header
            polls = len(session.returned)
            session.release()
            await until(pilot, lambda: len(session.returned) > polls and not screen.polling,
                        "the poll's end")
            await pilot.pause()  # its result is handled
            assert screen.last_ts_ms == frozen
            assert header_of().plain == header
            await pilot.press("p")  # resume: the held poll is drawn at once
            await until(pilot, lambda: screen.last_ts_ms == session.returned[polls],
                        "the held poll after resuming")

            await pilot.press("p")  # space while paused is one step, and stays paused
            stepped = screen.last_ts_ms
            await pilot.press("space")
            await until(pilot, lambda: screen.last_ts_ms > stepped, "the step")
            assert screen.paused

    asyncio.run(drive())


def test_process_exit_is_shown_in_place(start_client):
    client = start_client("producer")
    app, screen = attach_app(client.pid)

    async def drive() -> None:
        async with app.run_test(size=(160, 45)) as pilot:
            await until(pilot, lambda: table_rows(screen), "rows")
            client.stop()
            await until(pilot, lambda: screen.exit_notice, "the exit")
            assert "exited" in screen.exit_notice
            assert table_rows(screen), "the last state stays on screen"
            assert app.is_running

    asyncio.run(drive())


def test_r_records_the_session_to_parquet(consumer, tmp_path):
    client = consumer
    app, screen = attach_app(client.pid, record_dir=tmp_path)

    async def drive() -> None:
        async with app.run_test(size=(160, 45)) as pilot:
            await until(pilot, lambda: table_rows(screen), "rows")
            await pilot.press("r")
            assert screen.recorder is not None
            started = screen.last_ts_ms
            await until(pilot, lambda: screen.last_ts_ms > started + 1000, "more refreshes")
            await pilot.press("r")
            assert screen.recorder is None

    asyncio.run(drive())
    snapshots = pq.read_table(tmp_path / "snapshots").to_pylist()
    assert {row["pid"] for row in snapshots} == {client.pid}
    assert any(row["role"] == "coordinator" for row in snapshots)
    sessions = pq.read_table(tmp_path / "sessions").to_pylist()
    assert any(row["stopped_ms"] is not None for row in sessions), "stopped cleanly"


class ClosingSession:
    """A real ProcessSession that says when its close begins (``closing``)."""

    def __init__(self, session: ProcessSession) -> None:
        self.session, self.closing = session, threading.Event()

    def __getattr__(self, name: str):
        return getattr(self.session, name)

    def close(self) -> None:
        self.closing.set()
        self.session.close()


def test_a_screen_closed_mid_poll_closes_its_session_after_the_poll(consumer):
    """The attach screen is left while its poll is under way: its session closes the
    samplers only once that poll has finished, and the dashboard runs on."""
    client = consumer
    gated = GatedMonitor(Monitor([ProcessSampler(client.pid, open_socket_reader(),
                                                 SamplerSettings())]))
    session = ClosingSession(ProcessSession(gated))
    screen = AttachScreen(client.pid, session, DashboardSettings(interval_s=3600),
                          can_go_back=True)
    app = KmonApp(Screen())
    # the poll under way ends once the session's close has begun, not before
    releaser = threading.Thread(target=lambda: session.closing.wait(60) and gated.gate.set())
    releaser.start()

    async def drive() -> None:
        async with app.run_test(size=(160, 45)) as pilot:
            base = app.screen
            await app.push_screen(screen)
            await until(pilot, gated.entered.is_set, "the poll under way")
            await pilot.press("escape")
            await until(pilot, lambda: gated.log == ["polled", "closed"], "the close")
            assert app.is_running and app.screen is base

    asyncio.run(drive())
    releaser.join(60)
