"""The inet_diag wire format kmon speaks over netlink sock_diag: the requests it sends (exact
lookups, dumps with a port filter) and the socket messages it reads back (``struct inet_diag_msg``
and its tcp_info attribute). No I/O: ``sockdiag`` sends and receives them."""

from __future__ import annotations

import errno
import functools
import socket
import struct
from collections.abc import Collection
from dataclasses import dataclass

from kmon.sources.kernel.sockets import Endpoint, TcpSocket, TcpStall, shared_endpoint
from kmon.tcp_state import TcpState, kernel_number

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x1
NLM_F_DUMP = 0x300
INET_DIAG_INFO = 2
INET_DIAG_REQ_BYTECODE = 1
INET_DIAG_BC_JMP = 1
INET_DIAG_BC_S_GE = 2
INET_DIAG_BC_S_LE = 3
INET_DIAG_BC_D_GE = 4
INET_DIAG_BC_D_LE = 5

# Linux TCP states by number (TcpState is declared in the kernel's order), as plain strings
STATE_NAMES = ("NONE", *(state.value for state in TcpState),
               TcpState.SYN_RECV.value,  # TCP_NEW_SYN_RECV: a request socket
               "BOUND_INACTIVE")
_STATE_NAME_OF = STATE_NAMES + tuple(str(n) for n in range(len(STATE_NAMES), 256))  # by byte
LISTEN_STATE = kernel_number(TcpState.LISTEN)
# TIME_WAIT and NEW_SYN_RECV are mini sockets without an inode, so no fd can
# hold one: leaving them out keeps dumps small on busy hosts. LISTEN is kept
# in dumps only to recognise (and then ignore) a process's listeners.
DUMP_STATES = 0x3FFF & ~((1 << 6) | (1 << 12) | 1)

NLMSGHDR = struct.Struct("=IHHII")  # len, type, flags, seq, pid
_REQ_V2 = struct.Struct("=BBBBI")  # family, protocol, ext, pad, states; then the sockid
U32 = struct.Struct("=I")
I32 = struct.Struct("=i")
_RTATTR = struct.Struct("=HH")
NLMSG_HDR_LEN = NLMSGHDR.size
_SOCKID = slice(4, 52)  # struct inet_diag_sockid inside struct inet_diag_msg
INODE_AT = 68  # __u32 idiag_inode inside struct inet_diag_msg
DIAG_MSG_LEN = 72
# struct tcp_info (linux/tcp.h): retransmits@2, probes@3, last_data_sent@44,
# last_data_recv@52, rtt@68, bytes_acked@120, bytes_received@128, bytes_sent@200 (Linux >=
# 4.19); the rest of a stalled socket's figures (``_stall``): backoff@4, rto@8, unacked@24,
# last_ack_recv@56, total_retrans@100.
_TCPI_FULL = struct.Struct("=2xH40xI4xI12xI56xQ64xQ")  # retransmits and probes as one
_TIMERS = {1: "retransmit", 2: "keepalive", 4: "probe"}  # idiag_timer, at byte 2
_TCPI_STALL = (8, 24, 56, 100)  # rto, unacked, last_ack_recv, total_retrans: each "=I"
_TCPI_FULL_LEN = 208
_MAPPED_V4 = b"\0" * 10 + b"\xff\xff"


@dataclass(slots=True)
class Known:
    """A socket whose id we learned from a dump: enough to look it up exactly."""

    request: bytes  # a ready-made exact-lookup netlink message (seq = inode)
    local: Endpoint
    remote: Endpoint
    family: int


def diag_request(
    seq: int, flags: int, family: int, ext: int, states: int, sockid: bytes | None,
    bytecode: bytes = b"",
) -> bytes:
    """A netlink message carrying one struct inet_diag_req_v2 (and a filter for a dump)."""
    body = _REQ_V2.pack(family, socket.IPPROTO_TCP, ext, 0, states) + (sockid or bytes(48))
    if bytecode:
        body += _RTATTR.pack(4 + len(bytecode), INET_DIAG_REQ_BYTECODE) + bytecode
    return NLMSGHDR.pack(NLMSG_HDR_LEN + len(body), SOCK_DIAG_BY_FAMILY, flags, seq, 0) + body


