"""Roles over TLS: real clients on the real cluster's SSL listener, no key, no agent, no change
to the client. ``kmon attach PID --json`` reads the Kafka request headers inside their TLS
writes (uprobes on OpenSSL's ``SSL_write``/``SSL_write_ex``, in libssl, librdkafka or the
``node`` executable; on Go's ``crypto/tls.(*Conn).Write``) and every socket is scored against
the client's own view of it: kafka-python's connection table (node ``coordinator-N`` or a
broker id, and the socket's local port), librdkafka's debug log (its broker threads,
``GroupCoordinator`` or ``host:port/N``, and the fd each connected with), and for KafkaJS,
franz-go and kafka-go the api key of each request as the client writes it (before TLS), with
the local port of the socket it writes it to.

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
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from helpers import (
    SURE,
    VERDICT_S,
    Child,
    attach_stream,
    check_tls_roles,
    confluent_consumer,
    kcat_consumer,
    librdkafka_truth,
    produce,
    python_as,
    rows_until,
    scored_until_right,
    wait_for,
)

from kmon.devtools.client_programs import KAFKAJS_CONSUMER
from kmon.sources.kernel.kernel_events import tracefs
from kmon.sources.tls.uprobes import MAX_EVENTS_FILE

pytestmark = [pytest.mark.integration,  # a real cluster, real clients, uprobes
              pytest.mark.root(reason="uprobes and the wire need root")]

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
# put before KAFKAJS_CONSUMER: "WROTE <local port> <api key> <remote port>" for each request
# KafkaJS writes to a TLS socket (KafkaJS writes a request in one buffer)
KAFKAJS_WRITES = """
const tls = require('tls');
const connect = tls.connect;
tls.connect = function (...args) {
  const socket = connect.apply(this, args);
  const write = socket.write;
  socket.write = function (chunk, ...rest) {
    if (Buffer.isBuffer(chunk) && chunk.length >= 6) {
      console.log(`WROTE ${socket.localPort} ${chunk.readInt16BE(4)} ${socket.remotePort}`);
    }
    return write.call(this, chunk, ...rest);
  };
  return socket;
};
"""
NODE_MODULES = Path(__file__).parent / "node" / "node_modules"


@pytest.fixture
def topic(kafka) -> str:
    name = f"kmon-tls-{uuid.uuid4().hex[:8]}"
    produce(kafka.bootstrap(), name)
    return name


LIBSSL = "/usr/lib/x86_64-linux-gnu/libssl.so.3"  # where Debian puts OpenSSL 3


def uprobe_events() -> str:
    with tracefs() as root, open(root / "uprobe_events", encoding="ascii") as handle:
        return handle.read(MAX_EVENTS_FILE)


def uprobe_hits(kmon_pid: int) -> int:
    """The times one kmon's uprobes on OpenSSL's writes were hit (tracefs's own count; its
    profile lists the uprobes in ``uprobe_events``' order, by their names only: other kmons',
    made and removed meanwhile, are told apart by their group there)."""
    with tracefs() as root:
        while True:
            events = uprobe_events().splitlines()
            with open(root / "uprobe_profile", encoding="ascii") as handle:
                profile = handle.read(MAX_EVENTS_FILE).splitlines()
            if uprobe_events().splitlines() == events and len(events) == len(profile):
                break
    return sum(int(hits.split()[-1]) for event, hits in zip(events, profile, strict=True)
               if event.startswith(f"p:kmon_{kmon_pid}/") and "libssl" in event)


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
    client = kcat_consumer(kafka, topic, "SSL")
    try:
        check_tls_roles(scored_until_right(client.pid, lambda: librdkafka_truth(client)))
    finally:
        client.stop()


def test_confluent_kafka_consumer_over_tls_without_the_agent(kafka, topic):
    """confluent-kafka's wheel: OpenSSL linked into its librdkafka (``SSL_write`` only in the
    library's .symtab), and no kmon agent in the client."""
    pytest.importorskip("confluent_kafka")
    client = confluent_consumer(kafka, topic, "SSL")
    try:
        client.wait_line("READ", timeout=60)
        check_tls_roles(scored_until_right(client.pid, lambda: librdkafka_truth(client)))
    finally:
        client.stop()


