"""The wire and Java producers are pure functions of what the sources gathered: built by hand
here (a tap's view, a JVM's log lines and JMX problem), with every way out of the process
shut (sockets, subprocesses, files), they still make their claims, notices and questions."""

from __future__ import annotations

import builtins
import socket
import subprocess
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest

from kmon.classify import MAX_INT
from kmon.evidence.claims import Evidence, Gathered, socket_key
from kmon.evidence.jvm import JvmEvidence
from kmon.evidence.wire import WireEvidence
from kmon.model import Role
from kmon.sources import kafka_protocol as kp
from kmon.sources.brokers.dns import Resolver
from kmon.sources.clients.librdkafka_stats import ClientStats
from kmon.sources.jvm.java_log import parse_line
from kmon.sources.jvm.jvm_reading import JvmReading
from kmon.sources.kernel.sockets import Endpoint, TcpSocket
from kmon.sources.packets.kafka_wire import Flow, WireView
from kmon.sources.process_wire import NO_CAPTURE, WireReading

NOW_MS = 1_800_000_000_000
BROKER = Endpoint("127.0.0.1", 9092)
OTHER = Endpoint("127.0.0.1", 9093)
HELPER = Endpoint("127.0.0.1", 41000)  # the local end of kmon's JMX helper's connection


