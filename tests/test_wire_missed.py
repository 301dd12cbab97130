"""What the capture missed of a connection, and how its close is told then: never a close
reason at confidence 1 from evidence that did not see the connection's last exchange.

In the ground-truth harness (issue 33, sasl-wrong-password on a loaded host) failed logins
were told ``client_closed``/``broker_closed`` at confidence 1 three ways:

* librdkafka reconnected from a local port it had used seconds before (the broker had
  closed first: the broker's side held the TIME_WAIT, the client's port was free). The
  capture followed the old connection's frame chain, so every request of the new one (a
  fresh initial sequence number, far past it) was refused as a frame's body: the wire saw
  its FIN after no request.
* a socket's FIN the capture never read (the ring dropped it): no wire close at all, the
  kernel's reason told as it stood.
* the process's first connection, opened while the filter followed no port (request
  headers only): the broker's error answer to its login was never captured, yet read as
  heard, so the client's close after it was a plain ``client_closed``.
* (issue 39's stop, in ``kmon serve``'s and ``kmon record``'s host capture) a connection
  opened before its port was followed: the capture read its FIN only, and took the flow
  for one seen from its start (opened after the tap started), its close after no request
  a plain ``client_closed``.

Real sockets here and a real packet capture.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import threading
import time

import pytest

from kmon.engine.closes import wire_reason
from kmon.model import WireClose
from kmon.sources import kafka_protocol as kp
from kmon.sources.kernel.sockets import Endpoint, TcpSocket
from kmon.sources.packets import packet_filter

pytestmark = [pytest.mark.integration,  # real sockets and a real packet capture
              pytest.mark.root(reason="the wire needs CAP_NET_RAW (root)")]

LOGIN = (kp.API_VERSIONS, kp.SASL_HANDSHAKE, kp.SASL_AUTHENTICATE)
PRODUCE = 0
SYN = 0x02


def request(api: int, correlation: int) -> bytes:
    body = (api.to_bytes(2, "big") + (1).to_bytes(2, "big") + correlation.to_bytes(4, "big")
            + (4).to_bytes(2, "big") + b"kmon" + b"x" * 40)
    return len(body).to_bytes(4, "big") + body


def connect_from(port: int, server: socket.socket) -> socket.socket:
    """A client socket bound to local ``port`` (0: any), connected to ``server``."""
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client.bind(("127.0.0.1", port))
    client.connect(server.getsockname())
    return client


def send(client: socket.socket, apis: tuple[int, ...]) -> None:
    for correlation, api in enumerate(apis):
        client.sendall(request(api, correlation))
        time.sleep(0.01)  # one request a segment


def drain(sock: socket.socket) -> None:
    """Read ``sock`` to its end (the broker that keeps up)."""
    while sock.recv(1 << 16):
        pass


def reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@contextlib.contextmanager
def learned_tap():
    """A listening "broker", and a packet tap that knows it (so keeps requests only)."""
    from kmon.sources.packets.kafka_wire import WireTap

    with socket.create_server(("127.0.0.1", 0)) as server:
        remote = Endpoint(*server.getsockname())
        tap = WireTap([], 0)
        try:
            tap.learn({1: (remote.ip, remote.port)}, 0)
            tap.poll([], 0)  # the brokers known: responses no longer kept
            yield server, remote, tap
        finally:
            tap.close()


def test_a_reused_four_tuple_s_login_is_read_from_its_syn():
    """A connection that sent Metadata and was reset, then a new one on the same 4-tuple that
    logs in and is closed by the broker, neither shown by a poll (each lived between two):
    the second's close comes after its SaslAuthenticate, a failed login, not a close after
    no request."""
    with learned_tap() as (server, remote, tap):
        first = connect_from(0, server)
        local = Endpoint(*first.getsockname())
        peer, _ = server.accept()
        send(first, (kp.METADATA,) * 3)
        reset(first)  # no TIME_WAIT on either side: the 4-tuple is free at once
        peer.close()
        time.sleep(0.2)
        tap.poll([], 1)
        second = connect_from(local.port, server)
        peer, _ = server.accept()
        send(second, LOGIN)
        peer.close()  # the broker's FIN after the login
        time.sleep(0.2)
        second.close()
        time.sleep(0.3)
        close = tap.poll([], 2).closes.get((local, remote))
    assert close is not None and (close.first_by, close.last_api) == (
        "broker", kp.SASL_AUTHENTICATE), close
    assert wire_reason(close, "broker_closed") == "auth_failed"


def test_a_tls_login_read_before_its_syn_keeps_its_requests(slow_ring):
    """Over TLS a socket's requests come from the TLS source, its SYN from the capture's
    ring: where the ring lags (``slow_ring``), the login (written after the handshake, after
    the SYN) is in the flow a poll before its SYN is read. That older SYN is the flow's own
    opening, not a new connection on the 4-tuple: the login stays, and the broker's close
    after it is a failed login. The TLS writes are given as the TLS source hands them (its
    uprobes need a TLS library in the process); the socket, its SYN and its FINs are real."""
    with learned_tap() as (server, remote, tap):
        client = connect_from(0, server)
        peer, _ = server.accept()
        sock = tls_socket(client, remote)
        time.sleep(0.01)  # the TLS handshake
        flow = tap.poll([sock], 1, tls_writes(sock, LOGIN)).flows[(sock.local, sock.remote)]
        peer.close()  # the broker's FIN after the login
        time.sleep(0.2)
        client.close()
        time.sleep(1.5)  # the SYN's block handed over, and the FINs'
        close = tap.poll([], 2).closes.get((sock.local, sock.remote))
    assert flow.tls and flow.from_start and flow.last_api == kp.SASL_AUTHENTICATE, flow
    assert close is not None and (close.first_by, close.last_api) == (
        "broker", kp.SASL_AUTHENTICATE), close
    assert wire_reason(close, "broker_closed") == "auth_failed"


def test_a_tls_login_written_in_its_syn_s_millisecond_keeps_its_requests():
    """The capture's times are whole ms, the TLS source's finer: a login written within the
    ms its SYN was captured in (a handshake done in under a ms) sorts before that SYN, and
    opens the flow in the SYN's own ms. That SYN is still the flow's own opening: the login
    stays, and the broker's close after it is a failed login. A second capture of the port
    tells the SYN's ms; the TLS writes are given as the TLS source hands them, stamped in
    it."""
    from kmon.sources.packets.kafka_wire import WireTap
    from kmon.sources.packets.packet_capture import PacketCapture

    with socket.create_server(("127.0.0.1", 0)) as server:
        remote = Endpoint(*server.getsockname())
        tap = WireTap([], 0)
        watch = PacketCapture(set(), {remote.port})
        try:
            tap.learn({1: (remote.ip, remote.port)}, 0)
            tap.poll([], 0)  # the brokers known: responses no longer kept
            watch.set_ports(set(), {remote.port}, responses=False)
            client = connect_from(0, server)
            peer, _ = server.accept()
            sock = tls_socket(client, remote)
            time.sleep(0.3)  # the SYN's block handed over
            syn_ms = next(s.first_ms for s in watch.read() if s.flags & SYN)
            writes = [(sock.inode, syn_ms + 0.5 + correlation / 10, request(api, correlation)[:16],
                       None) for correlation, api in enumerate(LOGIN)]
            flow = tap.poll([sock], 1, writes).flows[(sock.local, sock.remote)]
            peer.close()  # the broker's FIN after the login
            time.sleep(0.2)
            client.close()
            time.sleep(0.3)
            close = tap.poll([], 2).closes.get((sock.local, sock.remote))
        finally:
            tap.close()
            watch.close()
    assert flow.last_api == kp.SASL_AUTHENTICATE, flow
    assert close is not None and (close.first_by, close.last_api) == (
        "broker", kp.SASL_AUTHENTICATE), close
    assert wire_reason(close, "broker_closed") == "auth_failed"


def tls_socket(client: socket.socket, remote: Endpoint) -> TcpSocket:
    """The socket table's row of ``client``: its inode ties the TLS source's writes to it."""
    return TcpSocket(os.fstat(client.fileno()).st_ino, client.fileno(),
                     Endpoint(*client.getsockname()), remote, "ESTABLISHED")


def tls_writes(sock: TcpSocket, apis: tuple[int, ...]
               ) -> list[tuple[int, float, bytes, None]]:
    """The starts of ``sock``'s TLS writes of ``apis``, a tenth of a ms apart, the last now,
    as the TLS source hands them over: (socket inode, epoch ms, the first 16 bytes, no
    4-tuple: a poll shows the socket)."""
    now = time.time() * 1000
    return [(sock.inode, now - (len(apis) - 1 - correlation) / 10, request(api, correlation)[:16],
             None) for correlation, api in enumerate(apis)]


@pytest.fixture
def slow_ring(monkeypatch):
    """The capture's ring hands a block over a second after it opened (not 50 ms): a poll
    soon after a segment does not read it, as a poll on a loaded host whose ring lags."""
    from kmon.sources.packets import packet_capture

    monkeypatch.setattr(packet_capture, "RETIRE_BLOCK_MS", 1000)


def reuse_over_tls(tap, server: socket.socket, lagging: bool
                   ) -> tuple[WireClose | None, WireClose | None]:
    """A TLS connection that sent Metadata, reset by the broker, then a new socket on the same
    4-tuple that logs in and is closed by the broker; each shown by a poll, with its TLS
    writes. ``lagging``: the ring hands the reset and the new SYN over a poll after the new
    socket's writes (``slow_ring``), else in the same poll. (the first socket's close, the
    second's)"""
    remote = Endpoint(*server.getsockname())

    def settle() -> None:  # the ring's blocks handed over: as kmon waits for a close
        if lagging:
            time.sleep(1.5)  # (a block is handed over a second after it opened)
        else:
            time.sleep(0.05)
            tap.capture.settle(time.time())

    tap.learn({1: (remote.ip, remote.port)}, 0)
    tap.poll([], 0)  # the brokers known: responses no longer kept
    first = connect_from(0, server)
    peer, _ = server.accept()
    old = tls_socket(first, remote)
    time.sleep(0.01)  # the TLS handshake
    tap.poll([old], 1, tls_writes(old, (kp.METADATA,) * 3))
    reset(peer)  # the broker's RST (no TIME_WAIT): not after a login
    first.close()
    second = connect_from(old.local.port, server)
    peer, _ = server.accept()
    new = tls_socket(second, remote)
    time.sleep(0.01)
    writes = tls_writes(new, LOGIN)
    if not lagging:
        settle()  # the reset and the SYN handed over: read in the same poll
    view = tap.poll([new], 2, writes)
    if lagging:
        settle()
        view = tap.poll([new], 3)  # the reset and the SYN, a poll after the writes
    old_close = view.closes.get((old.local, old.remote))
    peer.close()  # the broker's FIN after the login
    time.sleep(0.2)
    second.close()
    settle()
    new_close = tap.poll([], 4).closes.get((new.local, new.remote))
    return old_close, new_close


