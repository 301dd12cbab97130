"""TLS writes to sockets no poll showed (a failing login's connection lives ~0.3 s, between two
polls), on the real cluster's SSL listener: each is tied to the 4-tuple its close tells (the
closing thread's ``close`` and its socket's own state change right after), checked against
the client's own ``getsockname``/``getpeername``, never against what kmon read.
"""

from __future__ import annotations

import contextlib
import queue
import sys
import time
from collections.abc import Iterator

import pytest
from helpers import Child

from kmon.sources.kernel.sockets import Endpoint, TcpSocket
from kmon.sources.tls.tls_tap import TlsTap

pytestmark = [pytest.mark.integration,  # a real cluster, a real TLS client, uprobes
              pytest.mark.root(reason="uprobes need root")]

# python -c OPEN_AND_CLOSE BOOTSTRAP CAFILE: for each line read, a TLS socket opened, an
# ApiVersions v0 request written on it (client id "gone"), its endpoints printed ("SOCKET
# local-ip local-port remote-ip remote-port"); then, as the line says, closed at once
# ("close": a FIN), closed with the broker's answer unread ("unread": a reset), or kept open
# until the next line ("keep"); or ("reset") it sends a request of an API the broker does not
# know, which the broker answers by closing, reads to the end, waits until the broker's end is
# closed (/proc/net/tcp6: no inode; Java may shut it for writing first), writes one more
# request (the broker's closed socket answers it with a reset) and closes it ("STATE" and the
# socket's state after that write: 7, CLOSE, where the reset came in it)
OPEN_AND_CLOSE = """
import socket, ssl, struct, sys, time
def broker_end_closed(local, remote):  # no descriptor holds it: inode 0 (Java's is IPv6)
    ends = (":%04X" % remote[1], ":%04X" % local[1])
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(name) as table:
            if any(f[1].endswith(ends[0]) and f[2].endswith(ends[1]) and f[9] == "0"
                   for f in (line.split() for line in table)):
                return True
    return False
host, port = sys.argv[1].split(",")[0].rsplit(":", 1)
context = ssl.create_default_context(cafile=sys.argv[2])
kept = []
print("READY", flush=True)
for line in sys.stdin:
    for old in kept:
        old.close()
    kept = []
    tls = context.wrap_socket(socket.create_connection((host, int(port))), server_hostname=host)
    tls.sendall(struct.pack(">ihhih", 14, 18, 0, 7, 4) + b"gone")
    local, remote = tls.getsockname(), tls.getpeername()
    if line.strip() == "close":
        tls.recv(4)
        tls.close()
    elif line.strip() == "unread":
        time.sleep(0.2)
        tls.close()
    elif line.strip() == "reset":
        tls.sendall(struct.pack(">ihhih", 14, 999, 0, 8, 4) + b"gone")
        try:
            while tls.recv(4096):
                pass
        except (ssl.SSLError, OSError):
            pass
        waited = time.monotonic() + 20  # the broker's end closed, not only shut for writing
        while not broker_end_closed(local, remote) and time.monotonic() < waited:
            time.sleep(0.01)
        try:
            tls.sendall(struct.pack(">ihhih", 14, 18, 0, 9, 4) + b"gone")
        except (ssl.SSLError, OSError):
            pass
        state = tls.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
        print("STATE", state, flush=True)
        tls.close()
    else:
        kept.append(tls)
    print("SOCKET", *local[:2], *remote[:2], flush=True)
"""


@contextlib.contextmanager
def tapped(kafka, script: str, *args: str) -> Iterator[tuple[Child, TlsTap]]:
    """A client running ``script`` (argv: the SSL listener, its CA file, ``args``), once it
    says READY, and a TLS source on it; both ended after."""
    client = Child([sys.executable, "-c", script, kafka.bootstrap("SSL"), str(kafka.ca_file),
                    *args])
    tap = None
    try:
        client.wait_line("READY", timeout=60)
        tap = TlsTap(client.pid)
        yield client, tap
    finally:
        if tap is not None:
            tap.close()
        client.stop()


def endpoints(line: str) -> tuple[tuple[str, int], tuple[str, int]]:
    _, local_ip, local_port, remote_ip, remote_port = line.split()
    return (local_ip, int(local_port)), (remote_ip, int(remote_port))


