"""JMX of a JVM Kafka client: the helper attached to real Java clients on a real cluster.

The clients are tests/java/KafkaClientProgram.java on kafka-clients 4.4.0 and
3.9.1 (the conftest's ``start_java``), on the shared real Apache Kafka cluster.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from helpers import JAVA_VERSIONS, TESTS, log_table, unique, unused_pid, wait_for

from kmon.classify import MAX_INT
from kmon.sources.jvm.java_log import LogFollower
from kmon.sources.jvm.jmx import JmxReading, JmxSource, JmxUnavailable, JvmClient, is_jvm
from kmon.sources.kernel.socket_readers import open_socket_reader

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("private_cache"),
              pytest.mark.skipif(shutil.which("java") is None,
                                 reason="java (a JDK 11+) is not installed: the JMX path needs it")]

HELPER = TESTS.parent / "kmon" / "java" / "KmonJmx.java"
VERSIONS = JAVA_VERSIONS


def only_client(reading: JmxReading) -> JvmClient:
    (client,) = reading.clients
    return client


@pytest.mark.parametrize("version", VERSIONS)
def test_consumer_connections_seen_through_jmx(start_java, kafka, version, tmp_path) -> None:
    log = tmp_path / "consumer.log"
    client_id, group = unique("orders"), unique("group")
    consumer = start_java("consumer", "--client-id", client_id, "--group", group,
                          "--topic", unique("topic"), version=version, log=log)
    assert is_jvm(consumer.pid)
    table = log_table(log)
    state = table.client(client_id, "consumer")
    assert state is not None and state.group_id == group
    coordinator = state.coordinators["group"]
    broker = MAX_INT - coordinator  # 3.x numbers it so; 4.x names it "+broker", read the same
    assert broker in (1, 2, 3)
    with JmxSource(consumer.pid, interval_ms=250) as source:
        first = source.wait_first(20)
        client = only_client(first)
        assert (client.client_id, client.type) == (client_id, "consumer")
        bootstrap = {n for n in client.nodes if n < 0}
        assert bootstrap and bootstrap <= {-1, -2, -3}
        # the coordinator has its own connection and node metrics, apart from broker `broker`'s
        assert set(client.nodes) - bootstrap == {coordinator, 1, 2, 3}
        # every connection made, a coordinator reconnect (NOT_COORDINATOR on a new cluster)
        # included, is a connect line in the log; the two read at once, as the client may
        # connect again between a log read and a JMX reading
        def creations_agree() -> bool:
            reading = only_client(source.latest() or first)
            logged = log_table(log).client(client_id, "consumer")
            return reading.metrics["connection-creation-total"] == sum(
                s.connects for s in logged.nodes.values())

        wait_for(creations_agree, "JMX's connection-creation-total equal to the log's connects",
                 seconds=10, every=0.25)
        state = log_table(log).client(client_id, "consumer")  # every connect JMX counted
        assert client.metrics["assigned-partitions"] == 3
        later = source.wait_newer(first.ts_ms + 3500, 10)  # a heartbeat interval (3 s) on
        assert later is not None and later.ts_ms > first.ts_ms + 3500
        moved = {n for n in client.nodes if only_client(later).nodes[n]["outgoing-byte-total"]
                 > client.nodes[n]["outgoing-byte-total"]}
        assert {coordinator, 1, 2, 3} <= moved  # heartbeats and fetches
        assert not moved & bootstrap  # the bootstrap connections stay open, idle

    # The kernel agrees: one socket per node id, the coordinator's to broker `broker`.
    ports = {int(node.address().rpartition(":")[2]): node.node_id for node in kafka.nodes}
    remote = sorted(ports[s.remote.port] for s in open_socket_reader().sockets_of(consumer.pid)
                    if s.remote.port in ports and s.state == "ESTABLISHED")
    assert remote == sorted([1, 2, 3, broker] + [kafka.nodes[-n - 1].node_id for n in bootstrap])

    # The log tells the same nodes, opened bootstrap first, and the coordinator's address.
    assert {n: s.state for n, s in state.nodes.items()} == dict.fromkeys(client.nodes,
                                                                          "connected")
    opened = sorted(state.nodes.values(), key=lambda s: s.opened_ms)
    assert opened[0].node_id < 0
    assert state.nodes[coordinator].port == int(kafka.nodes[broker - 1].address().rpartition(
        ":")[2])


@pytest.mark.parametrize("version", VERSIONS)
def test_producer_bootstrap_and_broker_connections(start_java, version, tmp_path) -> None:
    client_id = f'billing "eu", v2 {version}'  # quoted in its ObjectName, escaped in the JSON
    log = tmp_path / "producer.log"
    producer = start_java("producer", "--client-id", client_id, "--topic", unique("topic"),
                          version=version, log=log)
    with JmxSource(producer.pid) as source:
        client = only_client(source.wait_first(20))
    assert (client.client_id, client.type) == (client_id, "producer")
    bootstrap = {n for n in client.nodes if n < 0}
    # Not every bootstrap address: one for metadata, one more for the telemetry subscription
    assert bootstrap <= {-1, -2, -3} and 1 <= len(bootstrap) <= 2
    assert set(client.nodes) - bootstrap <= {1, 2, 3}
    assert all(values["request-total"] >= 1 for values in client.nodes.values())

    opened = [e.node_id for e in LogFollower(log, from_start=True).poll() if e.kind == "connecting"]
    assert sorted(opened) == sorted(client.nodes)
    assert opened[0] < 0  # metadata first, from a bootstrap address


def test_a_process_that_is_not_a_jvm_is_refused_and_left_alone() -> None:
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        assert not is_jvm(sleeper.pid)
        with pytest.raises(JmxUnavailable, match=rf"PID {sleeper.pid} \(sleep\) is not a JVM"):
            JmxSource(sleeper.pid)
        # The helper checks too: attach would send SIGQUIT, which kills a non-JVM.
        result = subprocess.run(["java", str(HELPER), str(sleeper.pid)], capture_output=True,
                                stdin=subprocess.DEVNULL, text=True, timeout=60)
        assert result.returncode == 2
        assert result.stdout == f'{{"error":"PID {sleeper.pid} is not a JVM (no libjvm.so)"}}\n'
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()


def test_an_unknown_pid_is_refused() -> None:
    pid = unused_pid()
    with pytest.raises(JmxUnavailable, match=f"no such process: PID {pid}"):
        JmxSource(pid)
