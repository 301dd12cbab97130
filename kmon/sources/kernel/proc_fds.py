"""The socket file descriptors of a process, read from /proc/PID/fd."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Collection

import psutil

_SOCKET_PREFIX = "socket:["
_DENIED = (errno.EACCES, errno.EPERM)


def host_pids() -> set[int]:
    """The processes of this host (those of kmon's PID namespace), by a listing of /proc."""
    return {int(name) for name in os.listdir("/proc") if name.isdigit()}


def socket_inodes(pid: int) -> dict[int, int]:
    """Map socket inode -> fd for every socket open in process `pid`.

    Raises psutil.NoSuchProcess when the process is gone and
    psutil.AccessDenied when its fd table may not be read.
    """
    return FdTable(pid).socket_inodes()


REREAD_S = 10.0  # every link of a table read again this often, where nothing says when


class FdTable:
    """The socket fds of one process, read link by link only when they may have changed.

    Reading 2,000 links costs more than the rest of a poll of a process that holds
    2,000 sockets, and listing 2,000 fd numbers costs a sixth of it. Where the kernel
    gives the number of open fds as the size of /proc/PID/fd (Linux 6.2 on), the numbers
    are listed only when that count changes; otherwise on every call. The links are read
    again when the numbers change, when the caller saw a socket vanish (``changed()``: an
    fd may have been closed and its number reused between two polls), and every
    ``reread_s``. A file closed and a socket opened between two calls (the count
    unchanged) shows at the next of these. A caller that can tell when a socket it wants is
    missing asks for the new numbers' links alone (``new_only``: a number closed and opened
    again between two listings shows once every link is read, ``partial`` until then).
    """

    def __init__(self, pid: int, reread_s: float = REREAD_S) -> None:
        self.pid = pid
        self.reread_s = reread_s
        self._names: frozenset[str] = frozenset()
        self._count = 0  # open fds at the last listing, as the kernel counts them (0: unknown)
        self._inodes: dict[int, int] = {}
        self._read_at = float("-inf")
        self.partial = False  # links read for the new numbers alone since every link was

    def changed(self) -> None:
        """Read every link on the next call."""
        self._read_at = float("-inf")

    def socket_inodes(self, reread: bool = True, new_only: bool = False) -> dict[int, int]:
        """Map socket inode -> fd (raises like the module's ``socket_inodes``); the links are
        read again every ``reread_s`` only if ``reread``, and when the numbers changed, those
        of the new numbers alone if ``new_only`` (see the class)."""
        pid = self.pid
        try:
            dir_fd = os.open(f"/proc/{pid}/fd", os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise _translate(exc, pid) from None
        try:
            try:
                count = os.fstat(dir_fd).st_size  # before the listing: a race lists again
                fresh = not reread or time.monotonic() - self._read_at < self.reread_s
                if fresh and count and count == self._count:
                    return self._inodes
                names = frozenset(os.listdir(dir_fd))
            except OSError as exc:
                raise _translate(exc, pid) from None
            self._count = count
            if names == self._names and fresh:
                return self._inodes
            if new_only and fresh and self._names:
                gone = self._names - names
                inodes = {inode: fd for inode, fd in self._inodes.items()
                          if str(fd) not in gone}
                inodes.update(_read_links(pid, dir_fd, names - self._names))
                self.partial = True
            else:
                inodes, self.partial = _read_links(pid, dir_fd, names), False
                self._read_at = time.monotonic()
            self._inodes, self._names = inodes, names
            return inodes
        finally:
            os.close(dir_fd)


class SocketOwners:
    """Which process holds each socket inode, among the processes this user may read.

    Kept from call to call: each process's fd table is looked at as ``FdTable`` does (its
    fd numbers listed again when its fd count changes, its links read again when the
    numbers change, or every ``reread_s``: a socket that took a closed file's or
    socket's place is seen by then), so a search costs a look at each process's fd count.
    The tables of the processes a caller names ``settled`` (those it watches already, whose
    sockets a search is not for) are read again only when their fd numbers change. Where the
    numbers changed, the new ones' links alone are read; only while a wanted socket is found
    nowhere are the tables so read read whole (a number closed and opened again may hide it).
    """

    def __init__(self, reread_s: float = 30.0) -> None:
        self.reread_s = reread_s
        self._tables: dict[int, FdTable] = {}

    def owners(self, inodes: Collection[int], among: Collection[int] | None = None,
               settled: Collection[int] = ()) -> dict[int, int]:
        """inode -> PID for the ``inodes`` some readable process holds (of ``among`` only,
        when given: the fd tables of those alone are looked at)."""
        wanted = set(inodes)
        if not wanted:
            return {}
        if among is None:
            pids = host_pids()
            for gone in self._tables.keys() - pids:
                del self._tables[gone]
        else:
            pids = set(among)
        found: dict[int, int] = {}
        for pid in pids:
            table = self._tables.get(pid)
            if table is None:
                table = self._tables[pid] = FdTable(pid, self.reread_s)
            self._look(table, pid not in settled, wanted, found)
        if wanted.difference(found):
            for pid in pids:
                table = self._tables[pid]
                if table.partial:
                    table.changed()
                    self._look(table, True, wanted, found)
        return found

    @staticmethod
    def _look(table: FdTable, reread: bool, wanted: set[int], found: dict[int, int]) -> None:
        """Note in ``found`` the ``wanted`` sockets ``table`` holds (none where it cannot be
        read: the process exited, or is another user's)."""
        try:
            held = table.socket_inodes(reread, new_only=True)
        except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
            return
        for inode in wanted.intersection(held):  # a table's few sockets, or many wanted
            found[inode] = table.pid


def _read_links(pid: int, dir_fd: int, names: frozenset[str]) -> dict[int, int]:
    inodes: dict[int, int] = {}
    for name in names:
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in _DENIED:
                raise psutil.AccessDenied(pid) from None
            continue  # the fd was closed since listdir (or the process exited)
        if target.startswith(_SOCKET_PREFIX):
            inodes[int(target[len(_SOCKET_PREFIX) : -1])] = int(name)
    return inodes


def open_fd_count(pid: int) -> int | None:
    """How many file descriptors ``pid`` holds (None when they cannot be read): the size
    of /proc/PID/fd where the kernel gives it (Linux 6.2 on), else a listing."""
    try:
        return os.stat(f"/proc/{pid}/fd").st_size or len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def socket_protocol(pid: int, fd: int) -> str | None:
    """The kernel's protocol name of socket `fd` of `pid` ("TCP", "TCPv6", "UNIX-STREAM", ...).

    None when the fd is gone or the kernel does not say (xattr unsupported).
    """
    try:
        raw = os.getxattr(f"/proc/{pid}/fd/{fd}", "system.sockprotoname")
    except OSError:
        return None
    return raw.rstrip(b"\0").decode("ascii", "replace")


def _translate(exc: OSError, pid: int) -> Exception:
    if exc.errno in _DENIED:
        return psutil.AccessDenied(pid)
    if exc.errno in (errno.ENOENT, errno.ESRCH):
        return psutil.NoSuchProcess(pid)
    return exc
