"""The kernel's TCP socket count, as the socket reader weighs a dump against lookups."""

import socket

from kmon.sources.sockstat import tcp_sockets


def test_counts_the_kernels_tcp_sockets_and_follows_new_ones(tmp_path):
    before = tcp_sockets()
    with socket.create_server(("127.0.0.1", 0)) as server:
        clients = [socket.create_connection(server.getsockname()) for _ in range(20)]
        accepted = [server.accept()[0] for _ in clients]
        assert tcp_sockets() >= before + 40
        for sock in clients + accepted:
            sock.close()


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
