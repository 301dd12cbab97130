"""Snapshot tests of stable dashboard screens, from recordings of real client processes.

``tests/data/*.jsonl`` were recorded with ``kmon attach PID --json`` on the
demo's consumer and on its producer with ``connections.max.idle.ms=5000``.
Played back (``kmon.engine.replay``), they draw the same screen every time. Update
the stored screens with ``python -m pytest tests/test_dashboard_snapshots.py
--snapshot-update`` after a deliberate change, and look at them.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kmon.dashboard_settings import DashboardSettings
from kmon.engine.facade import ProcessSession
from kmon.engine.replay import Replay, read_recording
from kmon.widgets.app import KmonApp
from kmon.widgets.attach_screen import AttachScreen
from kmon.widgets.event_log import EventLog

DATA = Path(__file__).parent / "data"
SIZE = (170, 48)


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
        while not screen.history.ticks:  # the first refresh, from the screen's own worker
            await pilot.pause(0.05)
        while not replay.finished:
            screen.apply(*replay.poll())
        await pilot.pause()
        # the log follows its newest line after a refresh; settle it so the picture is stable
        for log in screen.query(EventLog):
            log.scroll_end(animate=False, immediate=True)
        await pilot.pause()
    return run_before


def test_consumer_screen(snap_compare):
    app, screen, replay = replayed("consumer.jsonl")
    assert snap_compare(app, terminal_size=SIZE, run_before=play_all(screen, replay))


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
