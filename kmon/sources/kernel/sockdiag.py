"""Read a process's TCP sockets, with tcp_info, over netlink sock_diag (Linux).

A poll costs a look at the process's fd table (``FdTable``: listed again only when
its fd count changes, its links read again only when the fd numbers change, a socket
vanished, the process connected a socket, or every 10 s; 60 s where the kernel's events
say who connects) plus one netlink round trip: exact lookups, one per socket
the process holds, or from 64 sockets on one dump filtered in the kernel by their
remote ports (unless the kernel holds over 8 TCP sockets per socket looked for and
family dumped: each dump walks them all). Socket ids are learned from a dump of the
host's TCP sockets (no tcp_info, small messages) only when the process shows a TCP
inode we have not seen yet; other sockets are told apart by their protocol xattr.

A caller polling many processes in turn says so first (``read_ahead``): their known
sockets then come from one filtered dump together, where the exact lookups of 50
processes of 100 sockets each cost 5,000 reads, and their new sockets are learned from
one dump of the host's sockets together, where each process's own would walk them all.
"""

from __future__ import annotations

import contextlib
import errno
import operator
import socket
import time
from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from kmon.sources.kernel.diag_messages import (
    DIAG_MSG_LEN,
    DUMP_STATES,
    I32,
    INET_DIAG_INFO,
    INODE_AT,
    LISTEN_STATE,
    NETLINK_SOCK_DIAG,
    NLM_F_DUMP,
    NLM_F_REQUEST,
    NLMSG_DONE,
    NLMSG_ERROR,
    NLMSG_HDR_LEN,
    NLMSGHDR,
    SOCK_DIAG_BY_FAMILY,
    U32,
    Known,
    MessageReader,
    diag_request,
    known_from_msg,
    port_filter,
    raise_error,
    remote_port_filter,
    socket_ends,
)
from kmon.sources.kernel.proc_fds import REREAD_S, FdTable, socket_protocol
from kmon.sources.kernel.sockets import Endpoint, TcpSocket
from kmon.sources.kernel.sockstat import tcp_sockets

SOL_NETLINK = 270
NETLINK_CAP_ACK = 10
SO_RCVBUFFORCE = 33
_BATCH = 64  # exact lookups per sendmsg: their replies always fit the receive buffer
# From this many sockets on, one dump (tcp_info included) filtered in the kernel by their
# remote ports replaces the exact lookups: the kernel packs many replies per read, where
# every exact lookup is a read of its own. Past _FILTER_PORTS distinct remote ports (a
# server's accepted sockets) the filter would cost the kernel more than it saves, and past
# _DUMP_WALK_MAX of the kernel's TCP sockets per socket looked for (each family's dump walks
# them all) so would the walk. 2,000 sockets read a second apart, dump / exact lookups:
# 0.65-1.0x among 4,000 TCP sockets, 0.94x among 14,000, 1.48x among 24,000.
_DUMP_FROM = 64
_FILTER_PORTS = 64
_DUMP_WALK_MAX = 8
# How long what ``read_ahead`` read answers ``sockets_of``: one round of polls, however long a
# busy host makes it (each answer is taken once; the next round reads ahead again), not a
# later one (a JVM's sampler, whose first poll waits for JMX, is not read ahead)
_AHEAD_FRESH_S = 5.0
_RETRY_FIRST_S = 0.5
_RETRY_MAX_S = 8.0
# Every link of a process's fd table is read again this often while the kernel's events say
# which processes connect (``connects``): a socket put in a closed file's fd (the count and
# the numbers the same) is then read at once where the process connected it, and this
# catches the rest (a socket passed from another process); else every REREAD_S.
TOLD_REREAD_S = 60.0
_TCP_PROTOCOLS = ("TCP", "TCPv6", None)  # socket_protocol(): None = cannot tell
_BY_FD = operator.attrgetter("fd")  # every socket sockets_of returns has its fd
_NO_FAMILY = (errno.EAFNOSUPPORT, errno.ENOENT, errno.EINVAL)  # no IPv6 in this kernel
_HOST_MEMOS = 8  # host dumps (by request) whose sockets the next dump alike may take over


