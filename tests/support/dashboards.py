"""The dashboards: real Textual apps over real sessions, driven with Textual's pilot."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow.parquet as pq

from kmon.engine.cluster_watch import ClusterWatcher
from kmon.engine.facade import ClusterSession, EngineSettings, ProcessSession
from kmon.engine.monitor import Monitor
from kmon.engine.sampler import ProcessSampler, SamplerSettings
from kmon.present.dashboard_settings import DashboardSettings
from kmon.sources.kernel.socket_readers import open_socket_reader
from kmon.widgets.app import KmonApp
from kmon.widgets.attach_screen import AttachScreen
from kmon.widgets.connection_table import ConnectionTable
from kmon.widgets.help import HelpScreen
from kmon.widgets.keyed_table import KeyedTable
from kmon.widgets.watch_screen import WatchScreen

__all__ = ["watch_app", "cells", "help_rows", "the_list_keys_work", "process_session", "attach_app",
           "attach_to", "until", "table_rows", "GatedMonitor"]


def watch_app(bootstrap: str, pids: list[int] | None = None, labels=None,
              discover_every_s: float = 5.0,
              record_dir: Path = Path("kmon-sessions")) -> tuple[KmonApp, WatchScreen]:
    watcher = ClusterWatcher(bootstrap, {}, timeout_s=2.0, refresh_s=10.0)
    session = ClusterSession(watcher, EngineSettings(SamplerSettings(require_kafka=False),
                                                     discover_every_s=discover_every_s),
                             pids or [])
    screen = WatchScreen("test", session,
                         DashboardSettings(interval_s=0.5, record_dir=record_dir), labels)
    return KmonApp(screen), screen


def cells(screen: WatchScreen, table_id: str) -> list[list[str]]:
    """The text of each row of table ``table_id``: the process table (a KeyedTable) or a
    DataTable (the brokers', the groups')."""
    table = screen.query_one(f"#{table_id}")
    if isinstance(table, KeyedTable):
        return [table.row_text(i) for i in range(table.row_count)]
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def help_rows(screen) -> list[str]:
    """What the help of ``screen`` should say: its bindings' words, then the app's quit
    unless the screen binds q itself."""
    own = [b.tooltip for b in screen.BINDINGS
           if screen.check_action(b.action, ()) is not False]
    return own + ([] if any("q" in b.key.split(",") for b in screen.BINDINGS
                            if screen.check_action(b.action, ()) is not False) else ["quit"])


async def the_list_keys_work(pilot, screen, ours) -> None:
    """help, sort, filter, clear, hide idle and record on a screen listing processes; the
    test's own processes (``ours``) are among those recorded (others on this host may come
    and go meanwhile)."""
    app = screen.app
    await pilot.press("question_mark")
    await until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help")
    assert [what for _, what in app.screen.rows] == help_rows(screen)
    await pilot.press("escape")
    await until(pilot, lambda: app.screen is screen, "the list again")
    table = screen.query_one("#processes")
    await pilot.press("s")
    assert "sort: max idle" in str(table.border_title)
    wanted = str(max(ours))  # a process of the test's own: others may exit meanwhile

    def filtered() -> bool:  # a bare word matches anywhere in a row: in others' too
        shown = [r for r in cells(screen, "processes") if r[0]]  # headings have no pid
        return (wanted in [r[0] for r in shown]
                and all(any(wanted in str(cell) for cell in r) for r in shown))

    await pilot.press("f", *wanted, "enter")
    await until(pilot, filtered, "only the processes the filter matches")
    await pilot.press("c", "i")
    assert "idle hidden" in str(table.border_title)
    await pilot.press("i", "s", "s", "s")  # back to every process by pid
    await until(pilot, lambda: len(cells(screen, "processes")) > 1, "every process again")
    await pilot.press("r")
    assert screen.recorder == screen.record_dir
    for _ in range(2):  # the first refresh may come before the recorder (a worker) is open
        started = screen.snapshot.ts_ms
        await until(pilot, lambda since=started: screen.snapshot.ts_ms > since,
                    "a recorded refresh")
    await pilot.press("r")
    await app.workers.wait_for_complete()  # the recording closed (in a worker)
    recorded = {row["pid"] for row in pq.read_table(screen.record_dir / "snapshots",
                                                    columns=["pid"]).to_pylist()}
    assert set(ours) <= recorded


def process_session(pid: int) -> ProcessSession:
    return ProcessSession(Monitor([ProcessSampler(pid, open_socket_reader(), SamplerSettings())]))


def attach_app(pid: int, interval_s: float = 0.25, **settings) -> tuple[KmonApp, AttachScreen]:
    screen = AttachScreen(pid, process_session(pid),
                          DashboardSettings(interval_s=interval_s, **settings))
    return KmonApp(screen), screen


async def attach_to(pilot, screen, pid: int) -> AttachScreen:
    """``pid``'s attach screen, opened from a list screen: its row picked and attached in one
    step, as rows move between a cursor move and a key on a busy host."""
    table = screen.query_one("#processes")
    table.move_to([r[0] for r in cells(screen, "processes")].index(str(pid)))
    screen.action_attach()
    await until(pilot, lambda: isinstance(screen.app.screen, AttachScreen), "attach")
    assert screen.app.screen.pid == pid
    return screen.app.screen


async def until(pilot, condition, what: str, polls: int = 400) -> None:
    """Let the app run until ``condition()`` holds (fails after ``polls`` short pauses)."""
    for _ in range(polls):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"the dashboard never showed {what}")


def table_rows(screen: AttachScreen) -> list[list[str]]:
    table = screen.query_one(ConnectionTable)
    return [table.row_text(i) for i in range(table.row_count)]


class GatedMonitor:
    """A real Monitor whose poll waits for ``gate`` and which logs when it polled and closed.

    A fake only of timing: it holds a real poll open while the test closes the session,
    which a real poll (a few milliseconds) cannot be made to be on demand.
    """

    def __init__(self, monitor) -> None:
        self.monitor = monitor
        self.gate, self.entered = threading.Event(), threading.Event()
        self.log: list[str] = []

    def __getattr__(self, name: str):
        return getattr(self.monitor, name)

    def poll(self):
        self.entered.set()
        self.gate.wait(60)
        result = self.monitor.poll()
        self.log.append("polled")
        return result

    def close(self) -> None:
        self.log.append("closed")
        self.monitor.close()