@pytest.mark.parametrize("lagging", [False, True], ids=["same_poll", "ring_lagging"])
def test_a_reused_four_tuple_s_tls_writes_stay_with_their_socket(request, lagging):
    """Over TLS a socket's requests come from the TLS source, tied to its socket's inode; its
    SYN and close from the capture's ring. On a reused 4-tuple the new socket's login is
    written after the old socket's reset and its own SYN: taken in time order with the ring's
    segments (``same_poll``), and waiting for its own flow while the ring still holds them
    (``ring_lagging``), the login is the new socket's only. The old socket's close is a
    reset after Metadata, never a failed login (the new socket's last request); the new
    one's, the broker's close after its login. The TLS writes are given as the TLS source
    hands them (its uprobes need a TLS library in the process); the sockets, their SYNs,
    the RST and the FINs are real."""
    from kmon.sources.packets.kafka_wire import WireTap

    if lagging:
        request.getfixturevalue("slow_ring")
    with socket.create_server(("127.0.0.1", 0)) as server:
        tap = WireTap([], 0)
        try:
            old_close, new_close = reuse_over_tls(tap, server, lagging)
        finally:
            tap.close()
    assert old_close is not None and (old_close.first_by, old_close.reset, old_close.last_api
                                      ) == ("broker", True, kp.METADATA), old_close
    assert wire_reason(old_close, "broker_closed") == "reset"
    assert new_close is not None and (new_close.first_by, new_close.last_api) == (
        "broker", kp.SASL_AUTHENTICATE), new_close
    assert wire_reason(new_close, "broker_closed") == "auth_failed"


