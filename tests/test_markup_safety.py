"""Text that others chose is shown as the characters it is, never read as markup.

A watched process picks its own name, command line and client ids; a recording, a broker
or another user's file picks the rest. Read as Rich/Textual markup, ``[@click=...]`` would
make a clickable action of it, ``[link=...]`` a terminal hyperlink, and a stray ``[/x]``
a crash. Every screen and table is walked here with such strings, and with escape
sequences, C1 controls and bidi overrides, which must not reach the terminal either.
"""

from __future__ import annotations

import asyncio
import html
import io
import json
import os
import re
import subprocess
import sys

import pyarrow as pa
import pytest
from helpers import Child, attach_to, until, watch_app
from rich.console import Console

from kmon.analysis import report
from kmon.analysis.jobs import ANALYSES
from kmon.cli.tables import snapshot_renderable
from kmon.engine.facade import ProcessSession
from kmon.engine.playback import Replay, read_recording
from kmon.model import (
    ClientInstance,
    Connection,
    Event,
    EventKind,
    ProcessView,
    Role,
    Snapshot,
)
from kmon.present.dashboard_settings import DashboardSettings
from kmon.widgets.app import KmonApp
from kmon.widgets.attach_screen import AttachScreen
from kmon.widgets.detail import DetailScreen
from kmon.widgets.help import HelpScreen

CLICK = "[@click=app.screenshot('owned.txt','/tmp')]orders"
# what each hostile string is, and what of it must be seen on screen
HOSTILE = {
    "[/x]": "[/x]",
    "svc[/prod]": "svc[/prod]",
    CLICK: CLICK,
    "[link=https://e.invalid]svc[/link]": "[link=https://e.invalid]svc[/link]",
    "[bold red]loud": "[bold red]loud",
    "esc\x1b]0;owned\x07.": "esc]0;owned.",
    "c1\u009b31m.": "c131m.",
    "bidi\u202etxt.exe\u202c.": "biditxt.exe.",
}
# no control character, no bidi override, no hyperlink on what reaches the terminal
FORBIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def shown_text(svg: str) -> str:
    """The characters of a Textual screenshot, line by line."""
    return html.unescape(re.sub("<[^>]+>", "", svg)).replace("\xa0", " ")


def hostile_snapshot(ts_ms: int, pid: int = 4242) -> tuple[Snapshot, list[Event]]:
    """A snapshot whose every string that another party chooses is one of HOSTILE."""
    words = list(HOSTILE)
    clients = [ClientInstance(name=words[n], client_id=words[(n + 1) % len(words)],
                              type="consumer", config={"group.id": words[n],
                                                       f"k{n}": words[(n + 2) % len(words)]},
                              group_id=words[n])
               for n in range(len(words))]
    connections = [Connection(key=f"sock:{n}", role=Role.BROKER, node_id=n, broker_id=n,
                              client=words[n], local=f"127.0.0.1:{50000 + n}",
                              remote=f"{words[n]}:9092", state="ESTABLISHED", idle_ms=10,
                              broker_name=words[n], evidence={"role": words[n]},
                              claims=[{"source": words[n], "role": "broker", "node_id": n,
                                       "broker_id": n, "confidence": 0.5,
                                       "detail": words[(n + 3) % len(words)]}])
                   for n in range(len(words))]
    view = ProcessView(pid, words[0], " ".join(words), clients, connections,
                       notices=[f"notice {w}" for w in words])
    events = [Event(ts_ms, EventKind.OPENED, pid, f"sock:{n}", Role.BROKER, n,
                    connections[n].remote, f"detail {w}", w, n) for n, w in enumerate(words)]
    return Snapshot(ts_ms, "host", [view]), events


@pytest.fixture
def hostile_recording(tmp_path):
    """A recording (as ``kmon attach --json`` writes them) full of hostile strings."""
    path = tmp_path / "hostile.jsonl"
    lines = []
    for ts_ms in (1_000_000, 1_001_000):
        snapshot, events = hostile_snapshot(ts_ms)
        record = snapshot.to_dict()
        record["events"] = [e.to_dict() for e in events]
        lines.append(json.dumps(record))
    path.write_text("\n".join(lines) + "\n")
    return path


def assert_shows_each(drawn: str, where: str, words=HOSTILE) -> None:
    text = shown_text(drawn)
    for word in words:
        assert HOSTILE[word] in text, (where, word)
    assert not FORBIDDEN.search(drawn), (where, FORBIDDEN.search(drawn))


