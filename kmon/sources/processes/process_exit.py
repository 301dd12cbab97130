"""Whether a watched process has exited: a pidfd (Linux 5.3+) polled, one system call a look,
where reading /proc/PID/stat at each poll costs a path walk, an open, a read and a close per
process (at 500 processes, 5% of a poll).

A pidfd names one process, not a pid: it turns readable when that process exits, and a pid
reused since by another process is not it. It is opened after the process's start time was
read and checked against it again, so a pid reused in between is told as exited. Each costs
a descriptor: at most a quarter of kmon's soft limit are held (``budget``); beyond them, and
where no pidfd opens (an older kernel, a seccomp filter), each look reads /proc/PID/stat.
"""

from __future__ import annotations

import os
import resource
import select
import threading

from kmon.sources.processes.process_info import running_since

_lock = threading.Lock()
_held = 0  # pidfds open, every watch's


def budget() -> int:
    """How many pidfds may be open at once: a quarter of kmon's soft descriptor limit."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 16 if soft == resource.RLIM_INFINITY else soft // 4


class ExitWatch:
    """The exit of the process ``pid`` that has been running since ``started`` (clock ticks
    since boot, ``running_since``; None: it had exited already)."""

    def __init__(self, pid: int, started: int | None) -> None:
        self.pid, self.started = pid, started
        self._fd: int | None = None
        self._poller: select.poll | None = None
        if started is not None:
            self._open()

    def _open(self) -> None:
        global _held
        with _lock:
            if _held >= budget():
                return
            try:
                fd = os.pidfd_open(self.pid)
            except (OSError, AttributeError):  # gone, an older kernel, no descriptor left
                return
            _held += 1
        self._fd = fd
        if running_since(self.pid) != self.started:  # the pid was reused meanwhile
            self.started = None
            self.close()
            return
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN)

    def exited(self) -> bool:
        """Whether the process has exited (or the pid names another process now)."""
        if self._poller is not None:
            return bool(self._poller.poll(0))
        return self.started is None or running_since(self.pid) != self.started

    @property
    def polled(self) -> bool:
        """Whether a pidfd answers ``exited`` (else /proc/PID/stat does)."""
        return self._poller is not None

    def close(self) -> None:
        """Release the pidfd; idempotent (``exited`` then reads /proc/PID/stat)."""
        global _held
        fd, self._fd, self._poller = self._fd, None, None
        if fd is not None:
            os.close(fd)
            with _lock:
                _held -= 1

    def __del__(self) -> None:  # a sampler dropped unclosed must not hold a descriptor
        self.close()
