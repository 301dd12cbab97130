"""TCP state changes and resets as the kernel records them: the tracepoints
``sock:inet_sock_set_state``, ``tcp:tcp_receive_reset`` and ``tcp:tcp_send_reset``
read through ``perf_event_open`` (one ring buffer per CPU), filtered in the kernel
by the ports kmon follows, the connects to other ports in rings of their own
(kmon.sources.kernel.kernel_filter); the records a full ring dropped are counted.

Needs root (or CAP_PERFMON). The tracepoints' ids and record layouts come from
tracefs's ``format`` files; where tracefs is not mounted, kmon mounts it on a
private directory just long enough to read them, and unmounts it at once.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import ipaddress
import itertools
import mmap
import os
import platform
import re
import stat
import struct
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import NamedTuple

from kmon.sources.kernel.kernel_filter import (  # noqa: F401  (the states, for the lives)
    TCP_CLOSE,
    TCP_SYN_SENT,
    bounded_ports,
    connect_filter,
    port_filter,
)
from kmon.sources.kernel.sockets import normalize_ip

TRACEPOINTS = ("sock/inet_sock_set_state", "tcp/tcp_receive_reset", "tcp/tcp_send_reset")
TRACEFS_PLACES = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
MAX_FORMAT_BYTES = 64 * 1024
# the private mounts ``tracefs`` makes where tracefs is not mounted: kmon-tracefs-PID-xxxxxxxx
SCRATCH_PREFIX = "kmon-tracefs-"
SCRATCH_NAME = re.compile(r"kmon-tracefs-(?:(\d{1,10})-)?[A-Za-z0-9_]{1,32}")
MAX_SCRATCH_LOOKED = 100_000  # entries of the temporary directory looked at for them
MAX_MOUNTINFO_BYTES = 1 << 20
# data pages per CPU (a power of two): state changes, about 10,000 records of ~100 bytes in
# 1 MiB (several seconds of 200 connections a second, a late poll included); resets are rare;
# connects to ports not followed: a new port's first connect (a flood of them fills these)
RING_PAGES = {"inet_sock_set_state": 256, "tcp_receive_reset": 8, "tcp_send_reset": 8,
              "connects": 32}
MAX_EVENTS_PER_READ = 200_000  # a read stops here; the rest waits for the next
RETIRING_READS = 2  # reads of a replaced ring, at most, for its count of lost records

PERF_TYPE_SOFTWARE, PERF_TYPE_TRACEPOINT, PERF_COUNT_SW_DUMMY = 1, 2, 9
# the event follows the threads its thread creates from now on (inherit, inherit_thread:
# threads only, never a child process; Linux 5.13 and later)
INHERIT_THREADS = 1 << 1 | 1 << 35
PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_SAMPLE_RAW = 1 << 1, 1 << 2, 1 << 10
PERF_SAMPLE_ID = 1 << 6  # the event's id: an inherited event's, its parent's
PERF_RECORD_LOST, PERF_RECORD_SAMPLE = 2, 9
USE_CLOCKID = 1 << 25
CLOCK_MONOTONIC = 1
PERF_EVENT_IOC_ENABLE = 0x2400
PERF_EVENT_IOC_DISABLE = 0x2401
PERF_EVENT_IOC_SET_FILTER = 0x40082406
PERF_EVENT_IOC_ID = 0x80082407
PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}
MNT_DETACH = 2
HEADER, SAMPLE = struct.Struct("<IHH"), struct.Struct("<IIQI")  # a record's, a sample's start
ID_SAMPLE = struct.Struct("<IIQQI")  # a sample's start, its event's id in it
FIELD_LINE = re.compile(r"field:(?P<decl>[^;]+);\s*offset:(?P<offset>\d+);\s*size:(?P<size>\d+);"
                        r"\s*signed:(?P<signed>\d);")


class KernelEventsUnavailable(Exception):
    """The kernel events cannot be read here (privilege, kernel, tracefs)."""


@dataclass(frozen=True)
class Field:
    """One field of a tracepoint record: where it sits and how wide it is."""

    offset: int
    size: int
    signed: bool


class TcpEvent(NamedTuple):
    """One state change (``kind`` "state") or reset ("reset_in", "reset_out") of one socket
    (a tuple: thousands are made a second)."""

    ts_ms: float  # UTC epoch ms (from the kernel's CLOCK_MONOTONIC stamp)
    kind: str
    pid: int  # the process the kernel ran on behalf of (the opener for SYN_SENT)
    skaddr: int  # the socket's kernel address: joins the events of one socket
    local: tuple[str, int] | None
    remote: tuple[str, int] | None
    old_state: int = 0
    new_state: int = 0


def parse_format(text: str) -> tuple[int, dict[str, Field]]:
    """A tracepoint's id and its fields by name, from its tracefs ``format`` file."""
    match = re.search(r"^ID:\s*(\d+)", text, re.M)
    if match is None:
        raise KernelEventsUnavailable("tracepoint format without an ID")
    fields = {}
    for line in FIELD_LINE.finditer(text):
        name = re.sub(r"\[.*\]$", "", line["decl"].split()[-1]).lstrip("*")
        fields[name] = Field(int(line["offset"]), int(line["size"]), line["signed"] == "1")
    return int(match[1]), fields


