"""TcpState: one spelling, in the kernel's order (sock_diag's states are read by number)."""

import socket

from kmon.sources.kernel.closing_sockets import CLOSING
from kmon.sources.kernel.diag_messages import STATE_NAMES
from kmon.tcp_state import TcpState, kernel_number

# include/net/tcp_states.h
KERNEL = {"ESTABLISHED": 1, "SYN_SENT": 2, "SYN_RECV": 3, "FIN_WAIT1": 4, "FIN_WAIT2": 5,
          "TIME_WAIT": 6, "CLOSE": 7, "CLOSE_WAIT": 8, "LAST_ACK": 9, "LISTEN": 10,
          "CLOSING": 11}


def test_each_state_has_the_kernels_number():
    assert {state.value: kernel_number(state) for state in TcpState} == KERNEL


def test_the_socket_readers_name_states_by_the_kernels_numbers():
    assert all(STATE_NAMES[number] == name for name, number in KERNEL.items())
    closing = ("FIN_WAIT1", "FIN_WAIT2", "TIME_WAIT", "CLOSE_WAIT", "LAST_ACK", "CLOSING")
    assert {KERNEL[name]: name for name in closing} == CLOSING


def test_a_state_is_the_plain_name_the_sources_read():
    assert TcpState.CLOSE_WAIT == "CLOSE_WAIT" and f"{TcpState.CLOSE_WAIT}" == "CLOSE_WAIT"
    assert TcpState("LISTEN") is TcpState.LISTEN


def test_a_listening_socket_reads_as_listen():
    """A real socket, read back through the kernel's own number for LISTEN."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with open("/proc/net/tcp") as table:
            rows = [line.split() for line in table.readlines()[1:]]
    (row,) = [r for r in rows if r[1].endswith(f":{port:04X}")]
    assert int(row[3], 16) == kernel_number(TcpState.LISTEN)
