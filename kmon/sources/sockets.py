"""The TCP sockets of one process, as the kernel sees them.

`TcpSocket` is the record every socket reader returns; `open_socket_reader()`
picks the fastest reader this host allows (netlink sock_diag on Linux, psutil
elsewhere or when netlink is refused).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Protocol


@dataclass(frozen=True)
class Endpoint:
    """An IP address and port; IPv6 addresses print in brackets."""

    ip: str
    port: int
    text: str = field(init=False, repr=False, compare=False)  # str(), made once

    def __post_init__(self) -> None:
        ip = self.ip
        object.__setattr__(self, "text",
                           f"[{ip}]:{self.port}" if ":" in ip else f"{ip}:{self.port}")

    def __str__(self) -> str:
        return self.text


class TcpSocket(NamedTuple):
    """One TCP socket owned by a process.

    Times are milliseconds; a field is None when the reader cannot know it
    (psutil knows no idle times, byte counters or rtt). A named tuple: a poll of a
    2,000-socket process makes 2,000 of them (a frozen dataclass costs 6x more).
    """

    inode: int
    fd: int | None
    local: Endpoint
    remote: Endpoint
    state: str  # ESTABLISHED, SYN_SENT, CLOSE_WAIT, ... (psutil's spelling)
    last_sent_ms: int | None = None  # tcpi_last_data_sent
    last_recv_ms: int | None = None  # tcpi_last_data_recv
    bytes_sent: int | None = None  # tcpi_bytes_sent (bytes_acked on old kernels)
    bytes_received: int | None = None  # tcpi_bytes_received
    rtt_ms: float | None = None  # tcpi_rtt / 1000
    source: str = "kernel"  # "kernel" (sock_diag) or "psutil"

    @property
    def idle_ms(self) -> int | None:
        """Time since the last data sent or received, whichever is more recent."""
        sent, received = self.last_sent_ms, self.last_recv_ms
        if sent is None or received is None:
            return received if sent is None else sent
        return sent if sent < received else received


class SocketReader(Protocol):
    """Reads the TCP sockets (all states but LISTEN) of one process."""

    name: str

    def sockets_of(self, pid: int) -> list[TcpSocket]:
        """Raise psutil.NoSuchProcess / psutil.AccessDenied like psutil does."""
        ...


def open_socket_reader(prefer: str = "auto") -> SocketReader:
    """The socket reader to use: "auto", "sock_diag" or "psutil".

    "auto" picks netlink sock_diag on Linux and falls back to psutil when the
    kernel refuses it; "sock_diag" raises SockDiagUnavailable (an OSError)
    instead of falling back. Unknown names raise ValueError.
    """
    import sys

    from kmon.sources.psutil_sockets import PsutilSocketReader

    if prefer == "psutil" or (prefer == "auto" and not sys.platform.startswith("linux")):
        return PsutilSocketReader()
    if prefer not in ("auto", "sock_diag"):
        raise ValueError(f"unknown socket reader {prefer!r} (auto, sock_diag, psutil)")
    from kmon.sources.sockdiag import SockDiagReader, SockDiagUnavailable

    try:
        return SockDiagReader()
    except SockDiagUnavailable:
        if prefer == "sock_diag":
            raise
        return PsutilSocketReader()
