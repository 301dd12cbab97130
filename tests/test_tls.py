"""Roles over TLS: real clients on the real cluster's SSL listener, no key, no agent, no change
to the client. ``kmon attach PID --json`` reads the Kafka request headers inside their TLS
writes (uprobes on OpenSSL's ``SSL_write``/``SSL_write_ex``) and every socket is scored against
the client's own view of it: kafka-python's connection table (node ``coordinator-N`` or a
broker id, and the socket's local port), librdkafka's debug log (its broker threads,
``GroupCoordinator`` or ``host:port/N``, and the fd each connected with).

Then the probes' safety: a kmon killed with SIGKILL leaves its uprobes behind; the next kmon
removes them when it starts; a kmon that exits removes its own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import uuid

import pytest
from helpers import (
    SURE,
    Child,
    attach_stream,
    check_tls_roles,
    librdkafka_truth,
    produce,
    python_as,
    rows_until,
    scored_until_right,
    wait_for,
)

from kmon.sources.kernel.kernel_events import tracefs
from kmon.sources.tls.uprobes import MAX_EVENTS_FILE

pytestmark = [pytest.mark.integration,  # a real cluster, real clients, uprobes
              pytest.mark.root(reason="uprobes and the wire need root")]

KCAT = "/usr/bin/kcat"
KAFKA_PYTHON_TLS = """
import json, sys, time
from kafka import KafkaConsumer
consumer = KafkaConsumer(sys.argv[3], bootstrap_servers=sys.argv[1].split(","),
                         group_id=sys.argv[2], client_id="kmon-kafka-python",
                         api_version=(2, 0, 0), security_protocol="SSL", ssl_cafile=sys.argv[4],
                         auto_offset_reset="earliest")
print("READY", flush=True)
told = 0.0
while True:
    consumer.poll(200)
    if time.monotonic() - told > 0.5:  # the client's own table: node id -> local port
        told = time.monotonic()
        conns = {str(node): conn._sock.getsockname()[1]
                 for node, conn in list(consumer._client._conns.items())
                 if conn.connected() and conn._sock is not None}
        print("TRUTH " + json.dumps(conns), flush=True)
"""
CONFLUENT_KAFKA_TLS = """
import sys
from confluent_kafka import Consumer
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                     "security.protocol": "SSL", "ssl.ca.location": sys.argv[4],
                     "auto.offset.reset": "earliest", "debug": "broker"})
consumer.subscribe([sys.argv[3]])
read = 0
while True:
    if consumer.poll(0.2) is not None:
        read += 1
        if read == 20:
            print("READ", flush=True)
