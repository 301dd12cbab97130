"""What the TLS source reads once roles are known (``TlsTap.follow``), on the real cluster's
SSL listener: a thread whose TLS writes all went to decided sockets is read no more (the
kernel records none of its writes) until an undecided socket has no thread read that wrote
to it and either was never heard on the wire or sends; a Go program whose ``Conn.Write``
names its own socket has no send recorded at all.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from collections import Counter

import pytest
from helpers import ACKED_ONCE, Child, produce, unique, wait_for

from kmon.sources.tls.tls_tap import TlsTap

pytestmark = [pytest.mark.integration,  # a real cluster, real clients, uprobes
              pytest.mark.root(reason="uprobes need root")]

# python -c CONNECTIONS BOOTSTRAP CAFILE: one thread driven through stdin: "open" opens one
# more TLS socket ("OPEN n fd"), "write n" writes an ApiVersions v0 request on socket n
# ("WROTE n"), each from the main thread
CONNECTIONS = """
import socket, ssl, struct, sys
host, port = sys.argv[1].split(",")[0].rsplit(":", 1)
context = ssl.create_default_context(cafile=sys.argv[2])
kept = []
print("READY", flush=True)
for line in sys.stdin:
    command = line.split()
    if command[0] == "open":
        kept.append(context.wrap_socket(socket.create_connection((host, int(port))),
                                        server_hostname=host))
        print(f"OPEN {len(kept) - 1} {kept[-1].fileno()}", flush=True)
    else:
        n = int(command[1])
        kept[n].sendall(struct.pack(">ihhih", 10 + 4, 18, 0, 1, 4) + b"kmon")
        print(f"WROTE {n}", flush=True)
"""


def open_socket(client: Child) -> int:
    """A new TLS socket of the client's, by its inode."""
    client.send("open")
    fd = int(client.wait_line("OPEN ").split()[2])
    return os.stat(f"/proc/{client.pid}/fd/{fd}").st_ino


def write(client: Child, n: int) -> None:
    client.send(f"write {n}")
    client.wait_line(f"WROTE {n}")


@contextlib.contextmanager
def tapped_connections(kafka):
    """The CONNECTIONS client with its first socket open, the TLS source on it."""
    client = Child([sys.executable, "-c", CONNECTIONS, kafka.bootstrap("SSL"),
                    str(kafka.ca_file)])
    tap = None
    try:
        client.wait_line("READY", timeout=60)
        first = open_socket(client)
        tap = TlsTap(client.pid)
        yield client, tap, first
    finally:
        if tap is not None:
            tap.close()
        client.stop()


def tap_first_write(client: Child, tap: TlsTap) -> list:
    """The first socket's first write, as the source reads it."""
    write(client, 0)
    return wait_for(tap.read, "the first write", 10)


def test_a_thread_writing_decided_sockets_is_read_no_more_until_a_socket_has_no_writer(kafka):
    """The client's thread wrote to one socket, whose role is decided: it is read no more
    (its next write is not recorded: ``read`` has nothing). Once a new socket is undecided,
    with no thread read that wrote to it and never heard (its first request may be the one
    that names it; which thread will write it is not known), the thread is read again, its
    writes to both sockets with it. A socket the wire heard before may go without a writer
    read (its next write is lost) until the wire hears it send again."""
    with tapped_connections(kafka) as (client, tap, first):
        writes = tap_first_write(client, tap)
        assert [(w.inode, w.data[4:6]) for w in writes] == [(first, b"\0\x12")]

        tap.follow({first})  # its one socket still undecided: read on
        write(client, 0)
        assert [w.inode for w in wait_for(tap.read, "the second write", 10)] == [first]

        tap.follow(set())  # decided
        write(client, 0)
        assert tap.read() == []

        second = open_socket(client)
        tap.follow({second})  # never heard: whichever thread writes it is read
        write(client, 1)
        write(client, 0)
        writes = wait_for(tap.read, "the writes once read again", 10)
        assert [w.inode for w in writes] == [second, first]

        tap.follow(set())  # both decided
        tap.follow({second}, heard={second})  # undecided again, heard before, silent since
        write(client, 1)
        assert tap.read() == []  # a write to a heard socket by a thread read no more: lost

        tap.follow({second}, heard={second}, spoke={second})  # the wire saw it: read again
        write(client, 1)
        assert [w.inode for w in wait_for(tap.read, "the next write", 10)] == [second]


