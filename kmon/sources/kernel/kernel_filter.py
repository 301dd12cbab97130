"""The kernel-side filters of kmon's TCP tracepoints: which records may reach its rings.

A filter is text the kernel parses once per event it is set on (at most a page). What
the followed ports' rings take is what kmon follows: the client sockets to those ports.
Every other connect goes to small rings of its own (``connect_filter``), so that a flood
of them may fill only those.
"""

from __future__ import annotations

from collections.abc import Iterable

TCP_ESTABLISHED, TCP_SYN_SENT, TCP_CLOSE = 1, 2, 7
MAX_PORTS = 64  # broker ports in the kernel filter
CONNECTS = (f"newstate == {TCP_SYN_SENT} || "
            f"(oldstate == {TCP_SYN_SENT} && newstate == {TCP_CLOSE})")  # and failed ones


def port_filter(name: str, ports: Iterable[int]) -> str:
    """The filter of one tracepoint's followed-port rings: the client sockets to ``ports``
    (a broker on this host: its own sockets are not read) and, for state changes, only the
    steps a life is told from (its connect, a failed connect, its local port once
    established, leaving ESTABLISHED: its first FIN either way, or its abort)."""
    if name == "tcp_send_reset":  # names no ports: a socket's own resets (joined by socket),
        return "skaddr != 0"  # not those answering a connect to a closed port
    by_port = " || ".join(f"dport == {p}" for p in sorted(ports))  # the clients' side only
    if not by_port:
        return "dport == 0"  # no port followed: nothing
    if name == "inet_sock_set_state":
        return (f"({by_port}) && ({CONNECTS} || oldstate == {TCP_SYN_SENT} "
                f"|| oldstate == {TCP_ESTABLISHED})")
    return by_port


def connect_filter(ports: Iterable[int]) -> str:
    """The filter of the connect rings: every connect (and failed connect) to a port other
    than ``ports``, so that a connect to a port not yet followed still shows its opener
    (whose port kmon then follows)."""
    return f"({CONNECTS})" + "".join(f" && dport != {p}" for p in sorted(ports))


def bounded_ports(ports: Iterable[int]) -> frozenset[int]:
    """The first MAX_PORTS valid ports given (the caller's most wanted first)."""
    return frozenset(list(dict.fromkeys(p for p in ports if 0 < p < 65536))[:MAX_PORTS])
