"""One host, one capture: the host view reads the wire once for every watched process and
hands each process the segments of its own sockets."""

from __future__ import annotations

import socket
import sys
import time
import uuid

import pytest
from helpers import Child, packet_sockets_held, produce, request_to, unique, wait_for

from kmon.engine.cluster_watch import ask_cluster
from kmon.engine.facade import (
    ClusterTarget,
    EngineSettings,
    HostTarget,
    SamplerSettings,
    open_session,
)
from kmon.model import EventKind, Role
from kmon.sources import kafka_protocol as kp
from kmon.sources.packets.host_wire import HostWire
from kmon.sources.process_wire import ProcessWire

pytestmark = [pytest.mark.integration,  # real processes, a cluster, real packet capture
              pytest.mark.root(reason="the wire needs CAP_NET_RAW (root)")]


def wired(view) -> list:
    """The rows of a process's view named by the wire."""
    return [c for c in view.connections if c.evidence.get("role") == "wire"]


def test_the_host_view_opens_one_capture_and_names_each_processs_sockets(cluster):
    """Three uninstrumented consumers started after the host view: one packet socket for all
    of them, and each one's coordinator and fetching brokers named by its own wire at 1.0."""
    topic = f"kmon-host-wire-{uuid.uuid4().hex[:8]}"
    produce(cluster, topic)
    session = open_session(HostTarget(), EngineSettings(SamplerSettings(require_kafka=False),
                                                        discover_every_s=0.0))
    clients: list[Child] = []
    try:
        session.poll()
        for _ in range(3):
            client = Child([sys.executable, "-m", "kmon.devtools.workload", "consumer",
                            cluster, "--topic", topic])
            clients.append(client)
        for client in clients:
            client.wait_line("READY", timeout=60)
        pids = {c.pid for c in clients}

        def named() -> dict | None:
            views = {v.pid: v for v in session.poll()[0].processes if v.pid in pids}
            done = len(views) == len(pids) and all(
                any(c.role == Role.COORDINATOR for c in wired(v))
                and any(c.role == Role.BROKER and "Fetch" in c.evidence["wire"]
                        for c in wired(v))
                # the wire may name roles a poll before the broker ids are known (from the
                # process's Metadata answers or kmon's own query)
                and all(c.broker_id is not None for c in wired(v)) for v in views.values())
            return views if done else None

        views = wait_for(named, "every consumer's sockets named by the wire", every=0.3)
        assert packet_sockets_held() == 1
        wire = session.discovery.wire
        assert wire is not None and len(wire.shares) >= 3  # other clients of the host too
    finally:
        session.close()
        for client in clients:
            client.stop()
    for view in views.values():
        assert sum(c.role == Role.COORDINATOR for c in wired(view)) == 1
        assert all(c.confidence == 1.0 and c.broker_id is not None for c in wired(view))
        # a socket silent since the process was found keeps the other evidence
        assert all(c.confidence < 1.0 for c in view.connections if c not in wired(view))
        # its own sockets only (a local port may serve another process's connection to
        # another broker once the first one closed: a socket is its local and remote ends)
        others = {(c.local, c.remote) for v in views.values() if v is not view
                  for c in v.connections}
        assert not {(c.local, c.remote) for c in view.connections} & others
    assert packet_sockets_held() == 0  # the capture closed with the session


def test_each_process_reads_only_its_own_sockets_from_its_first_request():
    """Two processes' wires on one capture: a connection each opens between two polls is
    read from its first request (its segments wait until a poll shows the socket), and
    never reaches the other process."""
    host = HostWire()
    first, second = ProcessWire(host), ProcessWire(host)
    opened = []
    with socket.create_server(("127.0.0.1", 0)) as broker:
        try:
            for wire in (first, second):
                assert wire.read([], 0).view is not None
            assert host.captures_opened == 1 and len(host.shares) == 2
            opened = [request_to(broker, "first"), request_to(broker, "second")]
            socks = [sock for _, sock, _ in opened]

            def read_by(wire: ProcessWire, sock):
                view = wire.read([sock], 1).view
                return view.flows if view.flows else None

            flows = [wait_for(lambda w=w, s=s: read_by(w, s), f"the {w} request")
                     for w, s in ((first, socks[0]), (second, socks[1]))]
        finally:
            first.close()
            second.close()
            for client, _, peer in opened:
                client.close()
                peer.close()
    assert [[(key[0].port, f.client_id, dict(f.api_counts), f.from_start)
             for key, f in found.items()] for found in flows] == [
        [(socks[0].local.port, "first", {kp.METADATA: 1}, True)],
        [(socks[1].local.port, "second", {kp.METADATA: 1}, True)]]
    assert host.capture is None and not host.shares  # closed with the last process


