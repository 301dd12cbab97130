"""kmon in a real 80×24 terminal (tmux): ``kmon demo``'s watch screen shows at least three of
its client processes and the footer's ``q`` and ``?``; ``kmon attach PID`` of a demo client
shows the idle and reap-in columns. Read as a user reads them: ``tmux capture-pane``."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time

import pytest
from helpers import unique

pytestmark = [pytest.mark.integration,  # real processes: the demo's cluster and clients
              pytest.mark.skipif(shutil.which("tmux") is None,
                                 reason="needs tmux (apt-get install tmux)")]

SIZE = (80, 24)
PROCESS_ROW = re.compile(r"^│ (\d+) ")


class Tmux:
    """A tmux server of its own (``-L``), its sessions SIZE cells large."""

    def __init__(self) -> None:
        self.socket = unique("kmon-test")

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True, text=True,
                              capture_output=True, timeout=30).stdout

    def start(self, name: str, *argv: str) -> None:
        self("new-session", "-d", "-x", str(SIZE[0]), "-y", str(SIZE[1]), "-s", name,
             " ".join(argv))

    def screen(self, name: str) -> list[str]:
        return self("capture-pane", "-p", "-t", name).splitlines()

    def wait(self, name: str, done, what: str, seconds: float = 90) -> list[str]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            lines = self.screen(name)
            if done(lines):
                return lines
            time.sleep(0.5)
        raise AssertionError(f"tmux never showed {what}:\n" + "\n".join(self.screen(name)))

    def alive(self, name: str) -> bool:
        """True while session ``name`` runs (a session ends when its command does)."""
        return subprocess.run(["tmux", "-L", self.socket, "has-session", "-t", name],
                              capture_output=True, timeout=30).returncode == 0

    def stop(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True,
                       timeout=30)


def panel_rows(lines: list[str], title: str) -> list[tuple[str, str]]:
    """(pid, line) of each process row visible in the panel whose border title starts
    ``title``."""
    start = next(i for i, line in enumerate(lines) if line.startswith(f"╭─ {title}"))
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("╰"):
            break
        if match := PROCESS_ROW.match(line):
            rows.append((match.group(1), line))
    return rows


def test_demo_and_attach_at_80x24_show_their_rows_idle_reap_in_and_q_and_help():
    tmux = Tmux()
    kmon = f"{sys.executable} -m kmon"
    try:
        tmux.start("demo", kmon, "demo")
        lines = tmux.wait("demo", lambda ls: any(ls) and any(
            ln.startswith("╭─ local client processes") for ln in ls)
            and len(rows := panel_rows(ls, "local client processes")) >= 3
            and any("consumer" in line for _, line in rows),  # named as the demo names it
            "three process rows in the demo's watch screen, a consumer's among them")
        rows = panel_rows(lines, "local client processes")
        footer = lines[-1]
        print(f"kmon demo at 80x24: {len(rows)} process rows; footer: {footer.strip()}")
        assert "q quit" in footer and "? help" in footer, footer
        assert "None" not in "\n".join(lines)  # no missing value shown as Python's None

        consumer = next(pid for pid, line in rows if "consumer" in line)  # its coordinator too
        tmux.start("attach", kmon, "attach", consumer)
        lines = tmux.wait("attach", lambda ls: any(
            "idle / limit" in ln and "reap in" in ln for ln in ls)
            and any(re.match(r"^│ (coordinator|broker|bootstrap) ", ln) for ln in ls),
            "the attach screen's idle and reap-in columns")
        header = next(ln for ln in lines if "idle / limit" in ln)
        connections = [ln for ln in lines if re.match(r"^│ (coordinator|broker|bootstrap) ", ln)]
        print(f"kmon attach {consumer} at 80x24: {len(connections)} connection rows; "
              f"header: {header.strip()}; footer: {lines[-1].strip()}")
        assert "q quit" in lines[-1] and "? help" in lines[-1], lines[-1]
        assert "None" not in "\n".join(lines)
        tmux("send-keys", "-t", "attach", "q")
        tmux("send-keys", "-t", "demo", "C-c")
        deadline = time.monotonic() + 30  # the demo stops every child, then its pane closes
        while tmux.alive("demo"):
            assert time.monotonic() < deadline, "the demo did not stop on Ctrl-C"
            time.sleep(0.5)
    finally:
        tmux.stop()
