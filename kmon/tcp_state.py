"""TCP states: one spelling for every layer, and the kernel's numbers for them."""

from __future__ import annotations

from enum import Enum


class TcpState(str, Enum):
    """A socket's TCP state, in psutil's (and ``ss``'s upper-case) spelling. A ``str``: equal to
    the plain names the sources read, so ``conn.state == TcpState.CLOSE_WAIT`` holds for them.
    Declared in the kernel's order (include/net/tcp_states.h: ESTABLISHED is 1): see
    ``kernel_number``."""

    ESTABLISHED = "ESTABLISHED"
    SYN_SENT = "SYN_SENT"
    SYN_RECV = "SYN_RECV"
    FIN_WAIT1 = "FIN_WAIT1"
    FIN_WAIT2 = "FIN_WAIT2"
    TIME_WAIT = "TIME_WAIT"
    CLOSE = "CLOSE"
    CLOSE_WAIT = "CLOSE_WAIT"
    LAST_ACK = "LAST_ACK"
    LISTEN = "LISTEN"
    CLOSING = "CLOSING"

    def __str__(self) -> str:
        return self.value


def kernel_number(state: TcpState) -> int:
    """The kernel's number for ``state`` (TCP_ESTABLISHED = 1, …, TCP_CLOSING = 11)."""
    return list(TcpState).index(state) + 1


# the states of a socket on its way out (either side closed it), CLOSE_WAIT aside
CLOSING_STATES = frozenset({TcpState.FIN_WAIT1, TcpState.FIN_WAIT2, TcpState.TIME_WAIT,
                            TcpState.CLOSE, TcpState.CLOSING, TcpState.LAST_ACK})
