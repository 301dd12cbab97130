"""The benchmarks' helper processes: the benchmark run again by the runner in a helper role."""

from __future__ import annotations

import contextlib
import os
import resource
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def command(name: str, *args: str) -> list[str]:
    """The command line running benchmark ``name`` in a helper role (from ``REPO``)."""
    return [sys.executable, "-m", "benchmarks", name, *args]


class Helpers:
    """Subprocesses running benchmark ``name`` (``python -m benchmarks NAME --role ...``, from
    the repository root) with role arguments; all end when the context exits.

    A helper reports on its stdout, one line at a time, and exits when its stdin
    closes (that is, whenever the benchmark exits, however it exits).
    """

    def __init__(self, name: str, ready_timeout_s: float) -> None:
        self.name, self.ready_timeout_s = name, ready_timeout_s
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """Start a helper (``env``: its whole environment, when not this process's)."""
        proc = subprocess.Popen(command(self.name, *args), cwd=REPO, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=env)
        self.procs.append(proc)
        return proc

    def line(self, proc: subprocess.Popen[str], word: str) -> list[str]:
        """Wait for the helper's next stdout line, which must start with ``word``."""
        assert proc.stdout is not None
        got: list[str] = []
        reader = threading.Thread(target=lambda: got.append(proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(self.ready_timeout_s)
        parts = got[0].split() if got else []
        if not parts or parts[0] != word:
            raise RuntimeError(f"helper {proc.args[3:]} failed (exit code {proc.poll()})")
        return parts[1:]

    def __enter__(self) -> Helpers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for proc in self.procs:
            with contextlib.suppress(OSError):
                proc.stdin.close()  # type: ignore[union-attr]
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def raise_fd_limit(needed: int) -> None:
    """Raise the soft RLIMIT_NOFILE to ``needed``; OSError when the hard limit is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise OSError(f"RLIMIT_NOFILE hard limit {hard} is below the {needed} fds needed")
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def no_time_wait(sock: socket.socket) -> socket.socket:
    """Close with a reset, so runs leave no TIME_WAIT sockets behind to skew the next."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return sock


def exit_when_parent_goes() -> None:
    """In a helper: exit when the benchmark does (its stdin closes); Ctrl-C is the parent's."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        sys.stdin.read()
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of ``pid`` so far, to the nanosecond (``/proc/*/schedstat``:
    ``/proc/PID/stat`` counts in 10 ms ticks, too coarse for a process idling at 0.1%)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # a thread just ended
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def listening(fds: int) -> tuple[selectors.BaseSelector, socket.socket]:
    """A non-blocking listener on 127.0.0.1 in a selector, with room for ``fds`` open files;
    its port printed first ("port N") for the benchmark that started this helper."""
    raise_fd_limit(fds)
    selector = selectors.DefaultSelector()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4096)
    listener.setblocking(False)
    selector.register(listener, selectors.EVENT_READ)
    print("port", listener.getsockname()[1], flush=True)
    return selector, listener


def serve_connections(fds: int, answer: Callable[[bytes], bytes | None]) -> None:
    """Accept connections on 127.0.0.1 (``listening``: the port printed first) and answer
    what each sends with ``answer(data)`` (nothing when it gives None); let go of each one
    its client closes."""
    selector, listener = listening(fds)
    while True:
        for key, _ in selector.select():
            sock = key.fileobj
            if sock is listener:
                with contextlib.suppress(BlockingIOError):
                    while True:
                        conn = no_time_wait(listener.accept()[0])
                        conn.setblocking(False)
                        selector.register(conn, selectors.EVENT_READ)
                continue
            try:
                data = sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            reply = answer(data) if data else None
            if reply:
                with contextlib.suppress(OSError):
                    sock.send(reply)
            if not data:
                selector.unregister(sock)
                sock.close()