class SockDiagUnavailable(OSError):
    """The kernel refused netlink sock_diag (sandbox, seccomp, no inet_diag)."""


class HostSocket(NamedTuple):
    """A TCP socket of the host, as a discovery dump sees it (no owner, no tcp_info)."""

    inode: int
    local: Endpoint
    remote: Endpoint
    listening: bool


@dataclass(slots=True)
class _Retry:
    """A TCP socket missing from the kernel's tables (not connected yet, or reset)."""

    due: float
    delay: float


@dataclass(slots=True)
class _ProcessCache:
    """What one process's socket inodes are, as far as we know."""

    fds: FdTable
    known: dict[int, Known] = field(default_factory=dict)
    ignored: set[int] = field(default_factory=set)  # non-TCP and listening sockets
    # its listening sockets' local ports, by inode: a connection accepted on one is another
    # program's connection to this one (a JMX client, an HTTP request), not a Kafka client's
    listening: dict[int, int] = field(default_factory=dict)
    retry: dict[int, _Retry] = field(default_factory=dict)
    # the known sockets' remote ports and families, with how many have each: a poll reads
    # them without a walk over every known socket
    ports: Counter[int] = field(default_factory=Counter)
    families: Counter[int] = field(default_factory=Counter)
    # the fd table's inodes as last learned from (FdTable gives the same dict while they stay)
    learned: dict[int, int] | None = None
    read_at: float = float("-inf")  # when its fd table was last looked at (monotonic)

    def remember(self, inode: int, known: Known) -> None:
        """Know ``inode``'s socket id from now on."""
        self.known[inode] = known
        self.ports[known.remote.port] += 1
        self.families[known.family] += 1

    def vanished(self, inode: int, now: float) -> None:
        """A known socket the kernel no longer has under its id (closed, or its id reused):
        forget it, look for it again at once, and list the fds again (its fd number may hold
        a new socket now)."""
        self.fds.changed()
        self.forget(inode)
        _schedule_retry(self, inode, now, immediately=True)

    def forget(self, inode: int) -> None:
        """Drop a known socket (closed, or its id reused)."""
        known = self.known.pop(inode)
        for counter, key in ((self.ports, known.remote.port), (self.families, known.family)):
            counter[key] -= 1
            if not counter[key]:
                del counter[key]


