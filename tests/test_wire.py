"""Roles from the wire: real clients that no kmon code instruments, on the embedded cluster.

Each client is attached with ``kmon attach PID --json`` and no ``-b``: every socket
must get its role, broker id and node id from the Kafka headers it carries, at
confidence 1.0. Then what the wire must never do: capture a password, or fail
without CAP_NET_RAW.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers import (
    KAFKA_PYTHON_CONSUMER,
    Child,
    all_named,
    apis,
    attach_stream,
    captured,
    from_start,
    produce,
    python_as,
    request_to,
    rows_until,
    wait_for,
    wire_sure,
)

from kmon.classify import MAX_INT
from kmon.devtools.client_programs import KAFKAJS_CONSUMER
from kmon.sources import kafka_protocol as kp
from kmon.sources.brokers.broker_query import ask_brokers
from kmon.sources.kernel.sockets import Endpoint
from kmon.sources.packets import packet_filter

pytestmark = [pytest.mark.integration,  # real processes, a cluster, real packet capture
              pytest.mark.root(reason="the wire needs CAP_NET_RAW (root)")]

KCAT = "/usr/bin/kcat"
NODE_MODULES = Path(__file__).parent / "node" / "node_modules"
def wire_rows(pid: int, wanted) -> list[dict]:
    """Attached to a running client: its rows once ``wanted``."""
    stream = attach_stream(pid, "--any-process", interval="500ms")
    try:
        return rows_until(stream, wanted)
    finally:
        stream.stop()


def check_roles(rows: list[dict], brokers: dict[int, tuple[str, int]]) -> None:
    """Every socket named by the wire, its broker id matching its address: at 1.0, but for a
    connection that only asked for metadata once the cluster was known (0.7: a broker, or a
    re-bootstrap)."""
    by_address = {f"{host}:{port}": broker for broker, (host, port) in brokers.items()}
    for row in rows:
        assert wire_sure(row) and row["evidence"]["role"] == "wire", row
        assert row["broker_id"] == by_address[row["remote"]], row
        if row["role"] == "bootstrap":
            assert row["node_id"] < 0 and "Metadata" in apis(row), row
            assert not {"Fetch", "Heartbeat"} & apis(row), row
        elif row["role"] == "coordinator":
            assert row["node_id"] == MAX_INT - row["broker_id"], row
            assert {"Heartbeat", "JoinGroup", "OffsetCommit", "SyncGroup",
                    "OffsetFetch"} & apis(row), row
        elif row["role"] == "unknown":  # only metadata, opened with nothing else held
            assert row["node_id"] is None and apis(row) <= {"Metadata", "ApiVersions"}, row
        else:
            # a broker connection fetches, or so far only asked for metadata (a client opens
            # one to a known broker for that: kafka-python's least-loaded node)
            assert row["role"] == "broker" and row["node_id"] == row["broker_id"], row
            assert "Fetch" in apis(row) or apis(row) <= {"Metadata", "ApiVersions"}, row
    assert sum(r["role"] == "coordinator" for r in rows) == 1
    assert any("Fetch" in apis(r) for r in rows if r["role"] == "broker")


@pytest.fixture
def topic(cluster) -> str:
    name = f"kmon-wire-{uuid.uuid4().hex[:8]}"
    produce(cluster, name)
    return name


@pytest.fixture
def brokers(cluster) -> dict[int, tuple[str, int]]:
    host, port = cluster.split(",")[0].rsplit(":", 1)
    return ask_brokers(Endpoint(host, int(port)))


def run_client(argv: list[str], ready: str = "READY"):
    client = Child(argv)
    client.wait_line(ready, timeout=60)
    return client


def test_an_uninstrumented_confluent_kafka_consumer_already_running(cluster, brokers, topic):
    """Attached to a running consumer: every socket that carries a request after kmon attached
    is named by it; one that stays silent keeps the other evidence."""
    client = run_client([sys.executable, "-m", "kmon.devtools.workload", "consumer", cluster,
                         "--topic", topic])
    attached = time.monotonic()

    def active_named(rows: list[dict]) -> bool:
        silent_ms = (time.monotonic() - attached) * 1000
        named = [r for r in rows if r["evidence"].get("role") == "wire"]
        return all_named(named) and all(r in named or (r["idle_ms"] or 0) >= silent_ms - 1000
                                        for r in rows)

    try:
        rows = wire_rows(client.pid, active_named)
        check_roles([r for r in rows if r["evidence"].get("role") == "wire"], brokers)
        assert all(r["confidence"] < 1.0 for r in rows if r["evidence"].get("role") != "wire")
    finally:
        client.stop()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_group_consumer(cluster, brokers, topic):
    client, rows = from_start([KCAT, "-b", cluster, "-G", f"g-{topic}", "-o", "beginning",
                               "-u", topic], all_named)
    try:
        check_roles(rows, brokers)
    finally:
        client.stop()


def test_kafka_python_consumer(cluster, brokers, topic):
    pytest.importorskip("kafka", reason="kafka-python 2.0.x is in the test extra")
    client, rows = from_start([sys.executable, "-c", KAFKA_PYTHON_CONSUMER, cluster,
                               f"g-{topic}", topic], all_named)
    try:
        check_roles(rows, brokers)
        assert {r["client"] for r in rows} == {"kmon-kafka-python"}  # its client_id names it
    finally:
        client.stop()


@pytest.mark.skipif(not (NODE_MODULES / "kafkajs").is_dir() or shutil.which("node") is None,
                    reason="kafkajs is not installed (npm install --prefix tests/node kafkajs)")
def test_kafkajs_consumer(cluster, brokers, topic, tmp_path):
    """KafkaJS holds two sockets per broker; its fetches long-poll 5 s."""
    script = tmp_path / "consumer.js"
    script.write_text(KAFKAJS_CONSUMER)
    client, rows = from_start(["node", str(script), cluster, f"g-{topic}", topic], all_named,
                              env={**os.environ, "NODE_PATH": str(NODE_MODULES)})
    try:
        named = [r for r in rows if r["evidence"].get("role") == "wire"]
        by_address = {f"{h}:{p}": b for b, (h, p) in brokers.items()}
        coordinator = [r for r in named if r["role"] == "coordinator"]
        assert len(coordinator) == 1 and coordinator[0]["node_id"] == MAX_INT - by_address[
            coordinator[0]["remote"]]
        assert all(wire_sure(r) and r["broker_id"] == by_address[r["remote"]] for r in named), [
            (r["role"], r["confidence"], r["broker_id"], r["remote"], r["evidence"].get("wire"))
            for r in named]
        assert {r["client"] for r in named} == {"kmon-kafkajs"}  # its client_id names it
    finally:
        client.stop()


ONE_REQUEST_CLIENT = """
import socket, sys
from kmon.sources import kafka_protocol as kp
host, port = sys.argv[1].split(",")[0].rsplit(":", 1)
conn = socket.create_connection((host, int(port)))
conn.sendall(kp.metadata_request(7, "kmon-one-request"))
conn.recv(65536)
sys.stdin.read()
"""


def test_the_first_request_of_a_new_process_is_seen(cluster):
    """A process that connects and sends its one request at once, before any poll has shown
    its socket: while it has none, request headers are kept from any port, so the request
    is read and the socket named (bootstrap) from it."""
    client, rows = from_start([sys.executable, "-c", ONE_REQUEST_CLIENT, cluster],
                              lambda rows: any(r["evidence"].get("role") == "wire"
                                               for r in rows))
    try:
        (row,) = rows
        assert row["role"] == "bootstrap" and row["node_id"] == -1, row
        assert apis(row) == {"Metadata"} and row["client"] == "kmon-one-request", row
    finally:
        client.stop()


# --- what the wire must never do -------------------------------------------------------------


@pytest.mark.parametrize("watched", ["its port", "no port yet"])
def test_the_filter_fits_the_kernel_and_a_request_body_is_never_captured(watched):
    """A request's header and client_id are captured, its body (a SaslAuthenticate's
    credentials) never; a TLS record shows its first bytes only; other bytes nothing. So too
    while the process has no socket yet and any port's request headers are kept."""
    from kmon.sources.packets.packet_capture import PacketCapture

    assert len(packet_filter.build(range(10_000, 12_000), range(9092, 9200), 1)) <= 4096
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        port = client.getsockname()[1]
        capture = PacketCapture({port} if watched == "its port" else set(), set())
        try:
            body = (36).to_bytes(2, "big") + (1).to_bytes(2, "big") + (7).to_bytes(4, "big") \
                + (4).to_bytes(2, "big") + b"kmon" + b"\0user\0hunter2"
            client.sendall(len(body).to_bytes(4, "big") + body)
            client.sendall(b"\x17\x03\x03\x00\x20" + b"s" * 32)
            client.sendall(b"not a Kafka header: hunter2")
            time.sleep(0.3)
            segments = capture.read()
        finally:
            capture.close()
            client.close()
            peer.close()
    data = [s.data for s in segments if s.src[1] == port]
    assert kp.request_header(data[0]).client_id == "kmon" and data[1] == b"\x17\x03\x03\x00"
    assert b"hunter2" not in b"".join(s.data for s in segments)


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_repeated_request_headers_come_as_one_counted_segment(host):
    """Once responses are not kept, a socket's requests of one API and version come as one
    segment with their count, at the place of the last; the tap counts every one (IPv4 and
    IPv6 frames read differently)."""
    from kmon.sources.kernel.sockets import Endpoint, TcpSocket
    from kmon.sources.packets.kafka_wire import WireTap, last_seen
    from kmon.sources.packets.packet_capture import PacketCapture

    produce = 0

    def request(api: int, version: int, correlation: int) -> bytes:
        body = api.to_bytes(2, "big") + version.to_bytes(2, "big") \
            + correlation.to_bytes(4, "big") + (4).to_bytes(2, "big") + b"kmon" + b"b" * 50
        return len(body).to_bytes(4, "big") + body

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.create_server((host, 0), family=family) as server:
        client = socket.create_connection(server.getsockname()[:2])
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer, _ = server.accept()
        local = Endpoint(*client.getsockname()[:2])
        remote = Endpoint(*server.getsockname()[:2])
        sock = TcpSocket(0, client.fileno(), local, remote, "ESTABLISHED")
        capture = PacketCapture({local.port}, set())
        capture.set_ports({local.port}, set(), responses=False)
        tap = WireTap([sock], 0)
        tap.learn({1: (remote.ip, remote.port)}, 0)
        tap.poll([sock], 0)  # the brokers are known: responses are no longer kept
        try:
            sent = [(produce, 9)] * 5 + [(kp.METADATA, 1)] + [(produce, 9)] * 3
            for correlation, (api, version) in enumerate(sent):
                client.sendall(request(api, version, correlation))
                time.sleep(0.01)  # one request a segment
            client.shutdown(socket.SHUT_WR)
            time.sleep(0.3)
            segments = [s for s in capture.read() if s.src[1] == local.port]
            flow = tap.poll([sock], 1).flows[(local, remote)]
        finally:
            capture.close()
            tap.close()
            client.close()
            peer.close()
    assert [(kp.request_header(s.data).api_key, s.repeats) for s in segments[:2]] == [
        (kp.METADATA, 1), (produce, 8)]
    assert segments[1].first_ms <= segments[0].ts_ms <= segments[1].ts_ms
    assert segments[2].flags & packet_filter.TCP_FIN
    assert flow.api_counts == {produce: 8, kp.METADATA: 1}
    seen = flow.seen()
    assert [text for text, _ in seen] == ["Produce×8", "Metadata×1"]
    last_produce = time.strftime("%H:%M:%S", time.localtime(segments[1].ts_ms // 1000))
    assert last_seen(seen).startswith(f"Produce×8 (last {last_produce}.")
    assert flow.close.first_by == "client" and flow.close.last_api == produce


def test_a_new_connection_is_seen_from_its_first_request():
    """The first request of a socket no poll has shown yet is read as the request it is:
    while the process has no socket (any port's request headers kept), and to a broker kmon
    has just learned (watched at once, not from the next poll)."""
    from kmon.sources.packets.kafka_wire import WireTap

    with socket.create_server(("127.0.0.1", 0)) as first, \
            socket.create_server(("127.0.0.1", 0)) as second:
        tap = WireTap([], 0)
        opened = []
        try:
            opened.append(request_to(first, "first"))
            # its socket was not read yet: the polls see its segments only
            wait_for(lambda: tap.poll([], 1) and tap.flows, "the first request in the tap")
            shown = [opened[0][1]]
            tap.poll(shown, 2)
            tap.learn({2: second.getsockname()}, 2)
            opened.append(request_to(second, "second"))
            both = shown + [opened[1][1]]
            view = wait_for(lambda: (polled := tap.poll(both, 3)).flows.get(
                (opened[1][1].local, opened[1][1].remote)) and polled,
                "the second request in the tap")
        finally:
            tap.close()
            for client, _, peer in opened:
                client.close()
                peer.close()
    flows = [view.flows.get((sock.local, sock.remote)) for _, sock, _ in opened]
    assert [f and (f.client_id, dict(f.api_counts), f.from_start) for f in flows] == [
        ("first", {kp.METADATA: 1}, True), ("second", {kp.METADATA: 1}, True)]


@pytest.mark.parametrize("window_s", [10.0, 0.0])
def test_a_first_request_to_a_port_not_yet_followed_is_seen_while_brokers_are_learned(
        window_s, monkeypatch):
    """A client connects to its other brokers within ms of its first Metadata answer and sends
    its first request at once, before a poll follows their ports (a socket silent afterwards
    would never be named): while the tap does not know the brokers, for ANY_PORT_S at most from
    its first port, it keeps the headers of any port's opening requests (with the window
    closed: not). Another port's Produce, a busy host's steady traffic, is never kept."""
    from kmon.sources.packets import kafka_wire
    from kmon.sources.packets.kafka_wire import WireTap

    monkeypatch.setattr(kafka_wire, "ANY_PORT_S", window_s)
    with socket.create_server(("127.0.0.1", 0)) as first, \
            socket.create_server(("127.0.0.1", 0)) as second, \
            socket.create_server(("127.0.0.1", 0)) as busy:
        opened = [request_to(first, "first")]
        tap = WireTap([opened[0][1]], 0)  # its port followed from the start
        try:
            tap.poll([opened[0][1]], 1)
            producer = socket.create_connection(busy.getsockname())
            opened.append((producer, None, busy.accept()[0]))
            producer.sendall(struct.pack(">ihhih", 10 + 4, 0, 3, 1, 4) + b"busy")  # Produce
            opened.append(request_to(second, "second"))  # a port no poll has followed
            both = [opened[0][1], opened[2][1]]
            key = (opened[2][1].local, opened[2][1].remote)
            deadline = time.monotonic() + 2  # the ring hands a block over within 50 ms
            view = tap.poll(both, 2)
            while key not in view.flows and time.monotonic() < deadline:
                time.sleep(0.05)
                view = tap.poll(both, 3)
        finally:
            tap.close()
            for client, _, peer in opened:
                client.close()
                peer.close()
    flow = view.flows.get(key)
    if window_s:
        assert flow is not None and (flow.client_id, dict(flow.api_counts), flow.from_start) == (
            "second", {kp.METADATA: 1}, True)
    else:
        assert flow is None
    assert not [f for f in tap.flows.values() if f.client_id == "busy"]


@pytest.mark.parametrize("capture", ["its own", "the host's"])
def test_a_reset_is_read_at_the_poll_that_no_longer_shows_its_socket(capture):
    """The kernel hands the capture's ring over a block at a time, once full or 50 ms after it
    opened: a broker's RST that ended a socket (gone from the process by the next poll) sat in
    the block still filling, read a poll too late, when the close's verdict was made without
    it (CI told such a reset ``broker_closed``). The poll that no longer shows the socket
    waits for that block and reads the RST, each time: from the process's own capture, and
    from the host's one (read before the socket is no longer the process's)."""
    from kmon.sources.packets.host_wire import HostWire
    from kmon.sources.process_wire import ProcessWire

    with socket.create_server(("127.0.0.1", 0)) as server:
        for attempt in range(3):
            client, sock, peer = request_to(server, f"reset-{attempt}")
            wire = ProcessWire(HostWire() if capture == "the host's" else None)
            try:
                assert wire.read([sock], 1).view is not None  # the tap follows the socket
                peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                peer.close()  # the broker resets it
                with contextlib.suppress(OSError):
                    client.recv(16)
                client.close()  # gone from the process
                closes = wire.read([], 2).view.closes
            finally:
                wire.close()
            close = closes.get((sock.local, sock.remote))
            assert close is not None and (close.first_by, close.reset) == ("broker", True), (
                attempt, closes)


def test_a_socket_gone_while_the_ring_held_its_close_back_closed_unheard():
    """A socket gone without its close read (the ring held it back) is told closed unheard,
    never as a close the wire saw nothing of."""
    from kmon.sources.packets.kafka_wire import UNHEARD, WireTap

    with socket.create_server(("127.0.0.1", 0)) as server:
        client, sock, peer = request_to(server, "unheard")
        tap = WireTap([sock], 0)
        try:
            tap.poll([sock], 1)
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            peer.close()
            with contextlib.suppress(OSError):
                client.recv(16)
            client.close()
            close = tap.poll([], 2).closes.get((sock.local, sock.remote))
        finally:
            tap.close()
    # the RST, where its block was handed over already; else unheard
    assert close == UNHEARD or (close.first_by, close.reset) == ("broker", True), close


def test_a_forged_segment_with_no_tcp_header_length_is_read_without_harm():
    """A raw TCP segment, as anyone who may send packets can forge, whose data offset is 0: the
    packet socket sees it before TCP drops it, and its bytes also pass for a request header
    (the header's fields overlap the TCP header's). The read goes on, drops it as TCP does, and
    a real request after it is still counted."""
    from kmon.sources.packets.packet_capture import PacketCapture

    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        port = client.getsockname()[1]
        capture = PacketCapture({port}, set())
        capture.set_ports({port}, set(), responses=False)
        # ports | seq: api_key 0, version 9 | ack: correlation | data offset 0 and flags 0x0a
        # (no FIN, no RST), read as a client_id length of 10 | the client_id
        forged = port.to_bytes(2, "big") + (9092).to_bytes(2, "big") + (9).to_bytes(4, "big") \
            + (1).to_bytes(4, "big") + bytes([0, 0x0A]) + b"kmonkmonkm"
        with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP) as raw:
            raw.sendto(forged, ("127.0.0.1", 0))
        body = bytes(2) + (9).to_bytes(2, "big") + (2).to_bytes(4, "big") \
            + (4).to_bytes(2, "big") + b"kmon"
        client.sendall(len(body).to_bytes(4, "big") + body)
        try:
            segments = captured(capture, lambda segments: any(
                s.src[1] == port and kp.request_header(s.data) == (14, 0, 9, 2, "kmon")
                for s in segments))
        finally:
            capture.close()
            client.close()
            peer.close()
    assert b"kmonkmonkm" not in b"".join(s.data for s in segments)  # no TCP segment


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_a_sasl_password_appears_in_no_capture_output_recording_or_log(cluster, tmp_path):
    """A SASL_PLAINTEXT client (kcat) connecting again and again (the mock cluster has no
    SASL): nothing of its password leaves the kernel's filter, or reaches kmon's output, its
    recording or its log. (A framed SaslAuthenticate: the test above.)"""
    from kmon.sources.packets.packet_capture import PacketCapture

    ports = {int(address.rsplit(":", 1)[1]) for address in cluster.split(",")}
    capture = PacketCapture(set(), ports)
    client = Child(["sh", "-c", 'read go; exec "$@"', "sh", KCAT, "-b", cluster,
                    "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN",
                    "-X", "sasl.username=alice", "-X", "sasl.password=hunter2-secret", "-L"])
    stream = record = None
    try:
        stream = attach_stream(client.pid, "--any-process", interval="500ms")
        record = Child([sys.executable, "-m", "kmon", "record", "--pid", str(client.pid),
                        "--out", str(tmp_path / "rec"), "--interval", "300ms", "--any-process"])
        stream.wait_line("{")
        client.send("go")
        lines = [stream.wait_line("{") for _ in range(8)]
        segments = capture.read()
    finally:
        capture.close()
        for child in (record, stream, client):
            if child is not None:
                child.stop()
    sent = [s.data for s in segments if s.dst[1] in ports]
    assert sent and b"hunter2" not in b"".join(s.data for s in segments)
    outputs = "\n".join(lines + stream.stderr + record.stderr)
    assert "kcat" in outputs and "hunter2" not in outputs
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files and not [p for p in files if b"hunter2" in p.read_bytes()]


@pytest.mark.skipif(not Path("/usr/sbin/useradd").exists(), reason="needs useradd")
def test_without_cap_net_raw_one_notice_and_the_rest_works(cluster, throwaway_user):
    """As an unprivileged user attaching to its own client: one notice, roles as before."""
    argv, env = python_as(throwaway_user.pw_name)
    env["HOME"] = throwaway_user.pw_dir
    client = Child([*argv, "-m", "kmon.devtools.workload", "consumer", cluster], env=env)
    try:
        client.wait_line("READY", timeout=60)
        pid = subprocess.run(["pgrep", "-u", throwaway_user.pw_name, "-f",
                              "kmon.devtools.workload"], capture_output=True, text=True).stdout
        result = subprocess.run([*argv, "-m", "kmon", "attach", pid.split()[0], "--once",
                                 "--json"], capture_output=True, text=True, env=env, timeout=60)
    finally:
        client.stop()
    assert result.returncode == 0, result.stderr
    (process,) = json.loads(result.stdout)["processes"]
    assert [n for n in process["notices"] if "CAP_NET_RAW" in n] == [
        "roles from the wire need CAP_NET_RAW (run kmon as root); they come from the other "
        "evidence"]
    assert process["connections"]


TLS_CLIENT = """
import socket, ssl, sys, time
context = ssl.create_default_context()
context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
with context.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[1])))) as conn:
    while True:
        conn.sendall(b"x" * 64)
        conn.recv(64)
        time.sleep(0.2)
"""


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl makes the test certificate")
def test_a_tls_connection_is_noted_and_keeps_the_other_evidence(tmp_path):
    import ssl
    import threading

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost"],
                   check=True, capture_output=True)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = socket.create_server(("127.0.0.1", 0))

    def echo() -> None:
        with context.wrap_socket(server.accept()[0], server_side=True) as conn:
            while data := conn.recv(64):
                conn.sendall(data)

    threading.Thread(target=echo, daemon=True).start()
    client, rows = from_start([sys.executable, "-c", TLS_CLIENT,
                               str(server.getsockname()[1])],
                              lambda rows: any(r["evidence"].get("wire") for r in rows))
    try:
        (row,) = rows
        assert row["evidence"]["wire"] == "tls" and row["evidence"]["role"] != "wire"
        assert row["confidence"] < 1.0
        assert [c["detail"] for c in row["claims"] if c["source"] == "wire"] == [
            "TLS: the Kafka headers are encrypted"]
    finally:
        client.stop()
        server.close()
