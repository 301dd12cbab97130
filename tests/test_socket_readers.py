"""The socket readers against real sockets held by this test process."""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator

import psutil
import pytest

from kmon.sources.kernel import proc_fds, sockdiag
from kmon.sources.kernel.diag_messages import _short_tcp_info
from kmon.sources.kernel.psutil_sockets import PsutilSocketReader
from kmon.sources.kernel.sockdiag import SockDiagReader, SockDiagUnavailable
from kmon.sources.kernel.socket_readers import open_socket_reader
from kmon.sources.kernel.sockets import Endpoint, TcpSocket

pytestmark = pytest.mark.integration  # real processes, a cluster or Spark

PID = os.getpid()


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


HAS_IPV6 = _ipv6_loopback()
needs_ipv6 = pytest.mark.skipif(not HAS_IPV6, reason="cannot bind ::1")


@pytest.fixture
def reader() -> Iterator[SockDiagReader]:
    try:
        diag = SockDiagReader()
    except SockDiagUnavailable as exc:
        pytest.skip(f"netlink sock_diag refused here: {exc}")
    with diag:
        yield diag


@pytest.fixture
def stack() -> Iterator[contextlib.ExitStack]:
    """Closes every socket a test registers, however the test ends."""
    with contextlib.ExitStack() as sockets:
        yield sockets


def _pair(
    stack: contextlib.ExitStack,
    family: int = socket.AF_INET,
    host: str = "127.0.0.1",
) -> tuple[socket.socket, socket.socket]:
    """(client, accepted): a connected TCP pair over loopback; the listener is closed."""
    with socket.socket(family) as listener:
        listener.bind((host, 0))
        listener.listen()
        client = stack.enter_context(socket.socket(family))
        client.connect((host, listener.getsockname()[1]))
        accepted = stack.enter_context(listener.accept()[0])
    return client, accepted


def _transfer(sender: socket.socket, receiver: socket.socket, size: int) -> None:
    sender.sendall(b"k" * size)
    got = 0
    while got < size:
        got += len(receiver.recv(size - got))


def _find(found: list[TcpSocket], sock: socket.socket) -> TcpSocket | None:
    """The reported socket held at `sock`'s fd, if any."""
    inode = os.stat(sock.fileno()).st_ino
    matches = [s for s in found if s.inode == inode]
    assert len(matches) <= 1
    if matches:
        assert matches[0].fd == sock.fileno()
    return matches[0] if matches else None


def _poll_until(
    read: Callable[[], TcpSocket | None], check: Callable[[TcpSocket | None], bool]
) -> TcpSocket | None:
    """Read until `check` holds (at most ~2 s), return the last reading."""
    for _ in range(100):
        got = read()
        if check(got):
            return got
        time.sleep(0.02)
    raise AssertionError(f"condition never held; last reading: {got}")


def _endpoint(address: tuple) -> Endpoint:
    ip = address[0]
    return Endpoint(ip.removeprefix("::ffff:") if "." in ip else ip, address[1])


@pytest.mark.parametrize(
    ("family", "host"),
    [
        (socket.AF_INET, "127.0.0.1"),
        pytest.param(socket.AF_INET6, "::1", marks=needs_ipv6),
        pytest.param(socket.AF_INET6, "::ffff:127.0.0.1", marks=needs_ipv6, id="v4-mapped"),
    ],
)
def test_sock_diag_reports_a_connected_socket(reader, stack, family, host):
    client, accepted = _pair(stack, family, host)
    _transfer(client, accepted, 1234)
    _transfer(accepted, client, 567)

    got = _find(reader.sockets_of(PID), client)

    assert got is not None
    assert got.local == _endpoint(client.getsockname())
    assert got.remote == _endpoint(client.getpeername())
    assert got.state == "ESTABLISHED"
    assert got.fd == client.fileno()
    assert (got.bytes_sent, got.bytes_received) == (1234, 567)
    assert got.rtt_ms is not None and got.rtt_ms >= 0
    assert got.source == "kernel"
    if host.startswith("::ffff:"):  # an IPv6 socket talking IPv4 shows plain IPv4
        assert got.local.ip == "127.0.0.1" and got.remote.ip == "127.0.0.1"


