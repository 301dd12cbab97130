"""``silent_drop`` against a real confluent-kafka consumer of the mock cluster and of the
real Apache Kafka cluster: nftables on loopback drops every segment the consumer sends on
one broker connection (the rule matches its two ports: the brokers' other connections, and
the other xdist worker's clusters, are untouched), and ``kmon attach --json`` names the
connection while the kernel retransmits into nothing, then the close says ``silent_drop``.
Its negative twins: a broker slow to answer (a fetch it holds for seconds) raises nothing,
nor does a peer that stops reading (its zero window probed, each probe answered). The idle
variant, keepalive probes unanswered, is read from a plain socket of this process."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import time

import pytest
from helpers import Drops, attach_stream, wait_for

from kmon.evidence.findings import silent_drop
from kmon.sources.kernel.sockdiag import SockDiagReader

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("nft") is None or os.geteuid() != 0,
                       reason="needs nftables (.ci/run installs it) and root"),
]

FINDING_WITHIN_S = 25  # the acceptance: the finding appears within 25 s
SOCKET_TIMEOUT_MS = 10_000  # the consumer gives up on an unanswered request after this


@pytest.fixture
def drop_to():
    """drop_to(port, from_port=None): nftables drops the TCP segments sent to ``port`` on
    loopback (``Drops``); the tables are deleted when the test ends, whatever happens."""
    drops = Drops()
    yield drops.drop
    drops.close()


def stream_records(stream, seconds: float):
    """The records of a streamed ``kmon attach --json`` for ``seconds``, each with its one
    process (a record once the process has gone lists none, its events the last ones)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = stream.wait_line("{", left)
        except AssertionError:
            return
        record = json.loads(line)
        yield record, next(iter(record["processes"]), {"connections": [], "findings": []})


def broker_connection(process: dict) -> dict | None:
    """A connection of the consumer to a broker it fetches from (a known broker id)."""
    return next((c for c in process["connections"] if c["role"] == "broker"
                 and c["broker_id"] is not None and c["state"] == "ESTABLISHED"), None)


def busiest_broker_connection(stream) -> dict | None:
    """The consumer's broker connection that sent the most over 3 s of records (one it
    fetches on: a broker leading none of its partitions is idle, nothing to drop)."""
    first, last = {}, {}
    for _, process in stream_records(stream, 3):
        for conn in process["connections"]:
            if conn == broker_connection({"connections": [conn]}) and conn["bytes_sent"]:
                first.setdefault(conn["key"], conn)
                last[conn["key"]] = conn
    grown = {key: last[key]["bytes_sent"] - first[key]["bytes_sent"] for key in last}
    busiest = max(grown, key=grown.get, default=None)
    return last[busiest] if busiest is not None and grown[busiest] > 0 else None


def test_a_silently_dropped_broker_connection_is_named_then_its_close(start_on, drop_to):
    client = start_on("consumer", properties={"socket.timeout.ms": str(SOCKET_TIMEOUT_MS)})
    stream = attach_stream(client.pid, interval="500ms")
    try:
        conn = wait_for(lambda: busiest_broker_connection(stream),
                        "a broker connection the consumer fetches on", 30)
        remote = conn["remote"]
        drop_to(int(remote.rsplit(":", 1)[1]), int(conn["local"].rsplit(":", 1)[1]))
        dropped = time.monotonic()
        found = None
        for _, process in stream_records(stream, FINDING_WITHIN_S):
            found = next((f for f in process["findings"] if f["reason"] == "silent_drop"
                          and f["evidence"]["remote"] == remote), None)
            if found:
                break
        took = time.monotonic() - dropped
        assert found, f"no silent_drop of {remote} within {FINDING_WITHIN_S} s"
        evidence = found["evidence"]
        assert evidence["broker_id"] == conn["broker_id"] and evidence["unacked"] >= 1
        assert evidence["retransmits"] >= silent_drop.UNANSWERED_TRIES
        assert evidence["unanswered_ms"] >= silent_drop.MIN_UNANSWERED_MS
        assert f"for {evidence['unanswered_ms'] / 1000:.1f} s" in found["detail"]
        assert "keepalive" in found["fix"]
        print(f"silent_drop named {took:.1f} s after the drop began: {found['detail']}")
        assert took * 1000 < SOCKET_TIMEOUT_MS  # before the client itself gives up

        closes = []
        for record, _ in stream_records(stream, SOCKET_TIMEOUT_MS / 1000 + 20):
            closes += [e for e in record["events"] if e["kind"] == "closed"
                       and e.get("remote") == remote]
            if closes:
                break
        assert closes and closes[0]["reason"] == "silent_drop", closes
    finally:
        stream.stop()


def test_a_broker_slow_to_answer_is_not_a_silent_drop(start_on):
    """The broker holds each fetch for 3 s before it answers (fetch.wait.max.ms with nothing
    to fetch): requests wait long, their segments are acked at once."""
    client = start_on("consumer", properties={"fetch.wait.max.ms": "3000"})
    stream = attach_stream(client.pid, interval="500ms")
    try:
        seen = [p for _, p in stream_records(stream, 12)]
    finally:
        stream.stop()
    assert any(broker_connection(p) for p in seen), "the consumer never fetched"
    assert not [f for p in seen for f in p["findings"] if f["reason"] == "silent_drop"]


def test_unanswered_keepalive_probes_are_the_idle_variant(drop_to):
    """An idle connection (nothing to send) with keepalive every second, its peer dropped:
    the kernel's probes go unanswered and sock_diag shows them."""
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
        port = listener.getsockname()[1]
        client = stack.enter_context(socket.create_connection(("127.0.0.1", port)))
        stack.enter_context(listener.accept()[0])
        client.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        for option in (socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL):
            client.setsockopt(socket.IPPROTO_TCP, option, 1)
        drop_to(port)
        reader = stack.enter_context(SockDiagReader())

        def stalled():
            (sock,) = [s for s in reader.sockets_of(os.getpid()) if s.remote.port == port]
            return sock.stall if sock.stall and silent_drop.unanswered(sock.stall._asdict()) \
                else None

        stall = wait_for(stalled, "unanswered keepalive probes", 15, every=0.2)
    assert stall.timer == "keepalive" and stall.unacked == 0
    assert stall.probes >= silent_drop.KEEPALIVE_PROBES


def test_a_peer_that_stops_reading_is_probed_and_answers():
    """A broker too slow to read (its receive buffer full): the kernel probes its zero window
    for seconds with no ack of new data, and each probe is answered: not a silent drop."""
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(socket.socket())
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = stack.enter_context(socket.create_connection(("127.0.0.1", port)))
        stack.enter_context(listener.accept()[0])  # never read
        client.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            while True:
                client.send(bytes(65536))
        reader = stack.enter_context(SockDiagReader())
        stalls = []
        for _ in range(80):  # a probe shows only until its answer: look often
            time.sleep(0.1)
            stalls += [s.stall for s in reader.sockets_of(os.getpid())
                       if s.remote.port == port and s.stall]
    assert [s for s in stalls if s.timer == "probe"], stalls  # the window was shut
    assert not [s for s in stalls if silent_drop.unanswered(s._asdict())], stalls