class SockDiagReader:
    """SocketReader over netlink sock_diag; one netlink socket, not thread-safe."""

    name = "sock_diag"

    def __init__(self) -> None:
        """Open and probe the netlink socket; raise SockDiagUnavailable if refused."""
        self._buf = bytearray(65536)
        self._view = memoryview(self._buf)
        self._caches: dict[int, _ProcessCache] = {}
        self._sock = self._open()
        self._dirty = False
        self.dumps = 0  # full dumps done so far: one per poll that met unknown sockets
        # what read_ahead found per process (its sockets, or what reading them raised)
        self._ahead: dict[int, list[TcpSocket] | Exception] = {}
        self._ahead_at = float("-inf")
        # each host dump's sockets by their message's fixed part (every byte they are read
        # from): the next dump alike parses only the messages that changed
        self._host_memos: dict[tuple[int, bytes], dict[bytes, HostSocket]] = {}
        self._reread_s = REREAD_S  # each fd table's links read again this often at least
        self._untold_until = float("-inf")  # ... REREAD_S until then (``connects``)

    def close(self) -> None:
        """Close the netlink socket."""
        self._sock.close()

    def __enter__(self) -> SockDiagReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def sockets_of(self, pid: int) -> list[TcpSocket]:
        """The TCP sockets (all states but LISTEN) held by `pid`, ordered by fd, but those
        accepted on a port it listens on (another program's connections to it).

        Raises psutil.NoSuchProcess / psutil.AccessDenied for the process, and
        OSError if netlink fails mid-way (the reader stays usable). Answered from the
        last ``read_ahead`` when that named ``pid`` under _AHEAD_FRESH_S ago.
        """
        ahead = self._ahead.pop(pid, None)
        if ahead is not None and time.monotonic() - self._ahead_at <= _AHEAD_FRESH_S:
            if isinstance(ahead, Exception):
                raise ahead
            return ahead
        cache, inodes = self._known_inodes(pid)
        found = self._lookup(inodes, cache)
        self._dirty = False
        found.sort(key=_BY_FD)
        return found

    def read_ahead(self, pids: Collection[int]) -> None:
        """Read the TCP sockets of every process of ``pids`` now, for the ``sockets_of``
        calls of the next _AHEAD_FRESH_S: the known sockets of those whose remote ports a
        filter can name, from one dump per family together where that pays (as for one
        process: ``_dump_pays``), the others' as ``sockets_of`` reads them."""
        ahead: dict[int, list[TcpSocket] | Exception] = {}
        self._ahead = ahead
        ready: dict[int, tuple[_ProcessCache, dict[int, int]]] = {}
        for pid in pids:
            try:
                ready[pid] = self._known_inodes(pid, learn=False)
                self._dirty = False
            except Exception as err:  # told by sockets_of(pid), as it would raise it
                ahead[pid] = err
        try:
            self._learn_together(ready)
        except OSError:  # each process's own read (sockets_of) tells it
            self._ahead = {}
            return
        together = _dumped_together(ready)
        if together:
            try:
                ahead.update(self._dump_together(together))
                self._dirty = False
            except OSError as err:
                ahead.update(dict.fromkeys(together, err))
        for pid, (cache, inodes) in ready.items():
            if pid not in ahead:
                try:
                    ahead[pid] = sorted(self._lookup(inodes, cache), key=_BY_FD)
                    self._dirty = False
                except OSError as err:
                    ahead[pid] = err
        self._ahead_at = time.monotonic()

    def connects(self, pids: Collection[int], complete: bool) -> None:
        """The processes the kernel saw connect since the last call (``complete``: no record
        of a connect was lost): their fd tables' links are read again at their next read;
        the others' every TOLD_REREAD_S once the kernel has said for TOLD_REREAD_S, else
        every REREAD_S (a lost connect's table is read within REREAD_S of its loss)."""
        now = time.monotonic()
        if not complete:
            self._untold_until = now + TOLD_REREAD_S
        reread = REREAD_S if now < self._untold_until else TOLD_REREAD_S
        if reread != self._reread_s:
            self._reread_s = reread
            for cache in self._caches.values():
                cache.fds.reread_s = reread
        for pid in pids & self._caches.keys():
            self._caches[pid].fds.changed()

    def _known_inodes(self, pid: int, learn: bool = True
                      ) -> tuple[_ProcessCache, dict[int, int]]:
        """``pid``'s cache and socket inodes (inode -> fd), new TCP sockets learned unless
        not ``learn``; leaves the netlink socket dirty (the caller's lookups follow)."""
        cache = self._caches.get(pid)
        now = time.monotonic()
        if cache is None:
            cache = _ProcessCache(FdTable(pid, self._reread_s))
        elif now - cache.read_at >= REREAD_S:  # not read meanwhile (not watched): its connects
            cache.fds.changed()  # were never told
        cache.read_at = now
        try:
            inodes = cache.fds.socket_inodes()
        except Exception:
            self._caches.pop(pid, None)
            raise
        self._caches[pid] = cache
        if self._dirty:
            self._reopen()  # the last poll failed mid-way: replies may be left unread
        self._dirty = True
        if learn:
            self._learn(pid, inodes, cache)
        return cache, inodes

    def _dump_together(self, ready: dict[int, tuple[_ProcessCache, dict[int, int]]]
                       ) -> dict[int, list[TcpSocket]]:
        """The known sockets of every process of ``ready``, by fd, from one filtered dump per
        family of their remote ports; a socket the dump lacks is demoted as vanished."""
        known: dict[int, Known] = {}
        fds: dict[int, int] = {}
        ports: set[int] = set()
        families: set[int] = set()
        for cache, inodes in ready.values():
            known.update(cache.known)
            fds.update(inodes)
            ports.update(cache.ports)
            families.update(cache.families)
        dumped = {sock.inode: sock for sock in self._dump_known(known, fds, ports, families)}
        now = time.monotonic()
        found: dict[int, list[TcpSocket]] = {}
        for pid, (cache, inodes) in ready.items():
            mine: list[TcpSocket] = []
            for inode in list(cache.known):
                sock = dumped.get(inode)
                if sock is None:
                    cache.vanished(inode, now)
                elif sock.fd == inodes[inode]:
                    mine.append(sock)
                else:  # a socket two processes share (inherited): under this one's fd
                    mine.append(sock._replace(fd=inodes[inode]))
            mine.sort(key=_BY_FD)
            found[pid] = mine
        return found

    def host_sockets(self, ports: Collection[int]) -> list[HostSocket]:
        """The TCP sockets of the host (this network namespace) connected to one of
        ``ports`` (their remote port), and those listening on one: one dump per family of
        each, filtered in the kernel, so the cost follows the matches rather than the host's
        socket count (a server's own ends of its connections, as many again, left out)."""
        wanted = frozenset(ports)
        if not wanted:  # an empty filter would pass every socket
            return []
        return self.connected_to(wanted) + self._host_dump(1 << LISTEN_STATE,
                                                           port_filter(local=wanted))

    def connected_to(self, ports: Collection[int]) -> list[HostSocket]:
        """The TCP sockets of the host (this network namespace) connected to one of ``ports``
        (their remote port), listeners left out: ``host_sockets``' first half."""
        wanted = frozenset(ports)
        if not wanted:
            return []
        return self._host_dump(DUMP_STATES & ~(1 << LISTEN_STATE), remote_port_filter(wanted))

    def listeners(self) -> list[HostSocket]:
        """Every listening TCP socket of the host (this network namespace): a host has few."""
        return self._host_dump(1 << LISTEN_STATE)

    def _host_dump(self, states: int, bytecode: bytes = b"") -> list[HostSocket]:
        """The host's sockets in ``states`` that ``bytecode`` passes, one dump per family; a
        message alike to one of the last dump of the same request is not parsed again."""
        found: list[HostSocket] = []
        memos = self._host_memos
        memo = memos.pop((states, bytecode), {})
        fresh: dict[bytes, HostSocket] = {}
        if self._dirty:
            self._reopen()
        self._dirty = True
        for seq, family in enumerate((socket.AF_INET, socket.AF_INET6), start=1):
            self._send(diag_request(seq, NLM_F_REQUEST | NLM_F_DUMP, family, 0, states, None,
                                bytecode))
            try:
                self._read_host_dump(found, memo, fresh)
            except OSError as err:  # a kernel without IPv6 refuses the second dump
                if family == socket.AF_INET or err.errno not in _NO_FAMILY:
                    raise
        self._dirty = False
        memos[(states, bytecode)] = fresh
        if len(memos) > _HOST_MEMOS:
            del memos[next(iter(memos))]
        return found

    def _read_host_dump(self, found: list[HostSocket], memo: dict[bytes, HostSocket],
                        fresh: dict[bytes, HostSocket]) -> None:
        """Read one host dump into ``found``, each socket from ``memo`` where its message's
        fixed part is there, and into ``fresh`` by it."""
        buf, view, unpack_u32 = self._buf, self._view, U32.unpack_from
        for off, length in self._dump_messages():
            at = off + NLMSG_HDR_LEN
            key = bytes(buf[at : at + DIAG_MSG_LEN])
            sock = memo.get(key)
            if sock is None:
                inode = unpack_u32(buf, at + INODE_AT)[0]
                if not inode:
                    continue
                local, remote = socket_ends(view[at : off + length])
                sock = HostSocket(inode, local, remote, buf[at + 1] == LISTEN_STATE)
            fresh[key] = sock
            found.append(sock)

    # -- cache upkeep -------------------------------------------------------

    def _learn(self, pid: int, inodes: dict[int, int], cache: _ProcessCache) -> None:
        """Forget closed sockets; dump once if the process shows sockets we don't know."""
        wanted = self._wanted(pid, inodes, cache)
        if wanted:
            self._take(cache, inodes, wanted, *self._dump(wanted))

    def _learn_together(self, ready: dict[int, tuple[_ProcessCache, dict[int, int]]]) -> None:
        """``_learn`` for every process of ``ready`` (pid -> its cache and socket inodes), from
        one dump for them all: a host of many clients reconnecting, or holding sockets the
        kernel's tables lack (their retries), costs a dump a poll, not one a process."""
        wanted = {pid: found for pid, (cache, inodes) in ready.items()
                  if (found := self._wanted(pid, inodes, cache))}
        if not wanted:
            return
        self._dirty = True
        learned, listening = self._dump({inode: proto for found in wanted.values()
                                         for inode, proto in found.items()})
        self._dirty = False
        for pid, found in wanted.items():
            cache, inodes = ready[pid]
            self._take(cache, inodes, found, learned, listening)

    def _wanted(self, pid: int, inodes: dict[int, int], cache: _ProcessCache
                ) -> dict[int, str | None]:
        """Forget the process's closed sockets; its sockets to look for in a dump (inode ->
        "TCP", "TCPv6" or None: cannot tell), none when its fd table is as last learned."""
        if inodes is cache.learned and not cache.retry:
            return {}  # the fd table as last time (a vanished socket makes FdTable read anew)
        for stale in cache.known.keys() - inodes.keys():
            cache.forget(stale)
        cache.ignored.intersection_update(inodes.keys())
        for closed in cache.listening.keys() - inodes.keys():
            del cache.listening[closed]
        for stale in cache.retry.keys() - inodes.keys():
            del cache.retry[stale]

        now = time.monotonic()
        wanted: dict[int, str | None] = {}  # inode -> "TCP", "TCPv6" or None (cannot tell)
        for inode, fd in inodes.items():
            if inode in cache.known or inode in cache.ignored:
                continue
            retry = cache.retry.get(inode)
            if retry is not None and retry.due > now:
                continue
            proto = socket_protocol(pid, fd)
            if proto in _TCP_PROTOCOLS:
                wanted[inode] = proto
            else:
                cache.retry.pop(inode, None)
                cache.ignored.add(inode)
        if not wanted:
            cache.learned = inodes
        return wanted

    @staticmethod
    def _take(cache: _ProcessCache, inodes: dict[int, int], wanted: dict[int, str | None],
              learned: dict[int, Known], listening: dict[int, int]) -> None:
        """Know the ``wanted`` sockets a dump found (``learned``, ``listening``); look for the
        others again later. A connection accepted on a port the process listens on is
        ignored as its listeners are."""
        now = time.monotonic()
        cache.listening.update((inode, port) for inode, port in listening.items()
                               if inode in wanted)
        served = set(cache.listening.values())
        for inode, proto in wanted.items():
            known = learned.get(inode)
            if known is not None and known.local.port in served:
                cache.retry.pop(inode, None)
                cache.ignored.add(inode)
            elif known is not None:
                cache.retry.pop(inode, None)
                cache.remember(inode, known)
            elif inode in listening or proto is None:
                cache.retry.pop(inode, None)
                cache.ignored.add(inode)
            else:
                _schedule_retry(cache, inode, now)
        cache.learned = inodes

    def _dump(self, wanted: dict[int, str | None]) -> tuple[dict[int, Known], dict[int, int]]:
        """Dump the host's TCP sockets (no extensions) of the families `wanted` needs.

        Returns (the wanted connected sockets by inode, the wanted listening ones' local
        ports by inode).
        """
        self.dumps += 1
        learned: dict[int, Known] = {}
        listening: dict[int, int] = {}
        families = [
            family
            for family, other in ((socket.AF_INET, "TCPv6"), (socket.AF_INET6, "TCP"))
            if any(proto != other for proto in wanted.values())
        ]
        for seq, family in enumerate(families, start=1):
            self._send(diag_request(seq, NLM_F_REQUEST | NLM_F_DUMP, family, 0, DUMP_STATES, None))
            if not self._read_dump(wanted.keys(), learned, listening):
                self._reopen()  # all found: drop the rest of the dump with the socket
                break
        return learned, listening

    def _read_dump(
        self, wanted: Collection[int], learned: dict[int, Known], listening: dict[int, int]
    ) -> bool:
        """Read one dump to its end (True), or until every wanted inode is found (False)."""
        buf, view, unpack_u32 = self._buf, self._view, U32.unpack_from
        for off, length in self._dump_messages():
            inode = unpack_u32(buf, off + NLMSG_HDR_LEN + INODE_AT)[0]
            if inode in wanted:
                msg = view[off + NLMSG_HDR_LEN : off + length]
                if msg[1] == LISTEN_STATE:
                    listening[inode] = known_from_msg(msg, inode).local.port
                else:
                    learned[inode] = known_from_msg(msg, inode)
                if len(learned) + len(listening) == len(wanted):
                    return False
        return True

    # -- exact lookups ------------------------------------------------------

    def _lookup(self, inodes: dict[int, int], cache: _ProcessCache) -> list[TcpSocket]:
        """Every known socket with its tcp_info, looked up by its id or found in a filtered
        dump; demote vanished ones."""
        if _dump_pays(len(cache.known), len(cache.ports), len(cache.families)):
            return self._filtered_dump(inodes, cache)
        found: list[TcpSocket] = []
        requests = list(cache.known.items())
        replies = MessageReader()  # every batch's replies are laid out alike
        for start in range(0, len(requests), _BATCH):
            chunk = dict(requests[start : start + _BATCH])
            self._send(b"".join(k.request for k in chunk.values()))
            for inode in self._read_replies(chunk, inodes, found, replies):
                cache.vanished(inode, time.monotonic())
        return found

    def _filtered_dump(self, inodes: dict[int, int], cache: _ProcessCache) -> list[TcpSocket]:
        """The known sockets from one dump per family of the host's sockets to their remote
        ports."""
        known = cache.known
        found = self._dump_known(known, inodes, cache.ports, cache.families)
        if len(found) < len(known):
            seen = {sock.inode for sock in found}
            now = time.monotonic()
            for inode in [inode for inode in known if inode not in seen]:
                cache.vanished(inode, now)
        return found

    def _dump_known(self, known: dict[int, Known], inodes: dict[int, int],
                    ports: Collection[int], families: Collection[int]) -> list[TcpSocket]:
        """The sockets of ``known`` that one dump per family of ``families``, of the host's
        sockets to the remote ``ports``, holds (each under its fd in ``inodes``)."""
        found: list[TcpSocket] = []
        ext = 1 << (INET_DIAG_INFO - 1)
        bytecode = remote_port_filter(frozenset(ports))
        for seq, family in enumerate(sorted(families), start=1):
            self._send(diag_request(seq, NLM_F_REQUEST | NLM_F_DUMP, family, ext, DUMP_STATES,
                                None, bytecode))
            self._read_info_dump(known, inodes, found)
        return found

    def _read_info_dump(self, known: dict[int, Known], inodes: dict[int, int],
                        found: list[TcpSocket]) -> None:
        """Read one dump with tcp_info to its end, keeping the ``known`` sockets."""
        read, view = MessageReader().read, self._view
        for off, length in self._dump_messages():
            sock = read(view, off + NLMSG_HDR_LEN, length - NLMSG_HDR_LEN, known, inodes)
            if sock is not None:
                found.append(sock)

    def _dump_messages(self) -> Iterator[tuple[int, int]]:
        """(offset, length) in the receive buffer of each socket message of one dump, to its
        end; an error reply raises. Each message is gone once the next is asked for."""
        buf, unpack_hdr = self._buf, NLMSGHDR.unpack_from
        while True:
            size = self._sock.recv_into(buf)
            off = 0
            while off + NLMSG_HDR_LEN <= size:
                length, kind = unpack_hdr(buf, off)[:2]
                if kind == SOCK_DIAG_BY_FAMILY:
                    yield off, length
                elif kind == NLMSG_DONE:
                    return
                elif kind == NLMSG_ERROR:
                    raise_error(buf, off)
                off += (length + 3) & ~3

    def _read_replies(
        self, chunk: dict[int, Known], inodes: dict[int, int], found: list[TcpSocket],
        replies: MessageReader,
    ) -> list[int]:
        """Collect one reply per request of `chunk`, read with ``replies``; return the inodes
        that are gone."""
        buf, view = self._buf, self._view
        unpack_hdr, unpack_u32 = NLMSGHDR.unpack_from, U32.unpack_from
        recv_into, dontwait = self._sock.recv_into, socket.MSG_DONTWAIT
        read = replies.read
        pending = set(chunk)
        gone: list[int] = []
        while pending:
            try:
                # The kernel answers within sendmsg, so everything is queued already.
                size = recv_into(buf, 0, dontwait)
            except BlockingIOError:
                raise OSError(errno.EIO, "sock_diag: exact lookup replies missing") from None
            off = 0
            while off + NLMSG_HDR_LEN <= size:
                length, kind, _flags, seq = unpack_hdr(buf, off)[:4]
                if kind == SOCK_DIAG_BY_FAMILY and seq in pending:
                    pending.discard(seq)
                    sock = read(view, off + NLMSG_HDR_LEN, length - NLMSG_HDR_LEN, chunk, inodes)
                    if sock is not None and sock.inode == seq:
                        found.append(sock)
                    else:
                        gone.append(seq)  # the id now names another socket
                elif kind == NLMSG_ERROR:
                    err = -I32.unpack_from(buf, off + NLMSG_HDR_LEN)[0]
                    seq = unpack_u32(buf, off + NLMSG_HDR_LEN + 4 + 8)[0]  # the request's header
                    if err not in (errno.ENOENT, errno.ESTALE) or seq not in pending:
                        raise_error(buf, off)
                    pending.discard(seq)
                    gone.append(seq)
                off += (length + 3) & ~3
        return gone

    # -- netlink plumbing ---------------------------------------------------

    def _open(self) -> socket.socket:
        try:
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG)
        except OSError as exc:
            raise SockDiagUnavailable(exc.errno, f"netlink sock_diag: {exc.strerror}") from exc
        try:
            _tune(sock)
            self._sock = sock
            # An empty dump (no states asked for) proves the kernel answers us.
            self._send(diag_request(1, NLM_F_REQUEST | NLM_F_DUMP, socket.AF_INET, 0, 0, None))
            self._read_dump((), {}, {})
        except OSError as exc:
            sock.close()
            raise SockDiagUnavailable(exc.errno, f"netlink sock_diag: {exc.strerror}") from exc
        return sock

    def _reopen(self) -> None:
        self._sock.close()
        self._sock = self._open()

    def _send(self, data: bytes) -> None:
        self._sock.sendto(data, (0, 0))