def test_idle_times_grow_and_reset(reader, stack):
    client, accepted = _pair(stack)
    _transfer(client, accepted, 10)
    time.sleep(1.2)
    idle = _find(reader.sockets_of(PID), client)
    assert idle is not None and idle.last_sent_ms is not None
    assert idle.last_sent_ms >= 1000
    assert idle.last_recv_ms is not None and idle.last_recv_ms >= 1000

    _transfer(client, accepted, 10)
    busy = _find(reader.sockets_of(PID), client)
    assert busy is not None and busy.last_sent_ms is not None
    assert busy.last_sent_ms < 500
    assert busy.bytes_sent == 20


def test_peer_close_shows_close_wait(reader, stack):
    client, accepted = _pair(stack)
    assert _find(reader.sockets_of(PID), client).state == "ESTABLISHED"
    accepted.close()
    got = _poll_until(
        lambda: _find(reader.sockets_of(PID), client),
        lambda s: s is not None and s.state == "CLOSE_WAIT",
    )
    assert got.remote == _endpoint(client.getpeername())


def test_closed_socket_disappears_and_new_one_appears(reader, stack):
    client, accepted = _pair(stack)
    assert _find(reader.sockets_of(PID), client) is not None
    old_inode = os.stat(client.fileno()).st_ino
    client.close()
    accepted.close()
    assert old_inode not in {s.inode for s in reader.sockets_of(PID)}

    new_client, _ = _pair(stack)  # likely reuses the fd number: the inode tells them apart
    found = reader.sockets_of(PID)
    assert old_inode not in {s.inode for s in found}
    got = _find(found, new_client)
    assert got is not None and got.state == "ESTABLISHED"


def test_a_new_socket_on_a_reused_fd_number_shows_by_the_next_poll(reader, stack):
    """The fd links are read again only when the fd numbers change: a socket that takes
    a closed one's number between two polls must still be found."""
    client, accepted = _pair(stack)
    other, _ = _pair(stack)
    old_inode, new_inode = (os.stat(s.fileno()).st_ino for s in (client, other))
    assert _find(reader.sockets_of(PID), client) is not None
    # The same fd numbers, other sockets: client's number now holds other's socket (the
    # old one is closed), other's number a second reference to the accepted end.
    os.dup2(other.fileno(), client.fileno())
    os.dup2(accepted.fileno(), other.fileno())
    polls = [{s.inode: s.fd for s in reader.sockets_of(PID)} for _ in range(2)]
    assert all(old_inode not in inodes for inodes in polls)
    assert polls[1][new_inode] == client.fileno()


def _moved_into(held, listener: socket.socket) -> int:
    """Connect a socket to ``listener``, put it in ``held``'s fd (the file closed) and close
    its own: the fd count and numbers are as before. Its inode."""
    conn = socket.create_connection(listener.getsockname())
    os.dup2(conn.fileno(), held.fileno())
    conn.close()
    return os.fstat(held.fileno()).st_ino


