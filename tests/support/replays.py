"""Recordings of real clients in ``tests/data`` played back into the dashboards, the same
screen every time (the snapshot and 80x24 tests)."""

from __future__ import annotations

import time

import pytest
from support.common import TESTS
from support.dashboards import until

from kmon.engine.facade import AttachFailed, ClusterView, ProcessSession
from kmon.engine.host_view import cluster_labels
from kmon.engine.playback import Replay, read_recording
from kmon.model import Event, Role, Snapshot
from kmon.present.dashboard_settings import DashboardSettings
from kmon.sources.brokers.admin import BrokerInfo
from kmon.sources.kernel.sockets import Endpoint
from kmon.widgets.app import KmonApp
from kmon.widgets.attach_screen import AttachScreen
from kmon.widgets.event_log import EventLog
from kmon.widgets.host_screen import HostScreen
from kmon.widgets.list_screen import ProcessListScreen
from kmon.widgets.watch_screen import WatchScreen

__all__ = ["DATA", "utc", "replayed", "play_all", "ReplayedClients", "play_listed",
           "replayed_list"]

DATA = TESTS / "data"


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    """Clock times on screen in UTC, whatever the machine's zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def replayed(name: str) -> tuple[KmonApp, AttachScreen, Replay]:
    replay = Replay(read_recording(DATA / name))
    pid = next(iter(replay.recording.pids))
    # An hour between refreshes: only the first comes from the timer; the test plays the rest.
    screen = AttachScreen(pid, ProcessSession(replay), DashboardSettings(interval_s=3600))
    return KmonApp(screen), screen, replay


def play_all(screen: AttachScreen, replay: Replay):
    async def run_before(pilot) -> None:
        # the first refresh, from the screen's own worker
        await until(pilot, lambda: screen.history.ticks, "the first refresh")
        while not replay.finished:
            screen.apply(*replay.poll())
        await pilot.pause()
        # the log follows its newest line after a refresh; settle it so the picture is stable
        for log in screen.query(EventLog):
            log.scroll_end(animate=False, immediate=True)
        await pilot.pause()
    return run_before


class ReplayedClients:
    """Both recordings played as one host's clients, for the watch and host screens: each
    poll is a frame of each (recorded a few ms apart). The recordings hold no cluster
    metadata: the watch screen's brokers are the ones the recorded clients name."""

    host = "replay"
    notices: list[str] = []
    next_retry_in_s = None

    def __init__(self) -> None:
        self.replays = [Replay(read_recording(DATA / n))
                        for n in ("consumer.jsonl", "idle-producer.jsonl")]
        first = self.replays[0].recording.frame(0)[0]
        brokers = {(c.broker_id, c.remote) for p in first.processes for c in p.connections
                   if c.role in (Role.BROKER, Role.COORDINATOR)}
        self.view = ClusterView(
            "127.0.0.1:38773", tuple(BrokerInfo(b, *r.rsplit(":", 1)) for b, r in sorted(brokers)),
            fetched_at=first.ts_ms)

    @property
    def finished(self) -> bool:
        return all(r.finished for r in self.replays)

    def cluster_labels(self, snapshot: Snapshot) -> dict[int, str]:
        """As kmon's own query to each recorded broker would have answered: its list (the
        recordings keep no cluster id)."""
        answer = tuple(sorted(f"{b.host}:{b.port}" for b in self.view.brokers))
        return cluster_labels(snapshot, {Endpoint(b.host, int(b.port)): (None, answer)
                                         for b in self.view.brokers})

    def poll(self) -> tuple[Snapshot, list[Event]]:
        frames = [r.poll() for r in self.replays]
        events = sorted((e for _, es in frames for e in es), key=lambda e: e.ts_ms)
        return Snapshot(frames[0][0].ts_ms, self.host,
                        [p for snapshot, _ in frames for p in snapshot.processes]), events

    def cluster_due(self) -> bool:
        return False

    def events_of(self, pid: int) -> list[Event]:
        return []

    def attach(self, pid: int) -> ProcessSession:
        raise AttachFailed("a replay")

    def close(self) -> None:
        pass


def play_listed(screen: ProcessListScreen, session: ReplayedClients):
    async def run_before(pilot) -> None:
        await until(pilot, lambda: screen.snapshot is not None, "the first refresh")
        while not session.finished:
            screen.apply(*session.poll())
        await pilot.pause()
        screen.query_one(EventLog).scroll_end(animate=False, immediate=True)
        await pilot.pause()
    return run_before


def replayed_list(kind: str):
    """The watch screen (``kind`` "watch") or the host screen over both recordings, in an
    app; and its ``run_before``, which plays them to their end."""
    session = ReplayedClients()
    settings = DashboardSettings(interval_s=3600)
    screen = (WatchScreen("demo", session, settings, labels={16172: "orders consumer"})
              if kind == "watch" else HostScreen(session, settings))
    return KmonApp(screen), screen, play_listed(screen, session)
