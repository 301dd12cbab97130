"""`kmon attach` on real Java Kafka clients: node ids from JMX and the log, joined with sockets.

The clients are tests/java/KafkaClientProgram.java (conftest ``start_java``):
kafka-clients 4.4.0 and 3.9.1 on the shared real cluster, started with no
change for kmon beyond where slf4j-simple writes its log.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from helpers import JAVA_VERSIONS, Child, attach_once, connections_of, log_table, unique

from kmon.classify import MAX_INT
from kmon.sources.jvm.java_log import LogFollower

VERSIONS = JAVA_VERSIONS
CONFIDENT = 0.9

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("private_cache"),
              pytest.mark.skipif(shutil.which("java") is None,
                                 reason="java (a JDK 11+) is not installed: the JMX path needs it")]
as_root = pytest.mark.root(reason="the wire needs CAP_NET_RAW (root)")


def by_node(rows: list[dict]) -> dict[int, dict]:
    named = [r for r in rows if r["node_id"] is not None]
    assert len({r["node_id"] for r in named}) == len(named), named
    return {r["node_id"]: r for r in named}


def addresses(kafka) -> dict[int, str]:
    return {node.node_id: node.address() for node in kafka.nodes}


def assert_named_as_the_log_says(rows: dict[int, dict], log: Path, client_id: str,
                                 ctype: str) -> None:
    """Every connection the log has open is a row, at the log's address, with its role."""
    state = log_table(log).client(client_id, ctype)
    assert state is not None
    open_nodes = {n: s for n, s in state.nodes.items() if s.state == "connected"}
    assert set(rows) == set(open_nodes), (sorted(rows), sorted(open_nodes))
    for node_id, row in rows.items():
        assert row["remote"] == f"{open_nodes[node_id].host}:{open_nodes[node_id].port}"
        role = "bootstrap" if node_id < 0 else "coordinator" if node_id > 1 << 30 else "broker"
        assert row["role"] == role, row
        assert row["broker_id"] == (None if node_id < 0 else MAX_INT - node_id
                                    if role == "coordinator" else node_id)
        assert (row["evidence"]["node_id"], row["evidence"]["address"]) == ("jmx", "log")
        assert row["confidence"] >= CONFIDENT, row


@pytest.mark.parametrize("version", VERSIONS)
def test_consumer_every_socket_named_from_jmx_and_its_debug_log(start_java, version,
                                                               tmp_path: Path) -> None:
    log = tmp_path / "consumer.log"
    client_id, group = unique("orders"), unique("group")
    consumer = start_java("consumer", "--client-id", client_id, "--group", group,
                          "--topic", unique("topic"), version=version, log=log)
    (process,) = attach_once(consumer.pid, "--client-log", str(log))["processes"]
    (client,) = process["clients"]
    rows = by_node(process["connections"])
    (coordinator,) = [n for n, r in rows.items() if r["role"] == "coordinator"]
    assert (client["client_id"], client["group_id"], client["group_coordinator_id"]) == (
        client_id, group, MAX_INT - coordinator)
    assert {n for n, r in rows.items() if r["role"] == "broker"} == {1, 2, 3}
    assert_named_as_the_log_says(rows, log, client_id, "consumer")
    assert process["notices"] == []


@pytest.mark.parametrize("version", VERSIONS)
def test_producer_every_socket_named_from_jmx_and_its_debug_log(start_java, version,
                                                               tmp_path: Path) -> None:
    log = tmp_path / "producer.log"
    client_id = unique("billing")
    producer = start_java("producer", "--client-id", client_id, "--topic", unique("topic"),
                          version=version, log=log)
    (process,) = attach_once(producer.pid, "--client-log", str(log))["processes"]
    assert [(c["client_id"], c["type"]) for c in process["clients"]] == [(client_id, "producer")]
    rows = by_node(process["connections"])
    assert any(n < 0 for n in rows) and any(n > 0 for n in rows)
    assert_named_as_the_log_says(rows, log, client_id, "producer")
    for row in rows.values():
        assert row["client"] == client_id and row["requests_sent"] >= 1
        assert row["idle_limit_ms"] == 540000  # the Java client's default reaps first