@pytest.mark.parametrize("seen", [True, False], ids=["its_syn_read", "unseen"])
def test_a_new_socket_s_login_never_takes_an_older_silent_connection_s_close(slow_ring, seen):
    """An older connection on the 4-tuple that wrote nothing over TLS kmon read (its flow, if
    any, holds no socket's writes), shown by a poll, reset by the broker; a new socket on the
    4-tuple logs in and closes itself, its writes read while the ring still holds the reset
    and its SYN (``slow_ring``). The login is the new socket's only: the reset is never
    told as the broker's close after a login (``auth_failed``), and the new socket's own
    close after its login stays unsettled. ``its_syn_read``: the older connection's SYN read
    before (a flow the poll showed as another socket's); ``unseen``: no segment of it read
    before the new socket's writes (the reset older than them). The TLS writes are given as
    the TLS source hands them; the sockets, SYNs, RST and FINs are real."""
    from kmon.sources.packets.kafka_wire import WireTap

    def now() -> int:
        return int(time.time() * 1000)

    with socket.create_server(("127.0.0.1", 0)) as server:
        remote = Endpoint(*server.getsockname())
        tap = WireTap([], 0)
        try:
            tap.learn({1: (remote.ip, remote.port)}, now())
            tap.poll([], now())
            first = connect_from(0, server)
            peer, _ = server.accept()
            old = tls_socket(first, remote)
            if seen:
                time.sleep(1.5)  # its SYN's block handed over
            tap.poll([old], now())
            reset(peer)
            first.close()
            second = connect_from(old.local.port, server)
            peer, _ = server.accept()
            new = tls_socket(second, remote)
            time.sleep(0.01)
            tap.poll([new], now(), tls_writes(new, LOGIN))  # the reset and SYN not read yet
            time.sleep(1.5)
            old_close = tap.poll([new], now()).closes.get((old.local, old.remote))
            second.close()  # the client's close after its login
            time.sleep(0.2)
            peer.close()
            time.sleep(1.5)
            new_close = tap.poll([], now()).closes.get((new.local, new.remote))
        finally:
            tap.close()
    assert old_close is None or old_close.last_api is None, old_close
    assert new_close is not None and (new_close.first_by, new_close.reset, new_close.last_api
                                      ) == ("client", False, kp.SASL_AUTHENTICATE), new_close
    assert wire_reason(new_close, "client_closed") == "unknown"


