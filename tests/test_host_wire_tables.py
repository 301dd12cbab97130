"""The host capture's tables of sockets claimed by a connect (``HostWire.opened``): the
segments that waited for a socket go to the process that opened it, and a flood of short
connections costs a bounded table."""

from __future__ import annotations

from kmon.sources.packets.host_wire import MAX_OPENED, HostWire, SharedCapture
from kmon.sources.packets.packet_capture import Segment
from kmon.sources.packets.packet_filter import MAX_PORTS, TCP_FIN

BROKER = ("127.0.0.1", 9092)


class ReplayedCapture:
    """A fake of ``PacketCapture``'s reading side: the given segments, read once, in order
    (a real capture cannot be made to stamp three segments of two directions in one ms)."""

    def __init__(self, segments: list[Segment]) -> None:
        self.segments = segments
        self.drops = 0

    def read(self) -> list[Segment]:
        segments, self.segments = self.segments, []
        return segments


def local(port: int) -> tuple[str, int]:
    return ("127.0.0.1", port)


def test_the_segments_that_waited_go_to_the_process_that_opened_the_socket():
    """Segments of a socket no poll showed wait; the connect's process takes them, in order,
    both directions, and no other process does."""
    host = HostWire()
    opener, other = SharedCapture(host), SharedCapture(host)
    request = Segment(1, local(50000), BROKER, b"req", 0, 1, 1)
    answer = Segment(2, BROKER, local(50000), b"ans", 0, 1, 2)
    host.capture = ReplayedCapture([request, answer])
    host.drain()
    opener.opened([(local(50000), BROKER)])
    assert opener.read() == [request, answer] and other.read() == []
    assert host.unowned == {}


def test_a_waiting_socket_s_segments_keep_the_order_captured_within_one_ms():
    """A login the broker failed, captured before any poll showed the socket: its error
    answer, its FIN, then the client's FIN, all in one ms. The process that claims the socket
    reads them in that order (before, both directions sorted by ms put the client's FIN
    first, and its close was told as the client's), whether a poll or a connect claims it."""
    port = 50000
    answer = Segment(7, BROKER, local(port), b"error", 0, 1, 7)
    broker_fin = Segment(7, BROKER, local(port), b"", TCP_FIN, 1, 7)
    client_fin = Segment(7, local(port), BROKER, b"", TCP_FIN, 1, 7)
    for claim in ("own", "opened"):
        host = HostWire()
        share = SharedCapture(host)
        host.capture = ReplayedCapture([answer, broker_fin, client_fin])
        host.drain()
        if claim == "own":
            share.own([(local(port), BROKER)], 7)
        else:
            share.opened([(local(port), BROKER)])
        assert share.read() == [answer, broker_fin, client_fin], claim


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


class FilteredCapture(ReplayedCapture):
    """A fake of ``PacketCapture``'s filter side: the remote ports it was last given."""

    def __init__(self) -> None:
        super().__init__([])
        self.remote: set[int] = set()

    def set_ports(self, local: set[int], remote: set[int], responses: bool = True) -> None:
        self.remote = remote


def test_one_process_s_brokers_cannot_push_the_others_out_of_the_filter():
    """A process's brokers are what its broker answers: a listener of its user's answering
    with 400 ports, watched first, filled the shared filter, and every other process's
    brokers (9092) went unheard. The ports the most processes follow come first."""
    host = HostWire()
    host.capture = capture = FilteredCapture()  # type: ignore[assignment]
    host.share().set_ports(set(), set(range(1, 401)))
    for _ in range(2):
        host.share().set_ports(set(), {9092})
    assert 9092 in capture.remote and len(capture.remote) == MAX_PORTS // 4
