"""Pairing a Java client's connections with its sockets, where bytes cannot tell them apart."""

from __future__ import annotations

import pytest

from kmon.classify import MAX_INT
from kmon.evidence.java_log_nodes import NodeTable
from kmon.evidence.jvm_join import join_jvm
from kmon.evidence.jvm_nodes import CounterHistory, JvmNode, jvm_clients
from kmon.evidence.stats_join import JoinSettings
from kmon.sources.brokers.dns import Resolver
from kmon.sources.jvm.java_log import parse_line
from kmon.sources.jvm.jmx import parse_reading
from kmon.sources.kernel.sockets import Endpoint, TcpSocket

NOW = 1_800_000_000_000
BROKER = Endpoint("127.0.0.1", 9092)


def twin(port: int, inode: int, idle_ms: int) -> TcpSocket:
    """A socket to the broker that carried the same 75/906 bytes as its twin."""
    return TcpSocket(inode=inode, fd=None, local=Endpoint("127.0.0.1", port), remote=BROKER,
                     state="ESTABLISHED", last_sent_ms=idle_ms, last_recv_ms=idle_ms,
                     bytes_sent=75, bytes_received=906)


def node(node_id: int, opened_ms: int, last_io_ms: int | None) -> JvmNode:
    return JvmNode(client="p", node_id=node_id, endpoints=frozenset({BROKER}), address_from="log",
                   out_bytes=75, in_bytes=906, requests=2, responses=2, opened_ms=opened_ms,
                   connects=1, last_io_ms=last_io_ms)


@pytest.mark.parametrize("inodes", [(10, 20), (20, 10)])  # whichever order the kernel numbered
def test_twin_connections_are_told_apart_by_the_logs_last_io(inodes) -> None:
    """A bootstrap and a broker connection to one address, the same requests on each
    (ApiVersions, InitProducerId): the DEBUG log's last line on each against the kernel's
    last data decides, whatever the inode order says."""
    sockets = [twin(50162, inodes[0], idle_ms=170_872), twin(50194, inodes[1], idle_ms=170_716)]
    # each line ~30 ms after its socket's last data (the logger follows the response)
    nodes = [node(1, NOW - 171_500, last_io_ms=NOW - 170_690),
             node(-1, NOW - 171_600, last_io_ms=NOW - 170_840)]
    pairs = join_jvm(sockets, nodes, JoinSettings(now_ms=NOW), {})
    assert {sockets[i].local.port: c.node_id for i, c in pairs.items()} == {50162: -1, 50194: 1}
    assert all(c.confidence >= 0.9 for c in pairs.values())
    assert all("log-io" in c.evidence["pairing"] for c in pairs.values())


def test_without_the_log_the_twins_stay_a_weak_guess() -> None:
    sockets = [twin(50162, 10, idle_ms=170_872), twin(50194, 20, idle_ms=170_716)]
    nodes = [node(1, NOW - 171_500, None), node(-1, NOW - 171_600, None)]
    pairs = join_jvm(sockets, nodes, JoinSettings(now_ms=NOW), {})
    assert all(c.confidence < 0.9 for c in pairs.values())


def test_a_4x_coordinator_connection_id_reads_as_max_int_minus_its_broker() -> None:
    line = ('{"ts_ms":1,"clients":[{"client_id":"c","type":"consumer","metrics":{},'
            '"nodes":{"+2":{},"-1":{},"3":{}}}]}')
    (client,) = parse_reading(line).clients
    assert set(client.nodes) == {MAX_INT - 2, -1, 3}
    with pytest.raises(ValueError, match="not a node id"):
        parse_reading(line.replace('"+2"', '"node+2"'))


def test_a_metric_no_row_can_hold_is_no_reading() -> None:
    """The watched JVM registers its MBeans itself: a request-total of 1e300 made a
    301-digit requests_sent, which ``--json`` could not write and a recording's int64
    column refused (ending ``kmon record``); NaN failed int(). Such values are dropped."""
    line = ('{"ts_ms":1,"clients":[{"client_id":"c","type":"producer","metrics":'
            '{"connection-count":NaN,"io-ratio":0.5},"nodes":{"1":{"request-total":1.0E300,'
            '"outgoing-byte-total":-Infinity,"incoming-byte-total":"9","response-total":7,'
            '"request-rate":true}}}]}')
    (client,) = parse_reading(line).clients
    assert client.metrics == {"io-ratio": 0.5}
    assert client.nodes == {1: {"response-total": 7}}


def test_a_node_the_log_saw_close_keeps_its_lingering_socket_a_moment() -> None:
    """The client logs an idle close before NIO releases the descriptor (at its next
    select): for a moment the socket is there, and is still the bootstrap node's."""
    table = NodeTable()
    prefix = "2026-11-24T05:17:{:06.3f}Z [main] DEBUG NetworkClient - [Consumer clientId=c, " \
             "groupId=g] "
    for second, message in ((34.5, "Initiating connection to node 127.0.0.1:9092 (id: -1 "
                                   "rack: null isFenced: false) using address /127.0.0.1"),
                            (39.8, "Idle connection to node -1 disconnected.")):
        table.apply(parse_line(prefix.format(second) + message))
    closed_ms = table.nodes("c")[-1].closed_ms
    reading = parse_reading('{"ts_ms":1,"clients":[{"client_id":"c","type":"consumer",'
                            '"metrics":{},"nodes":{"-1":{"outgoing-byte-total":60}}}]}')

    def nodes_at(now_ms: int) -> list[int]:
        history = CounterHistory()
        history.update(reading)
        _, nodes = jvm_clients(reading, table, history, {}, Resolver(), now_ms)
        return [n.node_id for n in nodes]

    assert nodes_at(closed_ms + 500) == [-1]
    assert nodes_at(closed_ms + 5000) == []


def test_received_bytes_decide_against_the_inode_order() -> None:
    """An admin client's bootstrap -2 and broker 2 to one address, 90 bytes sent on each,
    985 and 993 received; the kernel numbered them against their open order (inodes come in
    per-CPU batches). A socket cannot have received fewer bytes than its node counted."""
    def sock(port: int, inode: int, received: int) -> TcpSocket:
        return TcpSocket(inode=inode, fd=None, local=Endpoint("127.0.0.1", port), remote=BROKER,
                         state="ESTABLISHED", last_sent_ms=9000, last_recv_ms=9000,
                         bytes_sent=90, bytes_received=received)

    sockets = [sock(44088, 10, 993), sock(44074, 20, 985)]
    nodes = [JvmNode(client="a", node_id=n, endpoints=frozenset({BROKER}), address_from="log",
                     out_bytes=90, in_bytes=received, connects=1)
             for n, received in ((-2, 985), (2, 993))]
    pairs = join_jvm(sockets, nodes, JoinSettings(now_ms=NOW), {})
    assert {sockets[i].local.port: c.node_id for i, c in pairs.items()} == {44074: -2, 44088: 2}
    assert all(c.confidence >= 0.9 for c in pairs.values())