def test_no_run_of_requests_reaches_across_a_reused_four_tuple_s_open():
    """Read at once, two connections on one 4-tuple come in their order: the first's
    requests, its RST, the second's SYN, then the second's requests (the repeats of one API
    on the socket merged on each side only)."""
    from kmon.sources.packets.packet_capture import PacketCapture

    with socket.create_server(("127.0.0.1", 0)) as server:
        remote = server.getsockname()[1]
        capture = PacketCapture(set(), {remote})
        try:
            capture.set_ports(set(), {remote}, responses=False)
            first = connect_from(0, server)
            port = first.getsockname()[1]
            peer, _ = server.accept()
            send(first, (kp.API_VERSIONS, kp.SASL_HANDSHAKE))
            reset(first)
            peer.close()
            second = connect_from(port, server)
            peer, _ = server.accept()
            send(second, LOGIN)
            time.sleep(0.3)
            segments = [s for s in capture.read() if s.src[1] == port]
            second.close()
            peer.close()
        finally:
            capture.close()

    def told(seg) -> object:
        if seg.flags & (packet_filter.TCP_CLOSING | SYN):
            return "RST" if seg.flags & packet_filter.TCP_RST else "SYN"
        return kp.request_header(seg.data).api_key

    assert [told(s) for s in segments] == [
        "SYN", kp.API_VERSIONS, kp.SASL_HANDSHAKE, "RST", "SYN", *LOGIN]


def test_a_socket_whose_close_the_capture_dropped_is_closed_unheard():
    """A poll showed the socket; its FIN came while the ring was full (the kernel dropped
    it): gone, its close is unheard (``unknown`` for the close's reason), never a close the
    wire saw nothing of (the kernel's ``client_closed`` told at confidence 1). A ring of two
    blocks, filled by the socket's own requests."""
    from kmon.sources.packets.kafka_wire import UNHEARD, WireTap
    from kmon.sources.packets.packet_capture import PacketCapture

    with socket.create_server(("127.0.0.1", 0)) as server:
        client = connect_from(0, server)
        peer, _ = server.accept()
        sock = TcpSocket(0, client.fileno(), Endpoint(*client.getsockname()),
                         Endpoint(*server.getsockname()), "ESTABLISHED")
        reader = threading.Thread(target=lambda: drain(peer), daemon=True)
        reader.start()
        tap = WireTap([sock], 0, PacketCapture(set(), set(), blocks=2))
        try:
            tap.poll([sock], 1)
            flood = request(PRODUCE, 1)
            for _ in range(40_000):  # far more headers than the ring holds
                client.sendall(flood)
            client.close()
            reader.join(60)
            view = tap.poll([], 2)
        finally:
            tap.close()
            peer.close()
    assert view.drops > 0  # the ring was full: the FIN's packet went with the rest
    assert view.closes.get((sock.local, sock.remote)) == UNHEARD


