"""When the process learned its cluster, as the wire producer reads it: a view whose tap
started on a process that already talked to its brokers (``kmon record -b`` finding a
client mid-run) did not see it learn. Flows are built by hand; the rest is kmon's code."""

from __future__ import annotations

from collections import Counter

from kmon.evidence.claims import Gathered, socket_key
from kmon.evidence.wire import WireEvidence
from kmon.model import Role
from kmon.sources import kafka_protocol as kp
from kmon.sources.brokers.dns import Resolver
from kmon.sources.kernel.sockets import Endpoint, TcpSocket
from kmon.sources.packets.kafka_wire import Flow, WireView
from kmon.sources.process_wire import WireReading

ONE, TWO = Endpoint("127.0.0.1", 9092), Endpoint("127.0.0.1", 9093)
KNOWN = {ONE: 1, TWO: 2}
PRODUCE, FETCH = 0, 1


def sock(inode: int, remote: Endpoint) -> TcpSocket:
    return TcpSocket(inode, inode, Endpoint("127.0.0.1", 40_000 + inode), remote,
                     "ESTABLISHED", 100, 100, 10, 10, 0.1)


def flow(*apis: int, first_request_ms: int, from_start: bool) -> Flow:
    return Flow(first_request_ms, api_counts=Counter(apis),
                api_last_ms={api: first_request_ms for api in apis},
                first_request_ms=first_request_ms, from_start=from_start)


def told(producer: WireEvidence, flows: dict[TcpSocket, Flow], learned_ms: int | None,
         polls: int) -> dict[int, tuple[Role | None, int | None, float]]:
    view = WireView({(s.local, s.remote): f for s, f in flows.items()},
                    {1: ("127.0.0.1", 9092), 2: ("127.0.0.1", 9093)}, {}, learned_ms, 0, {},
                    polls=polls)
    gathered = Gathered(now_ms=20_000, sockets=list(flows), known=KNOWN, resolver=Resolver(),
                        broker_idle_ms=600_000, wire=WireReading(view))
    claims = producer.evidence(gathered, {}).claims
    return {s.inode: (claims[socket_key(s)].role, claims[socket_key(s)].node_id,
                      claims[socket_key(s)].confidence) for s in flows}


def test_a_tap_started_on_a_process_fetching_already_saw_it_learn_nothing():
    """franz-go in a rolling restart, as ``kmon record`` saw it: its tap started while the
    consumer fetched from broker 1; two sockets it opened then carried Metadata only, and
    their answers were the first the tap read (learned at 12,000, after their first requests
    at 11,000): they were named ``bootstrap`` at 1.0 "before the cluster was known", where
    the stream, which had seen the consumer learn its cluster long before, said broker at
    0.7. The Fetch on a socket held since before the tap says the process knew its cluster
    before the tap could see: they are broker connections (0.7), as in the stream, and stay
    so once the fetching socket has closed."""
    fetching = sock(1, ONE)
    opened = {sock(2, TWO): flow(kp.API_VERSIONS, kp.METADATA, first_request_ms=11_000,
                                 from_start=True),
              sock(3, ONE): flow(kp.API_VERSIONS, kp.METADATA, first_request_ms=11_500,
                                 from_start=True)}
    producer = WireEvidence()
    first = told(producer, {fetching: flow(FETCH, first_request_ms=10_000,
                                           from_start=False), **opened}, 12_000, 1)
    assert first == {1: (Role.BROKER, 1, 1.0), 2: (Role.BROKER, 2, 0.7),
                     3: (Role.BROKER, 1, 0.7)}
    assert told(producer, opened, 12_000, 2) == {2: (Role.BROKER, 2, 0.7),
                                                  3: (Role.BROKER, 1, 0.7)}


def test_a_tap_that_saw_the_process_learn_keeps_its_bootstrap():
    """The same sockets in a tap that saw no socket from before it carry a broker's request
    (its first connection the bootstrap one): they were first used before the cluster was
    known, bootstrap (1.0); a Produce on a socket opened since says nothing of before."""
    producer = WireEvidence()
    opened = {sock(2, TWO): flow(kp.API_VERSIONS, kp.METADATA, first_request_ms=11_000,
                                 from_start=True),
              sock(4, ONE): flow(PRODUCE, first_request_ms=12_500, from_start=True)}
    assert told(producer, opened, 12_000, 1) == {2: (Role.BOOTSTRAP, -1, 1.0),
                                                 4: (Role.BROKER, 1, 1.0)}