SCALARS = ("skaddr", "oldstate", "newstate", "sport", "dport", "family", "protocol")
PICKED = ("skaddr", "family", "protocol", "sport", "dport", "oldstate", "newstate")
CODES = {1: "b", 2: "h", 4: "i", 8: "q"}


class Layout:
    """How one tracepoint's records are read: its scalar fields unpacked at once at the
    offsets its format file gives, its addresses sliced."""

    def __init__(self, name: str, fields: dict[str, Field]) -> None:
        self.name, self.fields = name, fields
        wanted = sorted((f.offset, n, f) for n, f in fields.items()
                        if n in SCALARS and f.size in CODES)
        fmt, at = "<", 0
        for offset, _, field in wanted:
            if offset < at:
                raise KernelEventsUnavailable(f"{name}: overlapping fields in its format")
            code = CODES[field.size]
            fmt += f"{offset - at}x" + (code if field.signed else code.upper())
            at = offset + field.size
        names = [n for _, n, _ in wanted]
        self.scalars = struct.Struct(fmt)
        self.size = max([self.scalars.size] + [f.offset + f.size for f in fields.values()])
        # the unpacked values padded with the defaults of the fields a format lacks
        defaults = {"protocol": len(names) + 1, "family": len(names) + 2}
        self.pick = itemgetter(*(names.index(n) if n in names else defaults.get(n, len(names))
                                 for n in PICKED))
        self.spans = {family: tuple(self._span(f"{side}{suffix}") for side in ("saddr", "daddr"))
                      for family, suffix in ((2, ""), (10, "_v6"))}

    def _span(self, name: str) -> tuple[int, int] | None:
        field = self.fields.get(name)
        if field is None or field.size not in (4, 16):
            return None
        return field.offset, field.offset + field.size

    def decode(self, pid: int, ts_ms: float, raw: bytes) -> TcpEvent | None:
        """One raw record as a ``TcpEvent`` (None: short, or not TCP over IP)."""
        if len(raw) < self.size:
            return None
        skaddr, family, protocol, sport, dport, old, new = self.pick(
            self.scalars.unpack_from(raw) + (0, 6, None))
        if self.name == "tcp_send_reset":
            return TcpEvent(ts_ms, "reset_out", pid, skaddr, self._sockaddr(raw, "saddr"),
                            self._sockaddr(raw, "daddr"))
        if family not in (2, 10) or protocol != 6:
            return None
        source, dest = self.spans[family]
        local = None if source is None else (_ip(raw[source[0]:source[1]]), sport)
        remote = None if dest is None else (_ip(raw[dest[0]:dest[1]]), dport)
        if self.name == "tcp_receive_reset":
            return TcpEvent(ts_ms, "reset_in", pid, skaddr, local, remote)
        return TcpEvent(ts_ms, "state", pid, skaddr, local, remote, old, new)

    def _sockaddr(self, raw: bytes, name: str) -> tuple[str, int] | None:
        """A ``struct sockaddr_in``/``in6`` field (tcp_send_reset's saddr/daddr)."""
        field = self.fields.get(name)
        if field is None or field.size < 8:
            return None
        packed = raw[field.offset:field.offset + field.size]
        family, port = struct.unpack_from("<H", packed)[0], struct.unpack_from(">H", packed, 2)[0]
        if family == 2:
            return _ip(packed[4:8]), port
        if family == 10 and len(packed) >= 24:
            return _ip(packed[8:24]), port
        return None


