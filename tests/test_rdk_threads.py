"""librdkafka's broker threads as evidence: the socket a node's thread polls is that node's
connection. Scored against librdkafka's own debug log (``debug=broker``: each socket's fd and
the handle that connected it), on the real cluster's TLS listener, where the wire is blind
to a socket silent since kmon attached."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from helpers import (
    SURE,
    VERDICT_S,
    Child,
    attach_stream,
    confluent_consumer,
    librdkafka_truth,
    produce,
    python_as,
    wait_for,
)

from kmon.sources.kernel.socket_readers import open_socket_reader
from kmon.sources.processes.rdk_threads import POLL_CALLS, BrokerThreads

pytestmark = [pytest.mark.integration,  # a real cluster, real clients
              pytest.mark.root(reason="reading another process's thread waits needs root")]

# a producer over the listener's own client properties (argv[2]) that sends a message to
# each partition of argv[3] (leaders on every broker) and then stays silent
QUIET_PRODUCER = """
import sys
from confluent_kafka import Producer
config = dict(line.split("=", 1) for line in open(sys.argv[2]).read().splitlines())
producer = Producer({**config, "bootstrap.servers": sys.argv[1], "debug": "broker"})
for partition in range(3):
    producer.produce(sys.argv[3], b"x", partition=partition)
producer.flush(30)
print("SENT", flush=True)
sys.stdin.readline()
"""


def broker_one_thread(then: str, polled: str) -> str:
    """A program whose thread, named as librdkafka names broker 1's, connects to a listener of
    its own (``sock``), is busy elsewhere (reading stdin) until told, runs ``then`` and waits
    in poll() on ``polled``."""
    return f"""
import ctypes, os, select, socket, sys, threading
listener = socket.create_server(("127.0.0.1", 0))
def broker():
    ctypes.CDLL(None).prctl(15, b"rdk:broker1", 0, 0, 0)  # PR_SET_NAME, as librdkafka does
    sock = socket.create_connection(listener.getsockname())
    print("CONNECTED", threading.get_native_id(), flush=True)
    sys.stdin.readline()
{then}
    waiting = select.poll()
    waiting.register({polled}, select.POLLIN)
    waiting.poll()
