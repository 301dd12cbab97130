"""Writing the agent's spool: one private directory per user, one atomic file per client.

The format, the directory's location and the reader are in ``kmon.sources.clients.spool``.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from pathlib import Path

from kmon.sources.clients.spool import SpoolError


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` with mode 0700, or check that an existing one is private and ours."""
    try:
        path.mkdir(mode=0o700, parents=False)
    except FileExistsError:
        pass
    except FileNotFoundError:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.mkdir(mode=0o700, exist_ok=True)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise SpoolError(f"spool {path} is not a plain directory; refusing to use it")
    if info.st_uid != os.getuid():
        raise SpoolError(f"spool {path} belongs to uid {info.st_uid}, not to you")
    if info.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def file_name(pid: int, instance: str) -> str:
    """The spool file name of one client instance of one process."""
    return f"{pid}-{re.sub(r'[^A-Za-z0-9._-]', '_', instance)}.json"


def write_record(directory: Path, pid: int, instance: str, record_json: str) -> Path:
    """Atomically replace this instance's spool file with ``record_json``."""
    target = directory / file_name(pid, instance)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(record_json)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target