def test_a_recording_walked_through_every_attach_screen_shows_its_strings_as_text(
        hostile_recording):
    """The attach dashboard, its detail pane, its event log, the filter's title and the help
    screen, over a replayed recording (``kmon replay``'s own reader and session)."""
    replay = Replay(read_recording(hostile_recording))
    screen = AttachScreen(4242, ProcessSession(replay), DashboardSettings(interval_s=3600))
    app = KmonApp(screen)
    words = list(HOSTILE)

    async def drive() -> dict[str, str]:
        drawn = {}
        async with app.run_test(size=(250, 80)) as pilot:
            await until(pilot, lambda: screen.view is not None, "its first refresh")
            screen.apply(*replay.poll())
            await pilot.pause()
            drawn["attach"] = app.export_screenshot()
            await pilot.press("f")
            for key in "[/x]":
                await pilot.press({"[": "left_square_bracket", "]": "right_square_bracket",
                                   "/": "slash"}.get(key, key))
            await pilot.press("enter")
            await pilot.pause()
            drawn["filter"] = app.export_screenshot()
            await pilot.press("c")
            await pilot.pause()
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, DetailScreen), "the detail pane")
            await pilot.pause()
            drawn["detail"] = app.export_screenshot()
            await pilot.press("escape")
            await pilot.press("question_mark")
            await until(pilot, lambda: isinstance(app.screen, HelpScreen), "the help screen")
            drawn["help"] = app.export_screenshot()
            await pilot.press("escape")
            await until(pilot, lambda: app.screen is screen, "the attach screen again")
        return drawn

    drawn = asyncio.run(drive())
    # the header (name, command line, clients), the table, the notices and the event log
    assert_shows_each(drawn["attach"], "attach")
    assert "filter: [/x]" in shown_text(drawn["filter"])
    # the first row's connection: every field, the claims, its client's metrics and events
    assert_shows_each(drawn["detail"], "detail", [words[0], words[1], words[2], words[3]])
    assert "kmon keys" in shown_text(drawn["help"])
    assert not FORBIDDEN.search(drawn["help"])


def test_the_printed_tables_show_the_strings_as_text():
    """``--once`` and ``kmon demo`` print these tables."""
    out = io.StringIO()
    snapshot, events = hostile_snapshot(1_000_000)
    for word in HOSTILE:  # one process per name: each title is one of them
        snapshot.processes.append(ProcessView(len(snapshot.processes) + 1, word, ""))
    Console(file=out, force_terminal=True, width=400).print(
        snapshot_renderable(snapshot, events, title=CLICK))
    printed = out.getvalue()
    plain = re.sub(r"\x1b\[[0-9;]*m", "", printed)  # Rich's own colours
    for word, seen in HOSTILE.items():
        assert seen in plain, word
    assert "\x1b]8" not in printed  # no hyperlink
    assert not FORBIDDEN.search(plain)


def test_analyze_tables_show_the_strings_as_text():
    analysis = next(a for a in ANALYSES if a.name == "peak_connections")
    words = list(HOSTILE)
    table = pa.table({"host": words, "pid": list(range(len(words))), "client": words,
                      "client_type": words, "peak_connections": [1] * len(words),
                      "peak_ts": [1_000_000] * len(words), "mean_connections": [1.0] * len(words)})
    out = io.StringIO()
    report.show(Console(file=out, force_terminal=True, width=400), [analysis],
                {analysis.name: table}, top=0)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())
    for word, seen in HOSTILE.items():
        assert seen in plain, word
    assert not FORBIDDEN.search(plain)


def named_process(name: bytes) -> Child:
    """A Python process whose kernel name (``comm``, what ps shows) is ``name``."""
    code = (f"import ctypes, time; ctypes.CDLL(None).prctl(15, {name!r}, 0, 0, 0); "
            "print('READY', flush=True); time.sleep(120)")
    child = Child([sys.executable, "-c", code])
    child.wait_line("READY")
    return child


@pytest.mark.integration
@pytest.mark.parametrize("name", ["[/x]", "[link=//e.io]a"])
def test_once_prints_a_process_named_like_markup_as_its_name(name):
    """The Rich view a terminal gets (Rich's TTY_COMPATIBLE=1 stands for the terminal)."""
    child = named_process(name.encode())
    try:
        result = subprocess.run([sys.executable, "-m", "kmon", "attach", str(child.pid),
                                 "--once", "--any-process", "--wire", "off"],
                                capture_output=True, text=True, timeout=60,
                                env={**os.environ, "TTY_COMPATIBLE": "1", "NO_COLOR": "1"})
    finally:
        child.stop()
    assert result.returncode == 0, result.stderr
    assert f"PID {child.pid} {name}" in result.stdout


