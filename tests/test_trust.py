"""The verdicts an operator reads at the worst moment, each checked on a real Apache Kafka
cluster against a truth kmon does not use (the client's own log, its statistics).

Issue reproductions: a stopped cluster is refused connects, never a per-IP limit; a process
with no group has no coordinator whatever another process's client id is.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import pytest
from helpers import (
    KafkaClient,
    all_named,
    attach_once,
    attach_stream,
    connections_of,
    from_start,
    kmon,
    produce,
    read_until,
    wait_for,
)

from kmon.devtools.client_programs import KAFKAJS_CONSUMER

pytestmark = pytest.mark.integration  # a real cluster, real clients, kmon as root

WORKLOAD = [sys.executable, "-m", "kmon.devtools.workload"]


def started(*argv: str) -> KafkaClient:
    client = KafkaClient([*WORKLOAD, *argv])
    client.wait_line("READY", timeout=90)
    return client


@pytest.mark.skipif(sys.platform != "linux", reason="the kernel's TCP events are Linux's")
def test_a_stopped_cluster_is_refused_connects_never_a_per_ip_limit(start_kafka):
    """Every node stopped under a plain consumer: its reconnects are answered by a RST (the
    client's own log says "Connection refused"): connect_failed, refused, never
    per_ip_rejected (a per-IP limit accepts, then closes)."""
    if os.geteuid() != 0:
        pytest.skip("the kernel's TCP events need root")
    cluster = start_kafka(brokers=1)
    consumer = started("consumer", cluster.bootstrap(), "-X", "debug=broker",
                       "-X", "reconnect.backoff.max.ms=200")
    stream = attach_stream(consumer.pid, "-b", cluster.bootstrap())
    try:
        read_until(stream, lambda events, record: True, 5)  # attached, following the port
        stopped_ms = time.time() * 1000
        for node in cluster.nodes:
            cluster.kill(node)
        consumer.wait_stderr("Connection refused", timeout=30)  # the client's own word

        def enough(events, record):
            return sum(e["kind"] == "closed" and e["ts_ms"] >= stopped_ms
                       and e["reason"] == "connect_failed" for e in events) >= 3

        events, _ = read_until(stream, enough, 20)
    finally:
        stream.stop()
        consumer.stop()
    closed = [e for e in events if e["kind"] == "closed" and e["ts_ms"] >= stopped_ms]
    shown = [(e["reason"], e["closed_by"], e.get("detail")) for e in closed]
    assert not [e for e in closed if e["reason"] == "per_ip_rejected"], shown
    refused = [e for e in closed if e["reason"] == "connect_failed"]
    assert len(refused) >= 3 and all("refused" in e["detail"] for e in refused), shown
    churn = [e for e in events if e["kind"] == "churn" and e["ts_ms"] >= stopped_ms]
    assert not [e for e in churn if e.get("pattern") == "per_ip_rejected"], churn


KCAT = "/usr/bin/kcat"


@pytest.mark.skipif(not os.access(KCAT, os.X_OK), reason="kcat is not installed (.ci/run does)")
def test_an_idle_kcat_producer_has_no_coordinator_beside_a_member_sharing_its_client_id(
        kafka_one_node):
    """An idle kcat producer (client.id rdkafka, librdkafka's default) beside a group member
    whose client.id is also rdkafka: the cluster's group description matches both by host
    and client id, but only the member heartbeats. kcat's own debug log names no
    GroupCoordinator; kmon must name none either, in the stream and in --once. One node:
    kcat's one socket is to the group's coordinator."""
    bootstrap = kafka_one_node.bootstrap()
    member = started("consumer", bootstrap, "--client-id", "rdkafka")
    kcat = KafkaClient([KCAT, "-P", "-b", bootstrap, "-t", "kmon-trust-idle", "-d", "broker"])
    stream = None
    try:
        wait_for(lambda: any(re.search(r"NodeId changed from -1|with NodeId \d", line)
                             for line in kcat.stderr), "kcat learning the brokers", 30)
        stream = attach_stream(kcat.pid, "-b", bootstrap)
        rows: list[dict] = []

        def seen(events, record):
            rows.extend(c for view in record["processes"] for c in view["connections"])
            return False

        read_until(stream, seen, 14)  # more than four heartbeat intervals
        once = json.loads(kmon("attach", str(kcat.pid), "-b", bootstrap, "--once",
                               "--json").stdout)
    finally:
        for child in (stream, kcat, member):
            if child is not None:
                child.stop()
    assert not [line for line in kcat.stderr if "[thrd:GroupCoordinator" in line]  # oracle
    assert rows and not [r for r in rows if r["role"] == "coordinator"], {
        (r["key"], r["role"], str(r["evidence"])) for r in rows}
    assert not [c for view in once["processes"] for c in view["connections"]
                if c["role"] == "coordinator"]


def stats_coordinator(stats: dict) -> int:
    """The group coordinator's broker id, as the consumer's own statistics name it."""
    learned = {b["nodename"]: b["nodeid"] for b in stats["brokers"].values()
               if b["source"] == "learned"}
    return learned[stats["brokers"]["GroupCoordinator"]["nodename"]]


def test_one_shot_views_name_a_plain_consumer_s_coordinator_or_say_they_are_unsure(kafka):
    """An uninstrumented consumer in a group (kmon reads no statistics of it): its own
    statistics name the coordinator. ``attach --once`` and ``ps`` settle for a moment (a
    heartbeat on the wire) and name that coordinator; any socket still unsure is shown below
    0.9, never as a different confident answer."""
    bootstrap = kafka.bootstrap()
    consumer = started("consumer", bootstrap)
    try:
        truth = stats_coordinator(consumer.own_stats())  # the oracle
        once = json.loads(kmon("attach", str(consumer.pid), "-b", bootstrap, "--once",
                               "--json").stdout)
        ps = json.loads(kmon("ps", "-b", bootstrap, "-o", "json").stdout)
        # settled long enough for two heartbeats: named, in both views
        patient = json.loads(kmon("attach", str(consumer.pid), "-b", bootstrap, "--once",
                                  "--json", "--settle", "7s").stdout)
        patient_ps = json.loads(kmon("ps", "-b", bootstrap, "-o", "json", "--settle",
                                     "7s").stdout)
    finally:
        consumer.stop()
    (view,) = once["processes"]
    rows = view["connections"]
    named = [r for r in rows if r["role"] == "coordinator"]
    sure_wrong = [r for r in rows if r["confidence"] >= 0.9 and r["role"] == "coordinator"
                  and r["broker_id"] != truth]
    assert not sure_wrong, rows
    if named:
        assert [r["broker_id"] for r in named] == [truth], rows
    else:  # unsettled: the socket to the coordinator is not confidently anything else
        assert all(r["confidence"] < 0.9 for r in rows if r["broker_id"] == truth), rows
    (row,) = [p for p in ps["processes"] if p["pid"] == consumer.pid]
    assert row["coordinator"] == len(named), (row, named)
    (view,) = patient["processes"]
    assert [(r["broker_id"], r["confidence"]) for r in view["connections"]
            if r["role"] == "coordinator"] == [(truth, 1.0)], view["connections"]
    (row,) = [p for p in patient_ps["processes"] if p["pid"] == consumer.pid]
    assert row["coordinator"] == 1, row


def test_a_wrong_password_is_a_failed_login_said_at_once(kafka):
    """The SASL listener answers and refuses the login (the broker's own word, which
    librdkafka reports): kmon says so, instead of waiting out its timeout to say the port
    gave no Kafka answer."""
    result = kmon("ps", "-b", kafka.bootstrap("SASL_PLAINTEXT"), "-X",
                  "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanism=PLAIN", "-X",
                  "sasl.username=kmon", "-X", "sasl.password=wrong", "--cluster-timeout", "1m")
    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert "refused kmon's login" in result.stderr, result.stderr
    assert "Invalid username or password" in result.stderr, result.stderr
    assert "wrong" not in result.stderr  # the password given is never echoed
    assert "sasl.password=" not in result.stderr and "gave no Kafka answer" not in result.stderr


def test_watch_counts_an_uninstrumented_local_consumer_as_a_local_member(kafka):
    """A group whose only member is a plain consumer here (kmon reads no statistics of it):
    its own statistics say it is in the group; watch's groups panel counts it, 1 local."""
    from helpers import process_session

    from kmon.engine.cluster_watch import ClusterWatcher, groups_view

    consumer = started("consumer", kafka.bootstrap())
    session = process_session(consumer.pid)
    try:
        own = consumer.own_stats()["cgrp"]  # the oracle: the member's own word
        view = ClusterWatcher(kafka.bootstrap(), {}).refresh()
        snapshot, _ = session.poll()
    finally:
        session.close()
        consumer.stop()
    assert own["state"] == "up" and own["join_state"] == "steady", own
    rows = {r.group_id: r for r in groups_view(view, snapshot)}
    row = rows[f"kmon-test-group-{consumer.pid}"]
    assert (row.members, row.local_members) == (1, 1), row


@pytest.mark.parametrize("instrument", [True, False], ids=["agent", "plain"])
def test_librdkafka_s_rebootstrap_connection_is_a_bootstrap_never_broker_1(start_kafka,
                                                                           instrument):
    """One node reaping idle connections after 4 s: a producer (with kmon's agent, and
    without: no statistics) loses its only broker, re-bootstraps (its debug log:
    ``/bootstrap: Connected``, then ``Sending TERMINATE to …/bootstrap`` about a second later)
    and connects to broker 1 again, both to the same address. The short connection it closes
    itself is the bootstrap: the kernel saw it opened once the broker had closed the
    process's last connection (kmon.engine.losses), which the wire alone cannot tell."""
    if os.geteuid() != 0:
        pytest.skip("the kernel's TCP events and the wire need root")
    cluster = start_kafka(brokers=1, **{"connections.max.idle.ms": "4000"})
    producer = started("producer", cluster.bootstrap(), *(["--instrument"] if instrument
                                                          else []), "-X", "debug=broker")
    stream = attach_stream(producer.pid, "-b", cluster.bootstrap())
    last_rows: dict[str, dict] = {}  # socket key -> its last row
    try:
        def rebootstrapped(events, record):
            last_rows.update((c["key"], c) for view in record["processes"]
                             for c in view["connections"])
            return sum(e["kind"] == "closed" and e["closed_by"] == "client"
                       for e in events) >= 3 and any("Sending TERMINATE to" in line
                                                and "/bootstrap" in line
                                                for line in producer.stderr)

        events, _ = read_until(stream, rebootstrapped, 45)  # three reap cycles
    finally:
        stream.stop()
        producer.stop()
    # the oracle: the client's own log says it re-bootstrapped and closed that connection
    assert [line for line in producer.stderr if "re-bootstrap" in line], producer.stderr[-5:]
    # (one no poll saw is told from the kernel, with no row and no role: kernel_watch)
    short = [e for e in events if e["kind"] == "closed" and e["closed_by"] == "client"
             and not e["key"].startswith("kernel:")]
    assert short, [(e["kind"], e.get("role"), e.get("closed_by")) for e in events]
    for close in short:
        row = last_rows.get(close["key"])
        assert close["role"] == "bootstrap" and (row is None or row["role"] == "bootstrap"), (
            close, row)


def wire_truth(rows: list[dict]) -> dict[str, str]:
    """Socket key -> role, as the wire named each socket from its first request on."""
    return {r["key"]: r["role"] for r in rows}


def named_with_a_bootstrap(rows: list[dict]) -> bool:
    """Every socket named by the wire from its first request, a bootstrap among them."""
    return all_named(rows) and any(r["role"] == "bootstrap" for r in rows)


@pytest.mark.root(reason="the wire needs CAP_NET_RAW (root)")
@pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed")
def test_a_silent_socket_beside_others_to_its_broker_is_unsettled_never_a_broker(
        kafka_one_node, java_program, request):
    """A Java consumer (JMX off: no node ids from the JVM) and a franz-go consumer on one
    node: each holds its bootstrap (seed) socket, silent after the first Metadata, beside its
    broker and coordinator sockets to the same address (franz-go one more, for JoinGroup and
    SyncGroup, silent after the join). The oracle is kmon's wire attached before the client
    opened a connection: it saw each socket's first requests. A second look, attached later,
    hears nothing on the silent ones: they must be unsettled (or their true role), never a
    broker — the endpoint alone cannot tell sockets to one address apart."""
    bootstrap = kafka_one_node.bootstrap()
    produce(bootstrap, "kmon-trust-shared")
    java = ["java", "-XX:TieredStopAtLevel=1", "-XX:+DisableAttachMechanism", "-cp",
            java_program["4.4.0"], "KafkaClientProgram", "consumer", bootstrap, "--group",
            "kmon-trust-java", "--topic", "kmon-trust-shared"]
    go = [request.getfixturevalue("go_consumer"), "franz-go", bootstrap, "kmon-trust-go",
          "kmon-trust-shared"]
    for argv in (java, go):
        client, rows = from_start(argv, named_with_a_bootstrap)
        try:
            truth = wire_truth(rows)
            later = {r["key"]: r for r in connections_of(attach_once(
                client.pid, "-b", bootstrap, "--settle", "1s"))}
        finally:
            client.stop()
        silent = [later[key] for key, role in truth.items() if role != "broker"
                  and key in later and later[key]["evidence"].get("role") != "wire"]
        assert silent, (argv[0], truth, later)  # the bootstrap socket at least: never heard
        for row in silent:
            assert row["role"] in (truth[row["key"]], "unknown"), (row, truth)
            assert row["role"] != "unknown" or row["confidence"] < 0.9, row
        for key, role in truth.items():  # what the later look heard stays right
            if key in later and later[key]["evidence"].get("role") == "wire":
                assert later[key]["role"] == role or role == "bootstrap", (later[key], role)


NODE_MODULES = Path(__file__).parent / "node" / "node_modules"


@pytest.mark.root(reason="the wire needs CAP_NET_RAW (root)")
@pytest.mark.skipif(not (NODE_MODULES / "kafkajs").is_dir() or shutil.which("node") is None,
                    reason="kafkajs is not installed (npm install --prefix tests/node)")
def test_one_shot_views_never_call_kafkajs_s_coordinator_socket_a_broker(kafka_one_node,
                                                                         tmp_path):
    """KafkaJS holds two sockets to the coordinator's broker, one fetching, one for the
    group (its heartbeats, 3 to 5 s apart, follow its 5 s fetches). The oracle is kmon's wire
    attached before its first connection (it saw each socket's requests from the start);
    ``attach --once`` and ``ps``, attached later, may look between two heartbeats: they
    must name the coordinator or leave it unsettled, never a broker, as the stream does."""
    bootstrap = kafka_one_node.bootstrap()
    produce(bootstrap, "kmon-trust-kafkajs")
    script = tmp_path / "consumer.js"
    script.write_text(KAFKAJS_CONSUMER)
    client, rows = from_start(["node", str(script), bootstrap, "kmon-trust-kafkajs",
                               "kmon-trust-kafkajs"], all_named,
                              env={**os.environ, "NODE_PATH": str(NODE_MODULES)})
    try:
        truth = wire_truth(rows)
        looks = [connections_of(attach_once(client.pid, "-b", bootstrap, "--settle", settle))
                 for settle in ("0", "1s")]
        ps = json.loads(kmon("ps", "-b", bootstrap, "-o", "json", "--settle", "0").stdout)
    finally:
        client.stop()
    assert "coordinator" in truth.values(), rows
    for look in looks:
        for row in look:
            if truth.get(row["key"]) == "coordinator":
                assert row["role"] in ("coordinator", "unknown"), row
    (line,) = [p for p in ps["processes"] if p["pid"] == client.pid]
    assert line["broker"] <= sum(role == "broker" for role in truth.values()), (line, truth)


def jmx_helper_peers(pid: int) -> set[str]:
    """The peers ("ip:port") of ``pid``'s TCP sockets that a kmon JMX helper JVM holds the
    other end of, from the kernel's socket table and the owners' command lines."""
    import psutil

    owners = {(c.laddr.ip, c.laddr.port): c.pid for c in psutil.net_connections("tcp")
              if c.pid and c.laddr}
    peers = set()
    for conn in psutil.Process(pid).net_connections("tcp"):
        owner = owners.get((conn.raddr.ip, conn.raddr.port)) if conn.raddr else None
        if owner and "KmonJmx" in psutil.Process(owner).cmdline():
            peers.add(f"{conn.raddr.ip.removeprefix('::ffff:')}:{conn.raddr.port}")
    return peers


def test_no_view_shows_another_kmon_s_jmx_helper_as_a_socket_of_the_jvm(start_java, kafka):
    """Every kmon command attached to a JVM runs a JMX helper that connects to it; each
    hid its own helper's sockets only, so a live view and a one-shot view (or /metrics)
    counted each other's helpers as unknown sockets of the client: two views, two counts.
    None of them is the client's."""
    client = start_java("consumer", "--group", "kmon-trust-jmx", "--topic", "kmon-trust-jmx")
    stream = attach_stream(client.pid, "-b", kafka.bootstrap())
    try:
        read_until(stream, lambda events, record: True, 1)  # its helper attached
        wait_for(lambda: jmx_helper_peers(client.pid), "the stream's JMX helper connected", 30)
        once = connections_of(attach_once(client.pid, "-b", kafka.bootstrap()))
        helpers = jmx_helper_peers(client.pid)
    finally:
        stream.stop()
    assert not [r for r in once if r["remote"] in helpers], (once, helpers)
