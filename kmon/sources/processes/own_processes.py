"""kmon's own processes on this host, as kmon itself recorded them: what no kmon screen lists.

Every kmon command (a dashboard, ``ps``, ``serve``, ``record``, ``devcluster``; not ``run``,
which becomes the user's program) records its pid, and so does each process kmon runs as its
machinery (a broker JVM, the JMX helper), as a file named by the pid in a directory that only
this user can change (``files.private_cache_dir``: root's is under /var/cache/kmon). A file
holds the boot's id and the process's start time, so a pid the kernel has since given to
another process (or gave before a reboot) is not hidden. Nothing a process says of itself
(its environment, command line or name) counts: another user cannot write root's directory,
so cannot hide a client from root's kmon (docs/security.md, "kmon's own processes").
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from kmon.files import UnsafeFile, private_cache_dir, read_bounded
from kmon.sources.processes.process_info import running_since

DIRECTORY = "processes"  # under kmon's private cache directory
BOOT_ID = "/proc/sys/kernel/random/boot_id"
MAX_ENTRY = 128  # bytes of one file: the boot id and a start time


def register(pid: int) -> None:
    """Record ``pid`` as kmon's own (best effort: where kmon cannot write, it may list
    itself, never hide another); entries of processes gone are removed on the way."""
    started = running_since(pid)
    directory = _directory()
    if started is None or directory is None:
        return
    for stale in _entries(directory).keys() - own_pids():
        _remove(directory / str(stale))
    # written whole under a hidden name, then renamed: another kmon command reading (or
    # pruning) the entries meanwhile never finds it empty, taken for a process gone
    temporary = directory / f".{pid}.{secrets.token_hex(8)}"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w") as entry:
            entry.write(_stamp(started))
        os.rename(temporary, directory / str(pid))
    except OSError:
        _remove(temporary)


def unregister(pid: int) -> None:
    """Forget ``pid`` (it is stopping)."""
    directory = _directory()
    if directory is not None:
        _remove(directory / str(pid))


def own_pids() -> set[int]:
    """The pids recorded by kmon in this user's directory whose process still runs."""
    directory = _directory()
    if directory is None:
        return set()
    return {pid for pid, stamp in _entries(directory).items()
            if (started := running_since(pid)) is not None and stamp == _stamp(started)}


def _stamp(started: int) -> str:
    return f"{_boot_id()} {started}"


def _boot_id() -> str:
    try:
        return read_bounded(BOOT_ID, MAX_ENTRY, "boot id").decode(errors="replace").strip()
    except UnsafeFile:
        return "-"


def _entries(directory: Path) -> dict[int, str]:
    """pid -> what its file holds, for every file of this user named by a pid."""
    entries = {}
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            if not name.isdigit():
                continue
            with contextlib.suppress(UnsafeFile):
                data = read_bounded(directory / name, MAX_ENTRY, follow_links=False,
                                    trusted_only=True)
                entries[int(name)] = data.decode(errors="replace")
    return entries


def _directory() -> Path | None:
    """This user's private directory of entries; None where there is none to trust."""
    try:
        return private_cache_dir(DIRECTORY)
    except UnsafeFile:
        return None


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
