"""The socket file descriptors of a process, read from /proc/PID/fd."""

from __future__ import annotations

import errno
import os

import psutil

_SOCKET_PREFIX = "socket:["
_DENIED = (errno.EACCES, errno.EPERM)


def socket_inodes(pid: int) -> dict[int, int]:
    """Map socket inode -> fd for every socket open in process `pid`.

    Raises psutil.NoSuchProcess when the process is gone and
    psutil.AccessDenied when its fd table may not be read.
    """
    try:
        dir_fd = os.open(f"/proc/{pid}/fd", os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise _translate(exc, pid) from None
    try:
        try:
            names = os.listdir(dir_fd)
        except OSError as exc:
            raise _translate(exc, pid) from None
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
    finally:
        os.close(dir_fd)


def open_fd_count(pid: int) -> int | None:
    """How many file descriptors ``pid`` holds (None when they cannot be read)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
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
