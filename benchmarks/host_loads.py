"""The busy hosts of host_view_cost: client processes forked by one fleet helper.

Three loads, each a fleet of processes with librdkafka mapped (the host view's sign of a
Kafka client), forked from one helper so that hundreds of them share its memory:

* ``talking`` — each process holds ``connections`` connections to a listener that answers
  like a broker and sends ``rate`` Produce requests a second on them in turn (a real request
  header with its client_id, then a body); on SIGUSR1, one on every connection.
* ``silent`` — each process runs a real librdkafka producer (confluent-kafka) against the
  embedded mock cluster at ``rate`` messages a second, and holds ``connections`` more
  connections to the brokers that stay open and never carry a request (idle pools, health
  checks, a client's stale connections).
* ``many`` — ``talking`` at 500 processes x 10 connections.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import time

from benchmarks.helpers import no_time_wait, raise_fd_limit, serve_connections

PRODUCE = 0  # the Produce API key
FD_SLACK = 100
PR_SET_PDEATHSIG = 1
LOADS = {"talking": (50, 100), "silent": (50, 100), "many": (500, 10)}  # processes, conns


def produce_request(correlation: int, client_id: str) -> bytes:
    """A Produce request frame (v9 header, client_id) with a small body after its header."""
    header = (PRODUCE.to_bytes(2, "big") + (9).to_bytes(2, "big")
              + correlation.to_bytes(4, "big") + len(client_id).to_bytes(2, "big")
              + client_id.encode())
    body = bytes(200)
    return (len(header) + len(body)).to_bytes(4, "big") + header + body


def role_listener(count: int) -> None:
    """Accept connections on 127.0.0.1 and answer each request with a short response frame
    carrying its correlation id; print the port first."""
    serve_connections(count + FD_SLACK, lambda data: (
        (8).to_bytes(4, "big") + data[8:12] + bytes(4) if len(data) >= 12 else None))


def role_mock(connections: int) -> None:
    """The embedded mock cluster (3 brokers), with room for ``connections``; prints its
    bootstrap servers."""
    from kmon.devtools.mock_cluster import start_mock_cluster

    raise_fd_limit(connections + FD_SLACK)
    owner, bootstrap = start_mock_cluster(3)
    print("bootstrap", bootstrap, flush=True)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # its complaints of kmon's queries
    while True:
        owner.poll(1.0)


def role_fleet(load: str, target: str, processes: int, connections: int, rate: float) -> None:
    """Fork ``processes`` clients of the ``load`` (``target``: the listener's port, or the
    mock cluster's bootstrap servers); print "ready" and their PIDs once each holds its
    connections. SIGUSR1 is passed on to them; they die with this helper."""
    import confluent_kafka  # noqa: F401  (mapped in every client, shared by the fork)

    raise_fd_limit(FD_SLACK)
    children, readers = [], []
    for _ in range(processes):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            _child(load, target, connections, rate, write)
        os.close(write)
        children.append(pid)
        readers.append(read)
    for read in readers:
        if os.read(read, 1) != b"r":
            raise SystemExit("a client failed to connect")
        os.close(read)
    signal.signal(signal.SIGUSR1, lambda *_: [_signal(pid) for pid in children])
    print("ready", *children, flush=True)
    while True:
        time.sleep(3600)


def _signal(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGUSR1)


def _child(load: str, target: str, connections: int, rate: float, ready: int) -> None:
    """One client process: never returns."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:  # (stdin is left alone: the parent's thread reading it may hold its lock)
        raise_fd_limit(connections + FD_SLACK)
        if load == "silent":
            _silent(target, connections, rate, ready)
        else:
            _talking(int(target), connections, rate, ready)
    finally:
        os._exit(1)


def _connect(address: tuple[str, int]) -> socket.socket:
    conn = no_time_wait(socket.socket())
    conn.settimeout(10)
    conn.connect(address)
    return conn


def _talking(port: int, count: int, rate: float, ready: int) -> None:
    conns = [_connect(("127.0.0.1", port)) for _ in range(count)]
    primed: list[int] = []
    signal.signal(signal.SIGUSR1, lambda *_: primed.append(1))
    os.write(ready, b"r")
    client_id = f"bench-producer-{os.getpid()}"
    sent = 0
    while True:
        time.sleep(1.0 / rate)
        turn = [conns[sent % len(conns)]]
        if primed:
            primed.clear()
            turn = conns
        for conn in turn:
            sent += 1
            try:
                conn.sendall(produce_request(sent, client_id))
                conn.recv(65536)
            except OSError:
                continue


def _silent(bootstrap: str, count: int, rate: float, ready: int) -> None:
    from confluent_kafka import Producer

    brokers = [(host, int(port)) for host, port in
               (entry.rsplit(":", 1) for entry in bootstrap.split(","))]
    held = [_connect(brokers[i % len(brokers)]) for i in range(count)]  # never a request
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": f"bench-{os.getpid()}",
                         "linger.ms": 5})
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    producer.produce("bench", b"x" * 100)
    producer.flush(30)
    os.write(ready, b"r")
    while held:
        time.sleep(1.0 / rate)
        producer.produce("bench", b"x" * 100)
        producer.poll(0)
