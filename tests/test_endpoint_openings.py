"""The endpoint claim of a socket the process opened holding no other connection: its
broker's endpoint cannot tell a new client's bootstrap connection from a reconnect to the
broker (the ground-truth harness's client-per-message scenario)."""

from __future__ import annotations

from kmon.evidence.claims import Gathered, socket_key
from kmon.evidence.endpoints import EndpointEvidence
from kmon.evidence.resolve import resolve_one
from kmon.model import Connection, Opening, Role
from kmon.sources.brokers.dns import Resolver
from kmon.sources.kernel.sockets import Endpoint, TcpSocket

ONE, TWO = Endpoint("127.0.0.1", 9092), Endpoint("127.0.0.1", 9093)
KNOWN = {ONE: 1, TWO: 2}


def sock(inode: int, remote: Endpoint) -> TcpSocket:
    return TcpSocket(inode, inode, Endpoint("127.0.0.1", 40_000 + inode), remote,
                     "ESTABLISHED", 83, 0, 10, 10, 0.1)


def said(producer: EndpointEvidence, socket: TcpSocket,
         opening: Opening | None) -> tuple[Role | None, int | None, int | None, float]:
    """The endpoint claim of ``socket``, the process's only one, opened so."""
    gathered = Gathered(now_ms=0, sockets=[socket], known=KNOWN, resolver=Resolver(),
                        broker_idle_ms=600_000,
                        openings={(socket.local, socket.remote): opening})
    claim = producer.evidence(gathered, {}).claims[socket_key(socket)]
    return claim.role, claim.node_id, claim.broker_id, claim.confidence


def test_a_socket_opened_alone_to_a_broker_is_unsettled_where_it_may_bootstrap():
    """A process making a new producer per message: each producer's bootstrap connection
    opens once the last one closed (by the client), to the bootstrap address that is broker
    1's, and kmon saw it once, before its first request. Its endpoint was told ``broker:1``
    at 0.6 (librdkafka's own log: ``/bootstrap``); it is unsettled (no node, its broker
    named, 0.3), whatever left the process with no connection, and while kmon does not know
    the process's bootstrap servers. Opened beside another connection it is broker 1."""
    for opening in (Opening.FIRST, Opening.ALONE, Opening.LOST, None):
        assert said(EndpointEvidence(), sock(1, ONE), opening) == (Role.UNKNOWN, None, 1, 0.3)
    assert said(EndpointEvidence(), sock(1, ONE), Opening.HELD) == (Role.BROKER, 1, 1, 0.6)
    row = Connection("sock:1", Role.UNKNOWN, None, None, None, "127.0.0.1:40001", str(ONE),
                     "ESTABLISHED", fd=7)
    gathered = Gathered(now_ms=0, sockets=[sock(1, ONE)], known=KNOWN, resolver=Resolver(),
                        broker_idle_ms=600_000,
                        openings={(sock(1, ONE).local, ONE): Opening.ALONE})
    claims = EndpointEvidence().evidence(gathered, {}).claims.values()
    told, _ = resolve_one(row, list(claims))
    assert (told.role, told.node_id, told.broker_id, told.confidence) == (
        Role.UNKNOWN, None, 1, 0.3)


def test_a_socket_opened_alone_to_a_broker_no_bootstrap_server_is_that_broker():
    """Where the process's command line names its bootstrap servers, a socket opened alone to
    a broker that is none of them is no bootstrap connection: broker 2 (0.6). One to its
    bootstrap server stays unsettled, and so does every one once the sockets or their
    openings change (the claims follow them, not the last poll's)."""
    producer = EndpointEvidence("127.0.0.1:9092")
    assert said(producer, sock(2, TWO), Opening.ALONE) == (Role.BROKER, 2, 2, 0.6)
    assert said(producer, sock(3, ONE), Opening.ALONE) == (Role.UNKNOWN, None, 1, 0.3)
    assert said(producer, sock(3, ONE), Opening.HELD) == (Role.BROKER, 1, 1, 0.6)
