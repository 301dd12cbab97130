"""Files and directories someone else may control: read bounded, written without following links.

kmon often runs as root on other users' files (recordings, config files,
value files, spools). A FIFO would hang a plain ``open``, ``/dev/zero`` would
never end, and a huge file would cost memory: ``read_bounded`` refuses all of
them with one clear ``UnsafeFile`` message. Where kmon writes (recordings,
analysis results), a link planted in the directory could point a root write at
any file: ``OutputDir`` holds the directory open once verified and makes every
name relative to it, new files under unpredictable names with ``O_EXCL |
O_NOFOLLOW``, published by a rename inside that same directory.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


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
    refused = "not a regular file" if not stat.S_ISREG(info.st_mode) else (
        untrusted_because(info) if trusted_only else None)
    if refused:
        os.close(fd)
        raise UnsafeFile(f"{what} {path}: {refused}")
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


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def unsafe_output_dir(info: os.stat_result) -> str | None:
    """Why root must not write into a directory with ``info`` (None: it may). Another
    user's directory, or one others may write, could have links planted in it; kmon
    running as anyone else writes where that user may."""
    if os.geteuid() != 0:
        return None
    if info.st_uid != 0:
        return f"owned by uid {info.st_uid}; as root kmon writes only into root's own directories"
    if info.st_mode & 0o022:
        return (f"writable by users other than root (mode {stat.S_IMODE(info.st_mode):04o}); "
                "chmod go-w it")
    return None


def _made_dir(parent: int, name: str, shown: str) -> int:
    """A descriptor of the directory ``name`` in ``parent``, made if missing, never through
    a link; UnsafeFile naming ``shown`` if it cannot be."""
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o755, dir_fd=parent)
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as err:
        raise UnsafeFile(f"cannot write into {shown}: {_why_not_a_dir(parent, name, err)}"
                         ) from err


# an output path -> it with the links above it resolved, as at its first open (and that
# resolved path -> itself): a link put above it later is refused, not followed
_RESOLVED: dict[Path, Path] = {}
_MAX_RESOLVED = 256


def _resolved(path: Path) -> Path:
    """``path`` with the links above it resolved as they were at its first open."""
    known = _RESOLVED.get(path)
    if known is None:
        known = Path(os.path.realpath(path.parent)) / path.name
        if len(_RESOLVED) < _MAX_RESOLVED:
            _RESOLVED[path] = _RESOLVED[known] = known
    return known


def _why_not_a_dir(parent: int, name: str, err: OSError) -> str:
    """Why ``name`` in ``parent`` could not be opened as a directory, in a few words."""
    try:
        link = stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode)
    except OSError:
        link = False
    if link:
        return "is a symbolic link; kmon writes only into a real directory"
    return "not a directory" if err.errno == errno.ENOTDIR else err.strerror or str(err)


class OutputDir:
    """A directory kmon writes into, held open by descriptor once verified.

    Made with ``open`` (the last component is never a link; as root, root's own and
    writable by no one else) and ``subdir``; every name below is opened, renamed and
    removed relative to the descriptor, so renaming a directory above it or planting a
    link redirects nothing. Close it (or use it as a context manager) when done.
    """

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> OutputDir:
        """``path`` as an output directory, made if missing; UnsafeFile saying why not.

        Walked from ``/`` a directory at a time, each opened relative to the one above and
        never through a link: the links above it are resolved at its first open only
        (``_resolved``). A recording reopens its root at every rotation and for its
        retention; a link put in place of a directory above it since is refused, not
        followed (another user's directory above it could be renamed and a link to
        anywhere put in its place)."""
        path = _resolved(Path(os.path.abspath(path)))
        try:
            parent = os.open("/", _DIR_FLAGS)
        except OSError as err:
            raise UnsafeFile(f"cannot write into {path}: {err.strerror or err}") from err
        try:
            for at, name in enumerate(path.parts[1:-1], start=2):
                child = _made_dir(parent, name, f"{path} ({Path(*path.parts[:at])})")
                os.close(parent)
                parent = child
            return cls._child(parent, path.name, path)
        finally:
            os.close(parent)

    @classmethod
    def open_writable(cls, path: str | os.PathLike[str]) -> OutputDir:
        """``open``, once a file could be made there (one is made and removed): a place
        to refuse before any work, not after it."""
        out = cls.open(path)
        probe = f".kmon-probe.{secrets.token_hex(8)}"
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600,
                             dir_fd=out.fd))
            os.unlink(probe, dir_fd=out.fd)
        except OSError as err:
            out.close()
            raise UnsafeFile(f"cannot write into {out.path}: {err.strerror or err}") from err
        return out

    def subdir(self, name: str) -> OutputDir:
        """The directory ``name`` inside this one, made if missing, verified as ``open`` does."""
        return self._child(self.fd, name, self.path / name)

    @classmethod
    def _child(cls, parent: int, name: str, path: Path) -> OutputDir:
        fd = _made_dir(parent, name, str(path))
        why = unsafe_output_dir(os.fstat(fd))
        if why:
            os.close(fd)
            raise UnsafeFile(f"refusing to write into {path}: {why}")
        return cls(fd, path)

    @contextlib.contextmanager
    def replace(self, name: str) -> Iterator[BinaryIO]:
        """A new file to write, published as ``name`` when the block ends without error.

        It is written under a hidden, unpredictable name (``O_EXCL | O_NOFOLLOW``, so a
        planted name is never opened), synced, renamed over ``name`` within this
        directory (an existing ``name``, a link included, is replaced, never followed),
        and the directory synced; on error the hidden file is removed.
        """
        temporary = f".{name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o644, dir_fd=self.fd)
        try:
            with os.fdopen(fd, "wb") as file:
                yield file
                file.flush()
                os.fsync(file.fileno())
            os.rename(temporary, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=self.fd)
            raise
        self.sync()


    def open_read(self, name: str) -> BinaryIO:
        """The regular file ``name`` in this directory, for reading; never through a link."""
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.fd)
        return os.fdopen(fd, "rb")

    def rename(self, source: str, target: str) -> None:
        """Rename ``source`` to ``target`` within this directory and make it durable."""
        os.rename(source, target, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        self.sync()

    def remove(self, name: str) -> None:
        os.unlink(name, dir_fd=self.fd)

    def size(self, name: str) -> int:
        return os.stat(name, dir_fd=self.fd, follow_symlinks=False).st_size

    def sync(self) -> None:
        """Make the names in this directory durable (renames, removals)."""
        os.fsync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> OutputDir:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