def test_a_socket_in_a_closed_files_fd_is_read_when_the_kernel_says_its_process_connected(
        reader, stack, tmp_path, monkeypatch):
    """Where the kernel's events say which processes connect (``connects``), a process's fd
    links are read again when it connected, else every TOLD_REREAD_S: a socket that took a
    file's fd (the fd count and numbers unchanged) shows once its process is named; once the
    kernel may have missed a connect, every table is read again every REREAD_S; and a table
    not read for REREAD_S (its process not watched meanwhile) is read whole."""
    clock = [1000.0]
    fake = types.SimpleNamespace(monotonic=lambda: clock[0])  # the readers' clock alone
    monkeypatch.setattr(sockdiag, "time", fake)
    monkeypatch.setattr(proc_fds, "time", fake)
    listener = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
    files = [stack.enter_context((tmp_path / name).open("wb")) for name in "abc"]
    reader.connects(set(), complete=True)  # the kernel says who connects
    reader.sockets_of(PID)

    def inodes(seconds: float = 1.0) -> set[int]:
        clock[0] += seconds
        return {s.inode for s in reader.sockets_of(PID)}

    moved = _moved_into(files[0], listener)
    assert moved not in inodes()  # no process named: the links are not read again
    reader.connects({PID}, complete=True)
    found = {s.inode: s for s in reader.sockets_of(PID)}
    assert found[moved].fd == files[0].fileno()
    assert found[moved].remote.port == listener.getsockname()[1]

    reader.connects(set(), complete=True)
    moved = _moved_into(files[1], listener)
    assert all(moved not in inodes() for _ in range(15))  # a poll a second, 15 s
    reader.connects(set(), complete=False)
    assert moved in inodes()

    unwatched = stack.enter_context(SockDiagReader())  # told nothing of it for REREAD_S
    unwatched.connects(set(), complete=True)
    unwatched.sockets_of(PID)
    moved = _moved_into(files[2], listener)
    clock[0] += sockdiag.REREAD_S
    assert moved in {s.inode for s in unwatched.sockets_of(PID)}


