"""The TCP sockets of one process, as the kernel sees them.

`TcpSocket` is the record every socket reader returns and `SocketReader` what
one offers (``kmon.sources.kernel.socket_readers`` picks the reader this host allows).
"""

from __future__ import annotations

import functools
import ipaddress
import operator
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

MAX_PORT = 65535  # the largest TCP port


@functools.lru_cache(maxsize=4096)  # a host's sockets share a few addresses
def normalize_ip(ip: str) -> str:
    """An IPv4-mapped IPv6 address as plain IPv4; other addresses unchanged."""
    try:
        addr = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return ip
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
        return str(addr.ipv4_mapped)
    return str(addr)


@dataclass(frozen=True)
class Endpoint:
    """An IP address and port; IPv6 addresses print in brackets."""

    ip: str
    port: int
    text: str = field(init=False, repr=False, compare=False)  # str(), made once
    # hash(), made once: endpoints key the tables every poll looks each socket up in
    hashed: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ip = self.ip
        object.__setattr__(self, "text",
                           f"[{ip}]:{self.port}" if ":" in ip else f"{ip}:{self.port}")
        object.__setattr__(self, "hashed", hash((ip, self.port)))

    def __hash__(self) -> int:
        return self.hashed

    def __reduce__(self) -> tuple:
        return Endpoint, (self.ip, self.port)  # made again: another process hashes otherwise

    def __str__(self) -> str:
        return self.text


@functools.lru_cache(maxsize=4096)  # a host's sockets reach a few brokers
def shared_endpoint(ip: str, port: int) -> Endpoint:
    """The one ``Endpoint`` of ``ip``:``port`` that the sockets' remote ends and the brokers
    kmon knows share: the tables each poll looks every socket's peer up in (the brokers
    known, by endpoint) then find it by identity, with no comparison of fields."""
    return Endpoint(ip, port)


class TcpStall(NamedTuple):
    """A socket's unanswered sending, from its tcp_info: read only for a socket the kernel is
    retransmitting or probing on (its retransmits or probes not 0); a field is None where the
    kernel's tcp_info is too short."""

    timer: str  # the timer the kernel runs on it: retransmit, keepalive, probe (zero window
    # or a send that cannot leave), or none (inet_diag's idiag_timer)
    retransmits: int  # tcpi_retransmits: RTO expiries of the oldest unacknowledged segment
    probes: int  # tcpi_probes: keepalive or zero-window probes sent unanswered
    backoff: int  # tcpi_backoff: how often the RTO was doubled
    rto_ms: float | None  # tcpi_rto / 1000 (backed off)
    unacked: int | None  # tcpi_unacked: segments sent, not acknowledged
    last_ack_ms: int | None  # tcpi_last_ack_recv: since the peer last acknowledged anything
    total_retrans: int | None  # tcpi_total_retrans


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
    stall: TcpStall | None = None  # None while nothing goes unanswered (or unknown)

    @property
    def idle_ms(self) -> int | None:
        """Time since the last data sent or received, whichever is more recent."""
        sent, received = self.last_sent_ms, self.last_recv_ms
        if sent is None or received is None:
            return received if sent is None else sent
        return sent if sent < received else received


# what the kernel says of a socket but its ages: a TcpSocket's id, fd, ends, state, byte
# counters and stall (all its fields but last_sent_ms, last_recv_ms, rtt_ms and source)
facts_of = operator.itemgetter(0, 1, 2, 3, 4, 7, 8, 11)


def socket_facts(sockets: Iterable[TcpSocket]) -> tuple[tuple[object, ...], ...]:
    """What the kernel says of each socket but its ages: its id, fd, ends, state, byte counters
    and stall; the same from poll to poll while it carries nothing."""
    return tuple(map(facts_of, sockets))


class SocketReader(Protocol):
    """Reads the TCP sockets (all states but LISTEN) of one process."""

    name: str

    def sockets_of(self, pid: int) -> list[TcpSocket]:
        """Raise psutil.NoSuchProcess / psutil.AccessDenied like psutil does."""
        ...

    def read_ahead(self, pids: Collection[int]) -> None:
        """``pids`` are about to be read in turn: read them together now where that is
        cheaper (sockets_of then answers from it for a moment), or do nothing."""
        ...

    def connects(self, pids: Collection[int], complete: bool) -> None:
        """The processes the kernel saw connect since the last call (``complete``: none was
        missed). A reader that keeps what processes hold may read it again for those
        alone, and rarely for the others while the kernel misses none."""
        ...

