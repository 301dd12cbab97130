"""The first bytes of what one process writes through its TLS library, tied to the socket each
went to: a Kafka request's header (size, api key, version, correlation id) over TLS.

Uprobes (kmon.sources.tls.uprobes) read 16 bytes of the plaintext and its length, never more:
on OpenSSL's ``SSL_write``/``SSL_write_ex`` in the files the process maps (``libssl.so``; a
librdkafka with OpenSSL linked in; the ``node`` executable, OpenSSL built in), and on Go's
``crypto/tls.(*Conn).Write`` in a Go executable (its register ABI: the slice in rbx and rcx;
an entry probe only, never a return probe, which Go's moving stacks break). Of the 16 bytes
only the Kafka request header they open is kept (a raw SASL token is written this way too:
kafka-python's PLAIN login puts the password's first bytes within the 16). The thread's
next ``write``/``sendto``/``sendmsg`` (the syscall tracepoints) names the socket: OpenSSL's
socket BIO writes the record on the thread that called it, and librdkafka runs one thread per
broker connection; Node's TLS writes its memory BIO's record to the socket right after
``SSL_write``, on its one thread. Go's ``Conn.Write`` names its socket itself: the probe
also reads the connection's interface table and, through it, its file descriptor
(``Conn.conn`` -> ``*net.TCPConn`` -> ``netFD.pfd.Sysfd``), and the descriptor is taken only
where the table is the program's own ``*net.TCPConn`` one (its address from the binary's
``.symtab``): a connection of any other type (a wrapper, a proxy) falls back on the thread's
next send, as the goroutine seals the record and writes it on the thread it runs on.

Every event is opened per thread of the process and CPU (perf_event_open with its tid and
the CPU), inherited by the threads each creates from then on (a librdkafka broker thread
lives for one connection when its login fails: made after the source opened, it is followed
from its first write), never by a process it forks: the kernel sets the breakpoints in this
process only and records nothing of another (and a record of another pid would be dropped).
One ring per CPU, written from that CPU only, every record naming the event that made it
(an inherited one: its listed thread's), read like the TCP tracepoints'
(``kernel_events.read_ring``) and put in time order; a full ring drops, and the kernel counts
what it dropped. A ring per thread, which its new threads write from every CPU at once,
stalls: the kernel's ring is safe against interrupts on one CPU, not against two writers.

A descriptor is the socket's only while it is open: the ``close`` syscalls are read too,
and so are the state changes of sockets (``sock:inet_sock_set_state``) in the same threads,
and a write is tied to the socket its descriptor held then, in time order: after the
descriptor's last close since the last read, the one it holds now; before its first, the
socket it held at the last read; else the socket its next close closed, as that close tells
it (a failing login's socket lives ~0.3 s, between two reads): a socket's own close, as its
last descriptor's ``close`` returns, is the closing thread's next state change, made before
it sends its FIN or reset. That socket is named by its 4-tuple (``TlsWrite.pair``) and a
number of its own for an inode. A socket reset before it was closed changes no state at its
close: where the reset came while a thread wrote to it (``RESET``: on loopback, a peer that
closed answers the write with a reset in the same softirq, before the ``write`` returns), the
4-tuple it gave is its descriptor's, and that descriptor's next close tells it. A close that
tells nothing (a reset that came over a network, later, in a softirq) drops the writes. The
poll's sockets given, a write is tied only to a socket that poll or the last showed, or to a
4-tuple: one to a socket open but not shown waits for the next read, when a poll shows it or
its close tells it.

What is read is only what decides a role (``follow``): a thread whose TLS writes all went to
sockets whose role is known has its probes and sends disabled (its closes stay on) while every
undecided socket has a thread still read that wrote to it or was heard and is silent, and
every thread is read again as soon as one has not (a new connection: its writes are read from
the next poll, those before it missed, as a source opened at a poll misses them). Never in a
Go program, whose goroutines move between threads; there the sends are read only once a
``Conn.Write`` could not name its socket itself (not a ``*net.TCPConn``): one that names its
own needs no send. A write whose send may have come while its thread's sends were off is
dropped, never tied to a later send.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import re
import resource
import struct
import time
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import NamedTuple

from kmon.sources import kafka_protocol as kp
from kmon.sources.kernel.kernel_events import (
    PERF_COUNT_SW_DUMMY,
    PERF_EVENT_IOC_DISABLE,
    PERF_EVENT_IOC_ENABLE,
    PERF_TYPE_SOFTWARE,
    Field,
    KernelEventsUnavailable,
    Layout,
    TcpEvent,
    epoch_offset_ms,
    event_id,
    parse_format,
    perf_event_open,
    perf_ioctl,
    read_ring,
    tracefs,
    tracepoint_attr,
)
from kmon.sources.kernel.sockets import TcpSocket
from kmon.sources.tls.elf_symbols import NotElf, function_offsets, object_addresses
from kmon.sources.tls.uprobes import SAFE_PATH, registry

OPENSSL = "buf=+0(%si):x8[16] len=%dx:s32"  # (SSL *, const void *buf, int/size_t num, ...)
# (c *Conn, b []byte): c in rax, the slice's ptr and len in rbx and rcx; c.conn's interface
# table (+0) and data (+8): a *net.TCPConn, whose netFD's Sysfd is at +16 (after its fdMutex)
GO = ("buf=+0(%bx):x8[16] len=%cx:s32 tab=+0(%ax):u64 fd=+16(+0(+8(%ax))):s32")
GO_TCP_ITAB = "go:itab.*net.TCPConn,net.Conn"
FUNCTIONS = {"SSL_write": OPENSSL, "SSL_write_ex": OPENSSL, "crypto/tls.(*Conn).Write": GO}
HEADER_BYTES = 16
TRACEPOINTS = {"syscalls/sys_enter_write": "send", "syscalls/sys_enter_sendto": "send",
               "syscalls/sys_enter_sendmsg": "send", "syscalls/sys_enter_close": "close",
               "sock/inet_sock_set_state": "state"}
# a socket's own close, made by the ``close`` of its last descriptor as the syscall returns:
# ESTABLISHED to FIN_WAIT1 (the process closes first) and CLOSE_WAIT to LAST_ACK (after its
# peer), only ever in the closing thread; ESTABLISHED or CLOSE_WAIT to CLOSE where bytes came
# unread (a reset sent), as a reset received does in a softirq, which would have to run on the
# thread within those microseconds, after it closed something else
CLOSING = frozenset({(1, 4), (8, 9), (1, 7), (8, 7)})
CLOSE_TO_STATE_MS = 1.0  # a ``close`` and its socket's state change, at most this apart
# a socket reset while its thread wrote to it: CLOSE_WAIT to CLOSE in that ``write``, whose data
# the peer (closed on loopback) answers with a reset in the same softirq, before it returns
RESET = (8, 7)
SEND_TO_RESET_MS = 1.0  # a send and its socket's reset, at most this apart
RESET_TO_CLOSE_MS = 1000.0  # the reset socket's ``close``, at most this later
LIBRARIES = re.compile(r"/lib(ssl|rdkafka)[^/]*\.so[^/]*$")  # where OpenSSL's writes are
# (and the process's own executable: node's OpenSSL, a Go program's crypto/tls)
MAX_MAPS_BYTES = 8 << 20
MAX_THREADS = 256
RING_PAGES = 256  # all CPUs' rings together (~1 MiB): 8 to 64 pages each, a power of two
MAX_EVENT_FDS = 16_384  # the threads followed are fewer where they and the CPUs need more
# (and a quarter of kmon's descriptors at most, its soft limit raised to its hard one first)
MAX_RECORDS_PER_READ = 20_000
RESCAN_S = 5.0  # the maps looked at again, while no library is found
MAX_PENDING = 4096  # threads with an SSL write whose socket is not seen yet, at most
MAX_CARRIED = 4096  # writes waiting a read for their socket to be shown, at most
PERF_EVENT_IOC_SET_OUTPUT = 0x2405

Pair = tuple[tuple[str, int], tuple[str, int]]  # a socket's (local, remote) (ip, port)
# (ts, fd, data; None: a close, the listed thread it came from, the 4-tuple a close told)
_Record = tuple[float, int, bytes | None, int, Pair | None]


class TlsUnavailable(Exception):
    """The TLS source cannot run here (privilege, kernel, architecture)."""


class TlsWrite(NamedTuple):
    """The start of one TLS write and the socket it went to."""

    inode: int  # the socket's; one no read saw: a negative number of its own (``pair``)
    ts_ms: float  # UTC epoch ms
    data: bytes  # its first bytes (HEADER_BYTES at most)
    pair: Pair | None = None  # the socket's 4-tuple, where no read saw it (its close told)


@dataclass
class _Thread:
    fds: list[int] = field(default_factory=list)  # each event's, on each CPU
    switched: list[int] = field(default_factory=list)  # its OpenSSL probes' and sends' fds
    sends: list[int] = field(default_factory=list)
    wrote: set[int] = field(default_factory=set)  # the sockets its writes went to, resumed
    quiet: bool = False  # its probes and sends disabled (``follow``)
    resumed_ms: float = 0.0  # when its sends were last enabled (UTC epoch ms)


class TlsTap:
    """The TLS writes of one process; ``read()`` drains those since the last read."""

    def __init__(self, pid: int) -> None:
        if os.uname().machine != "x86_64":
            raise TlsUnavailable("TLS headers are read on x86-64 only")
        self.pid = pid
        self.probes = registry()
        self.events: dict[int, tuple[str, dict[str, Field]]] = {}  # tracepoint id -> kind
        self.tcp_itabs: dict[int, int] = {}  # a Go probe's id -> *net.TCPConn's table, mapped
        self.files: set[tuple[int, int]] = set()  # (device, inode) of the files probed
        self.refused: list[str] = []  # the paths of those that could not be
        self.threads: dict[int, _Thread] = {}  # those listed when the probes were made
        self.rings: dict[int, tuple[int, mmap.mmap]] = {}  # CPU -> its ring (fd, buffer)
        # each ring's data pages: 64 on a 2-CPU host (~3,600 records between two polls)
        share = max(1, RING_PAGES // (os.cpu_count() or 1))
        self.pages = min(64, max(8, 1 << share.bit_length() - 1))
        self.made_by: dict[int, tuple[int, int]] = {}  # perf event id -> (tid, tracepoint)
        # tid -> its last SSL write's start (and when: epoch ms), no socket yet
        self.pending: dict[int, tuple[bytes, float]] = {}
        self.go: set[int] = set()  # the Go probes' event ids
        self.sends_on = False  # the sends are read (a probe's write may not name its socket)
        self.held: dict[int, int] = {}  # fd -> the socket's inode, as of the last read
        self.settled: set[int] = set()  # sockets whose writes are not handed on (``follow``)
        self.lost = 0  # records the kernel dropped (a CPU's ring was full)
        self.states: Layout | None = None  # how a socket's state change is read
        self.shown: set[int] = set()  # the sockets (inodes) the last read was shown
        self.carried: list[_Record] = []  # writes to a socket no read was shown yet
        self.untold = 0  # the sockets named by their close (no inode: each a number)
        # fd -> the 4-tuple of the socket reset while a thread wrote to it (and when): its
        # ``close`` changes no state, the socket closed already, and tells it from this
        self.reset: dict[int, tuple[Pair, float]] = {}
        self.scanned = 0.0
        # closed before the probes go, from the first: a SIGTERM while its first scan opens
        # perf events on them would else leave them open, and the probes busy, behind kmon
        self.probes.before_removal.append(self.close)
        try:
            self._tracepoints()
            self._scan()
        except KernelEventsUnavailable as err:
            self.close()
            raise TlsUnavailable(str(err)) from err

    @property
    def probed(self) -> bool:
        return any(kind == "ssl" for kind, _ in self.events.values())

    def read(self, sockets: Sequence[TcpSocket] | None = None) -> list[TlsWrite]:
        """The TLS writes since the last read whose socket is known, oldest first.
        ``sockets``: the process's that its poll shows now (their fds), each write tied to
        one shown by this poll or the last, else to the 4-tuple its close told; a write to a
        socket open but shown by neither waits for the next read (by then a poll shows it, or
        its close is told). None: each fd is looked up, any socket taken."""
        now = time.monotonic()
        if not self.probed and now - self.scanned >= RESCAN_S:
            self._scan()
        out, carried = self.carried, {id(record) for record in self.carried}
        self.carried = []
        self._drain(out)
        if self.pending and not self.sends_on:  # a Go write that did not name its socket
            self._enable_sends()
        out.sort(key=lambda event: event[0])
        first_close: dict[int, float] = {}
        # each write's fd's next close: the socket it told (-its number, 4-tuple), None;
        # False: none since
        next_close: list[tuple[int, Pair] | None | bool] = [False] * len(out)
        closed: dict[int, tuple[int, Pair] | None] = {}  # fd -> its next close's socket
        owners: dict[Pair, int | None] | None = None  # the shown sockets' 4-tuples -> fd
        for at in range(len(out) - 1, -1, -1):
            ts_ms, fd, data, _, told_pair = out[at]
            if data is None:
                first_close[fd] = ts_ms
                closed[fd] = None
                if told_pair is None:
                    continue
                if owners is None:
                    owners = {((s.local.ip, s.local.port), (s.remote.ip, s.remote.port)): s.fd
                              for s in sockets or ()}
                # a 4-tuple the poll shows on another fd is that socket's (with none: closing,
                # held by no descriptor, as this one may be now)
                if owners.get(told_pair) in (None, fd):
                    self.untold += 1
                    closed[fd] = (-self.untold, told_pair)
            elif fd in closed:
                next_close[at] = closed[fd]
        held: dict[int, int | None] = {s.fd: s.inode for s in sockets or () if s.fd is not None}
        shown = None if sockets is None else self.shown | {s.inode for s in sockets}
        writes = []
        for at, record in enumerate(out):
            ts_ms, fd, data, owner, _ = record
            if data is None:
                continue
            inode: int | None = None
            pair, told = None, next_close[at]
            if told is False:  # no close since: the socket it holds now
                if fd not in held:
                    held[fd] = _socket_inode(self.pid, fd)
                inode = held[fd]
                if shown is not None and inode not in shown:
                    if id(record) not in carried and len(self.carried) < MAX_CARRIED:
                        self.carried.append(record)
                    continue
            elif (ts_ms < first_close[fd] and fd in self.held
                  and (shown is None or self.held[fd] in shown)):
                inode = self.held[fd]  # held at the last read, closed since
            elif isinstance(told, tuple):  # one no read saw, its close told
                inode, pair = told
            if inode is not None:
                self.threads[owner].wrote.add(inode)
                if inode not in self.settled:
                    writes.append(TlsWrite(inode, ts_ms, _header_only(data), pair))
        self.held = {fd: inode for fd, inode in held.items() if inode is not None}
        self.shown = set() if sockets is None else {s.inode for s in sockets}
        return writes

    def follow(self, undecided: AbstractSet[int], heard: AbstractSet[int] = frozenset(),
               spoke: AbstractSet[int] = frozenset(), settled: AbstractSet[int] = frozenset(),
               lingering: bool = False) -> None:
        """Read only the threads that write to the ``undecided`` sockets (their inodes). Every
        thread whose writes since it was last resumed all went to other sockets (decided: a
        connection's role is the same all its life) is disabled while each undecided socket
        has a thread read that wrote to it, or was ``heard`` (the wire saw it send before)
        and has not ``spoke`` since the last poll. Else every thread is read: a socket never
        heard (a new connection, one silent since kmon attached) has its first request read,
        whichever thread writes it; one heard that sends again, written by a disabled
        thread, has its next ones read. A write of a disabled thread whose send was not read
        yet is lost. Never in a Go program, whose goroutines move between threads. The
        writes read to the ``settled`` sockets (roles known, or given up on) are not handed
        on: a busy connection's writes cost no header read and no flow's update.

        ``lingering`` (a login may have failed): only a thread whose writes all went to
        settled sockets is disabled, and every other is read, a disabled one too (one that
        wrote to a socket closed since may log in again on a new one, as may one that wrote
        nothing read yet): a new socket has its first request read where a thread read
        writes it, and a busy connection's thread is read no more."""
        self.settled = set(settled)
        if self.go:
            return
        threads = self.threads.values()
        unread = undecided - set().union(*(t.wrote for t in threads if not t.quiet))
        if (not lingering and unread - heard) or unread & spoke:
            for thread in threads:
                if thread.quiet:
                    self._switch(thread, on=True)
            return
        for thread in threads:
            if lingering:
                done = bool(thread.wrote) and thread.wrote <= self.settled
                if done != thread.quiet:
                    self._switch(thread, on=not done)
            elif not thread.quiet and thread.wrote and thread.wrote.isdisjoint(undecided):
                self._switch(thread, on=False)

    def _switch(self, thread: _Thread, on: bool) -> None:
        """Enable or disable a thread's OpenSSL probes and sends (its closes stay on); what
        it wrote is counted anew from its resumption."""
        for fd in thread.switched:
            perf_ioctl(fd, PERF_EVENT_IOC_ENABLE if on else PERF_EVENT_IOC_DISABLE, 0)
        thread.quiet = not on
        if on:
            thread.wrote = set()
            thread.resumed_ms = time.time() * 1000

    def _enable_sends(self) -> None:
        """Read the sends from now on, in every thread (a write's send before is not read)."""
        self.sends_on = True
        for thread in self.threads.values():
            for fd in thread.sends:
                perf_ioctl(fd, PERF_EVENT_IOC_ENABLE, 0)
            thread.resumed_ms = time.time() * 1000

    def close(self) -> None:
        """Close every perf event (the uprobes themselves stay kmon's until it exits); once,
        from a sampler's thread or kmon's exit, whichever comes first."""
        with self.probes.lock:
            with contextlib.suppress(ValueError):
                self.probes.before_removal.remove(self.close)
            for thread in self.threads.values():
                self._close_thread(thread)
            self.threads = {}
            for fd, ring in self.rings.values():
                ring.close()
                os.close(fd)
            self.rings = {}

    def _tracepoints(self) -> None:
        with tracefs() as root:
            for name, kind in TRACEPOINTS.items():
                try:
                    with open(root / "events" / name / "format", encoding="ascii") as handle:
                        event_id, fields = parse_format(handle.read(64 * 1024))
                except OSError as err:
                    raise KernelEventsUnavailable(f"tracepoint {name}: {err.strerror}") from err
                if kind == "state":
                    self.states = Layout("inet_sock_set_state", fields)
                    self.events[event_id] = (kind, fields)
                elif "fd" in fields:
                    self.events[event_id] = (kind, fields)

    def _scan(self) -> None:
        """Probe the TLS writes of the files mapped; once there are some, follow the threads
        (twice listed: one made while the first were opened may have inherited nothing)."""
        self.scanned = time.monotonic()
        for path, ident, start in _mapped_libraries(self.pid):
            if ident in self.files:
                continue
            self.files.add(ident)
            if not SAFE_PATH.fullmatch(path):  # never written to tracefs
                self.refused.append(path)
                continue
            try:
                offsets = function_offsets(path, FUNCTIONS, ident)
            except (OSError, NotElf, ValueError, struct.error):
                continue
            for offset, fetch in sorted({(offset, FUNCTIONS[name])
                                         for name, offset in offsets.items()}):
                event_id, fields = self.probes.event(path, offset, fetch)
                self.events[event_id] = ("ssl", fields)
                if fetch == GO:
                    self.go.add(event_id)
                    if start is not None:
                        self._go_tcp_itab(event_id, path, ident, start)
        if not self.probed:
            if self.refused:
                raise TlsUnavailable(f"the TLS library is in a file whose path kmon does not "
                                     f"write to tracefs: {self.refused[0]!r}")
            return
        self.sends_on = any(kind == "ssl" and event_id not in self.tcp_itabs
                            for event_id, (kind, _) in self.events.items())
        with self.probes.opening():  # kept in ``threads`` before kmon's exit may close them
            if not self.rings:
                self._open_rings()
            most = min(MAX_THREADS, _descriptors() // (len(self.rings) * len(self.events)))
            for _ in range(2):
                try:
                    tids = sorted(int(t) for t in os.listdir(f"/proc/{self.pid}/task"))
                except OSError:
                    return
                for tid in tids:
                    if tid not in self.threads and len(self.threads) < most:
                        thread = self._open_thread(tid)
                        if thread is not None:
                            self.threads[tid] = thread

    def _go_tcp_itab(self, event_id: int, path: str, ident: tuple[int, int],
                     start: int) -> None:
        """Where ``*net.TCPConn``'s table for ``net.Conn`` is in the process (the Go program
        at ``path``, the file ``ident``, mapped from ``start``): a probe whose connection has
        it reads its fd."""
        try:
            found, lowest = object_addresses(path, [GO_TCP_ITAB], ident)
        except (OSError, NotElf, ValueError, struct.error):
            return
        if GO_TCP_ITAB in found:
            self.tcp_itabs[event_id] = found[GO_TCP_ITAB] - lowest + start

    def _open_rings(self) -> None:
        """One ring per CPU, a dummy event's (recording nothing itself)."""
        for cpu in range(os.cpu_count() or 1):
            try:
                fd = perf_event_open(tracepoint_attr(PERF_COUNT_SW_DUMMY,
                                                     kind=PERF_TYPE_SOFTWARE), cpu)
            except KernelEventsUnavailable:
                if cpu == 0:
                    raise
                continue  # an offline CPU
            try:
                ring = mmap.mmap(fd, (self.pages + 1) * mmap.PAGESIZE, mmap.MAP_SHARED,
                                 mmap.PROT_READ | mmap.PROT_WRITE)
            except OSError as err:
                os.close(fd)
                raise KernelEventsUnavailable(f"perf ring: {err.strerror}") from err
            self.rings[cpu] = (fd, ring)

    def _open_thread(self, tid: int) -> _Thread | None:
        """Every event of the thread on every CPU, inherited by the threads it creates, each
        recorded into its CPU's ring."""
        thread = _Thread()
        try:
            for event in self.events:
                for cpu, (ring, _) in self.rings.items():
                    self._add_event(thread, event, tid, cpu, ring)
        except KernelEventsUnavailable:
            self._close_thread(thread)
            if not os.path.exists(f"/proc/{self.pid}/task/{tid}"):
                return None  # gone meanwhile
            raise
        except BaseException:  # Ctrl-C: none of its events may keep a uprobe busy
            self._close_thread(thread)
            raise
        return thread

    def _add_event(self, thread: _Thread, event: int, tid: int, cpu: int, ring: int) -> None:
        """One more event of the thread on ``cpu``, recorded into that CPU's ``ring``; a send
        only once the sends are read."""
        kind = self.events[event][0]
        fd = perf_event_open(tracepoint_attr(event, inherit=True, disabled=True,
                                             sample_id=True), cpu, tid)
        thread.fds.append(fd)
        perf_ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, ctypes.c_int(ring))
        self.made_by[event_id(fd)] = (tid, event)
        if kind == "send":
            thread.sends.append(fd)
        if kind == "send" or (kind == "ssl" and event not in self.go):
            thread.switched.append(fd)
        if kind != "send" or self.sends_on:
            perf_ioctl(fd, PERF_EVENT_IOC_ENABLE, 0)

    def _drain(self, out: list[_Record]) -> None:
        """Every CPU's ring, the records in time order (a thread's may be in two: it moved):
        each listed thread's and those of the threads it created (its events' ids say
        whose), a listed thread's taken from its own events only (it may have inherited
        some too). A ``close`` whose thread's next record is its socket's own close
        (``CLOSING``) is told which socket it closed."""
        records: list[tuple[float, int, bytes, int]] = []

        def take(pid: int, tid: int, ts_ms: float, raw: bytes, made_by: int) -> bool:
            if pid != self.pid:
                return False
            records.append((ts_ms, tid, raw, made_by))
            return True

        epoch_ms = epoch_offset_ms()
        for _, ring in self.rings.values():  # what passes the bound waits in its ring
            read_ring(ring, self.pages, take, self._count_lost,
                      MAX_RECORDS_PER_READ - len(records), epoch_ms=epoch_ms, event_ids=True)
        records.sort(key=lambda record: record[0])
        events, itabs, pending, threads = self.events, self.tcp_itabs, self.pending, self.threads
        closing: dict[int, int] = {}  # tid -> its close's place in ``out``, nothing since
        sending: dict[int, tuple[int, float]] = {}  # tid -> its send's fd and time, nothing since
        for ts_ms, tid, raw, made_by in records:
            owner, event = self.made_by.get(made_by, (0, -1))
            if owner not in threads or (tid != owner and tid in threads):
                continue
            kind, fields = events.get(event, ("", {}))
            if kind == "state":  # the socket the close closed, or another's state change
                if self.states is None or tid not in closing and tid not in sending:
                    continue
                change = self.states.decode(self.pid, ts_ms, raw)
                if tid in closing and _tell_closed(out, closing[tid], change):
                    del closing[tid]
                elif tid in sending and self._reset_in_send(sending[tid], change):
                    del sending[tid]
                continue
            closing.pop(tid, None)
            sending.pop(tid, None)
            if kind == "ssl":
                buf, length = fields.get("buf"), fields.get("len")
                if buf is None or length is None or len(raw) < buf.offset + buf.size:
                    continue
                size = struct.unpack_from("<i", raw, length.offset)[0]
                data = raw[buf.offset:buf.offset + min(buf.size, HEADER_BYTES, max(size, 0))]
                own = _own_fd(raw, fields, itabs.get(event))
                if own is None:
                    if tid not in pending and len(pending) >= MAX_PENDING:
                        pending.pop(next(iter(pending)))
                    pending[tid] = (_header_only(data), ts_ms)  # kept: no token's bytes
                    continue
                out.append((ts_ms, own, data, owner, None))
            elif kind == "close" or kind == "send":
                fd = fields["fd"]
                if len(raw) < fd.offset + fd.size:
                    continue
                number = int.from_bytes(raw[fd.offset:fd.offset + fd.size], "little")
                if kind == "close":
                    closing[tid] = len(out)
                    reset = self.reset.pop(number, None)
                    out.append((ts_ms, number, None, owner, reset[0] if reset is not None
                                and ts_ms - reset[1] <= RESET_TO_CLOSE_MS else None))
                    continue
                sending[tid] = (number, ts_ms)
                if tid not in pending:
                    continue
                data, written_ms = pending.pop(tid)
                if written_ms >= threads[owner].resumed_ms:  # else its send may be unread
                    out.append((ts_ms, number, data, owner, None))

    def _reset_in_send(self, send: tuple[int, float], change: TcpEvent | None) -> bool:
        """Whether ``change`` is a reset of a socket right after its thread's send (``RESET``):
        that send's fd is then kept as that socket's, and its close tells the 4-tuple. On
        loopback the peer's own change comes first, in the same softirq (FIN_WAIT2 to CLOSE:
        data to a closed socket), but a peer still written to is never in CLOSE_WAIT: the
        writer sent no FIN."""
        fd, sent_ms = send
        if (change is None or (change.old_state, change.new_state) != RESET
                or change.local is None or change.remote is None
                or change.ts_ms - sent_ms > SEND_TO_RESET_MS):
            return False
        if fd not in self.reset and len(self.reset) >= MAX_PENDING:
            self.reset.pop(next(iter(self.reset)))
        self.reset[fd] = ((change.local, change.remote), change.ts_ms)
        return True

    def _count_lost(self, count: int) -> None:
        self.lost += count
        self.reset.clear()  # a lost close would leave its fd's entry to the next socket

    @staticmethod
    def _close_thread(thread: _Thread) -> None:
        for fd in thread.fds:
            os.close(fd)
        thread.fds = []


def _tell_closed(out: list[_Record], at: int, event: TcpEvent | None) -> bool:
    """Whether the close at ``out[at]`` was told the socket it closed: the thread's first
    state change since that is a socket's own close (``CLOSING``), right after. Its own is
    set before it sends its FIN or reset; a change made before it (the pending ACK a close
    sends first, and its peer's change on loopback, in the softirq that runs in the same
    thread) is never one of those."""
    ts, fd, _, owner, _ = out[at]
    if (event is None or (event.old_state, event.new_state) not in CLOSING
            or event.local is None or event.remote is None):
        return False
    if event.ts_ms - ts <= CLOSE_TO_STATE_MS:
        out[at] = (ts, fd, None, owner, (event.local, event.remote))
    return True


def _descriptors() -> int:
    """How many perf events one TLS source may open: ``MAX_EVENT_FDS``, a quarter of kmon's
    soft descriptor limit at most, that limit first raised to its hard one (a root shell's
    1,024 would else hold a 16-CPU host's source to a few threads); kmon's own limit only."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = MAX_EVENT_FDS * 4 if hard == resource.RLIM_INFINITY else min(hard, MAX_EVENT_FDS * 4)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
    return MAX_EVENT_FDS if soft == resource.RLIM_INFINITY else min(MAX_EVENT_FDS, soft // 4)


def _header_only(start: bytes) -> bytes:
    """``start`` cut to the Kafka request header it opens (size to client_id, as far as it
    goes); nothing when it opens none (a SASL token, a write in the middle of a request)."""
    header = kp.request_header(start, prefix=True)
    if header is None:
        return b""
    return start[:kp.REQUEST_HEADER + len(header.client_id or "")]


def _mapped_libraries(pid: int) -> list[tuple[str, tuple[int, int], int | None]]:
    """The executable file mappings of the process that may hold its TLS writes (``LIBRARIES``,
    its own executable): (path, (device, inode), where its offset 0 is mapped), the path
    checked to be the file mapped (the same inode)."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as handle:
            text = handle.read(MAX_MAPS_BYTES).decode("utf-8", "replace")
        executable = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return []
    found: dict[tuple[int, int], str] = {}
    starts: dict[tuple[str, int], int] = {}  # (path, inode) -> where its offset 0 is mapped
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or not (parts[5] == executable or LIBRARIES.search(parts[5])):
            continue
        path, inode = parts[5], int(parts[4])
        if int(parts[2], 16) == 0:
            starts.setdefault((path, inode), int(parts[0].split("-")[0], 16))
        if "x" not in parts[1]:
            continue
        try:
            stat = os.stat(path)
        except OSError:
            continue
        if stat.st_ino == inode:
            found.setdefault((stat.st_dev, inode), path)
    return [(path, ident, starts.get((path, ident[1]))) for ident, path in found.items()]


def _own_fd(raw: bytes, fields: dict[str, Field], tcp_itab: int | None) -> int | None:
    """The fd a Go ``Conn.Write`` record read through its connection, where the connection
    is a ``*net.TCPConn`` (its interface table is ``tcp_itab``); else None."""
    tab, fd = fields.get("tab"), fields.get("fd")
    if tcp_itab is None or tab is None or fd is None or len(raw) < max(
            tab.offset + 8, fd.offset + 4):
        return None
    if struct.unpack_from("<Q", raw, tab.offset)[0] != tcp_itab:
        return None
    number = struct.unpack_from("<i", raw, fd.offset)[0]
    return number if number >= 0 else None


def _socket_inode(pid: int, fd: int) -> int | None:
    """The inode of the socket that is ``fd`` in the process now (None: not a socket)."""
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None
    if target.startswith("socket:[") and target.endswith("]"):
        return int(target[8:-1])
    return None