def port_filter(local: Collection[int] = (), remote: Collection[int] = ()) -> bytes:
    """inet_diag bytecode passing the sockets whose local port is one of ``local`` or whose
    remote port is one of ``remote``.

    As ``ss`` compiles ``sport = P or dport = Q ...``: per port, "port >= P" then
    "port <= P" (a condition's operand is the ``no`` field of the word after it), whose
    failure jumps 4 bytes past the block, into the next port's; between blocks, a JMP
    whose jump goes to the end (the socket passes). Past the last block: rejected. The
    kernel accepts a jump only to an op reached by following the ``yes`` jumps.
    """
    op = struct.Struct("=BBH")
    blocks = [(INET_DIAG_BC_S_GE, INET_DIAG_BC_S_LE, port) for port in sorted(local)]
    blocks += [(INET_DIAG_BC_D_GE, INET_DIAG_BC_D_LE, port) for port in sorted(remote)]
    total = 20 * len(blocks) - 4
    code = b""
    for i, (at_least, at_most, port) in enumerate(blocks):
        code += op.pack(at_least, 8, 20) + op.pack(0, 0, port)
        code += op.pack(at_most, 8, 12) + op.pack(0, 0, port)
        if i < len(blocks) - 1:
            code += op.pack(INET_DIAG_BC_JMP, 4, total - len(code))
    return code


@functools.lru_cache(maxsize=16)
def remote_port_filter(ports: frozenset[int]) -> bytes:
    """``port_filter`` of remote ports, made once per set of ports."""
    return port_filter(remote=ports)


def known_from_msg(msg: memoryview, inode: int) -> Known:
    """Remember a dumped socket's id as a ready exact-lookup request (seq = inode)."""
    family = msg[0]
    request = diag_request(
        inode, NLM_F_REQUEST, family, 1 << (INET_DIAG_INFO - 1), DUMP_STATES,
        bytes(msg[_SOCKID])
    )
    return Known(request, *socket_ends(msg), family)


def socket_ends(msg: memoryview) -> tuple[Endpoint, Endpoint]:
    """A dumped socket's local and remote endpoints."""
    family = msg[0]
    sockid = bytes(msg[_SOCKID])
    sport, dport = struct.unpack_from(">HH", sockid)
    return (Endpoint(diag_address(family, sockid[4:20]), sport),
            _remote(family, sockid[20:36], dport))


@functools.lru_cache(maxsize=1024)
def _remote(family: int, raw: bytes, port: int) -> Endpoint:
    """A remote endpoint, one object for all the sockets to it (a client's few brokers):
    the sets and tables each poll builds of remotes compare them by identity."""
    return shared_endpoint(diag_address(family, raw), port)


def diag_address(family: int, raw: bytes) -> str:
    """The text of an address as inet_diag packs it (IPv4-mapped IPv6 addresses as IPv4)."""
    if family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[:4])
    if raw[:12] == _MAPPED_V4:
        return socket.inet_ntop(socket.AF_INET, raw[12:])
    return socket.inet_ntop(socket.AF_INET6, raw)


class MessageReader:
    """Reads the socket messages (``struct inet_diag_msg`` and its attributes) of one dump or
    of one poll's exact lookups' replies.

    The messages of one answer have their attributes in the same order, so once one showed
    where its whole tcp_info is, the next ones are read with one unpack (``_full_layout``);
    a message laid out otherwise takes the general path (``socket_from_msg``)."""

    __slots__ = ("info_at", "layout")

    def __init__(self) -> None:
        self.info_at = 0  # where the last message read whole had its INET_DIAG_INFO
        self.layout: struct.Struct | None = None  # _full_layout(info_at), if that was whole

    def read(self, view: memoryview, at: int, length: int, known: dict[int, Known],
             inodes: dict[int, int]) -> TcpSocket | None:
        """The socket of the ``length``-byte message at ``at``, if ``known`` holds its inode
        (then ``inodes`` holds its fd)."""
        layout = self.layout
        if layout is not None and length >= layout.size:
            (state, inode, info_len, info_type, retrying, sent, recv, rtt, received,
             bytes_sent) = layout.unpack_from(view, at)
            if (info_type == INET_DIAG_INFO and info_len >= 4 + _TCPI_FULL_LEN
                    and self.info_at + info_len <= length):
                ours = known.get(inode)
                if ours is None:
                    return None
                if retrying:
                    return TcpSocket(  # as socket_from_msg makes it
                        inode, inodes[inode], ours.local, ours.remote, _STATE_NAME_OF[state],
                        sent, recv, bytes_sent, received, rtt / 1000, "kernel",
                        _stall(view, at, at + self.info_at + 4, info_len - 4))
                return TcpSocket(  # as socket_from_msg makes it
                    inode, inodes[inode], ours.local, ours.remote, _STATE_NAME_OF[state],
                    sent, recv, bytes_sent, received, rtt / 1000)
        inode = U32.unpack_from(view, at + INODE_AT)[0]
        ours = known.get(inode)
        if ours is None:
            return None
        msg = view[at : at + length]
        info_at = self.info_at = _info_at(msg, self.info_at)
        self.layout = _full_layout(info_at) if _whole_info(msg, info_at) else None
        return socket_from_msg(msg, inode, inodes[inode], ours, info_at)