@pytest.fixture
def listener_process() -> Iterator[int]:
    """A child process accepting connections on 127.0.0.1 (its port is yielded)."""
    code = ("import socket, sys\n"
            "l = socket.create_server(('127.0.0.1', 0), backlog=512)\n"
            "print(l.getsockname()[1], flush=True)\n"
            "held = []\n"
            "while True:\n"
            "    held.append(l.accept()[0])\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        yield int(child.stdout.readline())
    finally:
        child.kill()
        child.wait()


def test_many_sockets_come_from_one_filtered_dump_as_from_exact_lookups(
        reader, stack, listener_process, monkeypatch):
    """From sockdiag._DUMP_FROM sockets on, a dump filtered by remote port in the kernel
    replaces the per-socket lookups, unless the kernel holds too many other TCP sockets for
    the dump's walk to pay: either way the same sockets are found."""
    from kmon.sources.kernel import sockdiag

    clients = [stack.enter_context(socket.create_connection(("127.0.0.1", listener_process)))
               for _ in range(2 * sockdiag._DUMP_FROM)]
    for i, client in enumerate(clients):
        client.sendall(b"k" * (i + 1))
    other, _ = _pair(stack)  # another remote port: in the filter too
    time.sleep(0.1)

    def facts() -> set[tuple]:
        return {(s.inode, s.fd, s.local, s.remote, s.state, s.bytes_sent, s.bytes_received,
                 s.rtt_ms is not None, s.last_sent_ms is not None, s.last_recv_ms is not None)
                for s in reader.sockets_of(PID)}

    filtered_dumps = []
    real_dump = reader._filtered_dump
    monkeypatch.setattr(reader, "_filtered_dump",
                        lambda *args: filtered_dumps.append(1) or real_dump(*args))
    # the kernel's TCP socket count, set: what this host holds besides is not the test's
    monkeypatch.setattr(sockdiag, "tcp_sockets", lambda: len(clients))
    dumped = facts()
    assert filtered_dumps and all(fact[-3:] == (True, True, True) for fact in dumped)
    monkeypatch.setattr(sockdiag, "tcp_sockets", lambda: 1 << 40)  # too many for a dump
    assert dumped == facts()
    monkeypatch.setattr(sockdiag, "tcp_sockets", lambda: len(clients))
    monkeypatch.setattr(sockdiag, "_DUMP_FROM", 1 << 30)
    assert dumped == facts()
    assert len(filtered_dumps) == 1
    assert len(dumped) >= len(clients) + 2
    assert {_find(reader.sockets_of(PID), c).bytes_sent for c in clients} == set(
        range(1, len(clients) + 1))
    assert _find(reader.sockets_of(PID), other) is not None


def test_read_ahead_reads_many_processes_in_one_dump_as_each_alone(
        reader, stack, listener_process, monkeypatch):
    """``read_ahead`` of several processes: their sockets from one filtered dump, as exact
    lookups of each process find them (a socket two processes share under its fd in each);
    a process gone raises as ``sockets_of`` would; a stale read-ahead is read again."""
    from kmon.sources.kernel import sockdiag

    mine = [stack.enter_context(socket.create_connection(("127.0.0.1", listener_process)))
            for _ in range(sockdiag._DUMP_FROM)]
    shared = mine[0].fileno()
    code = ("import os, socket, sys\n"
            f"os.dup2({shared}, 200); os.close({shared})\n"
            f"held = [socket.create_connection(('127.0.0.1', {listener_process})) "
            "for _ in range(30)]\n"
            "for i, s in enumerate(held): s.sendall(b'k' * (i + 1))\n"
            "print('ready', flush=True)\n"
            "sys.stdin.read()\n")
    children = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, pass_fds=(shared,))
                for _ in range(2)]
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        assert all(child.stdout.readline() == "ready\n" for child in children)
        pids = [PID, *(child.pid for child in children)]
        # the kernel's TCP socket count, set: what this host holds besides is not the test's
        monkeypatch.setattr(sockdiag, "tcp_sockets", lambda: 2 * len(mine))

        def facts(found: list[TcpSocket]) -> set[tuple]:
            """The test's own sockets (this process's others, as pytest-xdist's channel to
            its controller, count bytes meanwhile)."""
            return {(s.inode, s.fd, s.local, s.remote, s.state, s.bytes_sent,
                     s.bytes_received) for s in found if s.remote.port == listener_process}

        dumps = []
        real_dump = reader._dump_known
        monkeypatch.setattr(reader, "_dump_known",
                            lambda *args: dumps.append(args) or real_dump(*args))
        for pid in pids:
            reader.sockets_of(pid)  # learned: known sockets, as after a first poll
        dumps.clear()
        reader.read_ahead([*pids, gone.pid])
        ahead = {pid: reader.sockets_of(pid) for pid in pids}
        assert len(dumps) == 1 and len(dumps[0][0]) >= len(mine) + 60  # one family, together
        with pytest.raises(psutil.NoSuchProcess):
            reader.sockets_of(gone.pid)

        monkeypatch.setattr(sockdiag, "tcp_sockets", lambda: 1 << 40)  # exact lookups
        alone = {pid: reader.sockets_of(pid) for pid in pids}
        assert len(dumps) == 1
        assert {pid: facts(found) for pid, found in ahead.items()} == {
            pid: facts(found) for pid, found in alone.items()}
        inode = os.stat(shared).st_ino
        assert [s.fd for pid in pids for s in ahead[pid] if s.inode == inode] == [
            shared, 200, 200]
        assert all(found == sorted(found, key=lambda s: s.fd) for found in ahead.values())

        monkeypatch.setattr(sockdiag, "tcp_sockets", lambda: 2 * len(mine))
        reader.read_ahead(pids)
        lookups = []
        real_lookup = reader._lookup
        monkeypatch.setattr(reader, "_lookup",
                            lambda *args: lookups.append(args) or real_lookup(*args))
        time.sleep(0.6)  # a round of polls on a busy host: the read-ahead still answers it
        assert facts(reader.sockets_of(children[0].pid)) == facts(alone[children[0].pid])
        assert len(dumps) == 2 and not lookups  # not read again
        monkeypatch.setattr(sockdiag, "_AHEAD_FRESH_S", -1.0)  # stale: read again, alone
        assert facts(reader.sockets_of(PID)) == facts(alone[PID])
        assert len(dumps) == 3  # the read-ahead's, then PID's own filtered dump
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_read_ahead_learns_every_processs_new_sockets_from_one_dump(reader, listener_process):
    """The cost follows change: processes that each opened a socket since the last poll have
    them learned from one dump of the host's sockets together, not one a process; what the
    read-ahead then answers is what a fresh reader reads of each process alone."""
    code = ("import os, socket, sys\n"
            f"to = ('127.0.0.1', {listener_process})\n"
            "held = [socket.create_connection(to) for _ in range(2)]\n"
            "print('ready', flush=True)\n"
            "sys.stdin.readline(); held.append(socket.create_connection(to))\n"
            "print('more', flush=True)\n"
            "sys.stdin.read()\n")
    children = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True) for _ in range(3)]
    try:
        assert all(child.stdout.readline() == "ready\n" for child in children)
        pids = [child.pid for child in children]
        reader.read_ahead(pids)
        assert all(len(reader.sockets_of(pid)) == 2 for pid in pids)
        for child in children:
            child.stdin.write("\n")
            child.stdin.flush()
        assert all(child.stdout.readline() == "more\n" for child in children)
        dumps = reader.dumps
        reader.read_ahead(pids)
        assert reader.dumps == dumps + 1
        with SockDiagReader() as fresh:
            for pid in pids:
                assert [(s.inode, s.fd, s.local, s.remote, s.state)
                        for s in reader.sockets_of(pid)] == [
                    (s.inode, s.fd, s.local, s.remote, s.state) for s in fresh.sockets_of(pid)]
    finally:
        for child in children:
            child.kill()
            child.wait()


