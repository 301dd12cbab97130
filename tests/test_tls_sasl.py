"""Roles over TLS with SASL (the real cluster's SASL_SSL listener, PLAIN) and a KIP-848 group,
scored against librdkafka's own debug log as tests/test_tls.py does; and the password: the
TLS source reads 16 bytes of each TLS write, and a SASL login is a TLS write too.
"""

from __future__ import annotations

import shutil
import sys
import time
import uuid

import pytest
from helpers import (
    ACKED_ONCE,
    Child,
    attach_stream,
    check_tls_roles,
    confluent_consumer,
    data_files,
    kcat_consumer,
    librdkafka_truth,
    produce,
    read,
    read_until,
    record_child,
    scored_until_right,
    wait_for,
)

from kmon.record.schema import SCHEMAS
from kmon.sources import kafka_protocol as kp

pytestmark = [pytest.mark.integration,  # a real cluster, real clients, uprobes
              pytest.mark.root(reason="uprobes and the wire need root")]

# kafka-python 2.0.x logs in with SaslHandshake v0 and then the raw PLAIN token, one TLS write:
# its size, then "user\0user\0password" - the password's start within its first 16 bytes
KAFKA_PYTHON_LOGIN = """
import sys
from kafka import KafkaConsumer
print("WAITING", flush=True)
sys.stdin.readline()
consumer = KafkaConsumer(sys.argv[3], bootstrap_servers=sys.argv[1].split(","),
                         group_id=sys.argv[2], api_version=(2, 0, 0), client_id="kp",
                         security_protocol="SASL_SSL", ssl_cafile=sys.argv[4],
                         sasl_mechanism="PLAIN", sasl_plain_username=sys.argv[5],
                         sasl_plain_password=sys.argv[6], auto_offset_reset="earliest")
while True:
    consumer.poll(200)
"""


@pytest.fixture
def topic(kafka) -> str:
    name = f"kmon-sasl-{uuid.uuid4().hex[:8]}"
    produce(kafka.bootstrap(), name)
    return name


def test_confluent_kafka_consumer_over_sasl_ssl_without_the_agent(kafka, topic):
    """OpenSSL inside the wheel's librdkafka; the first TLS writes of each socket are
    SaslHandshake and SaslAuthenticate, which decide no role."""
    client = confluent_consumer(kafka, topic, "SASL_SSL")
    try:
        client.wait_line("READ", timeout=60)
        check_tls_roles(scored_until_right(client.pid, lambda: librdkafka_truth(client)))
    finally:
        client.stop()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_group_consumer_over_sasl_ssl_with_the_broker_ids(kafka, topic):
    """kcat: librdkafka with the system's libssl, the listener's properties file (-F). The
    headers inside TLS name the roles; kmon asks the cluster itself (``-b``/``-F``, the same
    file) for the broker ids, which no request header carries."""
    listener, config = kafka.bootstrap("SASL_SSL"), str(kafka.client_config("SASL_SSL"))
    client = kcat_consumer(kafka, topic, "SASL_SSL")
    try:
        check_tls_roles(scored_until_right(client.pid, lambda: librdkafka_truth(client),
                                           "-b", listener, "-F", config), broker_ids=True)
    finally:
        client.stop()


def test_a_kip848_consumer_over_tls_names_its_coordinator(kafka, topic):
    """group.protocol=consumer: the coordinator's socket carries ConsumerGroupHeartbeat (api
    68, every 5 s) and the offsets' requests, no JoinGroup/SyncGroup/Heartbeat; read inside
    TLS, they name the coordinator."""
    client = confluent_consumer(kafka, topic, "SSL", properties='{"group.protocol": "consumer"}')
    try:
        client.wait_line("READ", timeout=60)
        tally = scored_until_right(client.pid, lambda: librdkafka_truth(client))
        check_tls_roles(tally)
        # named from the group's own requests inside TLS: the heartbeat, or the offsets
        # committed between two heartbeats 5 s apart; never the classic group's
        assert any(role == "coordinator" and wire and any(api in wire for api in (
            "ConsumerGroupHeartbeat", "OffsetCommit", "OffsetFetch")) and "JoinGroup" not in wire
            for _, role, _, wire in tally["roles"]), tally
    finally:
        client.stop()


