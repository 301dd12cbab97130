"""`kmon attach PID` against real client processes on the mock cluster."""

from __future__ import annotations

import json
import sys
import time

import pytest
from helpers import Child, attach_once, connections_of

from kmon.sources.brokers.dns import split_host_port

pytestmark = pytest.mark.integration  # real processes, a cluster or Spark

MAX_INT = 2147483647


def broker_ids_by_port(stats: dict) -> dict[int, int]:
    """Broker id of each learned broker's port, from a client's own statistics."""
    return {split_host_port(b["nodename"])[1]: b["nodeid"]
            for b in stats["brokers"].values() if b["source"] == "learned"}


def port_of(address: str) -> int:
    return split_host_port(address)[1]


def test_consumer_shows_its_coordinator_and_brokers(start_client):
    consumer = start_client("consumer")
    stats = consumer.own_stats()
    ids = broker_ids_by_port(stats)
    coordinator_port = port_of(stats["brokers"]["GroupCoordinator"]["nodename"])
    coordinator_broker = ids[coordinator_port]

    snapshot = attach_once(consumer.pid)
    (process,) = snapshot["processes"]
    assert process["pid"] == consumer.pid
    assert [c["type"] for c in process["clients"]] == ["consumer"]
    rows = process["connections"]
    coordinators = [r for r in rows if r["role"] == "coordinator"]
    assert len(coordinators) == 1
    (coordinator,) = coordinators
    assert coordinator["node_id"] == MAX_INT - coordinator_broker
    assert coordinator["broker_id"] == coordinator_broker
    assert port_of(coordinator["remote"]) == coordinator_port
    assert coordinator["evidence"]["role"] == "stats"
    brokers = [r for r in rows if r["role"] == "broker"]
    assert brokers, rows
    for row in brokers:
        assert row["node_id"] == row["broker_id"] == ids[port_of(row["remote"])]
        assert row["state"] == "ESTABLISHED"
        assert row["idle_ms"] is not None and row["evidence"]["idle"] == "kernel"
    assert all(r["client"] == process["clients"][0]["name"] for r in coordinators + brokers)


@pytest.fixture(scope="module")
def producer(start_module_client):
    """An instrumented producer that the module's tests only attach to."""
    return start_module_client("producer")


@pytest.fixture(scope="module")
def plain_producer(start_module_client):
    """A producer without kmon's agent that the module's tests only attach to."""
    return start_module_client("producer", instrument=False)


def test_producer_connections_are_all_brokers(producer):
    ids = broker_ids_by_port(producer.own_stats())
    rows = connections_of(attach_once(producer.pid))
    assert rows
    assert {r["role"] for r in rows} == {"broker"}
    for row in rows:
        assert row["node_id"] == ids[port_of(row["remote"])]
        assert row["idle_limit_ms"] == 600000  # librdkafka never reaps: the broker does
        assert row["confidence"] >= 0.9


def test_uninstrumented_client_shows_sockets_with_kernel_idle(plain_producer, cluster):
    client = plain_producer
    snapshot = attach_once(client.pid, "--wire", "off")  # the kernel's and the threads' view
    (process,) = snapshot["processes"]
    assert process["clients"] == []
    rows = process["connections"]
    assert rows
    for row in rows:  # a socket librdkafka's node thread polls is that broker's; no other named
        assert (row["role"], row["evidence"]["role"]) in (("unknown", "none"),
                                                          ("broker", "thread")), row
        assert row["idle_ms"] is not None and row["evidence"]["idle"] == "kernel"
        assert row["bytes_sent"] > 0

    named = connections_of(attach_once(client.pid, "--bootstrap-servers", cluster, "--wire",
                                       "off"))
    cluster_ports = {port_of(a) for a in cluster.split(",")}
    for row in named:
        assert row["role"] == "broker" and row["evidence"]["role"] in ("inferred", "thread")
        assert port_of(row["remote"]) in cluster_ports
        assert row["broker_id"] is not None