@pytest.mark.parametrize(("mode", "version", "extra"), [
    ("producer", "4.4.0", ()), ("consumer", "3.9.1", ()), ("admin", "4.4.0", ()),
    ("consumer", "4.4.0", ("-X", "group.protocol=consumer"))])
def test_every_socket_named_from_jmx_alone(start_java, kafka, mode, version, extra) -> None:
    """No log: JMX's byte totals against the kernel's counters pair each node with its
    socket; bootstrap -N is the N-th address of bootstrap.servers."""
    client_id = unique(mode)
    client = start_java(mode, "--client-id", client_id, "--topic", unique("topic"),
                        "--group", unique("group"), *extra, version=version)
    (process,) = attach_once(client.pid, "--bootstrap-servers", kafka.bootstrap())["processes"]
    assert [(c["client_id"], c["type"]) for c in process["clients"]] == [(client_id, mode)]
    rows = by_node(process["connections"])
    assert any(n < 0 for n in rows) and any(n > 0 for n in rows)
    address = addresses(kafka)
    for node_id, row in rows.items():
        broker = None if node_id < 0 else MAX_INT - node_id if node_id > 1 << 30 else node_id
        assert row["broker_id"] == broker
        assert row["remote"] == address[-node_id if broker is None else broker], row
        assert row["evidence"]["node_id"] == "jmx" and row["confidence"] >= CONFIDENT, row


def test_kip848_consumer_coordinator_found_exactly(start_java, tmp_path: Path) -> None:
    """group.protocol=consumer (KIP-848): the client heartbeats its coordinator itself."""
    log = tmp_path / "consumer.log"
    client_id, group = unique("kip848"), unique("group")
    consumer = start_java("consumer", "--client-id", client_id, "--group", group,
                          "--topic", unique("topic"), "-X", "group.protocol=consumer", log=log)
    events = LogFollower(log, from_start=True).poll()
    (found,) = [e for e in events if e.kind == "coordinator"]
    assert "Coordinator(key=" in found.raw  # the new consumer's CoordinatorRequestManager line
    (process,) = attach_once(consumer.pid, "--client-log", str(log))["processes"]
    rows = by_node(process["connections"])
    coordinator = rows[found.node_id]
    assert (coordinator["role"], coordinator["broker_id"]) == ("coordinator",
                                                               MAX_INT - found.node_id)
    assert coordinator["remote"] == f"{found.host}:{found.port}"
    (client,) = process["clients"]
    assert client["group_coordinator_id"] == MAX_INT - found.node_id
    assert_named_as_the_log_says(rows, log, client_id, "consumer")


def wire_rows(pid: int, want, *extra: str) -> dict[int, dict]:
    """Rows of a streaming ``kmon attach`` once ``want(rows by node id)`` holds."""
    attach = Child([sys.executable, "-m", "kmon", "attach", str(pid), "--json",
                    "--interval", "300ms", *extra])
    try:
        rows: dict[int, dict] = {}
        for _ in range(60):
            rows = {r["node_id"]: r for r in connections_of(json.loads(attach.wait_line("{")))
                    if r["node_id"] is not None}
            if want(rows):
                return rows
        raise AssertionError(rows)
    finally:
        attach.stop()


def wire_seen(*node_ids: int):
    return lambda rows: all(n in rows and rows[n]["evidence"].get("role") == "wire"
                            for n in node_ids)


@as_root
def test_the_wire_tells_the_coordinator_and_fetch_connections_apart(start_java) -> None:
    """What order and idle times only weigh, the Kafka headers say: the coordinator
    connection carries Heartbeat, the leader's Fetch, both to one broker, at confidence 1.0."""
    consumer = start_java("consumer", "--group", unique("group"), "--topic", unique("topic"))

    def heard(n: int):  # both sockets to broker n, each with its request read (heartbeats
        # come every 3 s, so the first read on the coordinator's may be an OffsetCommit)
        return lambda rows: wire_seen(n, MAX_INT - n)(rows) and "Heartbeat" in rows[
            MAX_INT - n]["evidence"]["wire"] and "Fetch" in rows[n]["evidence"]["wire"]

    rows = wire_rows(consumer.pid, lambda rows: any(heard(n)(rows) for n in (1, 2, 3)))
    broker = next(n for n in (1, 2, 3) if heard(n)(rows))
    coordinator, leader = rows[MAX_INT - broker], rows[broker]
    assert coordinator["remote"] == leader["remote"]
    assert coordinator["role"] == "coordinator" and "Heartbeat" in coordinator["evidence"]["wire"]
    assert leader["role"] == "broker" and "Fetch" in leader["evidence"]["wire"]
    assert leader["confidence"] == coordinator["confidence"] == 1.0