# python -c BUSY_PRODUCER BOOTSTRAP CAFILE TOPIC MB_PER_S: 100 kB messages paced at MB_PER_S,
# all to partition 0, in batches up to 2 MB: one socket, busy with back-to-back segments
BUSY_PRODUCER = """
import sys, time
from confluent_kafka import Producer
producer = Producer({"bootstrap.servers": sys.argv[1], "security.protocol": "SSL",
                     "ssl.ca.location": sys.argv[2], "linger.ms": 5, "debug": "broker",
                     "message.max.bytes": 2000000})
payload, per_second = b"x" * 100_000, float(sys.argv[4]) * 1e6 / 100_000
started, sent, acked = time.monotonic(), 0, [0]
def delivered(err, msg):
    acked[0] += err is None
while True:
    while sent < int((time.monotonic() - started) * per_second):
        try:
            producer.produce(sys.argv[3], payload, partition=0, on_delivery=delivered)
            sent += 1
        except BufferError:
            break
    producer.poll(0.005)
    if acked[0] >= 100:
        print("BUSY", flush=True)
        acked[0] = -1 << 60
"""


def test_a_producer_busy_since_before_attach_is_read_inside_tls(start_kafka):
    """A producer sending 40 MB/s over TLS to a one-node cluster when kmon attaches, its one
    busy socket the only one: loopback's 64 kB segments of it seldom start with a TLS record
    (no quiet socket of the process shows one either), but the broker's answers do, and
    tell the wire the socket speaks TLS; then the probes read its Produce requests. Each
    socket librdkafka's log names a broker's is named so at SURE within VERDICT_S."""
    pytest.importorskip("confluent_kafka")
    cluster = start_kafka(brokers=1)
    client = Child([sys.executable, "-c", BUSY_PRODUCER, cluster.bootstrap("SSL"),
                    str(cluster.ca_file), f"kmon-busy-{uuid.uuid4().hex[:8]}", "40"])
    stream = None
    try:
        client.wait_line("BUSY", timeout=60)
        time.sleep(2)
        truth = librdkafka_truth(client)

        def brokers(rows: list[dict]) -> list[dict]:
            return [r for r in rows if (truth(r) or ("",))[0] == "broker"]

        stream = attach_stream(client.pid, "--any-process", interval="500ms")
        rows_until(stream, lambda rows: brokers(rows) and all(
            r["role"] == "broker" and r["confidence"] >= SURE
            and "Produce" in (r["evidence"].get("wire") or "") for r in brokers(rows)),
            seconds=VERDICT_S + 5)  # the first snapshot's start-up, then the bound
    finally:
        if stream is not None:
            stream.stop()
        client.stop()


GROUP_KEYS = {8, 9, 11, 12, 13, 14}  # OffsetCommit, OffsetFetch, JoinGroup, Heartbeat, ...
LEADER_KEYS = {0, 1, 2}  # Produce, Fetch, ListOffsets


def written_role(keys) -> str | None:
    """A socket's role by the requests written to it (None: only metadata and the like)."""
    keys = set(keys)
    return "coordinator" if keys & GROUP_KEYS else "broker" if keys & LEADER_KEYS else None


class Written:
    """A client's own account of its TLS sockets: the api keys of the requests it wrote to
    each (local port, remote port) ("WROTE <local port> <key> <remote port>" lines: the kernel
    gives one local port to two connections to two brokers), and whatever else it printed."""

    def __init__(self, client: Child) -> None:
        self.client = client
        self.keys: dict[tuple[int, int], Counter] = {}
        self.said: list[str] = []

    def take(self) -> dict[tuple[int, int], Counter]:
        while not self.client.lines.empty():
            line = self.client.lines.get()
            parts = line.split()
            if len(parts) == 4 and parts[0] == "WROTE" and parts[1].isdigit() and (
                    parts[3].isdigit()):
                ports = (int(parts[1]), int(parts[3]))
                self.keys.setdefault(ports, Counter())[int(parts[2])] += 1
            else:
                self.said.append(line)
        return {ports: Counter(keys) for ports, keys in self.keys.items()}

    def ready(self) -> bool:
        self.take()
        return "READY" in self.said and any(written_role(k) == "coordinator"
                                            for k in self.keys.values())


