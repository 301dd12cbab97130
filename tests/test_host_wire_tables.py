"""The host capture's tables of sockets claimed by a connect (``HostWire.opened``): the
segments that waited for a socket go to the process that opened it, and a flood of short
connections costs a bounded table."""

from __future__ import annotations

from kmon.sources.packets.host_wire import MAX_OPENED, HostWire, SharedCapture
from kmon.sources.packets.packet_capture import Segment

BROKER = ("127.0.0.1", 9092)


def local(port: int) -> tuple[str, int]:
    return ("127.0.0.1", port)


def test_the_segments_that_waited_go_to_the_process_that_opened_the_socket():
    """Segments of a socket no poll showed wait; the connect's process takes them, in order,
    both directions, and no other process does."""
    host = HostWire()
    opener, other = SharedCapture(host), SharedCapture(host)
    request = Segment(2, local(50000), BROKER, b"req", 0, 1, 2)
    answer = Segment(1, BROKER, local(50000), b"ans", 0, 1, 1)
    host.unowned = {(BROKER, local(50000)): [answer], (local(50000), BROKER): [request]}
    opener.opened([(local(50000), BROKER)])
    assert opener.read() == [answer, request] and other.read() == []
    assert host.unowned == {}


def test_a_flood_of_short_connections_keeps_a_bounded_table_and_a_leaving_process_none():
    host = HostWire()
    flooder, other = SharedCapture(host), SharedCapture(host)
    host.shares += [flooder, other]  # (as ``share`` adds them, with no capture opened)
    for start in range(2, 3 * MAX_OPENED, 512):
        flooder.opened([(local(port), BROKER) for port in range(start, start + 512)])
    assert len(host.openers) <= 2 * MAX_OPENED
    assert host.openers[(local(3 * MAX_OPENED), BROKER)] is flooder  # the latest kept
    other.opened([(local(1), BROKER)])
    host.leave(flooder)
    assert set(host.openers.values()) == {other}
