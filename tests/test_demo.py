"""`kmon demo`: the README's first command, on a terminal and headless."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import pty
import select
import signal
import struct
import sys
import termios
import time

import psutil
import pytest
from helpers import Child, kmon

from kmon.devtools.demo_workload import WORKLOAD

pytestmark = pytest.mark.integration  # real processes, a cluster or Spark


def test_headless_demo_watches_its_workload_honours_the_config_and_cleans_up(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[thresholds]\nmiddlebox_idle = "2s"\nidle_warning = 0.05\n')
    # polled every 250 ms: a near-reap event needs a connection seen under 100 ms idle, then
    # over it; at 500 ms, about one run in fifteen saw none in its 4 s
    result = kmon("demo", "--headless", "--json", "--duration", "4s", "--interval", "250ms",
                  "--config", str(config), timeout=120)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    last = records[-1]
    # the config's thresholds: a load balancer's 2 s idle limit, a warning at 5 % of it
    limits = {(c["idle_limit_by"], c["idle_limit_ms"]) for p in last["processes"]
              for c in p["connections"]}
    assert limits == {("middlebox", 2000)}, limits
    assert any(e["kind"] == "near_reap" for r in records for e in r["events"])
    assert len(last["processes"]) == 5
    types = sorted(c["type"] for p in last["processes"] for c in p["clients"])
    assert types == ["consumer", "consumer", "producer", "producer"]  # one is uninstrumented
    roles = {c["role"] for p in last["processes"] for c in p["connections"]}
    assert {"coordinator", "broker"} <= roles
    pids = {p["pid"] for p in last["processes"]}
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [pid for pid in pids if psutil.pid_exists(pid)], "demo left children behind"


def test_a_demo_consumer_joining_its_settled_group_late_is_ready_before_44_s(cluster):
    """librdkafka's mock cluster holds the rebalance a late member starts for the group's
    session timeout less 1 s: at the 45 s default, 44 s (the demo's second consumer, slower
    to start on a busy machine, then missed its 60 s settle wait). The bound is that hold:
    the demo's consumers ask for a session short enough that the hold is seconds."""
    group = f"late-joiner-{os.getpid()}"
    first, late = (dataclasses.replace(c, group=group) for c in WORKLOAD if c.kind == "consumer")
    children = [Child(first.argv(cluster))]
    try:
        children[0].wait_line("READY", timeout=60)  # the group is settled, with one member
        started = time.monotonic()
        children.append(Child(late.argv(cluster)))
        children[1].wait_line("READY", timeout=60)
        took = time.monotonic() - started
    finally:
        for child in children:
            child.stop()
    assert took < 44, f"the late consumer was ready after {took:.1f} s"


def test_demo_on_a_terminal_opens_watch_and_ctrl_c_stops_every_child():
    """The README's first command as a user runs it: on a terminal (a pty here)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: kmon demo on the pty, 170x48
        os.execvpe(sys.executable, [sys.executable, "-m", "kmon", "demo"],
                   {**os.environ, "COLUMNS": "170", "LINES": "48", "TERM": "xterm-256color"})
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 48, 170, 0, 0))
    screen = b""
    children: set[int] = set()
    try:
        deadline = time.monotonic() + 90
        while b"orders-reader-b" not in screen or b"brokers" not in screen:
            assert time.monotonic() < deadline, screen[-2000:]
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                screen += os.read(fd, 65536)
        children = {p.pid for p in psutil.Process(pid).children(recursive=True)}
        assert len(children) >= 6, "the cluster and five clients"
        os.write(fd, b"\x03")  # Ctrl-C
        with contextlib.suppress(OSError):  # the pty closes when kmon exits
            while os.read(fd, 65536):
                pass
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    deadline = time.monotonic() + 10
    while any(psutil.pid_exists(c) for c in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [c for c in children if psutil.pid_exists(c)], "demo left children behind"
