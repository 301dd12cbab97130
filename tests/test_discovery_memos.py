"""What a search for the host's clients keeps from the last one (each host dump's sockets by
their message, each process's fd links read only for its new fd numbers) gives what a search
from scratch gives: over random sequences of sockets opened, closed, reset, opened again from
the same local port, and fd numbers reused, each kept answer equals a fresh reader's."""

from __future__ import annotations

import contextlib
import os
import random
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator

import pytest

from kmon.sources.kernel.proc_fds import SocketOwners
from kmon.sources.kernel.sockdiag import SockDiagReader, SockDiagUnavailable

PID = os.getpid()
STEPS = 40
LINGER_0 = struct.pack("ii", 1, 0)  # close with a RST: no TIME_WAIT holds the local port


@pytest.fixture
def stack() -> Iterator[contextlib.ExitStack]:
    with contextlib.ExitStack() as sockets:
        yield sockets


def _reader() -> SockDiagReader:
    try:
        return SockDiagReader()
    except SockDiagUnavailable as exc:
        pytest.skip(f"netlink sock_diag refused here: {exc}")


class Sockets:
    """This process's sockets to two listeners of its own, changed at random."""

    def __init__(self, stack: contextlib.ExitStack, rng: random.Random) -> None:
        self.stack, self.rng = stack, rng
        self.servers = [stack.enter_context(socket.create_server(("127.0.0.1", 0)))
                        for _ in range(2)]
        self.ports = {s.getsockname()[1] for s in self.servers}
        self.clients: list[socket.socket] = []
        self.accepted: list[socket.socket] = []
        self.files: list[int] = []

    def connect(self, local: tuple[str, int] = ("127.0.0.1", 0),
                to: tuple[str, int] | None = None) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, LINGER_0)
        sock.bind(local)
        server = self.rng.choice(self.servers) if to is None else next(
            s for s in self.servers if s.getsockname() == to)
        sock.connect(server.getsockname())
        self.clients.append(self.stack.enter_context(sock))
        self.accepted.append(self.stack.enter_context(server.accept()[0]))

    def reset(self) -> tuple[tuple[str, int], tuple[str, int]]:
        """Close a client with a RST; its local and remote ends."""
        sock = self.clients.pop(self.rng.randrange(len(self.clients)))
        ends = sock.getsockname(), sock.getpeername()
        sock.close()
        return ends

    def step(self) -> None:
        """One random change: more sockets, fewer, a socket opened again on the same local
        port (the same 4-tuple, a new inode), a file closed and its fd number taken by a
        socket while another fd closes."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.3 or not self.clients:
            for _ in range(rng.randint(1, 4)):
                self.connect()
        elif roll < 0.5:
            self.reset()
        elif roll < 0.7:
            self.connect(*self.reset())  # the same 4-tuple
        elif roll < 0.85:
            self.files.append(os.open(os.devnull, os.O_RDONLY))
            self.files.append(os.open(os.devnull, os.O_RDONLY))
        else:  # files' numbers reused by sockets, one fd fewer all the same
            if len(self.files) < 3:
                self.files += [os.open(os.devnull, os.O_RDONLY) for _ in range(3)]
                return
            for _ in range(3):
                os.close(self.files.pop(0))
            self.connect()

    def inodes(self) -> set[int]:
        return {os.fstat(s.fileno()).st_ino
                for s in (*self.servers, *self.clients, *self.accepted)}

    def close(self) -> None:
        for fd in self.files:
            os.close(fd)


@pytest.mark.parametrize("seed", range(3))
def test_a_host_dump_kept_from_the_last_one_is_a_fresh_readers(stack, seed):
    """``connected_to`` and ``host_sockets`` of the listeners' ports: the sockets of a reader
    that dumped them before (each message's socket kept) are a fresh reader's."""
    rng = random.Random(seed)
    sockets = Sockets(stack, rng)
    kept = stack.enter_context(_reader())
    try:
        for _ in range(STEPS):
            sockets.step()
            fresh = stack.enter_context(_reader())
            for dump in ("connected_to", "host_sockets"):
                assert sorted(getattr(kept, dump)(sockets.ports)) == sorted(
                    getattr(fresh, dump)(sockets.ports))
            fresh.close()
    finally:
        sockets.close()


@pytest.mark.parametrize("seed", range(3))
def test_the_owners_kept_from_the_last_search_are_a_fresh_searchs(stack, seed):
    """``SocketOwners``: the owner of every socket this process holds, from fd tables kept
    from search to search (their links read again only for new fd numbers, never for time
    here), is the one a fresh search finds, settled or not."""
    rng = random.Random(seed)
    sockets = Sockets(stack, rng)
    kept = SocketOwners(reread_s=3600.0)
    try:
        for _ in range(STEPS):
            sockets.step()
            wanted = sockets.inodes()
            settled = [PID] if rng.random() < 0.5 else []
            assert kept.owners(wanted, [PID], settled) == SocketOwners().owners(wanted, [PID])
            assert set(kept.owners(wanted, [PID], settled)) == wanted
    finally:
        sockets.close()


def test_a_second_dump_of_the_same_sockets_parses_none_of_them_again(stack, monkeypatch):
    """The cost follows change: of 40 sockets dumped again, only the one opened since is
    parsed (``socket_ends``, counted where the reader calls it)."""
    from kmon.sources.kernel import sockdiag

    sockets = Sockets(stack, random.Random(0))
    for _ in range(40):
        sockets.connect()
    reader = stack.enter_context(_reader())
    parsed = []
    real = sockdiag.socket_ends
    monkeypatch.setattr(sockdiag, "socket_ends", lambda msg: parsed.append(1) or real(msg))
    assert len(reader.connected_to(sockets.ports)) == 40
    sockets.connect()
    parsed.clear()
    assert len(reader.connected_to(sockets.ports)) == 41
    assert len(parsed) == 1


@pytest.mark.integration  # a child process holding the sockets
def test_a_search_reads_the_links_of_new_fd_numbers_alone(stack, monkeypatch):
    """The cost follows change: a process of many sockets that opened one more has that one's
    link read, not every link again."""
    from kmon.sources.kernel import proc_fds

    server = stack.enter_context(socket.create_server(("127.0.0.1", 0), backlog=64))
    code = ("import os, socket, sys\n"
            f"to = ('127.0.0.1', {server.getsockname()[1]})\n"
            "held = [socket.create_connection(to) for _ in range(40)]\n"
            "print(*(os.fstat(s.fileno()).st_ino for s in held), flush=True)\n"
            "sys.stdin.readline(); held.append(socket.create_connection(to))\n"
            "print(os.fstat(held[-1].fileno()).st_ino, flush=True)\n"
            "sys.stdin.read()\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        inodes = {int(word) for word in child.stdout.readline().split()}
        owners = SocketOwners(reread_s=3600.0)
        assert owners.owners(inodes, [child.pid]) == dict.fromkeys(inodes, child.pid)
        read = []
        real = os.readlink
        monkeypatch.setattr(proc_fds.os, "readlink",
                            lambda *a, **k: read.append(a) or real(*a, **k))
        child.stdin.write("\n")
        child.stdin.flush()
        inodes.add(int(child.stdout.readline()))
        assert owners.owners(inodes, [child.pid]) == dict.fromkeys(inodes, child.pid)
        assert len(read) == 1
    finally:
        child.kill()
        child.wait()
