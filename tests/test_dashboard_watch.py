"""The watch dashboard, driven with Textual's pilot against the real demo workload."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers import PER_MESSAGE, Child
from test_dashboard_attach import table_rows, until

from kmon.dashboard_settings import DashboardSettings
from kmon.devtools.demo import Demo
from kmon.engine.cluster_watch import ClusterWatcher
from kmon.engine.facade import ClusterSession
from kmon.engine.sampler import SamplerSettings
from kmon.model import Churn, Event, EventKind, Snapshot
from kmon.widgets.app import KmonApp
from kmon.widgets.attach_screen import AttachScreen
from kmon.widgets.help import HelpScreen
from kmon.widgets.watch_screen import WatchScreen

pytestmark = pytest.mark.integration  # real processes, a cluster or Spark


def watch_app(bootstrap: str, pids: list[int] | None = None, labels=None,
              discover_every_s: float = 5.0,
              record_dir: Path = Path("kmon-sessions")) -> tuple[KmonApp, WatchScreen]:
    watcher = ClusterWatcher(bootstrap, {}, timeout_s=2.0, refresh_s=10.0)
    session = ClusterSession(watcher, SamplerSettings(require_kafka=False), pids or [],
                             discover_every_s=discover_every_s)
    screen = WatchScreen("test", session,
                         DashboardSettings(interval_s=0.5, record_dir=record_dir), labels)
    return KmonApp(screen), screen


def cells(screen: WatchScreen, table_id: str) -> list[list[str]]:
    table = screen.query_one(f"#{table_id}")
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def test_watch_lists_brokers_groups_and_discovered_processes(spool_dir, tmp_path):
    with Demo() as demo:
        # No PIDs given: every demo client must be found from the host's sockets.
        app, screen = watch_app(demo.bootstrap, discover_every_s=0.5, record_dir=tmp_path)

        async def drive() -> None:
            async with app.run_test(size=(170, 50)) as pilot:
                await until(pilot, lambda: len(cells(screen, "brokers")) == demo.brokers,
                            "the brokers")
                await until(pilot, lambda: {int(r[0]) for r in cells(screen, "processes")}
                            >= set(demo.clients), "every demo process")
                consumers = [r for r in cells(screen, "processes")
                             if r[2] in ("orders-reader-a", "orders-reader-b")]
                assert all(r[4] == "1" for r in consumers), "one coordinator connection each"
                await until(pilot, lambda: any(r[0] == "orders" for r in cells(screen, "groups")),
                            "the demo's consumer group")
                (group,) = [r for r in cells(screen, "groups") if r[0] == "orders"]
                assert group[5] == "2", "two local members"
                coordinator = int(group[3])
                brokers = {int(r[0]): r for r in cells(screen, "brokers")}
                assert brokers[coordinator][4] == "1", "it coordinates the group"
                assert brokers[coordinator][6] == "2", "both consumers' coordinator connections"

                await the_list_keys_work(pilot, screen)
                table = screen.query_one("#processes")
                row = next(i for i, r in enumerate(cells(screen, "processes"))
                           if r[2] == "orders-reader-a")
                table.move_cursor(row=row)
                await pilot.press("enter")
                await until(pilot, lambda: isinstance(app.screen, AttachScreen), "attach")
                attached = app.screen
                await until(pilot, lambda: any(r[0] == "coordinator"
                                               for r in table_rows(attached)), "its coordinator")
                await pilot.press("escape")
                await until(pilot, lambda: app.screen is screen, "the watch screen again")

        asyncio.run(drive())


def help_rows(screen) -> list[str]:
    """What the help of ``screen`` should say: its bindings' words, then the app's quit
    unless the screen binds q itself."""
    own = [b.tooltip for b in screen.BINDINGS
           if screen.check_action(b.action, ()) is not False]
    return own + ([] if any("q" in b.key.split(",") for b in screen.BINDINGS
                            if screen.check_action(b.action, ()) is not False) else ["quit"])


async def the_list_keys_work(pilot, screen) -> None:
    """help, sort, filter, clear, hide idle and record on a screen listing processes."""
    app = screen.app
    await pilot.press("question_mark")
    await until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
    assert [what for _, what in app.screen.rows] == help_rows(screen)
    await pilot.press("escape")
    await until(pilot, lambda: app.screen is screen, "the list again")
    table = screen.query_one("#processes")
    pids = [r[0] for r in cells(screen, "processes") if r[0]]  # cluster headings: no pid
    await pilot.press("s")
    assert "sort: max idle" in str(table.border_title)
    await pilot.press("f", *pids[-1], "enter")
    await until(pilot, lambda: [r[0] for r in cells(screen, "processes") if r[0]]
                == [pids[-1]], "only the process filtered for")
    await pilot.press("c", "i")
    assert "idle hidden" in str(table.border_title)
    await pilot.press("i", "s", "s", "s")  # back to every process by pid
    await until(pilot, lambda: len(cells(screen, "processes")) > 1, "every process again")
    await pilot.press("r")
    assert screen.recorder == screen.record_dir
    started = screen.snapshot.ts_ms
    await until(pilot, lambda: screen.snapshot.ts_ms > started, "a recorded refresh")
    await pilot.press("r")
    await app.workers.wait_for_complete()  # the recording closed (in a worker)
    recorded = {row["pid"] for row in pq.read_table(screen.record_dir / "snapshots",
                                                    columns=["pid"]).to_pylist()}
    assert set(map(int, pids)) <= recorded


def test_unreachable_cluster_shows_a_banner_and_keeps_running():
    app, screen = watch_app("127.0.0.1:1")

    async def drive() -> None:
        async with app.run_test(size=(150, 40)) as pilot:
            await until(pilot, lambda: screen.watcher.view.failures >= 1, "a failed refresh")
            await pilot.pause(0.2)
            notice = str(screen.query_one("#notice").render())
            assert "cluster unreachable" in notice and "retrying in" in notice
            assert app.is_running

    asyncio.run(drive())


def test_a_client_per_message_shows_in_the_churn_column(cluster, spool_dir):
    per_message = Child([sys.executable, "-m", "kmon", "run", "--", sys.executable, "-c",
                         PER_MESSAGE, cluster])
    try:
        per_message.wait_line("SENT")
        app, screen = watch_app(cluster, pids=[per_message.pid])

        async def drive() -> None:
            async with app.run_test(size=(190, 40)) as pilot:
                await until(pilot, lambda: any("client per message" in r[-2]
                                               for r in cells(screen, "processes")),
                            "a client-per-message churn pattern", polls=600)

        asyncio.run(drive())
    finally:
        per_message.stop()


def test_a_reconnect_storm_raises_a_banner():
    """A storm needs several processes dropped by one broker at once, which the embedded
    cluster cannot do on demand: the monitor's storm event is constructed here (its
    detection is tested in test_closes), the screen that shows it is the real one."""
    app, screen = watch_app("127.0.0.1:1")
    now = int(time.time() * 1000)
    storm = Event(now - 58_000, EventKind.CHURN, 0, None, broker_id=2,  # shown for 60 s
                  detail="reconnect_storm: 4 processes reconnected to broker 2 within 10s",
                  churn=Churn("reconnect_storm", 4.0, 10))

    async def drive() -> None:
        async with app.run_test(size=(150, 40)) as pilot:
            screen.apply(Snapshot(now, "host"), [storm])
            await pilot.pause()
            notice = screen.query_one("#notice")
            assert "reconnect storm: 4 processes reconnected to broker 2" in str(notice.render())
            assert notice.has_class("storm")
            await until(pilot, lambda: not notice.has_class("storm"), "the storm's end")
            assert "reconnect storm" not in str(notice.render())

    asyncio.run(drive())