def _dump_pays(wanted: int, ports: int, families: int) -> bool:
    """Whether filtered dumps (one per family) of ``wanted`` known sockets to ``ports``
    remote ports cost less than an exact lookup per socket; with the kernel's TCP sockets
    uncounted (0), they are taken to."""
    return (wanted >= _DUMP_FROM and ports <= _FILTER_PORTS
            and tcp_sockets() * families <= _DUMP_WALK_MAX * wanted)


def _dumped_together(ready: dict[int, tuple[_ProcessCache, dict[int, int]]]
                     ) -> dict[int, tuple[_ProcessCache, dict[int, int]]]:
    """The processes of ``ready`` whose sockets one filtered dump reads best together:
    those with known sockets, while their remote ports fit one filter (most sockets
    first); none if the dump does not pay for them."""
    together: dict[int, tuple[_ProcessCache, dict[int, int]]] = {}
    ports: set[int] = set()
    families: set[int] = set()
    wanted = 0
    for pid, (cache, inodes) in sorted(ready.items(), key=lambda item: -len(item[1][0].known)):
        if not cache.known or len(ports | cache.ports.keys()) > _FILTER_PORTS:
            continue
        together[pid] = (cache, inodes)
        ports.update(cache.ports)
        families.update(cache.families)
        wanted += len(cache.known)
    return together if _dump_pays(wanted, len(ports), len(families)) else {}


def _tune(sock: socket.socket) -> None:
    """Large receive buffer, short error acks; best effort."""
    for option in (SO_RCVBUFFORCE, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, 1 << 20)
            break
        except OSError:
            continue
    with contextlib.suppress(OSError):
        sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)


def _schedule_retry(
    cache: _ProcessCache, inode: int, now: float, immediately: bool = False
) -> None:
    """Look for a TCP socket missing from the dump again later, backing off."""
    previous = cache.retry.get(inode)
    delay = _RETRY_FIRST_S if previous is None else min(previous.delay * 2, _RETRY_MAX_S)
    cache.retry[inode] = _Retry(due=now if immediately else now + delay, delay=delay)


