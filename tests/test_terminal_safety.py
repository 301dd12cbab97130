"""Control characters a watched process puts in its strings never reach the terminal.

A process chooses its own name (prctl) and command line; printed as they are, an escape
sequence in them would clear kmon's screen or set the terminal's title.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys

import pytest
from helpers import Child, assert_one_clear_line, kmon, until
from rich.segment import ControlType, Segment
from rich.style import Style

from kmon.cli.json_lines import json_line
from kmon.engine.facade import ProcessSession
from kmon.engine.monitor import Monitor
from kmon.engine.sampler import ProcessSampler, SamplerSettings
from kmon.present.dashboard_settings import DashboardSettings
from kmon.present.plain_text import WithoutControls, one_line, strip_controls
from kmon.sources.kernel.socket_readers import open_socket_reader
from kmon.widgets.app import KmonApp
from kmon.widgets.attach_screen import AttachScreen

ESCAPES = "\x1b[2J\x1b]0;owned\x07\u009b31m"  # clear the screen, set the title, a C1 CSI
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")  # newlines and tabs may separate lines


def test_control_characters_are_taken_out_and_the_rest_kept():
    bold = Style(bold=True)
    segments = [Segment("plain"), Segment(f"a{ESCAPES}b", bold),
                Segment("\x1b[H", None, [(ControlType.HOME,)])]
    plain, hostile, cursor = strip_controls(segments)
    assert plain is segments[0]
    assert (hostile.text, hostile.style) == ("a[2J]0;owned31mb", bold)
    assert cursor is segments[2]  # Rich's own cursor moves are no text of a watched process


def test_a_printed_table_keeps_its_styles_and_loses_the_control_characters():
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    table = Table("client")
    table.add_row(f"orders{ESCAPES}")
    out = StringIO()
    Console(file=out, force_terminal=True, color_system="standard", width=60).print(
        WithoutControls(table))
    printed = out.getvalue()
    assert "orders[2J]0;owned31m" in printed
    assert "\x1b[1m" in printed  # Rich's own styling (the bold header) is kept
    assert not re.search("\x1b[^\\[]|\x1b\\[2J|\x07|\u009b", printed)


@pytest.fixture
def hostile_process():
    """A child whose name and command line carry escape sequences."""
    code = ("import ctypes, time\n"
            "ctypes.CDLL(None).prctl(15, b'\\x1b]0;owned\\x07', 0, 0, 0)  # PR_SET_NAME\n"
            "print('READY', flush=True)\n"
            "time.sleep(120)\n")
    # the code from the environment: a short command line, shown whole in the header
    child = Child([sys.executable, "-c", "import os; exec(os.environ['CODE'])", ESCAPES],
                  env={**os.environ, "CODE": code})
    child.wait_line("READY")
    yield child
    child.stop()


@pytest.mark.integration
@pytest.mark.parametrize("terminal", [True, False], ids=["rich-view", "piped-rows"])
def test_the_text_view_prints_no_control_character(hostile_process, terminal):
    """The Rich view a terminal gets (Rich's TTY_COMPATIBLE=1 stands for the terminal) names
    the process; the rows a pipe gets carry no control character either."""
    env = {**os.environ, "TTY_COMPATIBLE": "1", "NO_COLOR": "1"} if terminal else None
    result = subprocess.run([sys.executable, "-m", "kmon", "attach", str(hostile_process.pid),
                             "--once", "--any-process", "--wire", "off"],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    if terminal:
        assert "]0;owned" in result.stdout  # the name, shown as the plain text it is
    # kmon's own bold headers aside (ESCAPES has no such sequence), no control character
    assert not CONTROL.search(result.stdout.replace("\x1b[1m", "").replace("\x1b[0m", ""))


@pytest.mark.integration
def test_the_dashboard_draws_no_control_character(hostile_process):
    pid = hostile_process.pid
    sampler = ProcessSampler(pid, open_socket_reader(),
                             SamplerSettings(require_kafka=False, wire="off"))
    screen = AttachScreen(pid, ProcessSession(Monitor([sampler])),
                          DashboardSettings(interval_s=0.25))
    app = KmonApp(screen)

    async def run() -> str:
        async with app.run_test(size=(200, 30)) as pilot:
            await until(pilot, lambda: screen.view is not None, "its first refresh")
            await pilot.pause()
            return app.export_screenshot()

    drawn = asyncio.run(run())
    assert "[2J]0;owned31m" in drawn  # the command line, without its control characters
    assert f"PID&#160;{pid}&#160;]0;owned" in drawn  # the name
    assert not CONTROL.search(drawn)


BIDI = "\u202e\u2066"  # a right-to-left override and an isolate: they reorder what follows


@pytest.mark.integration
def test_the_one_line_error_names_a_process_without_its_control_characters():
    """A process that is no Kafka client: the error names it, as plain text."""
    code = ("import ctypes, time\n"
            f"ctypes.CDLL(None).prctl(15, {('e' + ESCAPES[:6] + BIDI + 'x').encode()!r}, 0, 0, 0)\n"
            "print('READY', flush=True)\n"
            "time.sleep(120)\n")
    child = Child([sys.executable, "-c", code])
    try:
        child.wait_line("READY")
        result = kmon("attach", str(child.pid), "--once", "--wire", "off")
    finally:
        child.stop()
    assert_one_clear_line(result, 1, "no sign of being a Kafka client", "(e[2J]x)")
    assert not CONTROL.search(result.stderr.rstrip("\n"))
    assert not set(BIDI) & set(result.stderr)


@pytest.mark.integration
def test_the_one_line_error_names_a_spool_file_without_its_control_characters(tmp_path):
    """A spool file whose name sets the terminal's title, in a spool kmon reads: the
    error names the file, as plain text."""
    child = Child([sys.executable, "-c", "import time; print('READY', flush=True); "
                   "time.sleep(120)"])
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o700)
    try:
        child.wait_line("READY")
        (spool / f"{child.pid}-\x1b]0;owned\x07{BIDI}\u009b.json").write_text("not json")
        result = subprocess.run(
            [sys.executable, "-m", "kmon", "attach", str(child.pid), "--once", "--any-process",
             "--wire", "off"], capture_output=True, text=True, timeout=60,
            env={**os.environ, "KMON_SPOOL_DIR": str(spool)})
    finally:
        child.stop()
    assert_one_clear_line(result, 1, "]0;owned", "corrupt")
    assert not CONTROL.search(result.stderr.rstrip("\n"))
    assert not set(BIDI) & set(result.stderr)


def test_one_line_strips_controls_and_overrides_and_joins_lines():
    assert one_line(f"a{ESCAPES}\n  b{BIDI}\tc") == "a[2J]0;owned31m bc"


@pytest.mark.integration
def test_json_lines_escape_c1_controls_and_del():
    """``--json`` of a process whose name holds DEL and a C1 CSI: valid JSON that keeps the
    name, in bytes that hold neither raw."""
    code = ("import ctypes, time\n"
            "ctypes.CDLL(None).prctl(15, 'n\\x7f\\u009bx'.encode(), 0, 0, 0)\n"
            "print('READY', flush=True)\n"
            "time.sleep(120)\n")
    child = Child([sys.executable, "-c", code, "arg\u0085\u009d\x7f"])
    try:
        child.wait_line("READY")
        result = subprocess.run([sys.executable, "-m", "kmon", "attach", str(child.pid),
                                 "--once", "--json", "--any-process", "--wire", "off"],
                                capture_output=True, timeout=60)
    finally:
        child.stop()
    assert result.returncode == 0, result.stderr
    assert not re.search(rb"\x7f|\xc2[\x80-\x9f]", result.stdout)
    assert b"n\\u007f\\u009bx" in result.stdout
    (process,) = json.loads(result.stdout)["processes"]
    assert process["name"] == "n\x7f\u009bx"
    assert "arg\u0085\u009d\x7f" in process["cmdline"]


@pytest.mark.parametrize("text", ["", "plain", "é°\u00a0\u00bf\u2028", "\x7f", "\u0080\u009f",
                                  "a\u009bb\x7fc\u0085é\u00a0\u009d"])
def test_escape_c1_keeps_the_value_and_leaves_no_raw_control(text):
    line = json_line({"k": text, text: [text]})
    assert json.loads(line) == {"k": text, text: [text]}
    assert not re.search(rb"\x7f|\xc2[\x80-\x9f]", line)