"""


@pytest.fixture
def topic(kafka) -> str:
    name = f"kmon-tls-{uuid.uuid4().hex[:8]}"
    produce(kafka.bootstrap(), name)
    return name


def uprobe_events() -> str:
    with tracefs() as root, open(root / "uprobe_events", encoding="ascii") as handle:
        return handle.read(MAX_EVENTS_FILE)


def uprobe_hits() -> int:
    """The times the host's uprobes on OpenSSL's writes were hit (tracefs's own count)."""
    with tracefs() as root, open(root / "uprobe_profile", encoding="ascii") as handle:
        return sum(int(line.split()[-1]) for line in handle.read(MAX_EVENTS_FILE).splitlines()
                   if "libssl" in line)


def kafka_python_role(node: str) -> str:
    return ("coordinator" if node.startswith("coordinator") else
            "bootstrap" if node.startswith("bootstrap") else "broker")


def test_kafka_python_consumer_over_tls(kafka, topic):
    pytest.importorskip("kafka", reason="kafka-python 2.0.x is in the test extra")
    client = Child([sys.executable, "-c", KAFKA_PYTHON_TLS, kafka.bootstrap("SSL"),
                    f"g-{topic}", topic, str(kafka.ca_file)])
    try:
        client.wait_line("READY", timeout=60)
        wait_for(lambda: "coordinator" in client.wait_line("TRUTH ", timeout=60),
                 "kafka-python's coordinator connection", 60)
        latest = {}

        def truth():
            while not client.lines.empty():
                line = client.lines.get()
                if line.startswith("TRUTH "):
                    latest.clear()
                    latest.update({port: kafka_python_role(node) for node, port in
                                   json.loads(line[6:]).items()})
            return lambda row: latest.get(int(row["local"].rsplit(":", 1)[1]))

        check_tls_roles(scored_until_right(client.pid, truth))
    finally:
        client.stop()


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat_group_consumer_over_tls(kafka, topic):
    """kcat: librdkafka with the system's libssl."""
    client = Child([KCAT, "-b", kafka.bootstrap("SSL"), "-X", "security.protocol=SSL",
                    "-X", f"ssl.ca.location={kafka.ca_file}", "-G", f"g-{topic}",
                    "-o", "beginning", "-d", "broker", topic])
    try:
        wait_for(lambda: sum("Reached end of topic" in line for line in client.stderr) >= 3,
                 "kcat at the end of the topic's three partitions", 60)
        check_tls_roles(scored_until_right(client.pid, lambda: librdkafka_truth(client)))
    finally:
        client.stop()


def test_confluent_kafka_consumer_over_tls_without_the_agent(kafka, topic):
    """confluent-kafka's wheel: OpenSSL linked into its librdkafka (``SSL_write`` only in the
    library's .symtab), and no kmon agent in the client."""
    pytest.importorskip("confluent_kafka")
    client = Child([sys.executable, "-c", CONFLUENT_KAFKA_TLS, kafka.bootstrap("SSL"),
                    f"g-{topic}", topic, str(kafka.ca_file)])
    try:
        client.wait_line("READ", timeout=60)
        check_tls_roles(scored_until_right(client.pid, lambda: librdkafka_truth(client)))
    finally:
        client.stop()


def test_a_killed_kmon_leaves_no_probe_once_kmon_starts_again(kafka, topic):
    pytest.importorskip("kafka", reason="kafka-python 2.0.x is in the test extra")
    client = Child([sys.executable, "-c", KAFKA_PYTHON_TLS, kafka.bootstrap("SSL"),
                    f"g-{topic}", topic, str(kafka.ca_file)])
    streams: list[Child] = []
    try:
        client.wait_line("TRUTH ", timeout=60)
        killed = attach_stream(client.pid, "--any-process", interval="500ms")
        streams.append(killed)
        wait_for(lambda: f"kmon_{killed.pid}/" in uprobe_events(), "the first kmon's uprobes")
        os.kill(killed.pid, signal.SIGKILL)
        killed.proc.wait(10)
        assert f"kmon_{killed.pid}/" in uprobe_events()  # left behind: nothing ran at its end
        # any kmon command started as root removes them, one that probes nothing too
        listed = subprocess.run([sys.executable, "-m", "kmon", "ps"], capture_output=True,
                                text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert f"kmon_{killed.pid}/" not in uprobe_events()
        again = attach_stream(client.pid, "--any-process", interval="500ms")
        streams.append(again)
        wait_for(lambda: f"kmon_{again.pid}/" in uprobe_events(), "the second kmon's uprobes")
        again.stop()  # SIGTERM: an orderly exit removes its own
        assert again.proc.returncode is not None
        assert f"kmon_{again.pid}/" not in uprobe_events()
    finally:
        for stream in streams:
            stream.stop()
        client.stop()


WITHOUT_PRIVILEGE = """
import os, ssl
from kmon.sources.tls.tls_tap import TlsTap, TlsUnavailable
try:
    TlsTap(os.getpid())
except TlsUnavailable as err:
    print("UNAVAILABLE", err)
"""


def test_without_privilege_the_tls_source_says_why_and_makes_no_uprobe(throwaway_user):
    """As a user without privilege (libssl mapped: ``import ssl``): one reason, no traceback,
    nothing added to tracefs."""
    prefix, env = python_as(throwaway_user.pw_name)
    before = uprobe_events()
    result = subprocess.run([*prefix, "-c", WITHOUT_PRIVILEGE], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 0 and not result.stderr, result
    (line,) = result.stdout.splitlines()
    assert line.startswith("UNAVAILABLE ") and len(line) > len("UNAVAILABLE "), line
    assert uprobe_events() == before


def test_the_probes_close_once_every_tls_socket_is_decided(kafka, topic):
    """The client pays for the probes only until its TLS sockets' roles are read: then the
    breakpoints go (tracefs's hit count stops) while the client goes on writing."""
    pytest.importorskip("kafka", reason="kafka-python 2.0.x is in the test extra")
    client = Child([sys.executable, "-c", KAFKA_PYTHON_TLS, kafka.bootstrap("SSL"),
                    f"g-{topic}", topic, str(kafka.ca_file)])
    stream = None
    try:
        wait_for(lambda: "coordinator" in client.wait_line("TRUTH ", timeout=60),
                 "kafka-python's coordinator connection", 60)
        stream = attach_stream(client.pid, "--any-process", interval="500ms")
        rows_until(stream, lambda rows: all(r["confidence"] >= SURE and "over TLS" in
                                            " ".join(c["detail"] for c in r["claims"])
                                            for r in rows))
        hits = uprobe_hits()
        assert hits > 0
        written = client.lines.qsize()
        wait_for(lambda: client.lines.qsize() >= written + 6, "the client going on", 30)
        assert uprobe_hits() == hits
        (process,) = json.loads(stream.wait_line("{"))["processes"]
        assert all(r["confidence"] >= SURE for r in process["connections"])  # roles stay
    finally:
        if stream is not None:
            stream.stop()
        client.stop()


def test_a_library_path_that_could_break_a_tracefs_line_is_never_written(tmp_path):
    """A process maps OpenSSL from a path of its choosing: one with a space (which would split
    a uprobe_events line) is refused with its reason, and tracefs is left as it was."""
    libssl = "/usr/lib/x86_64-linux-gnu/libssl.so.3"
    if not os.path.exists(libssl):
        pytest.skip("no libssl.so.3 here")
    from kmon.sources.tls.tls_tap import TlsTap, TlsUnavailable

    planted = tmp_path / "a b" / "libssl.so.3"
    planted.parent.mkdir()
    shutil.copy(libssl, planted)
    client = Child([sys.executable, "-c", f"import ctypes; ctypes.CDLL({str(planted)!r}); "
                    "print('READY', flush=True); input()"])
    try:
        client.wait_line("READY")
        before = uprobe_events()
        with pytest.raises(TlsUnavailable, match="a b/libssl"):
            TlsTap(client.pid)
        assert uprobe_events() == before
    finally:
        client.stop()