def test_idle_age_grows_while_quiet_and_resets_on_send(start_client):
    producer = start_client("producer")
    first = {r["key"]: r["idle_ms"] for r in connections_of(attach_once(producer.pid))}
    time.sleep(1.5)
    second = {r["key"]: r["idle_ms"] for r in connections_of(attach_once(producer.pid))}
    grown = [k for k in first if k in second and second[k] >= first[k] + 1000]
    assert grown, (first, second)

    sending = time.monotonic()
    producer.send("produce 5")
    producer.wait_line("PRODUCED")
    third = {r["key"]: r["idle_ms"] for r in connections_of(attach_once(producer.pid))}
    # reset by the send: idle no longer than since it (kmon's own start-up counts in that
    # time, a second or more on a loaded host), where it was idle a second or more before
    since_ms = (time.monotonic() - sending) * 1000
    assert any(third[k] <= since_ms + 50 and second[k] >= 1000 for k in third if k in second), (
        second, third, since_ms)


def test_short_idle_limit_reaps_connection_with_closed_event(start_client):
    producer = start_client("producer", idle_ms=3000)
    stream = Child([sys.executable, "-m", "kmon", "attach", str(producer.pid), "--json",
                    "--interval", "250ms"])
    try:
        deadline = time.monotonic() + 20
        closed, limits = [], set()
        while not closed and time.monotonic() < deadline:
            record = json.loads(stream.wait_line("{", timeout=10))
            limits |= {r["idle_limit_ms"] for p in record["processes"]
                       for r in p["connections"] if r["client"]}
            closed = [e for e in record["events"] if e["kind"] == "closed"]
        assert closed, "no connection was reaped within 20 s"
        assert closed[0]["role"] == "broker" and closed[0]["pid"] == producer.pid
        assert limits == {3000}
    finally:
        stream.stop()


def test_several_sockets_to_one_broker_are_told_apart(start_client):
    """A consumer and a producer in one process: each socket goes to its own client."""
    process = start_client("both")
    stats = process.all_stats()
    producer_name = next(n for n, s in stats.items() if s["type"] == "producer")
    snapshot = attach_once(process.pid, "--settle", "5s")  # till each is sure, as kmon's default
    rows = connections_of(snapshot)
    endpoints = [r["remote"] for r in rows]
    assert len(endpoints) > len(set(endpoints)), "expected shared broker endpoints"
    assert all(r["client"] for r in rows), rows
    # the producer is quiet: its sockets' kernel counters equal its own byte totals
    producer_rows = [r for r in rows if r["client"] == producer_name]
    assert producer_rows
    by_name = stats[producer_name]["brokers"]
    for row in producer_rows:
        assert row["bytes_sent"] == by_name[row["broker_name"]]["txbytes"]
        assert row["bytes_received"] == by_name[row["broker_name"]]["rxbytes"]
        assert row["confidence"] >= 0.75


def test_admin_client_connections(start_client):
    admin = start_client("admin")
    (process,) = attach_once(admin.pid)["processes"]
    assert [c["type"] for c in process["clients"]] == ["admin"]
    rows = process["connections"]
    assert rows and all(r["role"] == "broker" and r["client"] for r in rows)


def test_psutil_fallback_knows_no_kernel_idle_times(producer, plain_producer):
    """Without sock_diag, idle ages come from the client's statistics, or stay unknown."""
    rows = connections_of(attach_once(producer.pid, "--socket-reader", "psutil"))
    assert rows and all(r["role"] == "broker" for r in rows)
    assert all(r["evidence"]["idle"] == "stats" and r["idle_ms"] is not None for r in rows)

    rows = connections_of(attach_once(plain_producer.pid, "--socket-reader", "psutil"))
    assert rows and all(r["idle_ms"] is None and r["evidence"]["idle"] == "unknown"
                        for r in rows)
