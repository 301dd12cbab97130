"""kmon against a real Apache Kafka cluster: the broker's idle reap, a node killed and
restarted under running consumers, SASL and TLS listeners, the cluster's controller and
groups (classic and KIP-848) with their coordinators, the host view beside the brokers'
JVMs; and, with a stand-in broker, the wire following a client that reconnects between
polls."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from helpers import IDLE_REASONS, attach_once, attach_stream, connections_of, read_until, wait_for

from kmon.classify import coordinator_node_id
from kmon.engine.cluster_watch import ClusterWatcher
from kmon.engine.facade import (
    ClusterSession,
    ClusterTarget,
    EngineSettings,
    HostTarget,
    SamplerSettings,
    open_session,
)
from kmon.model import EventKind
from kmon.sources.kernel.host_sockets import HostClients


def closes(events: list[dict], reason: str | None = None) -> list[dict]:
    return [e for e in events if e["kind"] == "closed" and reason in (None, e["reason"])]


def coordinator_of(kafka, client) -> int:
    """The broker id coordinating the group of a workload consumer, as the cluster says."""
    from confluent_kafka.admin import AdminClient

    group = f"kmon-test-group-{client.pid}"
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap()})
    return admin.describe_consumer_groups([group])[group].result(timeout=20).coordinator.id


# --- a cluster of the test's own -----------------------------------------------------------

@pytest.mark.integration
def test_a_broker_idle_reap_is_the_broker_s_with_the_idle_time_before_it(start_kafka,
                                                                           start_client_at):
    cluster = start_kafka(1, **{"connections.max.idle.ms": "3000"})
    session = open_session(ClusterTarget(cluster.bootstrap()))
    try:
        session.refresh_cluster()
        session.poll()
    finally:
        session.close()
    configured = session.settings.sampler.broker_idle_ms
    assert session.directory.idle_limit_ms(configured) == 3000  # what kmon watch takes
    producer = start_client_at(cluster.bootstrap(), "producer", idle_ms=60_000)
    # the broker's limit as the cluster describes it (no --broker-idle-ms)
    stream = attach_stream(producer.pid, "--bootstrap-servers", cluster.bootstrap())
    try:
        events, _ = read_until(stream, lambda found, _: len(closes(found, "broker_idle_reap")) >= 2,
                               40)
    finally:
        stream.stop()
    reaps = closes(events, "broker_idle_reap")
    assert len(reaps) >= 2, closes(events)
    for reap in reaps:
        assert reap["closed_by"] == "broker", reap
        assert reap["idle_before_ms"] >= 0.9 * 3000, reap
        assert "closed by the broker after" in reap["detail"], reap
    assert not closes(events, "client_idle_reap")  # the client's limit is a minute


@pytest.mark.integration
def test_a_node_killed_then_restarted_under_three_consumers(start_kafka, start_client_at):
    """SIGKILL a node: each consumer's sockets to it close as the broker's; started again,
    the three processes reconnecting to it are a reconnect storm (the engine behind
    ``kmon watch``, polled here as the dashboard polls it).

    The kernel closes a killed JVM's sockets with a FIN (a RST where unread data was
    left), and librdkafka closes its end within a millisecond: its sockets never stay in
    CLOSE_WAIT long enough for a poll to see it (test_close_wait covers a client that
    holds them). A cluster of the test's own: the run's shared one serves other tests at
    the same time."""
    cluster = start_kafka(3)
    consumers = [start_client_at(cluster.bootstrap(), "consumer") for _ in range(3)]
    victim = cluster.nodes[1]
    watcher = ClusterWatcher(cluster.bootstrap(), {})
    session = ClusterSession(watcher, EngineSettings(interval_ms=250),
                             [c.pid for c in consumers])
    events, latest, stop = [], [], threading.Event()

    def poll() -> None:
        while not stop.is_set():
            snapshot, new = session.poll()
            events.extend(new)
            latest[:] = [snapshot]
            time.sleep(0.25)

    def settled() -> bool:
        """Every consumer holds a connection to the node about to be killed."""
        holding = {p.pid for p in (latest[0].processes if latest else ())
                   if any(c.broker_id == victim.node_id for c in p.connections)}
        return holding == {c.pid for c in consumers}

    def dropped() -> list:
        """The consumers' closes of sockets to the node since it was killed."""
        return [e for e in events if e.kind is EventKind.CLOSED and e.ts_ms >= killed
                and e.broker_id == victim.node_id]

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        deadline = time.monotonic() + 60
        while not settled():
            assert time.monotonic() < deadline, "the consumers never reached both nodes"
            time.sleep(0.25)
        killed = time.time() * 1000
        cluster.kill(victim)
        wait_for(lambda: {e.pid for e in dropped()} == {c.pid for c in consumers},
                 "a close to the killed node in every consumer")
        cluster.start_node(victim)
        cluster.wait_ready()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not [
                e for e in events
                if e.kind is EventKind.CHURN and e.churn.pattern == "reconnect_storm"]:
            time.sleep(0.5)
    finally:
        stop.set()
        poller.join(10)
        session.close()
    closed = dropped()
    assert {e.pid for e in closed} == {c.pid for c in consumers}, closed
    assert all(e.close.closed_by == "broker" for e in closed), [e.close for e in closed]
    told = [(e.role, e.close.reason) for e in closed]
    # a socket none of whose requests the capture read (a coordinator that sent no heartbeat
    # between kmon's first look and the kill) is unsettled, never another reason
    assert all(reason in ("broker_closed", "reset", "unknown") for _, reason in told), told
    # where none is told, the notices say why (the wire missed, a capture not open yet)
    assert any(reason in ("broker_closed", "reset") for _, reason in told), (
        told, [e.close for e in closed], [p.notices for p in latest[0].processes])
    churns = [e for e in events if e.kind is EventKind.CHURN]
    storms = [e for e in churns if e.churn.pattern == "reconnect_storm"]
    assert [(e.churn.pattern, e.broker_id) for e in storms] == [
        ("reconnect_storm", victim.node_id)], storms
    # A node starting up accepts and closes fresh connections within milliseconds, as a
    # per-IP limit does: the kernel's events cannot tell the two apart (docs/real-clients.md).
    # Whatever else is raised names the restarted node only.
    others = [e for e in churns if e.churn.pattern != "reconnect_storm"]
    assert all(e.churn.pattern in ("per_ip_rejected", "connect_failed")
               and victim.address() in e.detail for e in others), [e.detail for e in others]
    assert storms[0].churn.rate == 3


