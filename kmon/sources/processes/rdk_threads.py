"""librdkafka's own name for each connection: the broker thread that holds its socket.

librdkafka runs one thread per broker handle and names it ``rdk:broker<nodeid>`` when it
starts (``rd_kafka_broker_thread_main``): ``rdk:broker2`` for broker 2's handle, and
``rdk:broker-1`` for a bootstrap or logical (coordinator) handle, whose node id is not
known when its thread starts. A handle's thread waits in ``poll()`` on its one socket and
its wake-up pipe. So the socket a node's thread polls is that node's connection: what the
client would say of it, with no statistics, no debug log and no TLS key, even for a socket
silent since kmon attached.

A thread's wait is read from ``/proc/PID/task/TID/syscall`` (the call and its arguments
while it blocks) and the ``pollfd`` array it names from ``/proc/PID/mem``: at most
``MAX_POLLFDS`` entries of 8 bytes, nothing else of the process's memory. Both need the
right to trace the process (root, or its owner where ptrace allows): without it nothing
is read and nothing is said. The names and the array are the process's own: they can
mislead about itself only, as its statistics could.
"""

from __future__ import annotations

import os
import platform
import re
import struct
import time
from collections.abc import Sequence, Set
from itertools import islice

from kmon.sources.kernel.sockets import TcpSocket

# the poll calls by machine: a broker thread blocks in poll(), which arm64's libc makes ppoll
POLL_CALLS = {"x86_64": (7, 271), "aarch64": (73,)}.get(platform.machine(), ())
# a thread name is cut at 15 bytes: "rdk:broker" and five digits may be a longer id cut short
THREAD_NAME = re.compile(rb"rdk:broker(-?\d{1,4})\n?")
MAX_THREADS = 1024  # threads of one process looked at per scan
MAX_POLLFDS = 4  # a broker thread polls its socket and its wake-up fd
LOOKS = 4  # a new socket no scan named is looked for at this many polls in a row
RESCAN_S = 5.0  # sockets no thread has named after their LOOKS are looked for this often
OTHER_RESCAN_S = 30.0  # a process with no broker thread is looked at again this often
MAX_NAMED = 4096  # sockets remembered per process


