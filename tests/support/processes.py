"""Child processes of a test and their output: the kmon command line, its ``attach --json``
streams and recordings started in the background, a process's own kernel objects."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from support.common import wait_for

__all__ = ["Child", "KafkaClient", "kmon", "attach_once", "connections_of", "attach_stream",
           "closed_events", "read_until", "record_child", "unused_pid", "packet_sockets_held",
           "ProcessRefused", "refuse_processes", "FLOODER"]

# a process that connects to a closed port of its own as fast as it can for argv[1] seconds:
# a flood of connects (and refusals) elsewhere on the host, filling the kernel's connect rings
FLOODER = """
import socket, sys, time
closed = socket.create_server(("127.0.0.1", 0))  # a port of its own, nothing listening
port = closed.getsockname()[1]
closed.close()
print("READY", flush=True)
until, made = time.monotonic() + float(sys.argv[1]), 0
while time.monotonic() < until and made < 2_000_000:
    with socket.socket() as sock:
        sock.connect_ex(("127.0.0.1", port))
    made += 1
print("DONE", made, flush=True)
"""


class Child:
    """A subprocess whose stdout lines are read in the background."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env, bufsize=1)
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        self._pumps = [threading.Thread(target=self._pump, args=(stream, sink), daemon=True)
                       for stream, sink in ((self.proc.stdout, self.lines.put),
                                            (self.proc.stderr, self.stderr.append))]
        for pump in self._pumps:
            pump.start()

    @staticmethod
    def _pump(stream, sink) -> None:
        for line in stream:
            sink(line.rstrip("\n"))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_line(self, prefix: str, timeout: float = 40.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (self.proc.poll() is not None and self.lines.empty()):
                raise AssertionError(f"no {prefix!r} line from {self.proc.args}; "
                                     f"stderr: {self.stderr[-5:]}")
            try:
                line = self.lines.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue
            if line.startswith(prefix):
                return line

    def wait_exit(self, timeout: float = 60.0) -> int:
        """The exit code, once the process has exited and every line it wrote (stderr
        included) has been read."""
        code = self.proc.wait(timeout)
        for pump in self._pumps:
            pump.join(timeout)
        return code

    def wait_stderr(self, text: str, timeout: float = 40.0) -> str:
        """The first stderr line containing ``text`` (the process may still run)."""
        return wait_for(lambda: next((line for line in self.stderr if text in line), None),
                        f"{text!r} on the stderr of {self.proc.args}", timeout)

    def send(self, command: str) -> None:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class KafkaClient(Child):
    """kmon.devtools.workload: a real confluent-kafka client driven through stdin."""

    def all_stats(self) -> dict[str, dict]:
        """{instance name: statistics} as the clients' own stats_cb last saw them."""
        self.send("stats")
        return json.loads(self.wait_line("STATS ")[len("STATS "):])

    def own_stats(self) -> dict:
        """The statistics of a process's only client."""
        (stats,) = self.all_stats().values()
        return stats


def kmon(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """Run the real kmon command line."""
    return subprocess.run([sys.executable, "-m", "kmon", *args], capture_output=True,
                          text=True, timeout=timeout)


def attach_once(pid: int, *extra: str) -> dict:
    """``kmon attach PID --once --json``, parsed; fails the test on a non-zero exit. One look
    (``--settle 0``) unless ``extra`` asks to settle: test_trust checks the settled view."""
    settle = () if "--settle" in extra else ("--settle", "0")
    result = kmon("attach", str(pid), "--once", "--json", *settle, *extra)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def connections_of(snapshot: dict) -> list[dict]:
    (process,) = snapshot["processes"]
    return process["connections"]


def attach_stream(pid: int, *extra: str, interval: str = "250ms") -> Child:
    """``kmon attach PID --json`` every ``interval``."""
    return Child([sys.executable, "-m", "kmon", "attach", str(pid), "--json", "--interval",
                  interval, *extra])


def closed_events(stream: Child, wanted: int = 1, seconds: float = 30) -> list[dict]:
    """The closed events of a streamed ``kmon attach --json`` until ``wanted`` arrived."""
    deadline, found = time.monotonic() + seconds, []
    while len(found) < wanted and time.monotonic() < deadline:
        record = json.loads(stream.wait_line("{", timeout=seconds))
        found += [e for e in record["events"] if e["kind"] == "closed"]
    return found


def read_until(stream: Child, done, seconds: float) -> tuple[list[dict], dict]:
    """Every event of the stream until ``done(events, record)`` or ``seconds`` after its first
    record; and the last record."""
    record = json.loads(stream.wait_line("{", timeout=60))
    deadline, events = time.monotonic() + seconds, record["events"]
    while time.monotonic() < deadline and not done(events, record):
        record = json.loads(stream.wait_line("{", timeout=30))
        events += record["events"]
    return events, record


def record_child(*args: str) -> Child:
    """``kmon record`` in the background; returns once it has said it started."""
    child = Child([sys.executable, "-m", "kmon", "record", *args])
    child.wait_stderr("session", timeout=30)
    return child


def unused_pid() -> int:
    pid = 4_000_000
    while os.path.exists(f"/proc/{pid}"):
        pid += 1
    return pid


def packet_sockets_held(pid: int | str = "self") -> int:
    """The packet sockets a process holds, from /proc (its fds against /proc/net/packet)."""
    lines = Path("/proc/net/packet").read_text().splitlines()[1:]
    packet_inodes = {line.split()[-1] for line in lines}
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            held.add(target[len("socket:["):-1])
        # another thread's fd may come and go meanwhile: skipped
    return len(held & packet_inodes)


class ProcessRefused(RuntimeError):
    """A unit test tried to start a process."""


# Every way a Python test starts a process: subprocess (and asyncio's subprocesses, os.popen)
# and multiprocessing end in fork_exec or posix_spawn; pty.fork and os.spawn* in fork/forkpty.
PROCESS_STARTS = (("subprocess", "_fork_exec"), ("_posixsubprocess", "fork_exec"),
                  ("os", "fork"), ("os", "forkpty"), ("os", "posix_spawn"),
                  ("os", "posix_spawnp"), ("os", "system"))


def refuse_processes(monkeypatch, refused: list[str]) -> None:
    """Make every way of starting a process raise ProcessRefused (noted in ``refused`` too,
    for code that catches it) until ``monkeypatch`` is undone."""
    import importlib

    for module, name in PROCESS_STARTS:
        target = importlib.import_module(module)
        if getattr(target, name, None) is None:
            continue

        def refuse(*args, _what=f"{module}.{name}", **kwargs):
            refused.append(_what)
            raise ProcessRefused(f"a unit test starts no process, user, compiler or cluster "
                                 f"(tests/conftest.py), but this one called {_what}: mark it "
                                 "integration (pytestmark = pytest.mark.integration)")

        monkeypatch.setattr(target, name, refuse)