# --- the shared cluster --------------------------------------------------------------------

@pytest.mark.integration
def test_a_wrong_sasl_password_is_auth_failed_and_the_right_one_gives_roles(kafka,
                                                                              start_client_at,
                                                                              tmp_path):
    sasl = kafka.bootstrap("SASL_PLAINTEXT")
    config = kafka.client_config("SASL_PLAINTEXT")
    good = start_client_at(sasl, "consumer", extra_args=("--config", str(config)))
    conns = connections_of(attach_once(good.pid))
    assert {c["role"] for c in conns} == {"broker", "coordinator"}, conns
    assert all(c["confidence"] >= 0.9 and c["node_id"] is not None for c in conns), conns

    wrong = tmp_path / "wrong.properties"
    wrong.write_text("".join(line if not line.startswith("sasl.password=") else
                             "sasl.password=not-the-password\n"
                             for line in config.read_text().splitlines(keepends=True)))
    bad = start_client_at(sasl, "producer", extra_args=("--config", str(wrong)), ready=False)
    stream = attach_stream(bad.pid, "--any-process")
    try:
        events, _ = read_until(stream, lambda found, _: len(closes(found, "auth_failed")) >= 3, 40)
    finally:
        stream.stop()
    failed = closes(events, "auth_failed")
    assert len(failed) >= 3, closes(events)
    assert "authentication failed" in failed[0]["detail"]
    assert not [e for e in closes(events) if e["reason"] in IDLE_REASONS]


