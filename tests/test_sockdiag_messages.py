"""The socket reader's message parse: a message read with one unpack (the layout of the one
before it) gives what the general path gives, field by field.

The messages are built here, since no real socket can be made to hold a distinct value in
every tcp_info field; tests/test_socket_readers.py reads real ones from the kernel."""

from __future__ import annotations

import socket
import struct

import pytest

from kmon.sources.brokers.dns import Resolver
from kmon.sources.kernel import diag_messages
from kmon.sources.kernel.diag_messages import Known, MessageReader
from kmon.sources.kernel.sockets import Endpoint, TcpSocket, shared_endpoint

INET_DIAG_SHUTDOWN = 8
KNOWN = {inode: Known(b"", Endpoint("10.0.0.1", 40000 + inode), Endpoint("10.0.0.2", 9092),
                       socket.AF_INET) for inode in (7, 8, 9)}
FDS = {7: 30, 8: 31, 9: 32}


def _message(inode: int, state: int, info_len: int = 232, seed: int = 0) -> bytes:
    """An inet_diag_msg, a shutdown attribute (so tcp_info is not first), then tcp_info of
    ``info_len`` bytes with a distinct value in each field kmon reads."""
    diag = bytes([socket.AF_INET, state, 0, 0]) + bytes(48) + struct.pack("=5I", 0, 0, 0, 0,
                                                                          inode)
    shutdown = struct.pack("=HHB3x", 5, INET_DIAG_SHUTDOWN, 0)
    info = bytearray(info_len)
    for at, fmt, value in ((44, "=I", 1100), (52, "=I", 2200), (68, "=I", 3_300_000),
                           (120, "=Q", 4400), (128, "=Q", 5500), (200, "=Q", 6600)):
        if at + struct.calcsize(fmt) <= info_len:
            struct.pack_into(fmt, info, at, value + seed)
    return diag + shutdown + struct.pack("=HH", 4 + info_len, diag_messages.INET_DIAG_INFO) + info


def _expected(inode: int, state: str, seed: int = 0) -> TcpSocket:
    known = KNOWN[inode]
    return TcpSocket(inode, FDS[inode], known.local, known.remote, state, 1100 + seed,
                     2200 + seed, 6600 + seed, 5500 + seed, (3_300_000 + seed) / 1000)


@pytest.fixture
def general_reads(monkeypatch) -> list[int]:
    """The inodes of the messages read by the general path, not the one-unpack one."""
    reads: list[int] = []
    general = diag_messages.socket_from_msg

    def counted(msg, inode, *rest):
        reads.append(inode)
        return general(msg, inode, *rest)

    monkeypatch.setattr(diag_messages, "socket_from_msg", counted)
    return reads


def _read(reader: MessageReader, message: bytes, known=KNOWN) -> TcpSocket | None:
    padded = b"\xee" * 16 + message  # as after a netlink header, in a receive buffer
    return reader.read(memoryview(padded), 16, len(message), known, FDS)


def test_the_next_message_is_read_in_one_unpack_with_every_field_in_place(general_reads):
    reader = MessageReader()
    assert _read(reader, _message(7, 1)) == _expected(7, "ESTABLISHED")
    assert _read(reader, _message(8, 8, seed=5)) == _expected(8, "CLOSE_WAIT", seed=5)
    assert _read(reader, _message(9, 2, seed=9)) == _expected(9, "SYN_SENT", seed=9)
    assert general_reads == [7]


def test_a_message_not_ours_is_skipped_either_way(general_reads):
    reader = MessageReader()
    assert _read(reader, _message(7, 1), known={}) is None  # general path, not ours
    assert _read(reader, _message(7, 1)) is not None
    assert _read(reader, _message(8, 1), known={}) is None  # one unpack, not ours
    assert general_reads == [7]


def test_a_message_laid_out_otherwise_takes_the_general_path(general_reads):
    reader = MessageReader()
    _read(reader, _message(7, 1))
    short = _read(reader, _message(8, 1, info_len=160))  # an older kernel's tcp_info
    assert short is not None
    assert (short.last_sent_ms, short.bytes_sent, short.bytes_received) == (1100, 4400, 5500)
    assert _read(reader, _message(9, 1)) == _expected(9, "ESTABLISHED")  # relearnt
    truncated = _message(7, 1)[:-10]  # its tcp_info runs past the message's end
    assert _read(reader, truncated).bytes_sent is None
    assert general_reads == [7, 8, 9, 7]


def _stalled(inode: int, info_len: int = 232) -> bytes:
    """``_message`` of a socket the kernel retransmits on (idiag_timer 1): retransmits 4,
    probes 0, backoff 4, rto 3.2 s, 2 unacked, last ack 7 s ago, 9 retransmitted in all."""
    message = bytearray(_message(inode, 1, info_len))
    message[2] = 1
    info = len(message) - info_len
    message[info + 2 : info + 5] = bytes([4, 0, 4])[: max(0, info_len - 2)]
    for at, value in ((8, 3_200_000), (24, 2), (56, 7000), (100, 9)):
        if at + 4 <= info_len:
            struct.pack_into("=I", message, info + at, value)
    return bytes(message)


def test_a_stalled_socket_carries_its_unanswered_sending_on_either_path(general_reads):
    reader = MessageReader()
    first, second = _read(reader, _stalled(7)), _read(reader, _stalled(8))
    assert general_reads == [7]  # the second in one unpack
    for sock in (first, second):
        assert sock.stall == ("retransmit", 4, 0, 4, 3200.0, 2, 7000, 9)
        assert sock.last_sent_ms == 1100 and sock.rtt_ms == 3300.0
    assert _read(reader, _message(9, 1)).stall is None  # nothing unanswered: nothing read


def test_a_short_tcp_info_gives_the_stall_figures_it_has():
    # a tcp_info ending after last_ack_recv (60 bytes): no total_retrans; one of 3 bytes: none
    assert _read(MessageReader(), _stalled(7, 60)).stall == ("retransmit", 4, 0, 4, 3200.0, 2,
                                                              7000, None)
    assert _read(MessageReader(), _stalled(7, 3)).stall == ("retransmit", 4, 0, 0, None, None,
                                                             None, None)


def test_a_sockets_peer_and_a_known_broker_are_one_object():
    """A socket's remote end, as sock_diag reads it, and the same broker's endpoint, as the
    resolver gives it for an address, are one object: the brokers known find each socket's
    peer by identity, poll after poll (no field compared)."""
    peer = diag_messages._remote(socket.AF_INET, socket.inet_aton("127.0.0.1") + bytes(12), 9092)
    (known,) = Resolver().endpoints("127.0.0.1:9092")
    assert known is peer is shared_endpoint("127.0.0.1", 9092)
    assert Resolver().endpoints("localhost:9092") == frozenset()  # a name: looked up later
