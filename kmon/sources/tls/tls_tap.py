"""The first bytes of what one process writes through OpenSSL, tied to the socket each went
to: a Kafka request's header (size, api key, version, correlation id) over TLS.

Uprobes (kmon.sources.tls.uprobes) on ``SSL_write``/``SSL_write_ex`` in the files the process
maps (``libssl.so``; a librdkafka with OpenSSL linked in) read 16 bytes of the buffer and its
length, never more, and keep of them only the Kafka request header they open (a raw SASL token
is written this way too: kafka-python's PLAIN login puts the password's first bytes within
the 16). The thread's next ``write``/``sendto``/``sendmsg`` (the syscall
tracepoints) names the socket: OpenSSL's socket BIO writes the record on the thread that
called it, and librdkafka runs one thread per broker connection. Every event is opened per
thread of the process (perf_event_open with its tid): the kernel sets the breakpoints in this
process only and records nothing of another. One ring per thread, read like the TCP
tracepoints' (``kernel_events.read_ring``); a full ring drops, and the kernel counts what it
dropped.
"""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import re
import struct
import time
from dataclasses import dataclass
from typing import NamedTuple

from kmon.sources import kafka_protocol as kp
from kmon.sources.kernel.kernel_events import (
    PERF_EVENT_IOC_ENABLE,
    Field,
    KernelEventsUnavailable,
    parse_format,
    perf_event_open,
    perf_ioctl,
    read_ring,
    tracefs,
    tracepoint_attr,
)
from kmon.sources.tls.elf_symbols import NotElf, function_offsets
from kmon.sources.tls.uprobes import SAFE_PATH, registry

FUNCTIONS = ("SSL_write", "SSL_write_ex")  # (SSL *, const void *buf, int/size_t num, ...)
FETCH = "buf=+0(%si):x8[16] len=%dx:s32"  # x86-64: the 2nd argument in rsi, the 3rd in rdx
HEADER_BYTES = 16
SYSCALLS = ("sys_enter_write", "sys_enter_sendto", "sys_enter_sendmsg")
LIBRARIES = re.compile(r"/lib(ssl|rdkafka)[^/]*\.so[^/]*$")  # where OpenSSL's writes are
MAX_MAPS_BYTES = 8 << 20
MAX_THREADS = 256
RING_PAGES = 16  # per thread: ~900 records between two polls
MAX_RECORDS_PER_READ = 20_000
RESCAN_S = 5.0  # the maps looked at again (while no library is found), the threads
PERF_EVENT_IOC_SET_OUTPUT = 0x2405


class TlsUnavailable(Exception):
    """The TLS source cannot run here (privilege, kernel, architecture)."""


class TlsWrite(NamedTuple):
    """The start of one TLS write and the socket it went to."""

    inode: int  # the socket's
    ts_ms: float  # UTC epoch ms
    data: bytes  # its first bytes (HEADER_BYTES at most)


@dataclass
class _Thread:
    fds: list[int]
    ring: mmap.mmap
    pending: bytes | None = None  # the last SSL write's start, its socket not yet seen