def scored_by_writes(written: Written) -> dict:
    """``kmon attach PID --json`` for VERDICT_S after its first snapshot, each socket scored
    against the requests the client wrote to it: since kmon's uprobes were made (what kmon
    can have read), and over its life (any row at SURE or better must have that role). The
    rows of the last snapshot, and when each socket was first right."""
    stream = attach_stream(written.client.pid, "--any-process", interval="500ms")
    first, confident_wrong, right_at = None, [], {}
    try:
        wait_for(lambda: f"kmon_{stream.pid}/" in uprobe_events(), "kmon's uprobes", 30)
        stream.wait_line("{", timeout=60)  # a poll later: the perf events on them are open
        before = written.take()  # what was written before kmon could read it
        while first is None or time.monotonic() - first <= VERDICT_S:
            (process,) = json.loads(stream.wait_line("{", timeout=60))["processes"]
            first = first or time.monotonic()
            now = written.take()
            scored = []
            for row in process["connections"]:
                port = (int(row["local"].rsplit(":", 1)[1]), int(row["remote"].rsplit(":", 1)[1]))
                ever = now.get(port, Counter())
                since = written_role(ever - before.get(port, Counter()))
                scored.append((row, written_role(ever), since))
                if row["confidence"] >= SURE and written_role(ever) not in (None, row["role"]):
                    confident_wrong.append((row["local"], row["role"], dict(ever)))
                if since == row["role"] and row["confidence"] >= SURE:
                    right_at.setdefault(port, time.monotonic() - first)
    finally:
        stream.stop()
    decided = [(row, since) for row, _, since in scored if since]
    right = [row for row, since in decided if row["role"] == since and row["confidence"] >= SURE]
    return {"right": len(right), "decided": len(decided), "rows": len(scored),
            "coordinators": sum(since == "coordinator" for _, since in decided),
            "verdict_s": max(right_at.values(), default=None), "confident_wrong": confident_wrong,
            "silent": [(row["local"], row["role"], row["confidence"], ever)
                       for row, ever, since in scored if not since],
            "decided_rows": [(row["local"], row["role"], row["confidence"],
                              row["evidence"].get("wire"), since) for row, since in decided],
            "notices": process["notices"]}


def check_written_roles(client: Child, name: str) -> None:
    """``client`` (``name``: a program printing READY once in its group and "WROTE <local
    port> <key> <remote port>" for each request) scored by its writes with
    ``check_writes``; stopped after."""
    try:
        written = Written(client)
        wait_for(written.ready, f"{name} in its group", 60)
        check_writes(scored_by_writes(written))
    finally:
        client.stop()


def check_writes(tally: dict) -> None:
    """Every socket that wrote a request deciding its role since attach named right at SURE
    (a coordinator among them); none named wrong at SURE; a socket silent since attach keeps
    the other evidence."""
    assert not tally["confident_wrong"], json.dumps(tally)
    assert tally["coordinators"] >= 1 and tally["right"] == tally["decided"], json.dumps(tally)
    print(f"TLS roles: {tally['right']}/{tally['decided']} sockets that wrote since attach "
          f"right, verdict in {tally['verdict_s']:.1f}s; {len(tally['silent'])} of "
          f"{tally['rows']} silent since attach: {tally['silent']}")


@pytest.mark.skipif(not (NODE_MODULES / "kafkajs").is_dir() or shutil.which("node") is None,
                    reason="kafkajs is not installed (npm install --prefix tests/node)")
def test_kafkajs_consumer_over_tls(kafka, topic, tmp_path):
    """KafkaJS: OpenSSL built into the ``node`` executable (``SSL_write``, its writes through a
    memory BIO then to the socket on node's one thread); six TLS sockets, two per broker."""
    script = tmp_path / "consumer.js"
    script.write_text(KAFKAJS_WRITES + KAFKAJS_CONSUMER)
    check_written_roles(Child(["node", str(script), kafka.bootstrap("SSL"), f"g-{topic}", topic,
                               str(kafka.ca_file)],
                              env={**os.environ, "NODE_PATH": str(NODE_MODULES)}), "KafkaJS")


@pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed")
def test_franz_go_consumer_over_tls(kafka, topic, go_consumer):
    """franz-go: Go's ``crypto/tls.(*Conn).Write`` in the program's own .symtab, each
    record's socket read through the ``*tls.Conn`` itself; up to five sockets a broker."""
    check_written_roles(Child([go_consumer, "franz-go", kafka.bootstrap("SSL"), f"g-{topic}",
                               topic, str(kafka.ca_file)]), "franz-go")


@pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed")
def test_kafka_go_consumer_over_tls(kafka, topic, go_consumer):
    """segmentio/kafka-go: its Reader on Go's ``crypto/tls`` (a ``*tls.Conn`` from its
    Dialer's DialFunc), a socket per partition it fetches, one to the coordinator and short
    ones for metadata; each record's socket read through the ``*tls.Conn`` itself."""
    check_written_roles(Child([go_consumer, "kafka-go", kafka.bootstrap("SSL"), f"g-{topic}",
                               topic, str(kafka.ca_file)]), "kafka-go")


# python -c TWO_SOCKETS BOOTSTRAP CAFILE: two TLS sockets to one broker, silent until told;
# "a" sends a Heartbeat on the first (a coordinator's request), "b" a ListOffsets on the
# second (a partition leader's)
TWO_SOCKETS = """
import socket, ssl, struct, sys
host, port = sys.argv[1].split(",")[0].rsplit(":", 1)
context = ssl.create_default_context(cafile=sys.argv[2])
a, b = (context.wrap_socket(socket.create_connection((host, int(port))), server_hostname=host)
        for _ in range(2))
def request(key, body, correlation=[0]):
    correlation[0] += 1
    header = struct.pack(">hhih", key, 0 if key == 12 else 1, correlation[0], 4) + b"kmon"
    return struct.pack(">i", len(header) + len(body)) + header + body
print("READY", a.getsockname()[1], b.getsockname()[1], flush=True)
for line in sys.stdin:
    if line.strip() == "a":
        a.sendall(request(12, struct.pack(">h", 1) + b"g" + struct.pack(">ih", 0, 0)))
    elif line.strip() == "b":
        b.sendall(request(2, struct.pack(">ii", -1, 0)))
"""


def test_a_tls_socket_silent_at_attach_is_read_once_it_speaks(kafka):
    """A TLS socket that says nothing after kmon attached carries no sign that it is TLS;
    the probes stay on while it is undecided (PROBE_S at most), so its first request, once
    the process's other sockets are decided, is read."""
    client = Child([sys.executable, "-c", TWO_SOCKETS, kafka.bootstrap("SSL"),
                    str(kafka.ca_file)])
    stream = None
    try:
        _, a, b = client.wait_line("READY ", timeout=60).split()
        stream = attach_stream(client.pid, "--any-process", interval="500ms")

        def role(rows: list[dict], port: str) -> tuple:
            (row,) = [r for r in rows if r["local"].endswith(f":{port}")]
            return row["role"], row["confidence"]

        def a_named(rows: list[dict]) -> bool:
            client.send("a")  # until a heartbeat is read (the first opens the probes)
            return role(rows, a) == ("coordinator", 1.0)

        rows_until(stream, a_named)
        for _ in range(3):  # polls with every socket that spoke decided
            rows = rows_until(stream, lambda rows: True)
            assert role(rows, b)[0] == "unknown", rows
        client.send("b")  # once only
        rows_until(stream, lambda rows: role(rows, b) == ("broker", 1.0), seconds=15)
    finally:
        if stream is not None:
            stream.stop()
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


# python -c THREAD_AND_CHILD BOOTSTRAP CAFILE: once told, a new thread and a forked child
# process each open a TLS socket and write a request header on it (client id "thread",
# "child"), and keep it open
THREAD_AND_CHILD = """
import os, socket, ssl, struct, sys, threading, time
host, port = sys.argv[1].split(",")[0].rsplit(":", 1)
context = ssl.create_default_context(cafile=sys.argv[2])
kept = []
def write(who):
    tls = context.wrap_socket(socket.create_connection((host, int(port))), server_hostname=host)
    tls.sendall(struct.pack(">ihhih", 20 + len(who), 3, 1, 7, len(who)) + who + bytes(6))
    kept.append(tls)
print("READY", flush=True)
sys.stdin.readline()
child = os.fork()
if child == 0:
    write(b"child")
    time.sleep(30)
    os._exit(0)
thread = threading.Thread(target=write, args=(b"thread",))
thread.start()
thread.join()
print("WROTE", flush=True)
sys.stdin.readline()
os.kill(child, 9)
"""