@pytest.mark.integration
def test_the_tls_listener_is_noted_by_the_wire_and_roles_come_from_statistics(kafka,
                                                                              start_client_at):
    consumer = start_client_at(kafka.bootstrap("SSL"), "consumer",
                               extra_args=("--config", str(kafka.client_config("SSL"))))
    stream = attach_stream(consumer.pid, "--tls", "off")  # the TLS source: tests/test_tls.py
    try:
        _, record = read_until(stream, lambda found, _: False, 3)
    finally:
        stream.stop()
    conns = connections_of(record)
    assert {c["role"] for c in conns} == {"broker", "coordinator"}, conns
    for conn in conns:
        assert conn["evidence"]["wire"] == "tls", conn
        # the coordinator and the broker connection to one node are told apart by bytes and
        # idle times alone (no headers to read): a close pairing comes with less confidence
        assert conn["evidence"]["role"] == "stats" and conn["confidence"] >= 0.5, conn
    (coordinator,) = [c for c in conns if c["role"] == "coordinator"]
    assert coordinator["node_id"] == coordinator_node_id(coordinator_of(kafka, consumer))


@pytest.mark.integration
def test_a_kip848_consumer_s_coordinator_is_found_exactly(kafka, start_client_at):
    consumer = start_client_at(kafka.bootstrap(), "consumer",
                               properties={"group.protocol": "consumer"})
    stream = attach_stream(consumer.pid)

    def heartbeat_seen(_, record: dict) -> bool:  # one every 5 s (the broker's interval)
        return any("ConsumerGroupHeartbeat" in c["evidence"].get("wire", "")
                   for c in connections_of(record))

    try:
        _, record = read_until(stream, heartbeat_seen, 20)
    finally:
        stream.stop()
    (coordinator,) = [c for c in connections_of(record) if c["role"] == "coordinator"]
    broker_id = coordinator_of(kafka, consumer)
    assert coordinator["node_id"] == coordinator_node_id(broker_id), coordinator
    assert "ConsumerGroupHeartbeat" in coordinator["evidence"]["wire"], coordinator
    assert "JoinGroup" not in coordinator["evidence"]["wire"]
    sources = {c["source"]: c for c in coordinator["claims"]}
    assert sources["wire"]["role"] == sources["stats"]["role"] == "coordinator", sources
    assert coordinator["confidence"] == 1.0


@pytest.mark.integration
def test_watch_names_every_group_with_members_and_coordinator(
        kafka, start_client_at):
    classic = start_client_at(kafka.bootstrap(), "consumer")
    modern = start_client_at(kafka.bootstrap(), "consumer",
                             properties={"group.protocol": "consumer"})
    view = ClusterWatcher(kafka.bootstrap(), {}).refresh()
    coordinators = {client.pid: coordinator_of(kafka, client) for client in (classic, modern)}
    assert view.error is None and view.groups_error is None, (view.error, view.groups_error)
    assert [b.broker_id for b in view.brokers] == [1, 2, 3]
    # KRaft: a Metadata answer's controller id is any live broker: kmon names none
    assert not hasattr(view, "controller_id")
    assert view.broker_idle_ms == 600_000  # as the brokers describe their configuration
    groups = {g.group_id: g for g in view.groups}
    for client in (classic, modern):
        group = groups[f"kmon-test-group-{client.pid}"]
        assert group.state == "stable", group
        assert [m.client_id for m in group.members] == ["kmon-workload-consumer"], group
        assert group.coordinator_id == coordinators[client.pid], group


