"""A process's open file descriptors and the limit on them, from /proc (bounded reads)."""

from __future__ import annotations

from kmon.sources.kernel.proc_fds import open_fd_count

__all__ = ["open_fd_count", "open_fd_limit"]

LIMITS_MAX_BYTES = 16_384  # /proc/PID/limits is ~1.5 KiB; read no more than this


def open_fd_limit(pid: int) -> int | None:
    """The soft limit on ``pid``'s open files (None when unlimited or unreadable)."""
    try:
        with open(f"/proc/{pid}/limits", "rb") as file:
            text = file.read(LIMITS_MAX_BYTES).decode("ascii", "replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Max open files"):
            soft = line[len("Max open files"):].split()[:1]
            return int(soft[0]) if soft and soft[0].isdigit() else None
    return None