def scored(events, watched_ms):
    """The (reason, closed_by) of each close of a login opened once the wire watched."""
    return [(e["reason"], e["closed_by"]) for e in events
            if e["kind"] == "closed" and (e["opened_ms"] or 0) >= watched_ms]


def test_a_failed_login_over_sasl_ssl_is_auth_failed_or_unsettled_never_wrong(kafka, topic):
    """A wrong password: the broker answers SaslAuthenticate with an error, inside TLS, and
    one side closes ~0.3 s later, on a connection (and a librdkafka thread) made for that one
    login, some 5 a second. A login whose requests were read and tied to its socket (the
    one a poll showed, or the 4-tuple its close told), closed by the broker, is
    ``auth_failed``; the client's close (its reply to the answer kmon cannot read) stays
    ``unknown``, as does one whose requests were not tied (a socket reset before the client
    closed it; the source not open yet): never ``client_closed``, ``broker_closed`` or
    ``reset``. A login under way
    before kmon's first poll is not scored: kmon saw none of it but, maybe, its close (the
    kernel's reason, as without the wire)."""
    client = confluent_consumer(kafka, topic, "SASL_SSL",
                                properties='{"sasl.password": "not-the-password"}')
    stream = attach_stream(client.pid, "--any-process", interval="500ms")
    try:
        stream.wait_line("{", timeout=60)
        watched_ms = time.time() * 1000  # the wire's tap is open: logins from now on
        events, last = read_until(stream, lambda found, _: len(scored(found, watched_ms)) >= 10
                                  and ("auth_failed", "broker") in scored(found, watched_ms), 40)
    finally:
        stream.stop()
        client.stop()
    closes = scored(events, watched_ms)
    notices = [p["notices"] for p in last["processes"]]  # why the TLS source missed, if it did
    assert ("auth_failed", "broker") in closes, (closes, notices)
    assert {reason for reason, _ in closes} <= {"auth_failed", "unknown"}, closes


def test_a_sasl_login_over_tls_hands_on_no_byte_of_the_password(kafka, topic):
    """kafka-python's PLAIN login over TLS is one write of the raw token, the password's
    first bytes within the 16 the probe reads: the TLS source keeps only what opens a Kafka
    request header, so none of the token leaves it. The source is open before the client
    logs in, so every login write passes through it."""
    pytest.importorskip("kafka", reason="kafka-python 2.0.x is in the test extra")
    from kmon.sources.tls.tls_tap import TlsTap

    user = "kmon"
    token = f"{user}\0{user}\0{kafka.sasl_password}".encode()
    client = Child([sys.executable, "-c", KAFKA_PYTHON_LOGIN, kafka.bootstrap("SASL_SSL"),
                    f"g-{topic}", topic, str(kafka.ca_file), user, kafka.sasl_password])
    tap = None
    try:
        client.wait_line("WAITING", timeout=60)  # kafka-python imported: libssl is mapped
        tap = TlsTap(client.pid)
        client.send("")
        writes, deadline = [], time.monotonic() + 30
        while time.monotonic() < deadline and not any(
                (h := kp.request_header(w.data, True)) and h.api_key in kp.BROKER_APIS
                for w in writes):  # logged in and fetching
            writes += tap.read()
            time.sleep(0.1)
        headers = [kp.request_header(w.data, True) for w in writes if w.data]
        assert any(h and h.api_key == kp.SASL_HANDSHAKE for h in headers), headers
        # the failures say how many, never the bytes (they hold the password's start)
        assert headers.count(None) == 0  # what is handed on opens a request header
        assert all(len(w.data) <= 16 for w in writes)
        assert sum(token[:8] in w.data or kafka.sasl_password[:2].encode() in w.data[4:]
                   for w in writes) == 0
    finally:
        if tap is not None:
            tap.close()
        client.stop()