@pytest.mark.integration
def test_the_host_view_never_lists_a_broker_jvm(kafka, start_client_at):
    client = start_client_at(kafka.bootstrap(), "producer")
    brokers = {node.pid for node in kafka.nodes}
    session = open_session(HostTarget(), EngineSettings(SamplerSettings(require_kafka=False),
                                                        discover_every_s=0.0))
    try:
        first, _ = session.poll()  # no client has named the brokers yet
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            later, _ = session.poll()
            if client.pid in {p.pid for p in later.processes}:
                break
            time.sleep(0.5)
        else:
            pytest.fail("the host view never found the client")
        assert session.known_brokers  # the brokers are known now
    finally:
        session.close()
    for snapshot in (first, later):
        assert not brokers & {p.pid for p in snapshot.processes}, snapshot.processes
    # were a broker JVM taken for a client (it carries the client classes), it would still
    # be found serving: the client's connections reach its listening sockets
    search = HostClients()
    try:
        # (a producer need not reach every broker: those it reaches are found serving)
        served = search.serving(brokers | {client.pid})
        assert served and served <= brokers, served
    finally:
        search.close()


@pytest.mark.integration
def test_the_host_view_never_lists_the_embedded_mock_cluster(cluster, start_client):
    """The mock cluster's process maps librdkafka like a client, and listens."""
    import psutil

    client = start_client("producer")
    port = int(cluster.split(",")[0].rsplit(":", 1)[1])
    (server,) = {s.pid for s in psutil.net_connections("tcp")
                 if s.status == psutil.CONN_LISTEN and s.laddr.port == port}
    session = open_session(HostTarget(), EngineSettings(SamplerSettings(require_kafka=False),
                                                        discover_every_s=0.0))
    try:
        first, _ = session.poll()  # no client has named the brokers yet
        assert client.pid in {p.pid for p in first.processes}
        later, _ = session.poll()
    finally:
        session.close()
    for snapshot in (first, later):
        assert server not in {p.pid for p in snapshot.processes}


@pytest.mark.integration
def test_the_wire_follows_a_broker_with_no_socket_open_at_a_poll_and_reads_a_failed_login():
    """A client refused by a real broker reconnects every few ms, so a poll may find no
    socket to it: its next connection's requests and the broker's SASL error must still be
    seen. A plain socket server stands in for the broker (it answers SaslAuthenticate with
    an error, as a real broker does for a wrong password: the real one is
    test_a_wrong_sasl_password_is_auth_failed_and_the_right_one_gives_roles)."""
    from kmon.sources import kafka_protocol as kp
    from kmon.sources.kernel.sockets import Endpoint, TcpSocket
    from kmon.sources.packets.kafka_wire import WireTap

    def connect(server):
        client = socket.create_connection(server.getsockname()[:2])
        peer, _ = server.accept()
        sock = TcpSocket(0, client.fileno(), Endpoint(*client.getsockname()[:2]),
                         Endpoint(*server.getsockname()[:2]), "ESTABLISHED")
        return client, peer, sock

    body = (kp.SASL_AUTHENTICATE.to_bytes(2, "big") + (1).to_bytes(2, "big")
            + (7).to_bytes(4, "big") + (4).to_bytes(2, "big") + b"kmon")
    error = (7).to_bytes(4, "big") + (58).to_bytes(2, "big") + bytes(6)
    with socket.create_server(("127.0.0.1", 0)) as server:
        first, first_peer, first_sock = connect(server)
        tap = WireTap([first_sock], 0)
        try:
            tap.poll([first_sock], 0)
            first.close()
            first_peer.close()
            tap.poll([], 1)  # no socket to the broker at this poll
            client, peer, sock = connect(server)
            client.sendall(len(body).to_bytes(4, "big") + body)
            peer.recv(100)
            peer.sendall(len(error).to_bytes(4, "big") + error)

            def flow():
                return tap.poll([sock], 2).flows.get((sock.local, sock.remote))

            read = wait_for(lambda: (f := flow()) and f.auth_failed and f,
                            "the SaslAuthenticate error read by the tap")
            assert read.last_api == 36
            client.close()
            wait_for(lambda: flow().close, "the client's FIN read by the tap")
            closes = tap.poll([], 3).closes
            peer.close()
        finally:
            tap.close()
    close = closes[(sock.local, sock.remote)]
    assert (close.first_by, close.last_api, close.auth_failed) == ("client", 36, True)
