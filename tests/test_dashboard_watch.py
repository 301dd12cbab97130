"""The watch dashboard, driven with Textual's pilot against the real demo workload."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest
from helpers import PER_MESSAGE, Child, cells, table_rows, the_list_keys_work, until, watch_app

from kmon.devtools.demo_workload import Demo
from kmon.model import Churn, Event, EventKind, Snapshot
from kmon.widgets.attach_screen import AttachScreen
from kmon.widgets.process_table import COLUMNS

CLIENT_IDS, COORDINATOR = COLUMNS.index("client ids"), COLUMNS.index("coordinator")

pytestmark = pytest.mark.integration  # real processes, a cluster or Spark


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
                             if r[CLIENT_IDS] in ("orders-reader-a", "orders-reader-b")]
                assert all(r[COORDINATOR] == "1" for r in consumers), \
                    "one coordinator connection each"
                await until(pilot, lambda: any(r[0] == "orders" for r in cells(screen, "groups")),
                            "the demo's consumer group")
                (group,) = [r for r in cells(screen, "groups") if r[0] == "orders"]
                assert group[5] == "2", "two local members"
                coordinator = int(group[3])
                brokers = {int(r[0]): r for r in cells(screen, "brokers")}
                assert brokers[coordinator][3] == "1", "it coordinates the group"
                assert brokers[coordinator][5] == "2", "both consumers' coordinator connections"

                await the_list_keys_work(pilot, screen, demo.clients)
                table = screen.query_one("#processes")
                row = next(i for i, r in enumerate(cells(screen, "processes"))
                           if r[CLIENT_IDS] == "orders-reader-a")
                table.move_to(row)
                await pilot.press("enter")
                await until(pilot, lambda: isinstance(app.screen, AttachScreen), "attach")
                attached = app.screen
                await until(pilot, lambda: any(r[0] == "coordinator"
                                               for r in table_rows(attached)), "its coordinator")
                await pilot.press("escape")
                await until(pilot, lambda: app.screen is screen, "the watch screen again")

        asyncio.run(drive())


def test_unreachable_cluster_shows_a_banner_and_keeps_running():
    app, screen = watch_app("127.0.0.1:1")

    async def drive() -> None:
        async with app.run_test(size=(150, 40)) as pilot:
            await until(pilot, lambda: screen.watcher.view.failures >= 1, "a failed refresh")
            await pilot.pause(0.2)
            notice = str(screen.query_one("#notice").render())
            # as specific as kmon ps -b: what each address did, and what to do
            assert "cluster 127.0.0.1:1 did not answer" in notice, notice
            assert "127.0.0.1:1: refused" in notice and "nothing listens" in notice, notice
            assert "retrying in" in notice
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

    async def drive() -> None:
        async with app.run_test(size=(150, 40)) as pilot:
            # dated once the app runs (its start-up takes seconds on a loaded machine)
            now = int(time.time() * 1000)
            storm = Event(now - 55_000, EventKind.CHURN, 0, None, broker_id=2,  # shown 60 s
                          detail="reconnect_storm: 4 processes reconnected to broker 2 within "
                          "10s", churn=Churn("reconnect_storm", 4.0, 10))
            screen.apply(Snapshot(now, "host"), [storm])
            await pilot.pause()
            notice = screen.query_one("#notice")
            assert "reconnect storm: 4 processes reconnected to broker 2" in str(notice.render())
            assert notice.has_class("storm")
            await until(pilot, lambda: not notice.has_class("storm"), "the storm's end")
            assert "reconnect storm" not in str(notice.render())

    asyncio.run(drive())
