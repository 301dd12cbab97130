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
                 follow_links: bool = True, trusted_only: bool = False) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them.

    Raises UnsafeFile for anything else: missing, unreadable, not a regular
    file (a FIFO, a device, a directory), a link when ``follow_links`` is off,
    larger than ``limit`` or, with ``trusted_only``, a file another user could
    have written (see ``untrusted_because``).
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        why = "is a symbolic link" if not follow_links and Path(path).is_symlink() else (
            err.strerror or str(err))
        raise UnsafeFile(f"{what} {path}: {why}") from err
    info = os.fstat(fd)
    why = "not a regular file" if not stat.S_ISREG(info.st_mode) else (
        untrusted_because(info) if trusted_only else None)
    if why:
        os.close(fd)
        raise UnsafeFile(f"{what} {path}: {why}")
    with os.fdopen(fd, "rb") as file:
        if info.st_size > limit:
            raise UnsafeFile(f"{what} {path}: larger than {limit:,} bytes")
        data = file.read(limit + 1)
    if len(data) > limit:
        raise UnsafeFile(f"{what} {path}: larger than {limit:,} bytes")
    return data


def untrusted_because(info: os.stat_result) -> str | None:
    """Why a file with ``info`` may hold another user's words (None: it cannot): it
    belongs to neither root nor the user kmon runs as, or its group or others may
    write it. Used for what kmon acts on (a config file names libraries to load)."""
    if info.st_uid not in (0, os.geteuid()):
        return (f"owned by uid {info.st_uid}, not by root or this user (uid {os.geteuid()}); "
                "kmon reads only its own or root's")
    if info.st_mode & 0o022:
        return (f"writable by users other than its owner (mode {stat.S_IMODE(info.st_mode):04o}); "
                "chmod go-w it")
    return None


ROOT_CACHE = Path("/var/cache/kmon")  # root's caches: every directory root's own


def root_only(path: Path) -> bool:
    """True when only root can change ``path``: the file and every directory above it (after
    links) belong to root and are not group or other writable (a root-owned sticky
    directory, such as /tmp, counts: others cannot rename root's entries in it)."""
    real = Path(os.path.realpath(path))
    for part in (real, *real.parents):
        try:
            info = os.stat(part)
        except OSError:
            return False
        sticky_dir = stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX
        if info.st_uid != 0 or (info.st_mode & 0o022 and not sticky_dir):
            return False
    return True


def private_cache_dir(name: str) -> Path:
    """kmon's cache directory ``name``, which only this user can change.

    As root: ``/var/cache/kmon/NAME``, every directory up to ``/`` root's own (never one
    found through $HOME or $XDG_CACHE_HOME, which another user may control under
    ``sudo -E`` or ``su`` without ``-``). Otherwise ``$XDG_CACHE_HOME/kmon/NAME``
    (``~/.cache``), 0700, this user's, no link. Raises UnsafeFile when it cannot be so.
    """
    if os.geteuid() == 0:
        path = ROOT_CACHE / name
        try:
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as err:
            raise UnsafeFile(f"cannot make {path}: {err.strerror or err}") from err
        if path.is_symlink() or not root_only(path):
            raise UnsafeFile(f"{path} (or a directory above it) can be changed by users "
                             "other than root")
        return path
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    path = base / "kmon" / name
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        for part in (path.parent, path):
            info = part.lstat()
            if part.is_symlink() or info.st_uid != os.geteuid():
                raise UnsafeFile(f"{part} is not a private directory of this user")
            if info.st_mode & 0o077:
                part.chmod(0o700)
    except UnsafeFile:
        raise
    except OSError as err:
        raise UnsafeFile(f"cannot make {path}: {err.strerror or err}") from err
    return path


def private_file(path: Path) -> bool:
    """True when ``path`` is a regular file (not a link) of this user that no one else can
    write: a cached file kmon may hand to a program it runs."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return (stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()
            and not info.st_mode & 0o022)