@pytest.fixture(autouse=True)
def no_way_out(monkeypatch):
    """Any socket, subprocess or file a producer opened would fail the test."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"a producer did I/O: {args!r}")

    for owner, name in ((socket, "socket"), (socket, "create_connection"),
                        (socket, "getaddrinfo"), (subprocess, "Popen"), (builtins, "open")):
        monkeypatch.setattr(owner, name, refuse)


def tcp(inode: int, port: int, remote: Endpoint) -> TcpSocket:
    return TcpSocket(inode=inode, fd=inode, local=Endpoint("127.0.0.1", port), remote=remote,
                     state="ESTABLISHED", last_sent_ms=100, last_recv_ms=100)


def gathered(sockets: list[TcpSocket], **readings) -> Gathered:
    return Gathered(now_ms=NOW_MS, sockets=sockets, known={}, resolver=Resolver(),
                    broker_idle_ms=600_000, **readings)


def carried(*apis: int, client_id: str | None = None) -> Flow:
    return Flow(NOW_MS - 5_000, api_counts=Counter(apis),
                api_last_ms={api: NOW_MS - 1_000 for api in apis},
                first_request_ms=NOW_MS - 5_000, client_id=client_id, from_start=True)


def wire_reading(flows: dict[TcpSocket, Flow], brokers: dict[int, tuple[str, int]]) -> WireReading:
    view = WireView({(s.local, s.remote): f for s, f in flows.items()}, brokers, {},
                    NOW_MS - 10_000, 0, {})
    return WireReading(view)


def test_the_wire_producer_claims_from_the_view_it_is_handed():
    heartbeat, fetch = tcp(1, 50001, BROKER), tcp(2, 50002, OTHER)
    reading = wire_reading({heartbeat: carried(kp.API_VERSIONS, 12, client_id="orders-1"),
                            fetch: carried(1)}, brokers={1: ("127.0.0.1", 9092)})
    found = WireEvidence().evidence(gathered([heartbeat, fetch], wire=reading), {})
    coordinator = found.claims[socket_key(heartbeat)]
    assert (coordinator.role, coordinator.node_id, coordinator.broker_id) == (
        Role.COORDINATOR, MAX_INT - 1, 1)
    assert coordinator.facts == {"client": "orders-1"}
    assert found.claims[socket_key(fetch)].role is Role.BROKER
    assert found.learned == {BROKER: 1}
    assert found.ask == [OTHER]  # Fetch to a peer nobody named: kmon's own query asks it


def test_the_wire_producer_speaks_of_a_tap_that_cannot_be_read():
    sock = tcp(1, 50001, BROKER)
    found = WireEvidence().evidence(gathered([sock], wire=WireReading(None, NO_CAPTURE)), {})
    assert (found.claims, found.notices, found.ask) == ({}, [NO_CAPTURE], [])
    assert WireEvidence().evidence(gathered([sock]), {}) == Evidence()


CONSUMER = "[Consumer clientId=c1, groupId=g1]"


def log_events(*lines: tuple[int, str]):
    """Log events of ``lines`` ((seconds before now, message)), as the follower parses them."""
    return [parse_line(f"{_stamp(NOW_MS - ago * 1000)} DEBUG {CONSUMER} {message}")
            for ago, message in lines]


def _stamp(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


CONNECTED = ((30, "Initiating connection to node 127.0.0.1:9092 (id: 1 rack: null) using "
                  "address /127.0.0.1"),
             (30, "Completed connection to node 1. Fetching API versions."))
# a line of an earlier run of the process (before it started): left out
EARLIER_RUN = (3_600, "Initiating connection to node 127.0.0.1:9093 (id: 2 rack: null) using "
                      "address /127.0.0.1")


def test_the_java_producer_folds_the_log_it_is_handed_and_hides_kmons_own_helper():
    broker, helper = tcp(1, 50001, BROKER), tcp(2, 50002, HELPER)
    events = log_events(*CONNECTED, EARLIER_RUN)
    reading = JvmReading(jmx_wanted=True, jmx_problem="PID 7 (java) is not a JVM",
                         helper_locals=frozenset({HELPER}), has_log=True, log_events=events)
    producer = JvmEvidence(pid=7, start_time=(NOW_MS - 60_000) / 1000)
    found = producer.evidence(gathered([broker, helper], jvm=reading), {})
    assert found.hidden == {socket_key(helper)}
    claim = found.claims[socket_key(broker)]
    assert (claim.role, claim.node_id, claim.broker_id) == (Role.BROKER, 1, 1)
    assert found.learned == {BROKER: 1}
    assert [c.client_id for c in found.clients] == ["c1"]
    assert found.notices == ["JMX unavailable: PID 7 (java) is not a JVM; connections are "
                             "named from the client log and sockets"]
    # the table it folded stays: a later poll with no new lines still names the socket
    again = producer.evidence(gathered([broker], jvm=JvmReading(jmx_wanted=False)), {})
    assert again.claims[socket_key(broker)].node_id == 1


def test_a_jmx_helpers_connection_stays_hidden_while_the_helper_exits():
    """An exiting helper's sockets may be unreadable while the JVM's end of its connection is
    still open: every view that hid that connection hides it to its close (else one view
    tells an unknown connection, then its close by the peer, that no other view tells)."""
    broker, helper = tcp(1, 50001, BROKER), tcp(2, 50002, HELPER)
    producer = JvmEvidence(pid=7, start_time=(NOW_MS - 60_000) / 1000)
    attached = JvmReading(jmx_wanted=False, helper_locals=frozenset({HELPER}))
    assert producer.evidence(gathered([broker, helper], jvm=attached), {}).hidden == {
        socket_key(helper)}
    exiting = JvmReading(jmx_wanted=False)  # its sockets not read: /proc shows it none
    assert producer.evidence(gathered([broker, helper], jvm=exiting), {}).hidden == {
        socket_key(helper)}
    assert producer.evidence(gathered([broker], jvm=exiting), {}).hidden == set()


def test_fresh_librdkafka_statistics_silence_the_java_producer_not_its_memory():
    broker = tcp(1, 50001, BROKER)
    stats = ClientStats(instance="rdkafka#producer-1", client_id="p", type="producer",
                        config={}, brokers={}, written_ms=NOW_MS, path=Path("spool.json"))
    producer = JvmEvidence(pid=7, start_time=(NOW_MS - 60_000) / 1000)
    reading = JvmReading(jmx_wanted=False, has_log=True, log_events=log_events(*CONNECTED))
    assert producer.evidence(gathered([broker], stats=[stats], jvm=reading), {}) == Evidence()
    later = producer.evidence(gathered([broker], jvm=JvmReading(jmx_wanted=False)), {})
    assert later.claims[socket_key(broker)].node_id == 1  # the lines were folded all the same