def test_writes_to_sockets_closed_between_two_reads_go_to_the_4_tuple_their_close_tells(kafka):
    """Three sockets, one after another on the same descriptor, none shown by a poll: one
    closed with a FIN, one with a reset (its answer unread), one still open at a read (its
    write waits for the next read) and closed before that. Each write goes to its own
    socket's 4-tuple; none to another's."""
    with tapped(kafka, OPEN_AND_CLOSE) as (client, tap):
        truth = []
        for how in ("close", "unread"):
            client.send(how)
            truth.append(endpoints(client.wait_line("SOCKET", timeout=30)))
        writes = tap.read([])  # the poll showed none of them
        client.send("keep")
        truth.append(endpoints(client.wait_line("SOCKET", timeout=30)))
        kept = tap.read([])  # open, shown by no poll: it waits
        client.send("close")  # the kept socket closed, and one more opened and closed
        truth.append(endpoints(client.wait_line("SOCKET", timeout=30)))
        writes += tap.read([])
    assert kept == []
    assert [(w.pair, w.data[4:6]) for w in writes] == [
        (pair, b"\0\x12") for pair in truth], (writes, truth)
    assert all(w.inode < 0 for w in writes)  # no read saw them: no inode to give
    assert len({w.inode for w in writes}) == len(truth)


# python -c THREADS_AT_ONCE BOOTSTRAP CAFILE ROUNDS THREADS: once told, ROUNDS times THREADS new
# threads at once, each opening a TLS socket, writing an ApiVersions v0 request on it and
# closing it; then "DONE <writes>"
THREADS_AT_ONCE = """
import socket, ssl, struct, sys, threading
host, port = sys.argv[1].split(",")[0].rsplit(":", 1)
context = ssl.create_default_context(cafile=sys.argv[2])
rounds, threads = int(sys.argv[3]), int(sys.argv[4])
def login():
    tls = context.wrap_socket(socket.create_connection((host, int(port))), server_hostname=host)
    tls.sendall(struct.pack(">ihhih", 14, 18, 0, 7, 4) + b"many")
    tls.close()
print("READY", flush=True)
sys.stdin.readline()
for _ in range(rounds):
    started = [threading.Thread(target=login) for _ in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()
print("DONE", rounds * threads, flush=True)
"""


def test_new_threads_writing_on_every_cpu_at_once_lose_no_record(kafka):
    """Short-lived threads made after the source opened, several at once on every CPU, each
    writing on a socket of its own: the writes are read and tied to their sockets, and the
    kernel dropped none (a ring that two CPUs write at once stalls, then drops thousands)."""
    rounds, threads = 100, 16
    with tapped(kafka, THREADS_AT_ONCE, str(rounds), str(threads)) as (client, tap):
        client.send("")
        writes, done, deadline = [], None, time.monotonic() + 120
        while done is None and time.monotonic() < deadline:
            writes += tap.read()
            with contextlib.suppress(queue.Empty):
                done = client.lines.get(timeout=0.2)  # DONE: the only line after READY
        writes += tap.read()
        lost = tap.lost
    assert done == f"DONE {rounds * threads}"
    assert lost == 0
    # 99% at least: a socket reset before its own close names no 4-tuple (one in 1,600 in a
    # loaded run); a stalled ring read 128 to 896 of them
    assert sum(w.data[4:6] == b"\0\x12" for w in writes) >= 0.99 * rounds * threads, len(
        writes)


def test_writes_to_a_socket_reset_while_it_was_written_go_to_the_4_tuple_the_reset_told(kafka):
    """The broker closes a connection (a request of an API it does not know, as it closes a
    failed login's) and the client writes once more before it closes its own end: on loopback
    the broker's closed socket answers that write with a reset, in the write itself, so the
    client's close changes no state and tells nothing. The reset tells the socket its
    descriptor held; each of its writes goes to that 4-tuple (the unknown API's with no
    bytes: kmon keeps a header it can read only), unless the poll shows that 4-tuple held
    by another descriptor."""
    with tapped(kafka, OPEN_AND_CLOSE) as (client, tap):
        client.send("reset")
        state = client.wait_line("STATE", timeout=30)
        truth = endpoints(client.wait_line("SOCKET", timeout=30))
        writes = tap.read([])  # the poll showed none of it
        client.send("reset")  # once more, the poll showing its 4-tuple on another fd
        client.wait_line("STATE", timeout=30)
        again = endpoints(client.wait_line("SOCKET", timeout=30))
        elsewhere = TcpSocket(1, 1000, Endpoint(*again[0]), Endpoint(*again[1]), "CLOSE_WAIT")
        refused = tap.read([elsewhere])
    assert state == "STATE 7", "the broker's socket did not reset the client's write"
    assert [(w.pair, w.data[4:6]) for w in writes] == [
        (truth, b"\0\x12"), (truth, b""), (truth, b"\0\x12")], (writes, truth)
    assert refused == []  # a 4-tuple the poll shows held by another fd is that one's