@as_root
def test_the_wire_shows_the_kip848_heartbeat(start_java) -> None:
    consumer = start_java("consumer", "--group", unique("group"), "--topic", unique("topic"),
                          "-X", "group.protocol=consumer")
    rows = wire_rows(consumer.pid, lambda rows: any(
        r["role"] == "coordinator" and r["evidence"].get("role") == "wire" for r in rows.values()))
    (coordinator,) = [r for r in rows.values() if r["role"] == "coordinator"]
    assert "ConsumerGroupHeartbeat" in coordinator["evidence"]["wire"]
    assert coordinator["confidence"] == 1.0


def test_idle_bootstrap_connections_are_reaped_by_the_client(start_java, kafka,
                                                              tmp_path: Path) -> None:
    """The consumer's seed scenario: bootstrap, FindCoordinator, coordinator, leaders; the
    bootstrap connections then carry nothing and the client's idle reaper closes them."""
    log = tmp_path / "consumer.log"
    client_id = unique("reaped")
    consumer = start_java("consumer", "--client-id", client_id, "--group", unique("group"),
                          "--topic", unique("topic"), "-X", "connections.max.idle.ms=5000",
                          log=log)
    attach = Child([sys.executable, "-m", "kmon", "attach", str(consumer.pid), "--json",
                    "--interval", "300ms", "--client-log", str(log)])
    try:
        seen: set[int] = set()
        closed: list[dict] = []
        while True:
            snapshot = json.loads(attach.wait_line("{"))
            rows = connections_of(snapshot)
            seen |= {r["node_id"] for r in rows}
            closed += [e for e in snapshot["events"] if e["kind"] == "closed"]
            if seen and not any(r["node_id"] is not None and r["node_id"] < 0 for r in rows):
                break
        bootstrap = {n for n in seen if n is not None and n < 0}
        assert bootstrap and sorted(e["node_id"] for e in closed) == sorted(bootstrap), closed
        for event in closed:
            assert event["role"] == "bootstrap" and event["remote"] in addresses(kafka).values()
            # the client reaped it (its 5 s limit is its own; kmon assumes the default 9 min)
            assert (event["closed_by"], event["reason"]) == ("client", "client_closed")
            assert event["idle_before_ms"] >= 4000
        after = by_node(rows)
        assert {r["role"] for r in after.values()} == {"coordinator", "broker"}
        assert {n for n, r in after.items() if r["role"] == "broker"} == {1, 2, 3}
    finally:
        attach.stop()
    state = log_table(log).client(client_id, "consumer")
    assert {state.nodes[n].state for n in bootstrap} <= {"idle_closed", "disconnected"}


def test_a_jvm_without_jmx_still_attaches_with_a_notice(start_java, kafka) -> None:
    consumer = start_java("consumer", "--group", unique("group"), "--topic", unique("topic"),
                          jvm=("-XX:+DisableAttachMechanism",))
    (process,) = attach_once(consumer.pid, "--bootstrap-servers", kafka.bootstrap())["processes"]
    (notice,) = process["notices"]
    assert notice.startswith("JMX unavailable: ") and "named from sockets only" in notice
    rows = process["connections"]
    assert {r["broker_id"] for r in rows} == {1, 2, 3}
    assert all(r["evidence"]["role"] == "inferred" for r in rows)


def test_unreadable_log_lines_are_counted_never_fatal(start_java, tmp_path: Path) -> None:
    producer = start_java("producer", "--topic", unique("topic"))
    log = tmp_path / "client.log"
    log.write_bytes(b"\x00\xff garbage\n" + b"[Producer clientId=producer-1] "
                    b"Initiating connection to node nowhere\n" + b"x" * 3000 + b"\n")
    (process,) = attach_once(producer.pid, "--client-log", str(log))["processes"]
    assert any("1 connection lines in a format kmon does not read" in n
               for n in process["notices"]), process["notices"]
    assert any(r["node_id"] is not None and r["node_id"] < 0 for r in process["connections"])
