"""JMX of a JVM Kafka client: the helper attached to a real JVM with real sockets to the cluster.

The JVM is tests/java/FakeKafkaClient.java (no Kafka Java client can be installed
here): it connects to the mock brokers in the Java client's order, registers
MBeans under the Kafka clients' names and logs in NetworkClient's formats.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import TESTS, Child, unused_pid

from kmon.classify import MAX_INT
from kmon.sources.java_log import LogFollower, NodeTable
from kmon.sources.jmx import JmxReading, JmxSource, JmxUnavailable, JvmClient, is_jvm
from kmon.sources.sockets import open_socket_reader

pytestmark = [pytest.mark.integration, pytest.mark.skipif(shutil.which("java") is None,
                                reason="java (a JDK 11+) is not installed: the JMX path needs it")]

FAKE = TESTS / "java" / "FakeKafkaClient.java"
HELPER = TESTS.parent / "kmon" / "java" / "KmonJmx.java"


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory) -> Iterator[None]:
    """A fresh helper cache, so the compile path runs and the user's cache is untouched."""
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if old is None:
        del os.environ["XDG_CACHE_HOME"]
    else:
        os.environ["XDG_CACHE_HOME"] = old


@pytest.fixture(scope="module")
def brokers(cluster: str) -> dict[int, str]:
    """Broker id -> host:port, as the cluster's metadata says (ids 1..3 in bootstrap order)."""
    from confluent_kafka.admin import AdminClient

    metadata = AdminClient({"bootstrap.servers": cluster}).list_topics(timeout=10)
    found = {i: f"{b.host}:{b.port}" for i, b in sorted(metadata.brokers.items())}
    assert list(found.values()) == cluster.split(","), (found, cluster)
    return found


@pytest.fixture
def start_fake(cluster: str, brokers: dict[int, str]) -> Iterator[Callable[..., Child]]:
    """Start FakeKafkaClient against the cluster: start_fake("consumer", "--leaders", "1,3")."""
    started: list[Child] = []

    def start(role: str, *extra: str) -> Child:
        argv = ["java", str(FAKE), "--bootstrap", cluster, "--role", role,
                "--brokers", ",".join(f"{i}={hp}" for i, hp in brokers.items()), *extra]
        child = Child(argv)
        started.append(child)
        child.wait_line("READY", timeout=30)
        return child

    yield start
    for child in started:
        child.stop()


def only_client(reading: JmxReading) -> JvmClient:
    (client,) = reading.clients
    return client


def reading_after(source: JmxSource, ts_ms: int, timeout_s: float = 10) -> JmxReading:
    """The first reading taken after ``ts_ms``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reading = source.latest()
        if reading is not None and reading.ts_ms > ts_ms:
            return reading
        time.sleep(0.05)
    raise AssertionError(f"no JMX reading after {ts_ms}")


def test_consumer_connections_seen_through_jmx(start_fake, brokers, tmp_path: Path) -> None:
    log = tmp_path / "client.log"
    fake = start_fake("consumer", "--client-id", "orders-1", "--group", "orders",
                      "--coordinator", "2", "--leaders", "1,3", "--idle-ms", "1500",
                      "--send-ms", "200", "--log", str(log))
    coordinator = MAX_INT - 2
    assert is_jvm(fake.pid)
    with JmxSource(fake.pid, interval_ms=250) as source:
        first = source.wait_first(20)
        client = only_client(first)
        assert (client.client_id, client.type) == ("orders-1", "consumer")
        assert set(client.nodes) == {-1, coordinator, 1, 3}
        assert client.metrics["connection-creation-total"] == 4

        later = reading_after(source, first.ts_ms + 600)
        for node in (coordinator, 1, 3):
            before = client.nodes[node]["outgoing-byte-total"]
            assert only_client(later).nodes[node]["outgoing-byte-total"] > before, node
            assert only_client(later).nodes[node]["incoming-byte-total"] > 0, node

        # The bootstrap connection idles and is reaped; its node metrics stay, frozen.
        deadline = time.monotonic() + 10
        while only_client(later).metrics["connection-close-total"] < 1:
            assert time.monotonic() < deadline, only_client(later).metrics
            later = reading_after(source, later.ts_ms)
        reaped = reading_after(source, later.ts_ms)
        metrics = only_client(reaped).metrics
        assert (metrics["connection-count"], metrics["connection-close-total"]) == (3, 1)
        assert only_client(reaped).nodes[-1] == only_client(later).nodes[-1]
        assert metrics["heartbeat-total"] >= 2

    # The kernel agrees: one socket each to the coordinator and the two leaders.
    ports = {int(hp.rpartition(":")[2]): i for i, hp in brokers.items()}
    remote = sorted(ports[s.remote.port] for s in open_socket_reader().sockets_of(fake.pid)
                    if s.remote.port in ports and s.state == "ESTABLISHED")
    assert remote == [1, 2, 3]

    # And kmon's Java log reader reads the same story from its log.
    table = NodeTable()
    for event in LogFollower(log, from_start=True).poll():
        table.apply(event)
    state = table.client("orders-1", "consumer")
    assert state is not None and state.group_id == "orders"
    assert state.coordinators == {"group": coordinator}
    assert {n: s.state for n, s in state.nodes.items()} == {
        -1: "idle_closed", coordinator: "connected", 1: "connected", 3: "connected"}


def test_producer_connects_to_every_bootstrap_address_first(start_fake, tmp_path: Path) -> None:
    client_id = 'billing "eu", v2'  # quoted in its ObjectName, escaped in the helper's JSON
    log = tmp_path / "producer.log"
    fake = start_fake("producer", "--client-id", client_id, "--log", str(log))
    with JmxSource(fake.pid) as source:
        client = only_client(source.wait_first(20))
    assert (client.client_id, client.type) == (client_id, "producer")
    assert set(client.nodes) == {-1, -2, -3, 1, 2, 3}
    assert all(values["request-total"] >= 1 for values in client.nodes.values())

    opened = [e.node_id for e in LogFollower(log, from_start=True).poll() if e.kind == "connecting"]
    assert opened == [-1, -2, -3, 1, 2, 3]


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