def test_while_a_login_may_have_failed_only_threads_of_settled_sockets_go_unread(kafka):
    """While a login may have failed (``lingering``), a thread whose writes all went to
    settled sockets (open, their roles known) is read no more, where every thread used to be
    read: a busy connection's writes cost the client nothing. A thread that wrote to a
    socket no longer among them (closed: its next login may be on a new one) is read again,
    its next write with it."""
    with tapped_connections(kafka) as (client, tap, first):
        assert [w.inode for w in tap_first_write(client, tap)] == [first]

        tap.follow(set(), settled={first}, lingering=True)  # a login failed elsewhere
        write(client, 0)
        assert tap.read() == [] and next(iter(tap.threads.values())).quiet

        tap.follow(set(), lingering=True)  # its socket no longer open and decided: read again
        write(client, 0)
        assert [w.inode for w in wait_for(tap.read, "the write once read again", 10)] == [first]


def recorded(fd: int) -> int:
    """The records a perf event (and its inherited copies) took."""
    return int.from_bytes(os.read(fd, 8), "little")


def socket_inodes(pid: int) -> set[int]:
    return {int(t.split("[")[1].rstrip("]")) for t in
            (os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd"))
            if t.startswith("socket:")}


@contextlib.contextmanager
def franz_go_tapped(kafka, go_consumer, prefix: str):
    """A franz-go consumer over SSL, the TLS source on it, and its first writes read."""
    topic = unique(prefix)
    produce(kafka.bootstrap(), topic)
    client = Child([go_consumer, "franz-go", kafka.bootstrap("SSL"), f"g-{topic}", topic,
                    str(kafka.ca_file)])
    tap = None
    try:
        client.wait_line("READY", timeout=60)
        tap = TlsTap(client.pid)
        writes: list = []
        wait_for(lambda: writes.extend(tap.read()) or len(writes) >= 5, "franz-go's writes", 30)
        yield client, tap, writes
    finally:
        if tap is not None:
            tap.close()
        client.stop()


def events_of(tap: TlsTap, kind: str) -> list[int]:
    """The perf event fds of ``kind`` (ssl, send) of every thread the source reads."""
    kinds = [each for each, _ in tap.events.values() for _ in tap.rings]  # each on each CPU
    return [fd for thread in tap.threads.values()  # each thread's events, in order
            for fd, each in zip(thread.fds, kinds, strict=True) if each == kind]


@pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed")
def test_a_go_programs_writes_to_settled_sockets_are_not_handed_on(kafka, go_consumer):
    """A Go program's threads are all read (its goroutines move between them), but its
    writes to sockets whose role is known are not handed on: the probes go on recording
    franz-go's requests while ``read`` hands over none; a socket undecided again has its
    next writes handed on."""
    with franz_go_tapped(kafka, go_consumer, "kmon-tls-settled") as (client, tap, writes):
        probes = events_of(tap, "ssl")
        settled = socket_inodes(client.pid)
        tap.follow(set(), settled=settled)  # every socket decided
        before = sum(recorded(fd) for fd in probes)
        handed: list = []
        wait_for(lambda: handed.extend(tap.read()) or sum(recorded(fd) for fd in probes)
                 >= before + 5, "franz-go writing on", 30)
        handed += tap.read()
        # (a socket franz-go opened since is not settled: its writes are handed on)
        assert not [w for w in handed if w.inode in settled]

        # the socket franz-go writes to most (a fetch's or heartbeat's, asked again every few
        # seconds; its first writes' last may be a seed's Metadata, the socket then idle)
        tap.follow(socket_inodes(client.pid), settled=set())
        again: list = []
        wait_for(lambda: again.extend(tap.read()) or len(again) >= 8, "writes undecided", 30)
        busy = Counter(w.inode for w in again).most_common(1)[0][0]
        tap.follow({busy}, settled=socket_inodes(client.pid) - {busy})  # undecided again
        assert {w.inode for w in wait_for(tap.read, "its next writes", 30)} == {busy}


@pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed")
def test_a_go_program_whose_writes_name_their_socket_has_no_send_recorded(kafka, go_consumer):
    """franz-go's ``Conn.Write`` on a ``*net.TCPConn`` names its socket itself: its writes are
    read, tied to their sockets, and no send syscall of the program is recorded (the kernel
    counts none), where before each of its sends was a record for kmon to read."""
    with franz_go_tapped(kafka, go_consumer, "kmon-tls-follow") as (client, tap, writes):
        assert {w.inode for w in writes} <= socket_inodes(client.pid)
        sends = events_of(tap, "send")
        assert sends and sum(recorded(fd) for fd in sends) == 0


# python -c WAITING_PRODUCER BOOTSTRAP CAFILE TOPIC: confluent-kafka over SSL, told to start
# by a line on stdin, then a message every 10 ms; ACKED once one is delivered
WAITING_PRODUCER = """
import sys
import time
from confluent_kafka import Producer
producer = Producer({"bootstrap.servers": sys.argv[1], "security.protocol": "SSL",
                     "ssl.ca.location": sys.argv[2], "linger.ms": 5})
print("WAITING", flush=True)
sys.stdin.readline()
""" + ACKED_ONCE + """while True:
    producer.produce(sys.argv[3], b"x" * 1000, on_delivery=delivered)
    producer.poll(0.01)
"""


def test_a_client_at_work_dropping_a_socket_unread_closes_the_probes(kafka):
    """librdkafka drops its bootstrap connection once it knows the cluster, the client's
    close, before the TLS source (opened at the poll after the wire saw TLS) read a request
    of it: as a failed login's would be, but the client is at work on its other sockets
    (each carried a request past a login). Once every socket it holds is decided, the source
    closes within a poll or two, where it used to stay open PROBE_S more with every thread of the
    process read (a failed login's new sockets are read from their first write)."""
    unread = source_closes_once_decided(
        kafka, lambda c: c.tls and c.first_by == "client" and c.last_api is None)
    assert unread


# python -c SHUTTING BOOTSTRAP CAFILE: a client at work, writing a ListOffsets request on its
# first TLS socket every 0.2 s from a thread; on "drop" it opens a second ("OPENED"), and on
# "shut" ends that one's TLS (its close_notify, answered by the broker's and its FIN) and
# closes it once that FIN came ("SHUT"): the broker closed first, no request read
SHUTTING = """
import socket, ssl, struct, sys, threading, time
host, port = sys.argv[1].split(",")[0].rsplit(":", 1)
context = ssl.create_default_context(cafile=sys.argv[2])
def connect():
    return context.wrap_socket(socket.create_connection((host, int(port))),
                               server_hostname=host)
working = connect()
def work():
    while True:
        working.sendall(struct.pack(">ihhih", 10 + 4 + 8, 2, 1, 1, 4) + b"kmon"
                        + struct.pack(">ii", -1, 0))
        size = struct.unpack(">i", working.recv(4))[0]
        while size > 0:
            size -= len(working.recv(size))
        time.sleep(0.2)
threading.Thread(target=work, daemon=True).start()
print("WORKING", flush=True)
sys.stdin.readline()
dropped = connect()
print("OPENED", flush=True)
sys.stdin.readline()
raw = dropped.unwrap()
raw.recv(1)  # the broker's FIN, after its close_notify
raw.close()
print("SHUT", flush=True)
sys.stdin.readline()
"""


def test_a_client_at_work_shutting_a_tls_socket_unread_closes_the_probes(kafka):
    """A client at work that ends a TLS socket's session before any request on it: its
    close_notify, which the broker answers with its own and closes first, no request read.
    A failed login's close looks so too, but this client is past its login on its other
    socket: the source closes within a few polls, where it used to stay open PROBE_S more."""
    from kmon.sources.kernel.socket_readers import open_socket_reader
    from kmon.sources.process_wire import DECIDING_APIS, ProcessWire

    client = Child([sys.executable, "-c", SHUTTING, kafka.bootstrap("SSL"),
                    str(kafka.ca_file)])
    reader, wire = open_socket_reader(), ProcessWire(tls_pid=client.pid)
    closes: dict = {}  # (the tap reads the broker's port: other processes' closes too)
    held: list = []  # the client's sockets at the last poll

    def poll() -> bool:
        """Whether every socket of the client is decided (a poll a second, as kmon's)."""
        time.sleep(1)
        sockets = reader.sockets_of(client.pid)
        held[:] = [(s.local, s.remote) for s in sockets]
        view = wire.read(sockets, int(time.time() * 1000)).view
        closes.update(view.closes)
        flows = [view.flows.get((s.local, s.remote)) for s in sockets]
        return bool(flows) and all(f is not None and f.api_counts.keys() & DECIDING_APIS
                                   for f in flows)

    try:
        client.wait_line("WORKING", timeout=60)
        wait_for(poll, "the working socket decided", 20, every=0)
        working = set(held)
        client.send("")
        client.wait_line("OPENED")
        poll()  # a poll shows the dropped socket: the client's own
        (dropped,) = set(held) - working
        client.send("")
        client.wait_line("SHUT")
        close = wait_for(lambda: poll() and closes.get(dropped), "the dropped socket's close",
                         10, every=0)
        assert (close.tls, close.first_by, close.last_api) == (True, "broker", None)
        wait_for(lambda: poll() and wire.tls is None, "the source closed", 6, every=0)
    finally:
        wire.close()
        client.stop()


# python -c REFUSED BOOTSTRAP CAFILE: another client on the SSL listener, each of whose TLS
# connections writes a request size of -1: the broker closes it first, no request read
REFUSED = """
import socket, ssl, sys, time
host, port = sys.argv[1].split(",")[0].rsplit(":", 1)
context = ssl.create_default_context(cafile=sys.argv[2])
while True:
    with context.wrap_socket(socket.create_connection((host, int(port))),
                             server_hostname=host) as tls:
        tls.sendall(b"\\xff" * 4)
        try:
            tls.recv(1)
        except OSError:
            pass
    print("REFUSED", flush=True)
    time.sleep(0.3)
"""


def test_another_process_s_refused_tls_connections_keep_no_source_open(kafka):
    """A tap follows its process's broker ports, and reads every connection on them: another
    client's too. Those the broker closes before a request was read look like this process's
    failed logins, each of which used to keep its TLS source open PROBE_S more, every thread
    read. Only the process's own closes count: with another client's refused every 0.3 s on
    the same listener, the source closes once the process's sockets are decided."""
    stranger = Child([sys.executable, "-c", REFUSED, kafka.bootstrap("SSL"),
                      str(kafka.ca_file)])
    try:
        stranger.wait_line("REFUSED", timeout=60)
        refused = source_closes_once_decided(
            kafka, lambda c: c.tls and c.first_by == "broker" and c.last_api is None)
        assert refused and stranger.proc.poll() is None
    finally:
        stranger.stop()


def source_closes_once_decided(kafka, counted) -> list:
    """A WAITING_PRODUCER's TLS source, polled every second while its producer works: the
    closes ``counted`` picks out, once the source closed within a few polls of every socket
    being decided, with one such close seen."""
    from kmon.sources.kernel.socket_readers import open_socket_reader
    from kmon.sources.process_wire import DECIDING_APIS, ProcessWire

    topic = unique("kmon-tls-decided")
    produce(kafka.bootstrap(), topic)
    client = Child([sys.executable, "-c", WAITING_PRODUCER, kafka.bootstrap("SSL"),
                    str(kafka.ca_file), topic])
    reader, wire = open_socket_reader(), ProcessWire(tls_pid=client.pid)
    seen: list = []
    others: list = []  # the other closes, and whether each was untied (one may keep it open)

    def poll():
        sockets = reader.sockets_of(client.pid)
        view = wire.read(sockets, int(time.time() * 1000)).view
        seen.extend(c for c in view.closes.values() if counted(c))
        others.extend((c, pair in view.untied) for pair, c in view.closes.items()
                      if not counted(c))
        return sockets, view

    def all_decided() -> bool:
        time.sleep(1)  # kmon's default interval: the source opens a poll after TLS is seen
        sockets, view = poll()
        flows = [view.flows.get((s.local, s.remote)) for s in sockets]
        return bool(seen and flows) and all(
            f is not None and f.api_counts.keys() & DECIDING_APIS for f in flows)

    try:
        client.wait_line("WAITING", timeout=60)
        poll()  # the tap watches before the client connects
        client.send("")
        client.wait_line("ACKED", timeout=60)
        wait_for(all_decided, "every socket decided, a counted close seen", 25, every=0)
        # closed within a few polls (a socket the client at work opens meanwhile is undecided
        # for a poll or two), not PROBE_S (30 s) later
        try:
            wait_for(lambda: poll() and wire.tls is None, "the source closed", 6, every=1)
        except AssertionError as err:  # why it stays open: probes, or a linger, and whose
            now, (_, view) = time.monotonic(), poll()
            raise AssertionError(
                f"{err}; counted closes {seen}; other closes {others}; probing "
                f"{wire.probing}; lingering "
                f"{wire.linger_until - now:.1f} s, unread {wire.unread_until - now:.1f} s; flows "
                f"{[(key, dict(f.api_counts)) for key, f in view.flows.items()]}") from None
        return seen
    finally:
        wire.close()
        client.stop()