@functools.lru_cache(maxsize=1024)
def _ip(packed: bytes) -> str:
    """An address as kmon prints it (an IPv4-mapped IPv6 address as IPv4); the few a host
    talks to are remembered."""
    return normalize_ip(str(ipaddress.ip_address(packed)))


def decode(name: str, fields: dict[str, Field], pid: int, ts_ms: float,
           raw: bytes) -> TcpEvent | None:
    """One raw tracepoint record as a ``TcpEvent`` (None: short, or not TCP over IP)."""
    return Layout(name, fields).decode(pid, ts_ms, raw)


@dataclass
class _Ring:
    fd: int
    buffer: mmap.mmap
    name: str  # the tracepoint's
    pages: int
    followed: bool  # the followed ports' (else the connect ring)


def perf_event_open(attr: bytes, cpu: int, pid: int = -1) -> int:
    number = PERF_EVENT_OPEN.get(platform.machine())
    if number is None:
        raise KernelEventsUnavailable(f"perf_event_open not known on {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = libc.syscall(number, buf, pid, cpu, -1, 0)
    if fd < 0:
        err = ctypes.get_errno()
        raise KernelEventsUnavailable(f"perf_event_open: {os.strerror(err)}")
    return fd


def tracepoint_attr(config: int, inherit: bool = False,
                    kind: int = PERF_TYPE_TRACEPOINT, disabled: bool = False,
                    sample_id: bool = False) -> bytes:
    """A ``struct perf_event_attr`` (128 bytes) for one tracepoint, sampling every hit;
    ``inherit``: in the threads the thread creates too, not in the processes it forks (their
    records go to the ring of the event they inherit: perf's own rule); ``kind``: another
    type of event (``PERF_TYPE_SOFTWARE`` with ``PERF_COUNT_SW_DUMMY``: a ring that records
    nothing of its own); ``disabled``: recording nothing until enabled (an ioctl);
    ``sample_id``: each record says which event made it, an inherited one its parent
    (``read_ring``'s ``event_ids``)."""
    sampled = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW | (
        PERF_SAMPLE_ID if sample_id else 0)
    head = struct.pack("<IIQQQQQII", kind, 128, config, 1, sampled, 0,
                       USE_CLOCKID | (INHERIT_THREADS if inherit else 0) | int(disabled), 1, 0)
    body = bytearray(head.ljust(128, b"\0"))
    struct.pack_into("<i", body, 92, CLOCK_MONOTONIC)  # clockid, after sample_stack_user
    return bytes(body)


def read_formats() -> dict[str, tuple[int, dict[str, Field]]]:
    """Each tracepoint's id and fields, from tracefs (mounted for the read if need be)."""
    with tracefs() as root:
        return _formats_in(root)


@contextlib.contextmanager
def tracefs() -> Iterator[Path]:
    """tracefs's root where it is mounted, else mounted on a private directory for the
    block and unmounted after it (its name carries kmon's pid: ``remove_stale_scratch``)."""
    for place in TRACEFS_PLACES:
        if (place / "events").is_dir():
            yield place
            return
    libc = ctypes.CDLL(None, use_errno=True)
    scratch = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
    try:
        if libc.mount(b"nodev", scratch.encode(), b"tracefs", 0, None) != 0:
            raise KernelEventsUnavailable(
                f"tracefs cannot be mounted: {os.strerror(ctypes.get_errno())}")
        try:
            yield Path(scratch)
        finally:
            libc.umount2(scratch.encode(), MNT_DETACH)
    finally:
        os.rmdir(scratch)


def remove_stale_scratch() -> int:
    """The private tracefs mounts a killed kmon left (``tracefs``: mounted for a read, never
    unmounted) unmounted, and their directories removed, where the kmon that made them is
    gone; one named without a pid (as kmon named them before) counts as gone: no kmon holds
    one longer than a read. The mounts are the kernel's own list's, and only tracefs ones on
    a directory of that name in the temporary directory are touched; a directory left empty
    (killed between its unmount and its removal) only where this user owns it. How many
    went."""
    stale = _stale_scratch()
    if not stale:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    tracefs_mounts = _tracefs_mounts()
    removed = 0
    for path in stale:
        mounted = path in tracefs_mounts
        if mounted:
            libc.umount2(path.encode(), MNT_DETACH)
        try:
            info = os.lstat(path)
            if stat.S_ISDIR(info.st_mode) and (mounted or info.st_uid == os.geteuid()):
                os.rmdir(path)
                removed += 1
        except OSError:
            continue  # gone meanwhile, or not empty: never ours
    return removed


def _stale_scratch() -> list[str]:
    """The temporary directory's entries named as ``tracefs`` names its mounts, of a kmon
    that is gone (at most MAX_SCRATCH_LOOKED looked at)."""
    root = tempfile.gettempdir()
    stale = []
    try:
        with os.scandir(root) as entries:
            for entry in itertools.islice(entries, MAX_SCRATCH_LOOKED):
                found = SCRATCH_NAME.fullmatch(entry.name)
                if found and (found[1] is None or not process_running(int(found[1]))):
                    stale.append(os.path.join(root, entry.name))
    except OSError:
        return []
    return stale


def _tracefs_mounts() -> set[str]:
    """Where the kernel lists a tracefs mount (its mountinfo, octal escapes undone)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as handle:
            text = handle.read(MAX_MOUNTINFO_BYTES)
    except OSError:
        return set()
    found = set()
    for line in text.splitlines():
        fields, _, rest = line.partition(" - ")
        parts = fields.split(" ")
        if len(parts) > 4 and rest.startswith("tracefs "):
            found.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), parts[4]))
    return found


def process_running(pid: int) -> bool:
    """A process (not a thread: /proc shows threads' ids too) of this id is running."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
            return f"\nTgid:\t{pid}\n" in handle.read(4096)
    except OSError:
        return False


def _formats_in(root: Path) -> dict[str, tuple[int, dict[str, Field]]]:
    out = {}
    for tracepoint in TRACEPOINTS:
        try:
            with open(root / "events" / tracepoint / "format", encoding="ascii") as handle:
                out[tracepoint.split("/")[1]] = parse_format(handle.read(MAX_FORMAT_BYTES))
        except OSError as err:
            raise KernelEventsUnavailable(f"tracepoint {tracepoint}: {err.strerror}") from err
    return out


class KernelEvents:
    """The three tracepoints on every CPU filtered by the followed ports, and the other
    ports' connects in rings of their own; ``read()`` drains what they recorded."""

    def __init__(self, ports: Iterable[int] = (), pages: dict[str, int] | None = None) -> None:
        self.pages = pages or RING_PAGES  # data pages of each tracepoint's ring, per CPU
        self.formats = read_formats()
        self.layouts = {name: Layout(name, fields) for name, (_, fields) in self.formats.items()}
        self.lost = 0  # events the followed ports' rings dropped (a ring was full)
        self.lost_connects = 0  # ... and the connect rings (connects to other ports)
        self.cut_short = False  # the last read stopped at MAX_EVENTS_PER_READ
        self._page = mmap.PAGESIZE
        self._pending: list[TcpEvent] = []  # drained from rings replaced by a new filter
        # rings replaced by a new filter, read until a record comes (RETIRING_READS at most),
        # then closed: the kernel writes a full ring's count of lost records at its next one
        self._retiring: list[tuple[_Ring, int]] = []
        self.ports = bounded_ports(ports)
        self.rings = self._open_all(self.ports)

    def _open_all(self, ports: frozenset[int]) -> list[_Ring]:
        """Every tracepoint on every CPU filtered by ``ports``, and the connect rings, enabled
        (the kernel takes one filter per event: new ports need new events)."""
        wanted = [(name, name, port_filter(name, ports)) for name in self.formats]
        wanted.append(("inet_sock_set_state", "connects", connect_filter(ports)))
        rings: list[_Ring] = []
        try:
            for name, ring_of, text in wanted:
                for cpu in range(os.cpu_count() or 1):
                    ring = self._open(name, cpu, self.pages[ring_of], ring_of == name)
                    if ring is not None:
                        rings.append(ring)
                        perf_ioctl(ring.fd, PERF_EVENT_IOC_SET_FILTER,
                               ctypes.c_char_p(text.encode()))
            for ring in rings:
                perf_ioctl(ring.fd, PERF_EVENT_IOC_ENABLE, 0)
        except BaseException:
            _close(rings)
            raise
        return rings

    def _open(self, name: str, cpu: int, pages: int, followed: bool) -> _Ring | None:
        try:
            fd = perf_event_open(tracepoint_attr(self.formats[name][0]), cpu)
        except KernelEventsUnavailable:
            if cpu == 0:
                raise
            return None  # an offline CPU
        try:
            buffer = mmap.mmap(fd, (pages + 1) * self._page, mmap.MAP_SHARED,
                               mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError:
            os.close(fd)
            raise
        return _Ring(fd, buffer, name, pages, followed)

    def watch_ports(self, ports: Iterable[int]) -> None:
        """Filter in the kernel by these ports, the most wanted first (a no-op when they are
        the same): the new events start before the old ones are drained, so nothing falls
        between them; the old rings are read once more for their losses, then closed."""
        ports = bounded_ports(ports)
        if ports == self.ports:
            return
        old, self.rings, self.ports = self.rings, self._open_all(ports), ports
        for ring in old:
            self._drain(ring, self._pending, epoch_offset_ms())
            self._retiring.append((ring, RETIRING_READS))

    def read(self) -> list[TcpEvent]:
        """The events recorded since the last read, oldest first (``cut_short``: the read
        stopped at MAX_EVENTS_PER_READ, the rest left in the rings for the next)."""
        out, self._pending = self._pending, []
        overlap = bool(out)  # rings replaced by a new filter recorded alongside the new ones
        epoch_ms = epoch_offset_ms()  # one for every ring: their records interleave as stamped
        for ring in self.rings:
            self._drain(ring, out, epoch_ms)
        retiring, self._retiring = self._retiring, []
        for ring, reads in retiring:
            if self._drain(ring, out, epoch_ms, retiring=True) or reads <= 1:
                _close([ring])
            else:
                self._retiring.append((ring, reads - 1))
        self.cut_short = len(out) >= MAX_EVENTS_PER_READ
        return in_order(list(set(out)) if overlap else out)

    def _drain(self, ring: _Ring, out: list[TcpEvent], epoch_ms: float,
               retiring: bool = False) -> bool:
        """The ring's records into ``out`` (``read_ring``); True when there were any. A ring
        replaced by a new filter (``retiring``) gives only the count of records it lost before:
        the record the kernel writes first once it has room (what follows is the new rings')."""
        decode = self.layouts[ring.name].decode

        def sample(pid: int, _tid: int, ts_ms: float, raw: bytes) -> bool:
            event = decode(pid, ts_ms, raw)
            if event is not None:
                out.append(event)
            return event is not None

        def lost(count: int) -> None:
            if ring.followed:
                self.lost += count
            else:
                self.lost_connects += count

        return read_ring(ring.buffer, ring.pages, sample, lost,
                         MAX_EVENTS_PER_READ - len(out), retiring, epoch_ms)

    def close(self) -> None:
        """Stop the events and free their rings."""
        _close(self.rings + [ring for ring, _ in self._retiring])
        self.rings, self._retiring = [], []


def in_order(events: list[TcpEvent]) -> list[TcpEvent]:
    """Oldest first; at one instant (stamps closer than a float of epoch ms tells apart, 0.24
    us) a socket's reset before the state change it causes, as the kernel records them
    (``tcp_reset`` traces the RST, then ``tcp_done`` closes the socket): read the other way
    round, a reset connection would pass for one the client aborted."""
    return sorted(events, key=lambda e: (e.ts_ms, e.kind == "state"))


def epoch_offset_ms() -> float:
    """What turns a CLOCK_MONOTONIC stamp in ms into UTC epoch ms, now."""
    return (time.time() - time.monotonic()) * 1000


def read_ring(buf: mmap.mmap, pages: int, sample: Callable[..., bool],
              lost: Callable[[int], None], room: int, retiring: bool = False,
              epoch_ms: float | None = None, event_ids: bool = False) -> bool:
    """The records between a perf ring's tail and head, copied out in one or two slices
    (where they wrap), then read in place: each sample handed to ``sample(pid, tid, ts_ms,
    raw)`` (True: it counts against ``room``, the most taken), each count of records the
    kernel dropped to ``lost``; True when there were any. ``retiring``: only the count of
    records lost, and only the first record's. ``epoch_ms``: the offset to UTC of the rings
    read together (each its own taken apart: a few us, or a preemption, between them).
    ``event_ids``: the events sample their id too (``tracepoint_attr``'s ``sample_id``),
    handed on as ``sample``'s fifth argument."""
    page = mmap.PAGESIZE
    size = pages * page
    head, tail = struct.unpack_from("<QQ", buf, 1024)
    start, end = page + tail % size, page + tail % size + min(head - tail, size)
    data = buf[start:min(end, page + size)]
    if end > page + size:
        data += buf[page:end - size]
    if epoch_ms is None:
        epoch_ms = epoch_offset_ms()
    at = 0
    while at + 8 <= len(data) and room > 0:
        kind, _, length = HEADER.unpack_from(data, at)
        if length < 8 or at + length > len(data):
            at = head - tail  # a corrupt ring: start again from the head
            break
        if kind == PERF_RECORD_LOST and length >= 24 and not (retiring and at):
            lost(struct.unpack_from("<Q", data, at + 16)[0])
        elif event_ids and kind == PERF_RECORD_SAMPLE and length >= 36 and not retiring:
            pid, tid, ts_ns, event, raw_size = ID_SAMPLE.unpack_from(data, at + 8)
            if sample(pid, tid, ts_ns / 1e6 + epoch_ms, data[at + 36:at + 36 + raw_size],
                      event):
                room -= 1
        elif kind == PERF_RECORD_SAMPLE and length >= 28 and not retiring:
            pid, tid, ts_ns, raw_size = SAMPLE.unpack_from(data, at + 8)
            if sample(pid, tid, ts_ns / 1e6 + epoch_ms, data[at + 28:at + 28 + raw_size]):
                room -= 1
        at += length
    struct.pack_into("<Q", buf, 1032, tail + at)
    return at > 0


def _close(rings: list[_Ring]) -> None:
    for ring in rings:
        ring.buffer.close()
        os.close(ring.fd)


def perf_ioctl(fd: int, request: int, arg) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ioctl(fd, ctypes.c_ulong(request), arg) < 0:
        err = ctypes.get_errno()
        raise KernelEventsUnavailable(f"perf ioctl: {os.strerror(err)}")


def event_id(fd: int) -> int:
    """The kernel's id of the perf event ``fd`` (what ``PERF_SAMPLE_ID`` records)."""
    found = ctypes.c_uint64()
    perf_ioctl(fd, PERF_EVENT_IOC_ID, ctypes.byref(found))
    return found.value
