"""`kmon attach` on a JVM Kafka client: node ids from JMX and the client log, joined with sockets.

The JVM is tests/java/FakeKafkaClient.java (see its docstring: no Kafka Java
client can be installed here); it connects to the mock cluster in the Java
producer's and consumer's order, with Kafka's MBean names and log lines.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import test_jmx
from conftest import Child, attach_once, connections_of

from kmon.classify import MAX_INT

# test_jmx's fixtures: the mock cluster's brokers, a private helper cache, FakeKafkaClient
brokers, private_cache, start_fake = test_jmx.brokers, test_jmx.private_cache, test_jmx.start_fake
FAKE = test_jmx.FAKE

pytestmark = [pytest.mark.integration, pytest.mark.skipif(shutil.which("java") is None,
                                reason="java (a JDK 11+) is not installed: the JMX path needs it")]


def by_node(rows: list[dict]) -> dict[int, dict]:
    named = [r for r in rows if r["node_id"] is not None]
    assert len({r["node_id"] for r in named}) == len(named), named
    return {r["node_id"]: r for r in named}


def test_producer_bootstrap_ids_and_brokers_without_a_log(start_fake, brokers, cluster) -> None:
    bootstrap = f"{brokers[1]},{brokers[2]}"
    fake = start_fake("producer", "--bootstrap", bootstrap, "--client-id", "billing")
    snapshot = attach_once(fake.pid, "--bootstrap-servers", cluster)
    (process,) = snapshot["processes"]
    assert [(c["client_id"], c["type"]) for c in process["clients"]] == [("billing", "producer")]
    rows = by_node(process["connections"])
    assert set(rows) == {-1, -2, 1, 2, 3}
    assert rows[-1]["remote"] == brokers[1] and rows[-2]["remote"] == brokers[2]
    for node in (-1, -2):
        assert (rows[node]["role"], rows[node]["broker_id"]) == ("bootstrap", None)
        assert rows[node]["evidence"]["node_id"] == "jmx"
        assert rows[node]["confidence"] > 0.6, rows[node]  # bytes tell them apart
    for broker, address in brokers.items():
        row = rows[broker]
        assert (row["role"], row["broker_id"], row["remote"]) == ("broker", broker, address)
        assert row["client"] == "billing" and row["requests_sent"] >= 1
        assert row["idle_limit_ms"] == 540000  # the Java client's default reaps first
    assert process["notices"] == []


def test_consumer_coordinator_and_brokers_from_jmx_and_its_log(start_fake, brokers,
                                                                tmp_path: Path) -> None:
    log = tmp_path / "consumer.log"
    fake = start_fake("consumer", "--client-id", "orders-1", "--group", "orders",
                      "--coordinator", "2", "--leaders", "1,3", "--log", str(log))
    (process,) = attach_once(fake.pid, "--client-log", str(log))["processes"]
    (client,) = process["clients"]
    assert (client["client_id"], client["group_id"], client["group_coordinator_id"]) == (
        "orders-1", "orders", 2)
    rows = by_node(process["connections"])
    coordinator = rows[MAX_INT - 2]
    assert (coordinator["role"], coordinator["broker_id"]) == ("coordinator", 2)
    assert coordinator["remote"] == brokers[2]
    assert rows[-1]["role"] == "bootstrap" and rows[-1]["remote"] == brokers[1]
    assert {n: r["remote"] for n, r in rows.items() if r["role"] == "broker"} == {
        1: brokers[1], 3: brokers[3]}
    assert all(r["evidence"]["address"] == "log" for r in rows.values())
    confidence = {n: r["confidence"] for n, r in rows.items()}
    assert min(confidence.values()) >= 0.7, confidence


def test_three_sockets_to_one_broker_are_told_apart(start_fake, brokers, tmp_path: Path) -> None:
    """Bootstrap -1, coordinator MAX_INT - 1 and broker 1 all reach broker 1's address."""
    log = tmp_path / "consumer.log"
    fake = start_fake("consumer", "--coordinator", "1", "--leaders", "1,3", "--log", str(log))
    rows = connections_of(attach_once(fake.pid, "--client-log", str(log)))
    to_one = by_node([r for r in rows if r["remote"] == brokers[1]])
    assert set(to_one) == {-1, MAX_INT - 1, 1}
    # The bootstrap socket is the one that carried exactly its three requests (ApiVersions,
    # Metadata, FindCoordinator: 24-byte frames for client id "consumer-1"), by the kernel.
    assert to_one[-1]["bytes_sent"] == 3 * 24
    assert "bytes" in to_one[-1]["evidence"]["pairing"]
    # The other two sent alike: order and idle times decide, and the confidence says so.
    assert to_one[1]["confidence"] < 0.99