def test_host_clients_from_a_filtered_dump_agree_with_psutils_scan(stack, listener_process):
    """Discovery: the processes connected to the "brokers" (a listener in a child process,
    and one here), not the processes serving them, not kmon; as psutil's scan says."""
    from kmon.sources.kernel.host_sockets import HostClients, client_pids

    here = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
    brokers = {Endpoint("127.0.0.1", listener_process), _endpoint(here.getsockname())}
    code = ("import socket, sys\n"
            f"c = socket.create_connection(('127.0.0.1', {listener_process}))\n"
            "print('ready', flush=True)\n"
            "sys.stdin.read()\n")
    clients = [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True) for _ in range(2)]
    try:
        for client in clients:
            assert client.stdout.readline().strip() == "ready"
        search = HostClients()
        try:
            for _ in range(2):  # the second search from the kept inode -> PID map
                assert search(brokers) == client_pids(brokers) == {c.pid for c in clients}
            clients[0].kill()
            clients[0].wait()
            assert search(brokers) == {clients[1].pid}
        finally:
            search.close()
    finally:
        for client in clients:
            client.kill()
            client.wait()


def test_a_host_dump_of_ports_holds_their_clients_and_listeners_not_the_servers_ends(
        reader, stack):
    """The discovery dump of a port: the sockets connected to it and its listener, each once,
    with their endpoints; the server's own end of each connection (as many again, on a busy
    broker) is not read."""
    server = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
    port = server.getsockname()[1]
    clients = [stack.enter_context(socket.create_connection(("127.0.0.1", port)))
               for _ in range(3)]
    for _ in clients:
        stack.enter_context(server.accept()[0])
    inode = {os.fstat(sock.fileno()).st_ino: sock for sock in (server, *clients)}
    found = reader.host_sockets({port})
    assert sorted(s.inode for s in found) == sorted(inode)
    for host_socket in found:
        sock = inode[host_socket.inode]
        assert host_socket.listening == (sock is server)
        assert host_socket.local == _endpoint(sock.getsockname())
        if sock is not server:
            assert host_socket.remote == Endpoint("127.0.0.1", port)