def test_a_first_connection_s_login_whose_answer_went_uncaptured_is_unsettled():
    """A process's first connection, opened while the tap followed no port (it keeps request
    headers only): the broker answers the login with an error the capture does not keep, and
    the client closes first. The login's answer went unread, so the close is unsettled, not a
    client's plain close."""
    from kmon.sources.packets.kafka_wire import WireTap

    with socket.create_server(("127.0.0.1", 0)) as server:
        tap = WireTap([], 0)
        try:
            tap.poll([], 0)  # no socket, no broker: request headers from any port
            client = connect_from(0, server)
            key = (Endpoint(*client.getsockname()), Endpoint(*server.getsockname()))
            peer, _ = server.accept()
            for correlation, api in enumerate(LOGIN):
                client.sendall(request(api, correlation))
                time.sleep(0.01)
                # the correlation id, then an error code (58: SASL_AUTHENTICATION_FAILED)
                peer.sendall((6).to_bytes(4, "big") + correlation.to_bytes(4, "big")
                             + (58 if api == kp.SASL_AUTHENTICATE else 0).to_bytes(2, "big"))
            client.recv(1 << 16)
            client.close()  # librdkafka closes as soon as it reads the error
            time.sleep(0.3)
            close = tap.poll([], 1).closes.get(key)
            peer.close()
        finally:
            tap.close()
    assert close is not None and (close.first_by, close.last_api) == (
        "client", kp.SASL_AUTHENTICATE), close
    assert wire_reason(close, "client_closed") == "unknown"


def test_a_syn_sent_again_is_the_same_connection_not_a_close():
    """A connect under way (its SYNs dropped: nftables on loopback), shown by a poll in
    SYN_SENT: the SYN the kernel sends again a second later opens no new connection on the
    4-tuple, so the socket, still there, is not told closed."""
    from support.drops import Drops

    from kmon.sources.packets.kafka_wire import WireTap

    with socket.create_server(("127.0.0.1", 0)) as server:
        remote = Endpoint(*server.getsockname())
        drops = Drops()
        client = socket.socket()
        tap = WireTap([], 0)
        try:
            drops.drop(remote.port)
            tap.learn({1: (remote.ip, remote.port)}, 0)
            tap.poll([], 0)
            client.setblocking(False)
            client.connect_ex(server.getsockname())
            sock = TcpSocket(0, client.fileno(), Endpoint(*client.getsockname()), remote,
                             "SYN_SENT")
            tap.poll([sock], 1)
            time.sleep(1.5)  # the kernel's first SYN retransmission comes after 1 s
            view = tap.poll([sock], 2)
        finally:
            tap.close()
            client.close()
            drops.close()
    assert (sock.local, sock.remote) not in view.closes


def test_a_first_connection_closed_by_the_broker_is_told_the_broker_s_close():
    """A process's first connection, opened while the tap followed no port (it keeps every
    port's request headers, SYNs, FINs and RSTs): the broker closes it right after the
    login. Its FIN is the broker's (the client's SYN named the sides), so the close is the
    broker's after a SASL request: a failed login, not a client's close after which the
    kernel's ``broker_closed`` stood."""
    from kmon.sources.packets.kafka_wire import WireTap

    with socket.create_server(("127.0.0.1", 0)) as server:
        tap = WireTap([], 0)
        try:
            tap.poll([], 0)  # no socket, no broker
            client = connect_from(0, server)
            key = (Endpoint(*client.getsockname()), Endpoint(*server.getsockname()))
            peer, _ = server.accept()
            send(client, LOGIN)
            peer.recv(1 << 16)  # the login read: its close is a FIN
            peer.close()  # the broker's FIN after the login
            time.sleep(0.2)
            client.close()
            time.sleep(0.3)
            close = tap.poll([], 1).closes.get(key)
        finally:
            tap.close()
    assert close is not None and (close.first_by, close.last_api) == (
        "broker", kp.SASL_AUTHENTICATE), close
    assert wire_reason(close, "broker_closed") == "auth_failed"


def test_a_connection_whose_port_came_to_be_followed_after_it_opened_is_not_read_from_start():
    """The login goes out before the tap follows the port (the kernel's connect event, or a
    poll, names it a moment later); the client's FIN after the failed login is all the
    capture reads. Its close after no request is unsettled, not ``client_closed``."""
    with learned_tap() as (_, _, tap), socket.create_server(("127.0.0.1", 0)) as server:
        late = Endpoint(*server.getsockname())
        client = connect_from(0, server)
        local = Endpoint(*client.getsockname())
        peer, _ = server.accept()
        send(client, LOGIN)
        time.sleep(0.2)
        tap.poll([], 1)  # nothing of it read: its port not followed
        tap.follow([late.port])
        client.close()
        time.sleep(0.3)
        close = tap.poll([], 2).closes.get((local, late))
        peer.close()
    assert close is not None and close.heard and (close.first_by, close.last_api) == (
        "client", None), close
    assert not close.from_start
    assert wire_reason(close, "client_closed", lived_ms=200) == "unknown"