@pytest.mark.skipif(os.geteuid() != 0, reason="the wire needs CAP_NET_RAW (root)")
def test_the_wire_tells_the_coordinator_and_fetch_connections_to_one_broker_apart(
        start_fake, brokers) -> None:
    """What order and idle times only guess (above), the Kafka headers say: the coordinator
    connection carries Heartbeat, the other Fetch, both to broker 1, at confidence 1.0."""
    fake = start_fake("consumer", "--coordinator", "1", "--leaders", "1,3", "--send-ms", "200")
    attach = Child([sys.executable, "-m", "kmon", "attach", str(fake.pid), "--json",
                    "--interval", "300ms"])
    try:
        for _ in range(40):
            rows = connections_of(json.loads(attach.wait_line("{")))
            to_one = {r["node_id"]: r for r in rows if r["remote"] == brokers[1]
                      and r["evidence"]["role"] == "wire"}
            if {MAX_INT - 1, 1} <= set(to_one):
                break
        assert to_one[MAX_INT - 1]["role"] == "coordinator"
        assert "Heartbeat" in to_one[MAX_INT - 1]["evidence"]["wire"]
        assert to_one[1]["role"] == "broker" and "Fetch" in to_one[1]["evidence"]["wire"]
        assert to_one[1]["confidence"] == to_one[MAX_INT - 1]["confidence"] == 1.0
    finally:
        attach.stop()


def test_idle_reaping_shows_as_closed_events(start_fake, brokers) -> None:
    fake = start_fake("consumer", "--coordinator", "2", "--leaders", "3", "--idle-ms", "4000",
                      "--send-ms", "200")
    attach = Child([sys.executable, "-m", "kmon", "attach", str(fake.pid), "--json",
                    "--interval", "300ms"])
    try:
        seen: set[int] = set()
        closed = []
        while not closed:
            snapshot = json.loads(attach.wait_line("{"))
            seen |= {r["node_id"] for r in connections_of(snapshot)}
            closed = [e for e in snapshot["events"] if e["kind"] == "closed"]
        assert [(e["node_id"], e["role"], e["remote"]) for e in closed] == [
            (-1, "bootstrap", brokers[1])]
        # the client reaped it: its side went through TIME_WAIT. Its 4 s limit is the stand-in's
        # own (kmon assumes the Java default, 9 min), so the reason is a client close
        assert (closed[0]["closed_by"], closed[0]["reason"]) == ("client", "client_closed")
        assert closed[0]["idle_before_ms"] >= 3000
        assert {-1, MAX_INT - 2, 3} <= seen
        after = {r["node_id"] for r in connections_of(json.loads(attach.wait_line("{")))}
        assert after == {MAX_INT - 2, 3}
    finally:
        attach.stop()


def test_a_jvm_without_jmx_still_attaches_with_a_notice(cluster, brokers) -> None:
    argv = ["java", "-XX:+DisableAttachMechanism", str(FAKE), "--bootstrap", cluster,
            "--role", "consumer", "--coordinator", "2", "--leaders", "3",
            "--brokers", ",".join(f"{i}={hp}" for i, hp in brokers.items())]
    fake = Child(argv)
    try:
        fake.wait_line("READY", timeout=30)
        (process,) = attach_once(fake.pid, "--bootstrap-servers", cluster)["processes"]
        (notice,) = process["notices"]
        assert notice.startswith("JMX unavailable: ") and "named from sockets only" in notice
        rows = process["connections"]
        assert {r["broker_id"] for r in rows} == {1, 2, 3}
        assert all(r["evidence"]["role"] == "inferred" for r in rows)
    finally:
        fake.stop()


def test_unreadable_log_lines_are_counted_never_fatal(start_fake, tmp_path: Path) -> None:
    fake = start_fake("producer")
    log = tmp_path / "client.log"
    log.write_bytes(b"\x00\xff garbage\n" + b"[Producer clientId=producer-1] "
                    b"Initiating connection to node nowhere\n" + b"x" * 3000 + b"\n")
    (process,) = attach_once(fake.pid, "--client-log", str(log))["processes"]
    assert any("1 connection lines in a format kmon does not read" in n
               for n in process["notices"]), process["notices"]
    assert {r["node_id"] for r in process["connections"]} >= {-1, -2, -3}
