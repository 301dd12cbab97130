"""Which side of a closed connection closed first, as the kernel still remembers it.

When a socket leaves its process, its 4-tuple may live on in the kernel: the
side that closed first holds it in FIN_WAIT1/FIN_WAIT2/CLOSING/TIME_WAIT (60 s
on Linux), the other in CLOSE_WAIT/LAST_ACK. ``closing_states`` looks a batch
of (local, remote) endpoint pairs up in one netlink dump of those states only
(no tcp_info: small messages), or with psutil where netlink is refused.
``time_wait_pairs`` lists the host's connections to given ports in TIME_WAIT:
those closed first by this host's side within the last 60 s.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Collection

import psutil

from kmon.sources.kernel.diag_messages import (
    NETLINK_SOCK_DIAG,
    NLM_F_DUMP,
    NLM_F_REQUEST,
    NLMSG_DONE,
    NLMSG_ERROR,
    SOCK_DIAG_BY_FAMILY,
    diag_address,
    diag_request,
)
from kmon.sources.kernel.sockets import Endpoint, normalize_ip
from kmon.tcp_state import TcpState, kernel_number

Pair = tuple[Endpoint, Endpoint]  # (local, remote)
CLOSING = {kernel_number(state): state.value
           for state in (TcpState.FIN_WAIT1, TcpState.FIN_WAIT2, TcpState.TIME_WAIT,
                         TcpState.CLOSE_WAIT, TcpState.LAST_ACK, TcpState.CLOSING)}
_STATES = sum(1 << state for state in CLOSING)
TIME_WAIT = kernel_number(TcpState.TIME_WAIT)
MAX_TIME_WAITS = 65_536  # pairs listed at most (a host drowning in TIME_WAIT is cut short)
_HEADER = struct.Struct("=IHHII")
_MAX_BYTES = 64 << 20  # a dump larger than this (a host drowning in TIME_WAIT) is cut short


def closing_states(pairs: Collection[Pair]) -> dict[Pair, str]:
    """The closing state the kernel holds for each of ``pairs`` still known to it."""
    if not pairs:
        return {}
    wanted = set(pairs)
    try:
        return _by_netlink(_STATES, wanted.__contains__)
    except OSError:
        return _by_psutil(wanted)


def time_wait_pairs(ports: Collection[int]) -> set[Pair]:
    """The host's (local, remote) pairs in TIME_WAIT whose remote port is one of ``ports``
    (at most MAX_TIME_WAITS); empty where netlink is refused."""
    if not ports:
        return set()
    try:
        found = _by_netlink(1 << TIME_WAIT, lambda pair: pair[1].port in ports,
                            MAX_TIME_WAITS)
    except OSError:
        return set()
    return set(found)


def _by_netlink(states: int, keep, most: int = 1 << 62) -> dict[Pair, str]:
    found: dict[Pair, str] = {}
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as sock:
        for seq, family in enumerate((socket.AF_INET, socket.AF_INET6), start=1):
            sock.sendto(diag_request(seq, NLM_F_REQUEST | NLM_F_DUMP, family, 0, states, None),
                        (0, 0))
            _read(sock, keep, found, most)
    return found


def _read(sock: socket.socket, keep, found: dict[Pair, str], most: int) -> None:
    read = 0
    while read < _MAX_BYTES:
        data = sock.recv(1 << 16)
        read += len(data)
        off = 0
        while off + _HEADER.size <= len(data):
            length, kind = _HEADER.unpack_from(data, off)[:2]
            if kind == NLMSG_DONE:
                return
            if kind == NLMSG_ERROR:
                raise OSError("sock_diag dump failed")
            if kind == SOCK_DIAG_BY_FAMILY:
                msg = data[off + _HEADER.size: off + length]
                family, state = msg[0], msg[1]
                sport, dport = struct.unpack_from(">HH", msg, 4)
                pair = (Endpoint(diag_address(family, msg[8:24]), sport),
                        Endpoint(diag_address(family, msg[24:40]), dport))
                if len(found) < most and keep(pair):
                    found[pair] = CLOSING.get(state, str(state))
            off += (length + 3) & ~3


def _by_psutil(wanted: set[Pair]) -> dict[Pair, str]:
    found: dict[Pair, str] = {}
    try:
        connections = psutil.net_connections(kind="tcp")
    except psutil.Error:
        return found
    for conn in connections:
        if not conn.laddr or not conn.raddr or conn.status not in CLOSING.values():
            continue
        pair = (Endpoint(normalize_ip(conn.laddr.ip), conn.laddr.port),
                Endpoint(normalize_ip(conn.raddr.ip), conn.raddr.port))
        if pair in wanted:
            found[pair] = conn.status
    return found