class TlsTap:
    """The TLS writes of one process; ``read()`` drains those since the last read."""

    def __init__(self, pid: int) -> None:
        if os.uname().machine != "x86_64":
            raise TlsUnavailable("TLS headers are read on x86-64 only")
        self.pid = pid
        self.probes = registry()
        self.events: dict[int, tuple[str, dict[str, Field]]] = {}  # tracepoint id -> kind
        self.files: set[tuple[int, int]] = set()  # (device, inode) of the files probed
        self.refused: list[str] = []  # the paths of those that could not be
        self.threads: dict[int, _Thread] = {}
        self.lost = 0  # records the kernel dropped (a thread's ring was full)
        self.scanned = 0.0
        try:
            self._syscalls()
            self._scan()
        except KernelEventsUnavailable as err:
            self.close()
            raise TlsUnavailable(str(err)) from err
        self.probes.before_removal.append(self.close)

    @property
    def probed(self) -> bool:
        return any(kind == "ssl" for kind, _ in self.events.values())

    def read(self) -> list[TlsWrite]:
        """The TLS writes whose socket was seen since the last read, oldest first per thread."""
        now = time.monotonic()
        if now - self.scanned >= RESCAN_S:
            self._scan()
        out: list[tuple[int, float, bytes]] = []
        for tid, thread in list(self.threads.items()):
            self._drain(thread, out)
            if not os.path.exists(f"/proc/{self.pid}/task/{tid}"):
                self._close_thread(self.threads.pop(tid))
        inodes: dict[int, int | None] = {}
        writes = []
        for fd, ts_ms, data in out:
            if fd not in inodes:
                inodes[fd] = _socket_inode(self.pid, fd)
            inode = inodes[fd]
            if inode is not None:
                writes.append(TlsWrite(inode, ts_ms, data))
        return writes

    def close(self) -> None:
        """Close every perf event (the uprobes themselves stay kmon's until it exits)."""
        with contextlib.suppress(ValueError):
            self.probes.before_removal.remove(self.close)
        for thread in self.threads.values():
            self._close_thread(thread)
        self.threads = {}

    def _syscalls(self) -> None:
        with tracefs() as root:
            for name in SYSCALLS:
                try:
                    with open(root / "events" / "syscalls" / name / "format",
                              encoding="ascii") as handle:
                        event_id, fields = parse_format(handle.read(64 * 1024))
                except OSError as err:
                    raise KernelEventsUnavailable(f"tracepoint {name}: {err.strerror}") from err
                if "fd" in fields:
                    self.events[event_id] = ("syscall", fields)

    def _scan(self) -> None:
        """Probe the OpenSSL writes of the files newly mapped; follow new threads."""
        self.scanned = time.monotonic()
        if not self.probed:
            for path, ident in _mapped_libraries(self.pid):
                if ident in self.files:
                    continue
                self.files.add(ident)
                if not SAFE_PATH.fullmatch(path):  # never written to tracefs
                    self.refused.append(path)
                    continue
                try:
                    offsets = function_offsets(path, FUNCTIONS)
                except (OSError, NotElf, ValueError, struct.error):
                    continue
                for offset in sorted(set(offsets.values())):
                    event_id, fields = self.probes.event(path, offset, FETCH)
                    self.events[event_id] = ("ssl", fields)
        if not self.probed:
            if self.refused:
                raise TlsUnavailable(f"OpenSSL is in a file whose path kmon does not write to "
                                     f"tracefs: {self.refused[0]!r}")
            return
        try:
            tids = sorted(int(t) for t in os.listdir(f"/proc/{self.pid}/task"))[:MAX_THREADS]
        except OSError:
            return
        for tid in tids:
            if tid not in self.threads:
                thread = self._open_thread(tid)
                if thread is not None:
                    self.threads[tid] = thread

    def _open_thread(self, tid: int) -> _Thread | None:
        ids = list(self.events)
        try:
            first = perf_event_open(tracepoint_attr(ids[0]), -1, tid)
        except KernelEventsUnavailable:
            if not os.path.exists(f"/proc/{self.pid}/task/{tid}"):
                return None  # gone meanwhile
            raise
        try:
            ring = mmap.mmap(first, (RING_PAGES + 1) * mmap.PAGESIZE, mmap.MAP_SHARED,
                             mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as err:
            os.close(first)
            raise KernelEventsUnavailable(f"perf ring: {err.strerror}") from err
        thread = _Thread([first], ring)
        try:
            for event_id in ids[1:]:
                self._add_event(thread, event_id, tid)
        except KernelEventsUnavailable:
            self._close_thread(thread)
            return None
        return thread

    def _add_event(self, thread: _Thread, event_id: int, tid: int) -> None:
        """One more event of the thread, recorded into its ring."""
        fd = perf_event_open(tracepoint_attr(event_id), -1, tid)
        thread.fds.append(fd)
        perf_ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, ctypes.c_int(thread.fds[0]))
        perf_ioctl(fd, PERF_EVENT_IOC_ENABLE, 0)

    def _drain(self, thread: _Thread, out: list[tuple[int, float, bytes]]) -> None:
        events = self.events

        def sample(_pid: int, _tid: int, ts_ms: float, raw: bytes) -> bool:
            if len(raw) < 8:
                return False
            kind, fields = events.get(struct.unpack_from("<H", raw)[0], ("", {}))
            if kind == "ssl":
                buf, length = fields.get("buf"), fields.get("len")
                if buf is None or length is None or len(raw) < buf.offset + buf.size:
                    return False
                size = struct.unpack_from("<i", raw, length.offset)[0]
                thread.pending = _header_only(raw[buf.offset:buf.offset + min(
                    buf.size, HEADER_BYTES, max(size, 0))])
            elif kind == "syscall" and thread.pending is not None:
                fd = fields["fd"]
                if len(raw) >= fd.offset + fd.size:
                    number = int.from_bytes(raw[fd.offset:fd.offset + fd.size], "little")
                    out.append((number, ts_ms, thread.pending))
                    thread.pending = None
                    return True
            return False

        read_ring(thread.ring, RING_PAGES, sample, self._count_lost,
                  MAX_RECORDS_PER_READ - len(out))

    def _count_lost(self, count: int) -> None:
        self.lost += count

    @staticmethod
    def _close_thread(thread: _Thread) -> None:
        thread.ring.close()
        for fd in thread.fds:
            os.close(fd)
        thread.fds = []


def _header_only(start: bytes) -> bytes:
    """``start`` cut to the Kafka request header it opens (size to client_id, as far as it
    goes); nothing when it opens none (a SASL token, a write in the middle of a request)."""
    header = kp.request_header(start, prefix=True)
    if header is None:
        return b""
    return start[:kp.REQUEST_HEADER + len(header.client_id or "")]


def _mapped_libraries(pid: int) -> list[tuple[str, tuple[int, int]]]:
    """The executable file mappings of the process that may hold OpenSSL's writes: (path,
    (device, inode)), the path checked to be the file mapped (the same inode)."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as handle:
            text = handle.read(MAX_MAPS_BYTES).decode("utf-8", "replace")
    except OSError:
        return []
    found: dict[tuple[int, int], str] = {}
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 6 or "x" not in parts[1] or not LIBRARIES.search(parts[5]):
            continue
        path, inode = parts[5], int(parts[4])
        try:
            stat = os.stat(path)
        except OSError:
            continue
        if stat.st_ino == inode:
            found.setdefault((stat.st_dev, inode), path)
    return [(path, ident) for ident, path in found.items()]


def _socket_inode(pid: int, fd: int) -> int | None:
    """The inode of the socket that is ``fd`` in the process now (None: not a socket)."""
    try:
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return None
    if target.startswith("socket:[") and target.endswith("]"):
        return int(target[8:-1])
    return None