def test_the_password_is_in_no_output_nor_recording_of_kmon(kafka, topic, tmp_path):
    """kmon watching (a stream and a recording) from before a SASL_SSL client logs in: the
    password is in none of what it prints or writes."""
    client = confluent_consumer(kafka, topic, "SASL_SSL", wait=True)
    stream = record = None
    out = tmp_path / "recording"
    printed: list[str] = []

    def named_inside_tls() -> bool:
        printed.append(stream.wait_line("{", timeout=60))
        return "over TLS" in printed[-1]

    try:
        client.wait_line("WAITING", timeout=60)
        stream = attach_stream(client.pid, "--any-process", interval="500ms")
        record = record_child("--pid", str(client.pid), "--any-process", "--out", str(out),
                              "--interval", "500ms", "--rotate-every", "2s")
        printed.append(stream.wait_line("{", timeout=60))
        client.send("")
        client.wait_line("READ", timeout=60)
        wait_for(named_inside_tls, "a row named from inside TLS", 30)
        time.sleep(3)  # a rotation: the recording's parts on disk
    finally:
        for child in (stream, record):
            if child is not None:
                child.stop()
        client.stop()
    secret = kafka.sasl_password
    printed += [*stream.lines.queue, *stream.stderr, *record.lines.queue, *record.stderr]
    assert not [line for line in printed if secret in line]
    files = data_files(out)
    assert files and not [f for f in files if secret.encode() in f.read_bytes()]
    rows = [row for table in SCHEMAS if (out / table).exists() for row in read(out, table)]
    assert rows and secret not in repr(rows)


# python -c MIXED BOOTSTRAP CONFIG GROUP TOPIC: one process, two clients on the SASL_SSL
# listener: a producer that logs in and sends a message every 10 ms (ACKED once one is
# delivered), and a consumer whose logins fail (a wrong password), each on threads of its own
MIXED = """
import sys
from confluent_kafka import Consumer, Producer
config = dict(line.split("=", 1) for line in open(sys.argv[2]).read().splitlines())
producer = Producer({**config, "bootstrap.servers": sys.argv[1], "linger.ms": 5})
failing = Consumer({**config, "bootstrap.servers": sys.argv[1], "group.id": sys.argv[3],
                    "sasl.password": "not-the-password"})
failing.subscribe([sys.argv[4]])
""" + ACKED_ONCE + """while True:
    producer.produce(sys.argv[4], b"x" * 1000, on_delivery=delivered)
    producer.poll(0.01)
    failing.poll(0)
"""


def test_a_failing_login_beside_a_busy_client_leaves_the_busy_thread_unread(kafka, topic):
    """A process whose one client logs in and works while the other's logins fail: each
    failed login's socket is read from its first write (its SASL requests read before it
    closes), while the working client's busy thread, whose writes all went to a decided
    socket, is read no more, where every thread of the process used to be read as long as
    logins failed."""
    from kmon.sources.kernel.socket_readers import open_socket_reader
    from kmon.sources.process_wire import ProcessWire

    client = Child([sys.executable, "-c", MIXED, kafka.bootstrap("SASL_SSL"),
                    str(kafka.client_config("SASL_SSL")), f"g-{topic}", topic])
    reader, wire = open_socket_reader(), ProcessWire(tls_pid=client.pid)
    logins_read_unread_busy = []  # failed logins read while a thread of the process was unread

    def polled() -> bool:
        quiet = wire.tls is not None and any(t.quiet for t in wire.tls.threads.values())
        time.sleep(0.5)  # a thread unread all along: since the last poll
        view = wire.read(reader.sockets_of(client.pid), int(time.time() * 1000)).view
        quiet &= wire.tls is not None and any(t.quiet for t in wire.tls.threads.values())
        logins_read_unread_busy.extend(
            c for c in view.closes.values() if quiet and c.last_api in kp.SASL_APIS)
        return len(logins_read_unread_busy) >= 2

    try:
        client.wait_line("ACKED", timeout=60)
        wait_for(polled, "two failed logins read, the busy thread unread meanwhile", 60, every=0)
    finally:
        wire.close()
        client.stop()
