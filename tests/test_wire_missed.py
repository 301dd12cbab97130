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

Real sockets here and a real packet capture.
"""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import pytest

from kmon.engine.closes import wire_reason
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


def test_a_reused_four_tuple_s_login_is_read_from_its_syn():
    """A connection that sent Metadata and was reset, then a new one on the same 4-tuple that
    logs in and is closed by the broker, neither shown by a poll (each lived between two):
    the second's close comes after its SaslAuthenticate, a failed login, not a close after
    no request."""
    from kmon.sources.packets.kafka_wire import WireTap

    with socket.create_server(("127.0.0.1", 0)) as server:
        remote = Endpoint(*server.getsockname())
        tap = WireTap([], 0)
        try:
            tap.learn({1: (remote.ip, remote.port)}, 0)
            tap.poll([], 0)  # the brokers known: responses no longer kept
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
        finally:
            tap.close()
    assert close is not None and (close.first_by, close.last_api) == (
        "broker", kp.SASL_AUTHENTICATE), close
    assert wire_reason(close, "broker_closed") == "auth_failed"


def test_a_tls_login_read_before_its_syn_keeps_its_requests():
    """Over TLS a socket's requests come from the TLS source, its SYN from the capture's
    ring: a poll takes the TLS writes first, so the login (written after the handshake,
    after the SYN) is in the flow before its SYN is read. That older SYN is the flow's own
    opening, not a new connection on the 4-tuple: the login stays, and the broker's close
    after it is a failed login. The TLS writes are given as the TLS source hands them (its
    uprobes need a TLS library in the process); the socket, its SYN and its FINs are real."""
    from kmon.sources.packets.kafka_wire import WireTap

    with socket.create_server(("127.0.0.1", 0)) as server:
        remote = Endpoint(*server.getsockname())
        tap = WireTap([], 0)
        try:
            tap.learn({1: (remote.ip, remote.port)}, 0)
            tap.poll([], 0)  # the brokers known: responses no longer kept
            client = connect_from(0, server)
            peer, _ = server.accept()
            sock = TcpSocket(os.fstat(client.fileno()).st_ino, client.fileno(),
                             Endpoint(*client.getsockname()), remote, "ESTABLISHED")
            time.sleep(0.01)  # the TLS handshake
            writes = [(sock.inode, time.time() * 1000 + correlation, request(api, correlation)[:16])
                      for correlation, api in enumerate(LOGIN)]
            time.sleep(0.3)  # the SYN's block handed over: read in the same poll
            flow = tap.poll([sock], 1, writes).flows[(sock.local, sock.remote)]
            peer.close()  # the broker's FIN after the login
            time.sleep(0.2)
            client.close()
            time.sleep(0.3)
            close = tap.poll([], 2).closes.get((sock.local, sock.remote))
        finally:
            tap.close()
    assert flow.tls and flow.from_start and flow.last_api == kp.SASL_AUTHENTICATE, flow
    assert close is not None and (close.first_by, close.last_api) == (
        "broker", kp.SASL_AUTHENTICATE), close
    assert wire_reason(close, "broker_closed") == "auth_failed"


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