class BrokerThreads:
    """Which broker node's librdkafka thread polls each socket of one process.

    ``nodes(sockets)`` gives inode -> node id for the sockets a broker thread of a known
    node (>= 0) was seen polling. A thread is seen only while it blocks in ``poll()``;
    one busy at a scan (just connected, serving a request) is looked at again at the next
    polls, up to ``LOOKS`` scans for each new socket, then every ``RESCAN_S`` (the
    sockets no node's thread ever polls, a bootstrap's or a coordinator's, cost no more).
    A socket named stays named while it lives: a handle's thread keeps its one
    connection until it closes, and a reused inode is another socket's.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.named: dict[int, int] = {}  # socket inode -> node id of the thread polling it
        self.looks: dict[int, int] = {}  # socket inode -> the scans that could not name it
        self.looked: set[int] = set()  # those of them looked for at ``LOOKS`` scans or more
        self.scanned_at = float("-inf")  # monotonic
        self.librdkafka = True  # until a scan finds no broker thread at all
        self.readable = bool(POLL_CALLS)  # False once the process refused a read

    def nodes(self, sockets: Sequence[TcpSocket]) -> dict[int, int]:
        """inode -> node id of each of ``sockets`` a node's broker thread polls: the same
        mapping poll after poll while the sockets it names live and no scan names another
        (never changed in place: a poll's claims are carried while it stays the same)."""
        alive = {s.inode for s in sockets if s.fd is not None and s.inode}
        if not self.named.keys() <= alive:
            self.named = {inode: node for inode, node in self.named.items() if inode in alive}
        unnamed = alive - self.named.keys()
        if not self.looks.keys() <= unnamed:
            self.looks = {inode: n for inode, n in self.looks.items() if inode in unnamed}
            self.looked &= unnamed
        if unnamed and self.readable and self._due(unnamed):
            self.scanned_at = time.monotonic()
            by_fd = {s.fd: s.inode for s in sockets if s.fd is not None and s.inode}
            found = dict(islice(((inode, node) for inode, node in self._scan(by_fd).items()
                                 if inode in unnamed), MAX_NAMED - len(self.named)))
            if found:
                self.named = {**self.named, **found}
            looks = self.looks
            for inode in unnamed - found.keys():
                looks[inode] = looks.get(inode, 0) + 1
                if looks[inode] == LOOKS:
                    self.looked.add(inode)
        return self.named

    def _due(self, unnamed: Set[int]) -> bool:
        """Whether to look again: in a librdkafka process, a socket looked for at fewer than
        ``LOOKS`` scans or the last look ``RESCAN_S`` old; in another, ``OTHER_RESCAN_S``
        after the last (it may load librdkafka later; its threads are not listed at each
        new socket)."""
        since = time.monotonic() - self.scanned_at
        if not self.librdkafka:
            return since >= OTHER_RESCAN_S
        return since >= RESCAN_S or not unnamed <= self.looked  # (a set test: no loop a poll)

    def _scan(self, by_fd: dict[int, int]) -> dict[int, int]:
        """inode -> node id of the sockets the process's node threads block polling now."""
        found: dict[int, int] = {}
        task = f"/proc/{self.pid}/task"
        try:
            tids = [name for name in os.listdir(task) if name.isdigit()][:MAX_THREADS]
        except OSError:
            return found
        threads = {tid: node for tid in tids
                   if (node := _thread_node(f"{task}/{tid}/comm")) is not None}
        self.librdkafka = bool(threads)
        if not any(node >= 0 for node in threads.values()):
            return found
        try:
            mem = os.open(f"/proc/{self.pid}/mem", os.O_RDONLY)
        except OSError:
            self.readable = False
            return found
        try:
            for tid, node in threads.items():
                if node < 0:
                    continue
                fds = _polled_fds(f"{task}/{tid}/syscall", mem)
                if fds is None:  # no right to trace the process
                    self.readable = False
                    break
                held = {fd: by_fd[fd] for fd in fds if fd in by_fd}
                if len(set(held.values())) == 1 and self._still(held):  # its one connection
                    found[next(iter(held.values()))] = node
        finally:
            os.close(mem)
        return found


    def _still(self, held: dict[int, int]) -> bool:
        """Whether each fd of ``held`` (fd -> inode, as the poll read the sockets) still
        holds that socket, read after the thread was seen polling it: an inode is never
        reused, so the fd held it all along. A client made per message reconnects on the fd
        its last socket freed within a millisecond (librdkafka's broker 1 handle on the fd
        its bootstrap socket had): the thread polls the new socket, not the one read."""
        for fd, inode in held.items():
            try:
                if os.readlink(f"/proc/{self.pid}/fd/{fd}") != f"socket:[{inode}]":
                    return False
            except OSError:
                return False
        return True


def _thread_node(comm_path: str) -> int | None:
    """The node id in a thread's name ``rdk:broker<id>``, or None for any other thread."""
    try:
        with open(comm_path, "rb") as comm:
            name = comm.read(32)
    except OSError:
        return None
    match = THREAD_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def _polled_fds(syscall_path: str, mem: int) -> list[int] | None:
    """The fds a thread blocks polling ([] when it is not in a poll call); None where the
    thread's call may not be read (no right to trace the process, or the thread is gone)."""
    try:
        with open(syscall_path, "rb") as syscall:
            fields = syscall.read(256).split()
    except PermissionError:
        return None
    except OSError:
        return []
    try:
        if len(fields) < 3 or int(fields[0]) not in POLL_CALLS:
            return []
        address, count = int(fields[1], 16), int(fields[2], 16)
    except ValueError:
        return []
    if not 0 < count <= MAX_POLLFDS:
        return []
    try:
        raw = os.pread(mem, 8 * count, address)
    except (OSError, OverflowError):
        return []
    return [fd for (fd,) in struct.iter_unpack("i4x", raw[:len(raw) - len(raw) % 8])
            if fd >= 0]
