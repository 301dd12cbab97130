"""A raw packet socket with a kernel filter and a memory-mapped ring (``TPACKET_V3``).

``PacketCapture(local_ports, remote_ports)`` sees the TCP segments of those
local ports, and to or from those remote ports, on every interface, loopback
included, cut short by ``kmon.sources.packets.packet_filter``;
``read()`` hands over what the kernel queued since the last call in a few
block-sized batches (no system call per packet), and ``drops`` counts what the
kernel could not queue. The kernel hands a block over only once it is full or
``RETIRE_BLOCK_MS`` after it opened: a close the socket table already shows may
still sit in the block it fills, and ``settle`` waits for that block. A segment
that does not start at a Kafka frame boundary of its stream
(``kmon.sources.packets.frame_boundaries``: a frame's body, a spoofed segment)
is not handed over. Needs CAP_NET_RAW: ``PermissionError`` otherwise.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import ipaddress
import mmap
import os
import select
import socket
import struct
import time
from typing import NamedTuple

from kmon.sources.packets import packet_filter
from kmon.sources.packets.frame_boundaries import FrameBoundaries

SOL_PACKET = 263
PACKET_RX_RING, PACKET_STATISTICS, PACKET_VERSION = 5, 6, 10
TPACKET_V3 = 2
ETH_P_ALL = 0x0003
SO_ATTACH_FILTER = 26
TP_STATUS_USER = 1
BLOCK_SIZE = 1 << 16
BLOCKS = 32  # 2 MiB of ring: a second of a busy client's cut-short segments
FRAME_SIZE = 2048
RETIRE_BLOCK_MS = 50  # a block is handed over this long after its first packet at most
# ``settle`` waits this long at most: the kernel's retire timer was seen 280 ms late on a
# host at load average 30
SETTLE_TIMEOUT_S = 0.5
BLOCK_OPENED = struct.Struct("=II")  # a block's ts_first_pkt: when the kernel opened it
BLOCK_OPENED_AT = 32
BLOCK_HEADER = struct.Struct("=IIIIIIQ")  # version, offset_to_priv, status, num_pkts, first, len
PACKET_HEADER = struct.Struct("=IIII10xH")  # next, sec, nsec, snaplen, (len, status, mac,) net
TCP_OFFSET_FLAGS = struct.Struct("!BB")  # 12 bytes into the TCP header
TCP_SEQ = struct.Struct("!I")  # 4 bytes into the TCP header
FRAME_SIZE_FIELD = struct.Struct("!I")  # a Kafka frame's first 4 bytes
MIN_DATA_OFFSET = 5 << 4  # the data offset byte of the shortest TCP header (a forged one may
# say less: the packet socket sees it before TCP drops it, and kmon drops it too)
MAX_ENDPOINTS = 4096  # remembered (source, destination) pairs: a client's sockets


Address = tuple[str, int]  # (ip, port): cheaper to hash per packet than an Endpoint


class Segment(NamedTuple):
    """One TCP segment (or a run of repeats of it): its endpoints and the captured start of its
    payload."""

    ts_ms: int  # when it was captured (the last of its repeats)
    src: Address
    dst: Address
    data: bytes  # the first bytes of the payload that the filter kept
    flags: int  # the TCP flags (FIN 0x01, RST 0x04, ...)
    repeats: int  # segments it stands for (see PacketCapture.read)
    first_ms: int  # when the first of them was captured


class PacketCapture:
    """The filtered packet ring of one watched process."""

    def __init__(self, local_ports: set[int], remote_ports: set[int],
                 blocks: int = BLOCKS) -> None:
        self.local_ports: set[int] = set()
        self.remote_ports: set[int] = set()
        self.responses = True
        self.any_requests = False  # any port's opening requests kept too
        self.attached = False  # no filter yet: the first set_ports attaches one
        self.drops = 0
        self.blocks = blocks
        self.endpoints: dict[bytes, tuple[Address, Address]] = {}
        self.frames = FrameBoundaries()
        self.fast = _fast_layout(96, 0x80)  # as on x86-64 with TCP timestamps; read() learns it
        self.settled: list[Segment] = []  # read by ``settle``, handed over by the next read
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, 0)  # receives nothing yet
        try:
            self.loopback = socket.if_nametoindex("lo")
            self.set_ports(local_ports, remote_ports)
            self.sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V3)
            request = struct.pack("=7I", BLOCK_SIZE, blocks, FRAME_SIZE,
                                  BLOCK_SIZE * blocks // FRAME_SIZE, RETIRE_BLOCK_MS, 0, 0)
            self.sock.setsockopt(SOL_PACKET, PACKET_RX_RING, request)
            self.ring = mmap.mmap(self.sock.fileno(), BLOCK_SIZE * blocks,
                                  mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            _bind_all(self.sock.fileno())  # from here on, the filter decides what is queued
            self.block = 0
        except BaseException:
            self.sock.close()
            raise

    def set_ports(self, local_ports: set[int], remote_ports: set[int],
                  responses: bool = True, any_requests: bool = False) -> None:
        """Keep the segments of these ports (responses too, if ``responses``; any port's opening
        requests' headers too, if ``any_requests``) from now on; the kernel filter is rebuilt
        only when they changed."""
        wanted = (set(local_ports), set(remote_ports), responses, any_requests)
        if self.attached and wanted == (self.local_ports, self.remote_ports, self.responses,
                                        self.any_requests):
            return
        program = packet_filter.pack(packet_filter.build(local_ports, remote_ports,
                                                         self.loopback, responses, any_requests))
        buffer = ctypes.create_string_buffer(program)
        fprog = struct.pack("HxxxxxxQ", len(program) // 8, ctypes.addressof(buffer))
        self.sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
        self.local_ports, self.remote_ports, self.responses, self.any_requests = wanted
        self.attached = True

    def settle(self, before: float, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        """Wait until every packet captured before ``before`` (epoch seconds) can be read: the
        block the kernel fills, if it opened before then and holds packets, is handed over
        (the next ``read`` gives its segments). At most ``timeout_s`` (a close still held
        then is read as unheard: ``WireTap.poll``)."""
        deadline = time.monotonic() + timeout_s
        while True:
            # every handed-over block back to the kernel: the socket polls readable at the next
            self.settled = self.read()
            base = self.block * BLOCK_SIZE
            _, _, status, count, _, _, _ = BLOCK_HEADER.unpack_from(self.ring, base)
            sec, nsec = BLOCK_OPENED.unpack_from(self.ring, base + BLOCK_OPENED_AT)
            left = deadline - time.monotonic()
            if (not status & TP_STATUS_USER and (not count or sec + nsec / 1e9 >= before)
                    or left <= 0):
                return
            if not status & TP_STATUS_USER:
                select.select([self.sock], [], [], left)

    def read(self) -> list[Segment]:
        """Every segment queued since the last read, in order.

        While responses are not kept, the segments of one socket whose payload bytes 4-7 are
        the same (a Kafka request's API key and version; its client_id is the same on every
        request of a socket) come as one, with their count, at the place and time of the last:
        a busy client's thousands of Produce or Fetch headers cost kmon a few objects a read.
        No run reaches across a SYN, FIN or RST: a 4-tuple reused by a new connection keeps
        each connection's requests on its side of the close and the open.
        """
        runs: dict[object, list] = {}  # repeat signature (or arrival) -> a run of segments
        done: list[list] = []  # the runs before the last SYN, FIN or RST, in order
        ring, merge, control = self.ring, not self.responses, packet_filter.TCP_CONTROL
        follows, ntohl = self.frames.follows, socket.ntohl
        fast, fast_net, fast_offset, fast_snaplen, fast_payload = self.fast
        last_at = len(ring) - fast.size
        taken = 0  # blocks read
        for _ in range(self.blocks):
            base = self.block * BLOCK_SIZE
            _, _, status, count, first, _, _ = BLOCK_HEADER.unpack_from(ring, base)
            if not status & TP_STATUS_USER:
                break
            at = base + first
            for _ in range(count):  # the hot loop: a busy client's every request header
                if merge and at <= last_at:  # a repeat laid out as the last request: one unpack
                    (step, sec, nsec, snaplen, net, version, raw, seq, offset, flags, size,
                     api) = fast.unpack_from(ring, at)
                    if (net == fast_net and version == 0x45 and offset == fast_offset
                            and snaplen >= fast_snaplen and not flags & control):
                        if not follows(raw, ntohl(seq), ntohl(size), sec):
                            at += step  # inside a frame, or not of this stream: no header
                            continue
                        key = raw + api
                        run = runs.pop(key, None) or [
                            sec, nsec, raw, ring[at + net + fast_payload:at + net + snaplen],
                            flags, 0, _ms(sec, nsec)]
                        run[0], run[1], run[5] = sec, nsec, run[5] + 1
                        runs[key] = run  # at the place of the last
                        at += step
                        continue
                step, sec, nsec, snaplen, net = PACKET_HEADER.unpack_from(ring, at)
                start, end, at = at + net, at + net + snaplen, at + step
                if ring[start] == 0x45 and snaplen >= 40:  # IPv4 without options
                    raw = ring[start + 12:start + 24]  # addresses and ports: one run of bytes
                    (seq,) = TCP_SEQ.unpack_from(ring, start + 24)
                    offset, flags = TCP_OFFSET_FLAGS.unpack_from(ring, start + 32)
                    if offset < MIN_DATA_OFFSET:
                        continue  # forged: TCP drops it
                    payload = start + 20 + (offset >> 4) * 4
                    if (merge and not flags & control
                            and (net, offset) != (fast_net, fast_offset)):
                        self.fast = _fast_layout(net, offset)  # the next repeats read as this
                        fast, fast_net, fast_offset, fast_snaplen, fast_payload = self.fast
                        last_at = len(ring) - fast.size
                else:
                    found = _tcp(ring, start, snaplen)
                    if found is None:
                        continue
                    raw, seq, payload, flags = found
                    payload += start
                if flags & control:  # an open, a close or a reset: the runs before it end
                    if flags & packet_filter.TCP_SYN:
                        self.frames.start(raw, seq)
                    done += runs.values()
                    done.append([sec, nsec, raw, ring[payload:end], flags, 1, _ms(sec, nsec)])
                    runs = {}
                    continue
                if payload + 4 <= end and not follows(
                        raw, seq, FRAME_SIZE_FIELD.unpack_from(ring, payload)[0], sec):
                    continue  # inside a frame, or not of this stream: no header
                # a request's signature; else a key of its own (runs only grow)
                key = raw + ring[payload + 4:payload + 8] if merge else len(runs)
                held = runs.pop(key, None) or [sec, nsec, raw, ring[payload:end], flags, 0,
                                               _ms(sec, nsec)]
                held[0], held[1], held[5] = sec, nsec, held[5] + 1
                runs[key] = held
            struct.pack_into("=I", ring, base + 8, 0)  # the block goes back to the kernel
            self.block = (self.block + 1) % self.blocks
            taken += 1
        if taken:  # the kernel drops only while the ring is full: then blocks were ready
            self._count_drops()
        endpoints, settled, self.settled = self.endpoints, self.settled, []
        return settled + [
            Segment(_ms(sec, nsec), *(endpoints.get(raw) or _remember(raw, endpoints)), data,
                    flags, repeats, first_ms)
            for sec, nsec, raw, data, flags, repeats, first_ms in [*done, *runs.values()]]

    def _count_drops(self) -> None:
        packets, drops, _ = struct.unpack("=III", self.sock.getsockopt(
            SOL_PACKET, PACKET_STATISTICS, 12))  # the kernel resets them on each read
        del packets
        self.drops += drops

    def close(self) -> None:
        with contextlib.suppress(AttributeError, BufferError, ValueError):
            self.ring.close()
        self.sock.close()


def _tcp(ring: mmap.mmap, start: int, snaplen: int) -> tuple[bytes, int, int, int] | None:
    """(address and port bytes, sequence number, payload offset, TCP flags) of an IPv4
    packet with options or an IPv6 packet at ``start`` in the ring (None for an unreadable
    one)."""
    version = ring[start] >> 4 if snaplen >= 40 else 0
    if version == 4:
        header = (ring[start] & 0x0F) * 4
        raw = ring[start + 12:start + 20] + ring[start + header:start + header + 4]
    elif version == 6 and snaplen >= 60:  # addresses, then the TCP header's ports
        header, raw = 40, ring[start + 8:start + 44]
    else:
        return None
    if snaplen < header + 20:
        return None
    (seq,) = TCP_SEQ.unpack_from(ring, start + header + 4)
    offset, flags = TCP_OFFSET_FLAGS.unpack_from(ring, start + header + 12)
    if offset < MIN_DATA_OFFSET:
        return None  # forged: TCP drops it
    return raw, seq, header + (offset >> 4) * 4, flags


@functools.lru_cache(maxsize=16)
def _fast_layout(net: int, offset: int) -> tuple[struct.Struct, int, int, int, int]:
    """How a request's frame in the ring reads in one unpack, when it is laid out like one
    whose IPv4 header (no options) starts at ``net`` and whose TCP data offset byte is
    ``offset`` (at least ``MIN_DATA_OFFSET``): (the struct, net, offset, least snaplen, payload
    start after ``net``). The struct reads the packet header (next, sec, nsec, snaplen, net),
    the IP version byte, the addresses and ports, the TCP sequence number, the TCP data offset
    and flags, and the request's size and its API key and version (the sequence number and
    size in network order)."""
    payload = 20 + (offset >> 4) * 4
    layout = struct.Struct(f"=IIII10xH{net - 28}xB11x12sI4xBB{payload - 34}xI4s")
    return layout, net, offset, payload + 8, payload


def _ms(sec: int, nsec: int) -> int:
    return sec * 1000 + nsec // 1_000_000


def _remember(raw: bytes, endpoints: dict[bytes, tuple[Address, Address]]
              ) -> tuple[Address, Address]:
    """(source, destination) of IP addresses and TCP ports ``raw``, kept in ``endpoints``."""
    if len(endpoints) >= MAX_ENDPOINTS:
        endpoints.clear()
    half = (len(raw) - 4) // 2
    text = socket.inet_ntoa if half == 4 else _ipv6_text
    src_port, dst_port = struct.unpack_from("!HH", raw, 2 * half)
    pair = endpoints[raw] = (text(raw[:half]), src_port), (text(raw[half:2 * half]), dst_port)
    return pair


def _ipv6_text(raw: bytes) -> str:
    return str(ipaddress.IPv6Address(raw))


def _bind_all(fd: int) -> None:
    """Bind the packet socket to every interface and protocol (Python's bind() needs a name)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    address = struct.pack("=HHiHBB8s", socket.AF_PACKET, socket.htons(ETH_P_ALL), 0, 0, 0, 0,
                          b"")
    if libc.bind(fd, address, len(address)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