def test_a_wire_is_quiet_until_a_segment_waits_for_it():
    """``ProcessWire.quiet`` (a poll may carry the process's claims forward): never before its
    first read; after a read, while nothing waits for it; not once a request the process sent
    waits, until the next read takes it in."""
    wire = ProcessWire(HostWire())
    assert not wire.quiet()
    assert wire.read([], 0).view is not None  # the tap opened
    with socket.create_server(("127.0.0.1", 0)) as broker:
        client, sock, peer = request_to(broker, "quiet")
        try:
            wait_for(lambda: wire.read([sock], 1).view.flows or None, "the first request")
            assert wire.quiet()
            client.sendall(kp.metadata_request(2, "quiet"))
            wait_for(lambda: not wire.quiet(), "the second request, waiting")
            assert wire.read([sock], 2).view.flows
            assert wire.quiet()
        finally:
            wire.close()
            client.close()
            peer.close()


SHORT_CONNECTIONS = """
import socket, sys, time
from kmon.sources import kafka_protocol as kp
broker = ("127.0.0.1", int(sys.argv[1]))
held = socket.create_connection(broker)  # a poll's row: the broker's port, followed
held.sendall(kp.metadata_request(1, "held"))
print("READY", flush=True)
for line in sys.stdin:
    with socket.create_connection(broker) as sock:
        port = sock.getsockname()[1]
        sock.sendall(kp.metadata_request(2, "short"))
        time.sleep(0.05)
    print("CLOSED", port, flush=True)
"""


def test_a_close_between_two_polls_is_told_alike_by_the_host_capture_and_a_processs_own():
    """A connection a client opens and closes between two polls (no poll shows it): the
    per-process stream (``attach PID``: a capture of its own) and the host's views (``record
    -b``, ``serve -b``, ``ps -b``: several processes on one capture) tell its close with one
    story. Before, the host capture kept its segments for a poll that never showed the
    socket, and the host's views said ``client/unknown`` where the stream said
    ``client/client_closed``."""
    from kmon.engine.facade import ProcessTarget
    from kmon.model import EventKind

    settings = EngineSettings(SamplerSettings(require_kafka=False))
    with socket.create_server(("127.0.0.1", 0)) as broker:  # never accepts: the backlog does
        port = broker.getsockname()[1]
        client = Child([sys.executable, "-c", SHORT_CONNECTIONS, str(port)])
        other = Child([sys.executable, "-c", "import time; time.sleep(600)"])
        sessions = []
        try:
            client.wait_line("READY")
            alone = open_session(ProcessTarget((client.pid,)), settings)
            sessions.append(alone)
            shared = open_session(ProcessTarget((client.pid, other.pid)), settings)
            sessions.append(shared)
            assert shared.monitor.samplers[client.pid].wire_source.host is not None

            def rows_to_broker(session) -> bool:
                view = {v.pid: v for v in session.poll()[0].processes}.get(client.pid)
                return view is not None and any(c.remote == f"127.0.0.1:{port}"
                                                for c in view.connections)

            for session in sessions:  # its taps open, the broker's port followed
                wait_for(lambda s=session: rows_to_broker(s), "the held connection's row")
            closes: dict[str, list] = {"alone": [], "shared": []}
            for _ in range(3):
                client.send("go")
                short = int(client.wait_line("CLOSED").split()[1])
                for _ in range(4):  # its close is told within a poll or two
                    time.sleep(0.2)
                    for name, session in (("alone", alone), ("shared", shared)):
                        closes[name] += [
                            (short, e.close.closed_by, e.close.reason)
                            for e in session.poll()[1]
                            if e.kind is EventKind.CLOSED and e.pid == client.pid
                            and e.key and e.key.startswith(f"kernel:127.0.0.1:{short}>")]
        finally:
            for session in sessions:
                session.close()
            client.stop()
            other.stop()
    shorts = sorted({short for short, _, _ in closes["alone"]})
    assert len(shorts) == 3, closes
    assert sorted(closes["alone"]) == [(short, "client", "client_closed") for short in shorts]
    assert sorted(closes["shared"]) == sorted(closes["alone"])