def socket_from_msg(msg: memoryview, inode: int, fd: int, known: Known,
                     info_at: int) -> TcpSocket:
    """Build a TcpSocket from an inet_diag_msg whose INET_DIAG_INFO attribute starts at
    ``info_at`` (``_info_at``; 0: it has none)."""
    sent = recv = bytes_sent = bytes_received = rtt = stall = None
    if info_at:
        size = _RTATTR.unpack_from(msg, info_at)[0] - 4
        if size >= _TCPI_FULL_LEN:  # any kernel since 4.19
            (retrying, sent, recv, rtt, bytes_received,
             bytes_sent) = _TCPI_FULL.unpack_from(msg, info_at + 4)
            rtt /= 1000
        else:
            sent, recv, rtt, bytes_sent, bytes_received = _short_tcp_info(msg, info_at + 4, size)
            retrying = any(msg[info_at + 6 : info_at + 4 + min(size, 4)])
        if retrying:
            stall = _stall(msg, 0, info_at + 4, size)
    return TcpSocket(  # by position: 2,000 a poll
        inode, fd, known.local, known.remote, _STATE_NAME_OF[msg[1]],
        sent, recv, bytes_sent, bytes_received, rtt, "kernel", stall)


@functools.lru_cache(maxsize=8)
def _full_layout(info_at: int) -> struct.Struct:
    """One unpack of a message whose INET_DIAG_INFO attribute starts at ``info_at`` and holds
    a whole tcp_info: (state, inode, the attribute's length and type, then ``_TCPI_FULL``'s
    fields)."""
    return struct.Struct(f"=xB{INODE_AT - 2}xI{info_at - DIAG_MSG_LEN}xHH"
                         + _TCPI_FULL.format.lstrip("="))


def _whole_info(msg: memoryview, info_at: int) -> bool:
    """Whether ``msg``'s INET_DIAG_INFO attribute (at ``info_at``; 0: none) holds a whole
    tcp_info, as ``_full_layout`` reads it."""
    return bool(info_at) and _RTATTR.unpack_from(msg, info_at)[0] >= 4 + _TCPI_FULL_LEN


def _info_at(msg: memoryview, hint: int = 0) -> int:
    """Where the INET_DIAG_INFO attribute starts in ``msg`` (0: it has none). The messages
    of one answer (a dump, a poll's replies) have their attributes in the same order, so
    ``hint``, where the last one had it, is nearly always right."""
    end = len(msg)
    if hint and hint + 4 <= end:
        rta_len, rta_type = _RTATTR.unpack_from(msg, hint)
        if rta_type == INET_DIAG_INFO and 4 <= rta_len <= end - hint:
            return hint
    off = DIAG_MSG_LEN
    while off + 4 <= end:
        rta_len, rta_type = _RTATTR.unpack_from(msg, off)
        if rta_len < 4:
            return 0
        if rta_type == INET_DIAG_INFO:
            return off if rta_len <= end - off else 0
        off += (rta_len + 3) & ~3
    return 0


def _short_tcp_info(
    msg: memoryview, off: int, size: int
) -> tuple[int | None, int | None, float | None, int | None, int | None]:
    """(last_data_sent, last_data_recv, rtt ms, bytes sent, bytes received) from the tcp_info
    of a kernel older than 4.19 (each field where it is long enough)."""
    rtt_us = _field(msg, off, size, 68, "=I")
    return (
        _field(msg, off, size, 44, "=I"),
        _field(msg, off, size, 52, "=I"),
        None if rtt_us is None else rtt_us / 1000,
        _field(msg, off, size, 120, "=Q"),  # bytes_acked: the closest counter before 4.19
        _field(msg, off, size, 128, "=Q"),
    )


def _stall(msg: memoryview, at: int, off: int, size: int) -> TcpStall:
    """The unanswered sending of the socket whose message starts at ``at`` and whose
    ``size``-byte tcp_info, at ``off``, shows retransmits or probes (read only then: most
    sockets show none)."""
    retransmits, probes, backoff = bytes(msg[off + 2 : off + min(size, 5)]).ljust(3, b"\0")
    rto, unacked, last_ack, total = (_field(msg, off, size, i, "=I") for i in _TCPI_STALL)
    return TcpStall(_TIMERS.get(msg[at + 2], "none"), retransmits, probes, backoff,
                    None if rto is None else rto / 1000, unacked, last_ack, total)


def _field(msg: memoryview, off: int, size: int, at: int, fmt: str) -> int | None:
    """The tcp_info field at offset `at`, or None if this kernel's tcp_info is too short."""
    if size < at + struct.calcsize(fmt):
        return None
    return struct.unpack_from(fmt, msg, off + at)[0]


def raise_error(buf: bytearray, off: int) -> None:
    err = -I32.unpack_from(buf, off + NLMSG_HDR_LEN)[0]
    raise OSError(err, f"sock_diag: {errno.errorcode.get(err, err)}")
