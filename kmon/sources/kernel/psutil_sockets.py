"""Read a process's TCP sockets through psutil: portable, but no tcp_info."""

from __future__ import annotations

from collections.abc import Collection

import psutil

from kmon.sources.kernel.proc_fds import socket_inodes
from kmon.sources.kernel.sockets import Endpoint, TcpSocket

_MAPPED_V4 = "::ffff:"


class PsutilSocketReader:
    """SocketReader over psutil; idle times, byte counters and rtt stay None."""

    name = "psutil"

    def sockets_of(self, pid: int) -> list[TcpSocket]:
        """The TCP sockets (all states but LISTEN, with a remote address) of `pid`, by fd,
        but those accepted on a port it listens on (another program's connections to it).

        Raises psutil.NoSuchProcess / psutil.AccessDenied.
        """
        proc = psutil.Process(pid)
        read = getattr(proc, "net_connections", None) or proc.connections
        every = read(kind="tcp")
        served = {c.laddr.port for c in every if c.status == psutil.CONN_LISTEN and c.laddr}
        conns = [
            c for c in every if c.status != psutil.CONN_LISTEN and c.raddr and c.laddr
            and c.laddr.port not in served
        ]
        inode_of_fd = _inodes_by_fd(pid) if conns else {}
        found = [
            TcpSocket(
                inode=inode_of_fd.get(c.fd, 0),
                fd=c.fd if c.fd >= 0 else None,
                local=Endpoint(_plain_ip(c.laddr.ip), c.laddr.port),
                remote=Endpoint(_plain_ip(c.raddr.ip), c.raddr.port),
                state=c.status,
                source="psutil",
            )
            for c in conns
        ]
        found.sort(key=lambda s: s.fd if s.fd is not None else -1)
        return found


    def read_ahead(self, pids: Collection[int]) -> None:
        """Nothing: psutil reads one process at a time."""

    def connects(self, pids: Collection[int], complete: bool) -> None:
        """Nothing: psutil keeps nothing from one read to the next."""


def _inodes_by_fd(pid: int) -> dict[int, int]:
    """fd -> socket inode, or {} if the fd table cannot be read (any more)."""
    try:
        return {fd: inode for inode, fd in socket_inodes(pid).items()}
    except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
        return {}


def _plain_ip(ip: str) -> str:
    """Show an IPv4-mapped IPv6 address (::ffff:127.0.0.1) as plain IPv4."""
    if ip.startswith(_MAPPED_V4) and "." in ip:
        return ip[len(_MAPPED_V4) :]
    return ip