def test_the_sockets_connected_to_ports_are_the_host_dumps_without_its_listeners(
        reader, stack):
    """``connected_to``: what a search for who reaches a listener reads, one dump per family
    of the connections alone (the listeners' own dump left out)."""
    server = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
    port = server.getsockname()[1]
    for _ in range(2):
        stack.enter_context(socket.create_connection(("127.0.0.1", port)))
        stack.enter_context(server.accept()[0])
    dumped = []
    real = reader._host_dump
    reader._host_dump = lambda *args: dumped.append(args) or real(*args)
    connected = reader.connected_to({port})
    assert len(dumped) == 1 and len(connected) == 2
    assert connected == [s for s in reader.host_sockets({port}) if not s.listening]


def test_a_settled_processs_fd_table_is_read_again_only_when_its_numbers_change(stack):
    """``SocketOwners``: the links of a process the caller watches already (``settled``) are
    not read again for time alone; a socket that took a closed file's place there shows to a
    search that is not told so, and once its fd numbers change."""
    from kmon.sources.kernel.proc_fds import SocketOwners

    server = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
    code = ("import os, socket, sys\n"
            "f = open(os.devnull)\n"
            "print('ready', flush=True)\n"
            "sys.stdin.readline(); f.close()\n"
            f"s = socket.create_connection(('127.0.0.1', {server.getsockname()[1]}))\n"
            "print(os.fstat(s.fileno()).st_ino, flush=True)\n"
            "sys.stdin.readline(); t = open(os.devnull)\n"
            "print('more', flush=True)\n"
            "sys.stdin.read()\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        owners, fresh = SocketOwners(reread_s=0.0), SocketOwners(reread_s=0.0)  # each look
        for table in (owners, fresh):  # is past its time; the child's table read first
            assert table.owners({1}, [child.pid], settled=[child.pid]) == {}
        child.stdin.write("\n")
        child.stdin.flush()
        inode = int(child.stdout.readline())  # in the closed file's place: the same count
        stack.enter_context(server.accept()[0])
        assert owners.owners({inode}, [child.pid], settled=[child.pid]) == {}
        assert owners.owners({inode}, [child.pid]) == {inode: child.pid}
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline() == "more\n"  # one more fd: its numbers change
        assert fresh.owners({inode}, [child.pid], settled=[child.pid]) == {inode: child.pid}
    finally:
        child.kill()
        child.wait()


def test_non_tcp_and_listening_sockets_are_skipped_without_new_dumps(reader, stack):
    client, _ = _pair(stack)
    listener = stack.enter_context(socket.socket())
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    udp = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    udp.bind(("127.0.0.1", 0))
    udp.connect(listener.getsockname())
    unix_a, unix_b = socket.socketpair()
    stack.enter_context(unix_a)
    stack.enter_context(unix_b)
    others = {os.stat(s.fileno()).st_ino for s in (listener, udp, unix_a, unix_b)}

    first = reader.sockets_of(PID)
    dumps = reader.dumps
    for _ in range(3):
        found = reader.sockets_of(PID)
        assert not others & {s.inode for s in found}
        assert _find(found, client) is not None
    assert not others & {s.inode for s in first}
    assert reader.dumps == dumps  # nothing new to learn: no dump


def test_connections_accepted_on_a_port_the_process_listens_on_are_not_its_own(
        reader, stack):
    """A Kafka client may serve too: a JVM's JMX connector (kmon's own helpers of other
    commands attach to it, each a connection of a few hundred ms: shown as the client's
    ``unknown`` socket by whichever view polled then), an application's HTTP port. A
    connection accepted on a port the process listens on is another program's connection
    to it, left out by both readers as its listener is, learned before or after it; its
    own connections stay, a pair's accepted end too once its listener is closed."""
    kept_client, kept_accepted = _pair(stack)  # its listener closed: both its own
    listener = stack.enter_context(socket.socket())
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    early = stack.enter_context(socket.create_connection(listener.getsockname()))
    early_accepted = stack.enter_context(listener.accept()[0])
    assert _find(reader.sockets_of(PID), early_accepted) is None  # learned in one dump
    late = stack.enter_context(socket.create_connection(listener.getsockname()))
    late_accepted = stack.enter_context(listener.accept()[0])
    for found in (reader.sockets_of(PID), PsutilSocketReader().sockets_of(PID)):
        assert _find(found, early_accepted) is None and _find(found, late_accepted) is None
        for own in (kept_client, kept_accepted, early, late):  # (early, late: their ends)
            assert _find(found, own) is not None


def test_socket_seen_before_connect_shows_once_connected(reader, stack):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        client = stack.enter_context(socket.socket())
        assert _find(reader.sockets_of(PID), client) is None  # not in the kernel's tables yet
        client.connect(listener.getsockname())
        stack.enter_context(listener.accept()[0])
    got = _poll_until(lambda: _find(reader.sockets_of(PID), client), lambda s: s is not None)
    assert got.state == "ESTABLISHED"


def test_reset_socket_still_held_is_dropped_quietly(reader, stack):
    client, accepted = _pair(stack)
    assert _find(reader.sockets_of(PID), client) is not None
    accepted.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    accepted.close()  # RST: the client's socket leaves the kernel's tables, its fd stays
    _poll_until(lambda: _find(reader.sockets_of(PID), client), lambda s: s is None)


def test_psutil_reader_agrees_without_inventing_numbers(reader, stack):
    pairs = [_pair(stack)]
    if HAS_IPV6:
        pairs.append(_pair(stack, socket.AF_INET6, "::1"))
        pairs.append(_pair(stack, socket.AF_INET6, "::ffff:127.0.0.1"))
    for client, accepted in pairs:
        _transfer(client, accepted, 100)
    ours = {s.inode: s for s in reader.sockets_of(PID)}

    theirs = PsutilSocketReader().sockets_of(PID)

    for client, accepted in pairs:
        for sock in (client, accepted):
            got, kernel = _find(theirs, sock), _find(list(ours.values()), sock)
            assert got is not None and kernel is not None
            assert (got.local, got.remote, got.state, got.fd) == (
                kernel.local,
                kernel.remote,
                kernel.state,
                kernel.fd,
            )
            assert got.idle_ms is None and got.last_sent_ms is None and got.last_recv_ms is None
            assert got.bytes_sent is None and got.bytes_received is None and got.rtt_ms is None
            assert got.source == "psutil"


def test_psutil_reader_skips_listeners(stack):
    listener = stack.enter_context(socket.socket())
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    assert all(s.state != "LISTEN" for s in PsutilSocketReader().sockets_of(PID))


def test_vanished_process_raises_no_such_process(reader):
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    gone = int(child.stdout)
    for each in (reader, PsutilSocketReader()):
        with pytest.raises(psutil.NoSuchProcess):
            each.sockets_of(gone)


def test_open_socket_reader_choices(reader):
    assert open_socket_reader("psutil").name == "psutil"
    for prefer in ("sock_diag", "auto"):
        chosen = open_socket_reader(prefer)
        assert isinstance(chosen, SockDiagReader)
        chosen.close()
    with pytest.raises(ValueError):
        open_socket_reader("netstat")


def test_short_tcp_info_of_older_kernels_gives_what_it_has():
    info = bytearray(160)  # a Linux 4.9 tcp_info: bytes_acked, no bytes_sent yet
    struct.pack_into("=I", info, 44, 1500)  # last_data_sent
    struct.pack_into("=I", info, 52, 2500)  # last_data_recv
    struct.pack_into("=I", info, 68, 250)  # rtt, microseconds
    struct.pack_into("=Q", info, 120, 4096)  # bytes_acked
    struct.pack_into("=Q", info, 128, 8192)  # bytes_received
    view = memoryview(bytes(info))
    assert _short_tcp_info(view, 0, 160) == (1500, 2500, 0.25, 4096, 8192)
    assert _short_tcp_info(view, 0, 104) == (1500, 2500, 0.25, None, None)
    assert _short_tcp_info(view, 0, 40) == (None, None, None, None, None)