def test_the_probes_follow_new_threads_never_a_forked_process(kafka):
    """The events are inherited by the threads the process makes after the source opened (a
    librdkafka thread per failing login), not by a process it forks: the child's writes
    are never recorded, though it runs the same code from the same files."""
    from kmon.sources.tls.tls_tap import TlsTap

    client = Child([sys.executable, "-c", THREAD_AND_CHILD, kafka.bootstrap("SSL"),
                    str(kafka.ca_file)])
    tap = None
    try:
        client.wait_line("READY", timeout=60)
        tap = TlsTap(client.pid)
        threads = set(tap.threads)
        client.send("")
        client.wait_line("WROTE", timeout=60)
        writes = []
        wait_for(lambda: writes.extend(tap.read()) or writes, "the new thread's write", 10)
        time.sleep(1)  # the child's, were it recorded
        writes += tap.read()
        assert [w.data[4:6] for w in writes] == [b"\0\3"], writes  # the thread's Metadata
        assert set(tap.threads) == threads  # followed by inheritance, not opened anew
    finally:
        if tap is not None:
            tap.close()
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
        hits = uprobe_hits(stream.pid)
        assert hits > 0
        written = client.lines.qsize()
        wait_for(lambda: client.lines.qsize() >= written + 6, "the client going on", 30)
        assert uprobe_hits(stream.pid) == hits
        (process,) = json.loads(stream.wait_line("{"))["processes"]
        assert all(r["confidence"] >= SURE for r in process["connections"])  # roles stay
    finally:
        if stream is not None:
            stream.stop()
        client.stop()


def test_a_library_path_that_could_break_a_tracefs_line_is_never_written(tmp_path):
    """A process maps OpenSSL from a path of its choosing: one with a space (which would split
    a uprobe_events line) is refused with its reason, and tracefs is left as it was."""
    if not os.path.exists(LIBSSL):
        pytest.skip("no libssl.so.3 here")
    from kmon.sources.tls.tls_tap import TlsTap, TlsUnavailable

    planted = tmp_path / "a b" / "libssl.so.3"
    planted.parent.mkdir()
    shutil.copy(LIBSSL, planted)
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


# python -c REMOVED_THEN_ASKED LIBSSL: kmon's uprobes, one made, then removed as at exit; an
# event asked for after the removal (a sampler thread still running) is refused
REMOVED_THEN_ASKED = """
import sys
from kmon.sources.kernel.kernel_events import KernelEventsUnavailable
from kmon.sources.tls.uprobes import registry
probes = registry()
probes.event(sys.argv[1], 0x1000, "len=%dx:s32")
print("MADE", probes.group, flush=True)
sys.stdin.readline()
probes.remove_all()
try:
    probes.event(sys.argv[1], 0x1000, "len=%dx:s32")
    print("ASKED made", flush=True)
except KernelEventsUnavailable as err:
    print("ASKED refused:", err, flush=True)
sys.stdin.readline()
"""


def test_no_uprobe_is_made_after_kmon_removed_its_own():
    """At exit the removal runs while a sampler thread may still ask for an event: the event it
    asks for afterwards is refused, so no uprobe outlives an orderly exit. (In a process of its
    own: a process has one group of uprobes, which this test's removal would take from any
    other made here.)"""
    if not os.path.exists(LIBSSL):
        pytest.skip("no libssl.so.3 here")
    child = Child([sys.executable, "-c", REMOVED_THEN_ASKED, LIBSSL])
    try:
        group = child.wait_line("MADE ", timeout=30).split()[1]
        assert f"{group}/w0" in uprobe_events()
        child.send("")
        assert "refused: kmon is ending" in child.wait_line("ASKED ", timeout=30)
        assert f"{group}/" not in uprobe_events()
    finally:
        child.stop()


# python -c OPENED_DURING_REMOVAL: a TlsTap on this very process (its python maps libssl);
# at kmon's exit, after the tap's perf events are closed and before the uprobes go, a sampler
# thread lists the process's threads again (played by one more closer, in that window)
OPENED_DURING_REMOVAL = """
import ssl, sys
from kmon.sources.kernel.kernel_events import KernelEventsUnavailable
from kmon.sources.tls.tls_tap import TlsTap
from kmon.sources.tls.uprobes import registry
tap = TlsTap(__import__("os").getpid())
probes = registry()
print("PROBED", probes.group, len(tap.threads), flush=True)
def rescan():
    try:
        tap._scan()
        print("RESCAN opened", len(tap.threads), flush=True)
    except KernelEventsUnavailable as err:
        print("RESCAN refused:", err, flush=True)
probes.before_removal.append(rescan)
sys.stdin.readline()
probes.remove_all()
sys.stdin.readline()
"""


