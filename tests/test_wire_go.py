"""Roles from the wire for Go clients on a real Apache Kafka cluster: franz-go and kafka-go.

tests/go/ holds one small consumer program (its go.mod and go.sum pin the two
libraries); it is built once a run from the Go module proxy with ``go build``.
Each library, in a group, is attached from its first connection with no ``-b``:
every socket must get its role and broker id from the Kafka headers it carries,
at confidence 1.0.
"""

from __future__ import annotations

import shutil
import uuid

import pytest
from helpers import all_named, apis, from_start, produce, wire_sure

from kmon.classify import MAX_INT
from kmon.sources.brokers.broker_query import ask_brokers
from kmon.sources.kernel.sockets import Endpoint

pytestmark = [
    pytest.mark.integration,
    pytest.mark.root(reason="the wire needs CAP_NET_RAW (root)"),
    pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed"),
]

GROUP_APIS = {"JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit", "OffsetFetch",
              "ConsumerGroupHeartbeat"}


@pytest.fixture
def real_topic(kafka) -> str:
    name = f"kmon-wire-go-{uuid.uuid4().hex[:8]}"
    produce(kafka.bootstrap(), name)
    return name


@pytest.fixture
def real_brokers(kafka) -> dict[int, tuple[str, int]]:
    host, port = kafka.bootstrap().split(",")[0].rsplit(":", 1)
    return ask_brokers(Endpoint(host, int(port)))


def leaders_and_coordinator(bootstrap: str, topic: str, group: str) -> tuple[set[int], int]:
    """The brokers leading the topic's partitions, and the group's coordinator, as the
    cluster tells them."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
    description = admin.describe_consumer_groups([group])[group].result(10)
    return {p.leader for p in partitions}, description.coordinator.id


def fetching_from(rows: list[dict]) -> set[int]:
    return {r["broker_id"] for r in rows if r["role"] == "broker" and "Fetch" in apis(r)}


def check_go_roles(rows: list[dict], brokers: dict[int, tuple[str, int]], leaders: set[int],
                   coordinator: int, client_id: str) -> None:
    """Every socket named by the wire (``wire_sure``) with its broker; the coordinator sockets (a Go
    client may hold more than one) all to the group's coordinator; a fetch from every
    leader; no group request on a broker socket."""
    by_address = {f"{host}:{port}": broker for broker, (host, port) in brokers.items()}
    for row in rows:
        assert wire_sure(row) and row["evidence"]["role"] == "wire", row
        assert row["broker_id"] == by_address[row["remote"]] and row["client"] == client_id, row
        if row["role"] == "bootstrap":
            assert row["node_id"] < 0 and "Metadata" in apis(row), row
            assert apis(row) <= {"ApiVersions", "Metadata"}, row
        elif row["role"] == "coordinator":
            assert row["broker_id"] == coordinator, row
            assert row["node_id"] == MAX_INT - coordinator, row
            assert GROUP_APIS & apis(row), row
        elif row["role"] == "unknown":  # only metadata, opened with nothing else held
            assert row["node_id"] is None and apis(row) <= {"ApiVersions", "Metadata"}, row
        else:
            assert row["role"] == "broker" and row["node_id"] == row["broker_id"], row
            assert not GROUP_APIS & apis(row), row
    assert any(r["role"] == "coordinator" for r in rows)
    assert fetching_from(rows) == leaders


def consumed(go_consumer: str, options: list[str], library: str, bootstrap: str,
             topic: str) -> tuple:
    """The Go program consuming ``topic`` in a group of its own, attached from its first
    connection: (client, its rows once every socket is named and it fetches from every
    leader, those leaders, the group's coordinator)."""
    group = f"g-{topic}"
    found: dict = {}

    def named_and_fetching(rows: list[dict]) -> bool:
        if not all_named(rows):
            return False
        found["leaders"], found["coordinator"] = leaders_and_coordinator(bootstrap, topic, group)
        return fetching_from(rows) == found["leaders"]

    client, rows = from_start([go_consumer, *options, library, bootstrap, group, topic],
                              named_and_fetching)
    return client, rows, found["leaders"], found["coordinator"]


@pytest.mark.parametrize("library", ["franz-go", "kafka-go"])
def test_go_group_consumer(library, go_consumer, kafka, real_brokers, real_topic):
    """A Go consumer in a group, attached from its first connection: every socket named at
    1.0 with its broker and by the client_id the program set.

    franz-go keeps up to five connections a broker, one per kind of request: JoinGroup and
    SyncGroup (which block for a rebalance) on one of their own, Heartbeat, OffsetFetch and
    OffsetCommit on its general one to the same broker (two coordinator sockets while both
    are open), Fetch on one of its own. kafka-go holds one coordinator connection and a
    connection per partition that lists offsets and fetches.
    """
    client, rows, leaders, coordinator = consumed(go_consumer, [], library, kafka.bootstrap(),
                                                  real_topic)
    try:
        check_go_roles(rows, real_brokers, leaders, coordinator, f"kmon-{library}")
        coordinators = [apis(r) for r in rows if r["role"] == "coordinator"]
        fetches = [apis(r) for r in rows if "Fetch" in apis(r)]
        if library == "franz-go":
            # a second coordinator socket is the one for JoinGroup and SyncGroup (franz-go
            # closes it after 20 s idle, its own idle limit)
            assert len(coordinators) == 1 or any(
                {"JoinGroup", "SyncGroup"} <= c <= {"JoinGroup", "SyncGroup", "ApiVersions"}
                for c in coordinators), coordinators
            assert all(f <= {"Fetch", "ApiVersions"} for f in fetches), fetches
        else:
            assert len(coordinators) == 1, coordinators
            assert all(f <= {"ListOffsets", "Fetch", "ApiVersions"} for f in fetches), fetches
    finally:
        client.stop()


def test_franz_go_in_a_kip848_group(go_consumer, kafka, real_brokers, real_topic):
    """-group-protocol=consumer (kgo.ServerSideBalancer): franz-go joins a KIP-848 group, its
    coordinator socket carrying ConsumerGroupHeartbeat and never JoinGroup; every socket named
    at 1.0 as in a classic group."""
    client, rows, leaders, coordinator = consumed(go_consumer, ["-group-protocol=consumer"],
                                                  "franz-go", kafka.bootstrap(), real_topic)
    try:
        check_go_roles(rows, real_brokers, leaders, coordinator, "kmon-franz-go")
        coordinators = [apis(r) for r in rows if r["role"] == "coordinator"]
        assert any("ConsumerGroupHeartbeat" in c for c in coordinators), coordinators
        assert not any("JoinGroup" in c for c in coordinators), coordinators
    finally:
        client.stop()