NAMED = ("import ctypes, runpy, sys; ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0); "
         "sys.argv = sys.argv[4:]; runpy.run_module(sys.argv[0], run_name='__main__')")


@pytest.mark.integration
def test_the_host_view_shows_clients_named_like_markup_and_keeps_running(start_client):
    """A consumer whose ``client.id`` is ``svc[/prod]`` beside a producer whose process is
    named ``[/x]`` and whose client id would be a click action: the host view shows both as
    written; attached to ``[/x]``, its exit is a notice and the dashboard runs on."""
    from kmon.engine.facade import EngineSettings, HostTarget, SamplerSettings, open_session
    from kmon.widgets.host_screen import HostScreen

    consumer = start_client("consumer", properties={"client.id": "svc[/prod]"})
    named = start_client("producer", properties={"client.id": CLICK},
                         wrapper=[sys.executable, "-c", NAMED, "[/x]"])
    session = open_session(HostTarget(), EngineSettings(
        SamplerSettings(require_kafka=False, wire="off"), discover_every_s=0.5))
    screen = HostScreen(session, DashboardSettings(interval_s=0.5))
    app = KmonApp(screen)
    ours = {consumer.pid, named.pid}

    def rows() -> dict[int, list]:
        table = screen.query_one("#processes")
        return {int(r[0]): r for r in map(table.row_text, range(table.row_count))
                if r[0] and int(r[0]) in ours}  # cluster headings have no pid

    async def drive() -> tuple[str, str]:
        async with app.run_test(size=(250, 50)) as pilot:
            await until(pilot, lambda: ours <= rows().keys() and all(
                "no client" not in str(r[2]) for r in rows().values()), "both clients",
                polls=1200)
            table = screen.query_one("#processes")

            async def in_view(pid: int) -> str:
                """A screenshot with ``pid``'s row scrolled into view: on a busy host the rows
                are sorted again at each refresh, which can move it out between two pauses."""
                for _ in range(100):
                    pids = [table.row_text(i)[0] for i in range(table.row_count)]
                    table.move_to(pids.index(str(pid)))
                    await pilot.pause()
                    shot = app.export_screenshot()
                    if re.search(rf"(^|\s){pid} ", shown_text(shot), re.M):
                        return shot
                raise AssertionError(f"{pid}'s row never stayed in view")

            host = await in_view(consumer.pid) + await in_view(named.pid)
            attached = await attach_to(pilot, screen, named.pid)
            await until(pilot, lambda: attached.view is not None, "its first refresh")
            named.stop()
            await until(pilot, lambda: attached.exit_notice, "its exit", polls=1200)
            await pilot.pause()
            assert app.is_running and app.screen is attached
            return host, app.export_screenshot()

    host, exited = asyncio.run(drive())
    host = shown_text(host)
    assert re.search(rf"{consumer.pid} +.+? +svc\[/prod\] ", host)  # pid, command, client
    assert re.search(rf"{named.pid} +.+? +{re.escape(CLICK)} ", host)
    assert "[/x]" in shown_text(exited) and "EXITED" in shown_text(exited)


@pytest.mark.integration
def test_the_watch_view_shows_a_group_and_client_named_like_markup(start_client, cluster):
    """The cluster view's brokers, groups and processes tables, with a consumer whose
    ``client.id`` and group are markup."""

    group = "[/x][link=//e.io]g"
    consumer = start_client("consumer", properties={"client.id": "svc[/prod]",
                                                    "group.id": group})
    app, screen = watch_app(cluster, pids=[consumer.pid])

    def shown() -> str:
        return shown_text(app.export_screenshot())

    async def drive() -> str:
        async with app.run_test(size=(250, 50)) as pilot:
            await until(pilot, lambda: group in shown() and "svc[/prod]" in shown(),
                        "the group and the client", polls=1200)
            return app.export_screenshot()

    drawn = asyncio.run(drive())
    assert re.search(rf"{consumer.pid} +.+? +svc\[/prod\] ", shown_text(drawn))
    assert not FORBIDDEN.search(drawn)
