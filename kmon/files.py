"""Reading files that someone else may control: regular files only, bounded, never blocking.

kmon often runs as root on other users' files (recordings, config files,
value files, spools). A FIFO would hang a plain ``open``, ``/dev/zero`` would
never end, and a huge file would cost memory: ``read_bounded`` refuses all of
them with one clear ``UnsafeFile`` message.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class UnsafeFile(OSError):
    """A file kmon will not read; the message says why in one line."""


def read_bounded(path: str | os.PathLike[str], limit: int, what: str = "file",
                 follow_links: bool = True) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    Raises UnsafeFile for anything else: missing, unreadable, not a regular
    file (a FIFO, a device, a directory), a link when ``follow_links`` is off,
    or larger than ``limit``.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        why = "is a symbolic link" if not follow_links and Path(path).is_symlink() else (
            err.strerror or str(err))
        raise UnsafeFile(f"{what} {path}: {why}") from err
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise UnsafeFile(f"{what} {path}: not a regular file")
    with os.fdopen(fd, "rb") as file:
        if info.st_size > limit:
            raise UnsafeFile(f"{what} {path}: larger than {limit:,} bytes")
        data = file.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFile(f"{what} {path}: larger than {limit:,} bytes")
    return data
