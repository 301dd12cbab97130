"""The kernel's TCP socket count, as the socket reader weighs a dump against lookups."""

import contextlib
import socket

from kmon.sources.kernel.sockstat import tcp_sockets


def test_counts_the_sockets_this_test_holds():
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
        for _ in range(20):
            stack.enter_context(socket.create_connection(server.getsockname()))
            stack.enter_context(server.accept()[0])
        assert tcp_sockets() >= 41  # the listener, 20 connections' two ends


def test_reads_alloc_and_time_wait_and_nothing_else(tmp_path):
    stats = tmp_path / "sockstat"
    stats.write_text("sockets: used 80\nTCP: inuse 7 orphan 1 tw 5 alloc 30 mem 2\n"
                     "UDP: inuse 3 mem 1\n")
    assert tcp_sockets(str(stats)) == 35


def test_an_unreadable_or_garbled_file_counts_nothing(tmp_path):
    garbled = tmp_path / "sockstat"
    garbled.write_text("TCP: inuse x tw y alloc z\n")
    assert tcp_sockets(str(garbled)) == 0
    assert tcp_sockets(str(tmp_path / "missing")) == 0
    assert tcp_sockets(str(tmp_path)) == 0  # a directory