threading.Thread(target=broker).start()
"""


# told, it waits in poll() on its socket
LATE_POLLER = broker_one_thread("", "sock")
# told, it connects again on the fd of its first socket, as a client reconnects on the fd its
# last socket freed, and waits in poll() on it
REUSED_FD = broker_one_thread("""    second = socket.create_connection(listener.getsockname())
    os.dup2(second.fileno(), sock.fileno())
    second.close()""", "sock.fileno()")


@pytest.fixture
def topic(kafka) -> str:
    name = f"kmon-threads-{uuid.uuid4().hex[:8]}"
    produce(kafka.bootstrap(), name)
    return name


def thread_nodes(pid: int, polls: int = 10) -> tuple[dict[int, int], dict[int, int]]:
    """(inode -> node, inode -> fd) after ``polls`` reads half a second apart: a broker thread
    is seen only while it waits in poll()."""
    reader, threads = open_socket_reader(), BrokerThreads(pid)
    nodes, fds = {}, {}
    for _ in range(polls):
        sockets = reader.sockets_of(pid)
        fds = {s.inode: s.fd for s in sockets}
        threads.scanned_at = float("-inf")  # look again at every read
        nodes = threads.nodes(sockets)
        time.sleep(0.5)
    return nodes, fds


def test_each_node_thread_names_its_own_socket_and_no_other(kafka, topic):
    """A consumer in a group over TLS: every socket a node's thread polls is, by the client's
    log, that broker's connection; the coordinator's and bootstrap sockets are never named."""
    client = confluent_consumer(kafka, topic, "SSL")
    try:
        client.wait_line("READ", timeout=60)
        nodes, fds = thread_nodes(client.pid)
        truth = librdkafka_truth(client)
        told = {inode: truth({"fd": fds[inode]}) for inode in nodes}
        assert nodes and all(told[inode] == ("broker", node) for inode, node in nodes.items()), (
            nodes, told)
        brokers = [fd for fd in fds.values() if (truth({"fd": fd}) or ("",))[0] == "broker"]
        assert len(nodes) == len(brokers), (nodes, fds, brokers)
    finally:
        client.stop()


def test_a_producer_silent_since_attach_is_named_by_its_threads(kafka, topic):
    """A producer that sent one message to each broker over TLS and went quiet before kmon
    attached: no TLS record to read, yet each broker connection is named right at SURE
    within VERDICT_S, and nothing at SURE is named wrong."""
    client = Child([sys.executable, "-c", QUIET_PRODUCER, kafka.bootstrap("SSL"),
                    str(kafka.client_config("SSL")), topic])
    stream = None
    try:
        client.wait_line("SENT", timeout=60)
        time.sleep(1)
        truth = librdkafka_truth(client)
        stream = attach_stream(client.pid, "--any-process", interval="500ms")
        first, rows = None, []
        while first is None or time.monotonic() - first <= VERDICT_S:
            (process,) = json.loads(stream.wait_line("{", timeout=60))["processes"]
            first = first or time.monotonic()
            rows = process["connections"]
            wrong = [r for r in rows if r["confidence"] >= SURE and truth(r)
                     and (r["role"], r["node_id"]) != truth(r)]
            assert not wrong, rows
            brokers = [r for r in rows if (truth(r) or ("",))[0] == "broker"]
            if brokers and all(r["confidence"] >= SURE and r["evidence"].get("role") == "thread"
                               for r in brokers):
                return
        pytest.fail(f"broker sockets not named by their threads in {VERDICT_S}s: {rows}")
    finally:
        if stream is not None:
            stream.stop()
        client.stop()


def test_without_the_right_to_trace_nothing_is_read_or_said(kafka, topic, throwaway_user):
    """Another user's kmon code cannot read a root client's thread waits: no node, no error."""
    client = confluent_consumer(kafka, topic, "SSL")
    try:
        client.wait_line("READ", timeout=60)
        argv, env = python_as(throwaway_user.pw_name)
        code = ("import sys; from kmon.sources.processes.rdk_threads import BrokerThreads;"
                "from kmon.sources.kernel.sockets import Endpoint, TcpSocket;"
                "e = Endpoint('127.0.0.1', 1);"
                "t = BrokerThreads(int(sys.argv[1]));"
                "print(t.nodes([TcpSocket(i, i, e, e, 'ESTABLISHED') for i in range(3, 40)]),"
                " t.readable)")
        out = subprocess.run([*argv, "-c", code, str(client.pid)], env=env, capture_output=True,
                             text=True, timeout=60)
        assert out.returncode == 0 and out.stdout.split() == ["{}", "False"], out
    finally:
        client.stop()


def test_a_thread_busy_at_the_first_look_names_its_socket_at_the_next_poll():
    """Seen in the truth harness (client-idle-reap, ``kmon record``): librdkafka's thread was
    busy at kmon's first look at its new socket, so nothing named it until ``RESCAN_S``
    later; the connection, reaped within 5 s, stayed unknown in the recording while the
    stream, whose look caught the thread waiting, named it broker 1. A librdkafka thread busy
    on demand cannot be had: this process's thread, named as librdkafka names broker 1's,
    is busy at the first look and waits in poll() by the next poll."""
    child = Child([sys.executable, "-c", LATE_POLLER])
    try:
        tid = int(child.wait_line("CONNECTED").split()[1])
        reader, threads = open_socket_reader(), BrokerThreads(child.pid)
        sockets = wait_for(lambda: reader.sockets_of(child.pid), "the child's socket", 30)
        assert threads.nodes(sockets) == {}  # busy reading its stdin, not polling
        child.send("poll")
        polling = f"/proc/{child.pid}/task/{tid}/syscall"
        wait_for(lambda: Path(polling).read_text().split()[0] in map(str, POLL_CALLS),
                 "the thread waiting in poll()", 30)  # ("running" while it runs)
        assert threads.nodes(sockets) == {sockets[0].inode: 1}
    finally:
        child.stop()


def test_a_socket_whose_fd_a_new_socket_took_is_never_named_by_its_thread():
    """Seen in the truth harness (client-per-message): a bootstrap socket named broker 1 at
    0.95. The poll read the sockets (fd 7: the bootstrap one); librdkafka closed it and
    connected broker 1's handle on fd 7 before the scan, which saw thread rdk:broker1 poll
    fd 7 and named the socket the poll had read there. This process's thread, named as
    librdkafka names broker 1's, reconnects on its first socket's fd between the read and
    the scan: the first socket is named nothing, the second broker 1."""
    child = Child([sys.executable, "-c", REUSED_FD])
    try:
        tid = int(child.wait_line("CONNECTED").split()[1])
        reader, threads = open_socket_reader(), BrokerThreads(child.pid)
        first = wait_for(lambda: reader.sockets_of(child.pid), "the child's socket", 30)
        child.send("reconnect")
        polling = f"/proc/{child.pid}/task/{tid}/syscall"
        wait_for(lambda: Path(polling).read_text().split()[0] in map(str, POLL_CALLS),
                 "the thread waiting in poll()", 30)
        assert threads.nodes(first) == {}
        second = open_socket_reader().sockets_of(child.pid)  # (a reader of its own: fresh fds)
        assert [s.fd for s in second] == [s.fd for s in first]
        assert second[0].inode != first[0].inode
        assert threads.nodes(second) == {second[0].inode: 1}
    finally:
        child.stop()