def test_no_perf_event_is_opened_on_a_uprobe_while_kmon_removes_them():
    """A sampler thread that lists the process's threads while kmon's exit closes the perf
    events would open new ones the closing missed: each keeps its uprobe busy, and the removal
    leaves it behind kmon. Once the removal began, no perf event is opened. (In a process of
    its own, as above.)"""
    if not os.path.exists(LIBSSL):
        pytest.skip("no libssl.so.3 here")
    child = Child([sys.executable, "-c", OPENED_DURING_REMOVAL])
    try:
        probed = child.wait_line("PROBED ", timeout=30).split()
        group = probed[1]
        assert int(probed[2]) > 0 and f"{group}/w0" in uprobe_events()
        child.send("")
        assert "refused: kmon is ending" in child.wait_line("RESCAN ", timeout=30)
        wait_for(lambda: f"{group}/" not in uprobe_events(), "kmon's uprobes removed", 10)
    finally:
        child.stop()


# python -c SIGNALLED_WHILE_OPENING: a TlsTap on this very process (its python maps libssl),
# made in the main thread, as `kmon attach --json` does; SIGTERM comes right after a thread's
# first perf event on a uprobe is opened, before the thread is kept where the removal closes it
SIGNALLED_WHILE_OPENING = """
import os, signal, ssl
from kmon.sources.tls import tls_tap, uprobes
uprobes.hook_exit_signals()
print("GROUP", uprobes.registry().group, flush=True)
add_event = tls_tap.TlsTap._add_event
def add_then_signalled(self, thread, event_id, *where):
    add_event(self, thread, event_id, *where)
    if self.events[event_id][0] == "ssl":
        signal.raise_signal(signal.SIGTERM)
tls_tap.TlsTap._add_event = add_then_signalled
tls_tap.TlsTap(os.getpid())
print("NOT ENDED", flush=True)
"""


def test_a_sigterm_while_perf_events_open_ends_kmon_with_no_uprobe_left():
    """kmon's exit signal handler runs in the main thread, between two of its steps: where it
    came while the main thread opened a thread's perf events, the one opened and not yet kept
    would keep its uprobe busy, and the removal would leave it behind kmon. The signal is
    handled once the opening is done: kmon ends by it, its uprobes removed. (In a process of
    its own, as above.)"""
    if not os.path.exists(LIBSSL):
        pytest.skip("no libssl.so.3 here")
    child = Child([sys.executable, "-c", SIGNALLED_WHILE_OPENING])
    try:
        group = child.wait_line("GROUP ", timeout=30).split()[1]
        assert child.wait_exit(30) == -signal.SIGTERM, child.stderr[-5:]
        assert f"{group}/" not in uprobe_events()
    finally:
        child.stop()


# python -c SWEPT_THEN_ASKED LIBSSL: an event made, then the sweep an in-process `kmon` run
# makes at start (remove_stale), then the event removed by someone else; asked for after each
SWEPT_THEN_ASKED = """
import sys
from kmon.sources.kernel.kernel_events import tracefs
from kmon.sources.tls import uprobes
probes = uprobes.registry()
first = probes.event(sys.argv[1], 0x1000, "len=%dx:s32")[0]
uprobes.remove_stale()
print("SWEPT", probes.event(sys.argv[1], 0x1000, "len=%dx:s32")[0] == first, flush=True)
with tracefs() as root:
    uprobes._append(root, f"-:{probes.group}/w0\\n")
    assert not (root / "events" / probes.group / "w0").exists()
again = probes.event(sys.argv[1], 0x1000, "len=%dx:s32")[0]
with tracefs() as root:
    alive = (root / "events" / probes.group / "w1" / "id").read_text().strip()
print("REMADE", str(again) == alive, flush=True)
probes.remove_all()
"""


def test_a_live_kmons_uprobe_survives_a_sweep_and_is_made_again_when_gone():
    """The sweep of stale uprobes a kmon makes at start removes those of its own pid that an
    earlier kmon with that pid left, never the ones this kmon made and still uses (a test run
    in-process, or a second command, would otherwise take them from under a live TLS source);
    and an event removed by another root tool is made again, not handed out by an id that
    now names nothing. (In a process of its own, as above.)"""
    if not os.path.exists(LIBSSL):
        pytest.skip("no libssl.so.3 here")
    child = Child([sys.executable, "-c", SWEPT_THEN_ASKED, LIBSSL])
    try:
        assert child.wait_line("SWEPT ", timeout=30) == "SWEPT True", child.stderr[-5:]
        assert child.wait_line("REMADE ", timeout=30) == "REMADE True", child.stderr[-5:]
        assert child.wait_exit(30) == 0
    finally:
        child.stop()