PER_MESSAGE = """
import sys, time
from confluent_kafka import Producer
while True:
    producer = Producer({"bootstrap.servers": sys.argv[1]})
    producer.produce(sys.argv[2], b"one message, one client")
    producer.flush(5)
    del producer
    print("SENT", flush=True)
    time.sleep(0.5)
"""


def test_a_client_per_message_s_closes_between_polls_are_heard_on_the_host_s_capture(
        kafka_one_node):
    """Seen in the truth harness's client-per-message scenario: ``kmon serve -b`` and
    ``kmon record -b`` (the host's one capture) told every close of a producer made per
    message ``client/unknown`` where ``kmon attach`` told ``client/client_closed``. Its
    connections live between two polls: no poll showed a socket to the brokers, so its tap
    never followed their ports and heard none of their closes. Polled only while the client
    holds no connection, every close of one it opened once watched is told from the wire:
    the capture follows the named cluster's brokers, and the ports the kernel saw the
    process connect to."""
    cluster = kafka_one_node.bootstrap()
    topic = unique("kmon-per-message")
    produce(cluster, topic)
    session = open_session(HostTarget(ask_cluster(cluster, cluster, {}, 10)), EngineSettings(
        SamplerSettings(require_kafka=False), discover_every_s=0.0))
    client = Child([sys.executable, "-c", PER_MESSAGE, cluster, topic])
    told: list = []

    def poll_between_messages():
        while not client.lines.empty():  # the lines of messages sent meanwhile
            client.lines.get_nowait()
        client.wait_line("SENT")  # its connections closed; the next in 0.5 s
        snapshot, events = session.poll()
        told.extend(e for e in events if e.kind is EventKind.CLOSED and e.pid == client.pid)
        return snapshot if any(v.pid == client.pid for v in snapshot.processes) else None

    try:
        watched_ms = wait_for(poll_between_messages, "the client watched").ts_ms
        for _ in range(4):
            poll_between_messages()
    finally:
        client.stop()
        session.close()
    since = [e for e in told if e.close.opened_ms is not None and e.close.opened_ms > watched_ms]
    assert len(since) >= 6, [(e.key, e.close) for e in told]
    unheard = [(e.key, e.detail) for e in since if e.close.reason == "unknown"]
    assert not unheard, (len(since), unheard)


def test_a_client_per_message_joins_a_cluster_s_session_by_its_connects(kafka_one_node):
    """Seen in the truth harness's client-per-message scenario: ``kmon record -b`` (a
    cluster's session, the host searched every 10 s) never watched a producer made per
    message: at each search it held no connection. The kernel saw it connect to the
    cluster's broker: that process is looked at alone, and joins, with no search of the
    host (this session's searches are ten minutes apart). The host's capture follows the
    cluster's brokers from the session's start: the closes of its first connections, made
    before it was found, are heard too (they were told ``unknown`` in the recording)."""
    cluster = kafka_one_node.bootstrap()
    topic = unique("kmon-per-message")
    produce(cluster, topic)
    session = open_session(ClusterTarget(cluster), EngineSettings(
        SamplerSettings(require_kafka=False), discover_every_s=600.0))
    client = None
    try:
        session.refresh_cluster()
        session.poll()  # the session's search of the host: before the client
        client = Child([sys.executable, "-c", PER_MESSAGE, cluster, topic])
        client.wait_line("SENT")
        told: list = []

        def closes() -> list:
            told.extend(e for e in session.poll()[1] if e.kind is EventKind.CLOSED
                        and e.pid == client.pid and e.key.startswith("kernel:"))
            return told if client.pid in session.pids and len(told) >= 4 else []

        wait_for(closes, "the client watched, four of its closes told", every=0.5)
        unheard = [(e.key, e.detail) for e in told if e.close.reason == "unknown"]
        assert not unheard, (len(told), unheard)
    finally:
        if client is not None:
            client.stop()
        session.close()
