"""Which process holds which connection, from /proc alone: each process's socket fds joined
with the kernel's TCP table, sampled every 200 ms while a scenario runs."""

from __future__ import annotations

import contextlib
import os
import threading


class Owners:
    """{(local port, remote port): fd} of each watched pid's TCP sockets ever sampled."""

    def __init__(self, every_s: float = 0.2) -> None:
        self.every_s = every_s
        self.seen: dict[int, dict[tuple[int, int], int]] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def watch(self, pid: int) -> None:
        self.seen.setdefault(pid, {})
        if not self.thread.is_alive():
            self.thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(self.every_s):
            self.sample()

    def sample(self) -> None:
        table = tcp_table()
        for pid in list(self.seen):
            fds = socket_fds(pid)
            for inode, ports in table.items():
                if inode in fds:
                    self.seen[pid][ports] = fds[inode]

    def stop(self) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(5)

    def fd_of(self, pid: int, ports: tuple[int, int]) -> int | None:
        return self.seen.get(pid, {}).get(ports)


def socket_fds(pid: int) -> dict[str, int]:
    """{socket inode: fd} of a process (empty once it is gone)."""
    found = {}
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    found[target[8:-1]] = int(fd)
    return found


def tcp_table() -> dict[str, tuple[int, int]]:
    """{inode: (local port, remote port)} of the host's IPv4 and IPv6 TCP sockets."""
    table = {}
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(name) as lines:
            next(lines)
            for line in lines:
                parts = line.split()
                if parts[9] != "0":
                    table[parts[9]] = (int(parts[1].rsplit(":", 1)[1], 16),
                                       int(parts[2].rsplit(":", 1)[1], 16))
    return table
