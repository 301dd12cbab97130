"""A raw packet socket with a kernel filter and a memory-mapped ring (``TPACKET_V3``).

``PacketCapture(local_ports, remote_ports)`` sees the TCP segments of those
local ports, and to or from those remote ports, on every interface, loopback
included, cut short by ``kmon.sources.packet_filter``;
``read()`` hands over what the kernel queued since the last call in a few
block-sized batches (no system call per packet), and ``drops`` counts what the
kernel could not queue. Needs CAP_NET_RAW: ``PermissionError`` otherwise.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import ipaddress
import mmap
import os
import socket
import struct
from dataclasses import dataclass

from kmon.sources import packet_filter

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
BLOCK_HEADER = struct.Struct("=IIIIIIQ")  # version, offset_to_priv, status, num_pkts, first, len
PACKET_HEADER = struct.Struct("=IIIIIIHH")  # next, sec, nsec, snaplen, len, status, mac, net


Address = tuple[str, int]  # (ip, port): cheaper to hash per packet than an Endpoint


@dataclass(frozen=True, slots=True)
class Segment:
    """One TCP segment: its endpoints and the captured start of its payload."""

    ts_ms: int
    src: Address
    dst: Address
    length: int  # payload bytes on the wire
    data: bytes  # the first bytes of the payload that the filter kept
    flags: int = 0  # the TCP flags (FIN 0x01, RST 0x04, ...)


class PacketCapture:
    """The filtered packet ring of one watched process."""

    def __init__(self, local_ports: set[int], remote_ports: set[int]) -> None:
        self.local_ports: set[int] = set()
        self.remote_ports: set[int] = set()
        self.responses = True
        self.drops = 0
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, 0)  # receives nothing yet
        try:
            self.loopback = socket.if_nametoindex("lo")
            self.set_ports(local_ports, remote_ports)
            self.sock.setsockopt(SOL_PACKET, PACKET_VERSION, TPACKET_V3)
            request = struct.pack("=7I", BLOCK_SIZE, BLOCKS, FRAME_SIZE,
                                  BLOCK_SIZE * BLOCKS // FRAME_SIZE, RETIRE_BLOCK_MS, 0, 0)
            self.sock.setsockopt(SOL_PACKET, PACKET_RX_RING, request)
            self.ring = mmap.mmap(self.sock.fileno(), BLOCK_SIZE * BLOCKS,
                                  mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            _bind_all(self.sock.fileno())  # from here on, the filter decides what is queued
            self.block = 0
        except BaseException:
            self.sock.close()
            raise

    def set_ports(self, local_ports: set[int], remote_ports: set[int],
                  responses: bool = True) -> None:
        """Keep the segments of these ports (responses too, if ``responses``) from now on; the
        kernel filter is rebuilt only when they changed."""
        wanted = (set(local_ports), set(remote_ports), responses)
        if wanted == (self.local_ports, self.remote_ports, self.responses):
            return
        program = packet_filter.pack(packet_filter.build(local_ports, remote_ports,
                                                         self.loopback, responses))
        buffer = ctypes.create_string_buffer(program)
        fprog = struct.pack("HxxxxxxQ", len(program) // 8, ctypes.addressof(buffer))
        self.sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
        self.local_ports, self.remote_ports, self.responses = wanted

    def read(self) -> list[Segment]:
        """Every segment queued since the last read, oldest first."""
        out: list[Segment] = []
        for _ in range(BLOCKS):
            base = self.block * BLOCK_SIZE
            _, _, status, count, first, _, _ = BLOCK_HEADER.unpack_from(self.ring, base)
            if not status & TP_STATUS_USER:
                break
            at = base + first
            for _ in range(count):
                out += _segment(self.ring, at)
                at += PACKET_HEADER.unpack_from(self.ring, at)[0]
            struct.pack_into("=I", self.ring, base + 8, 0)  # the block goes back to the kernel
            self.block = (self.block + 1) % BLOCKS
        self._count_drops()
        return out

    def _count_drops(self) -> None:
        packets, drops, _ = struct.unpack("=III", self.sock.getsockopt(
            SOL_PACKET, PACKET_STATISTICS, 12))  # the kernel resets them on each read
        del packets
        self.drops += drops

    def close(self) -> None:
        with contextlib.suppress(AttributeError, BufferError, ValueError):
            self.ring.close()
        self.sock.close()


def _segment(ring: mmap.mmap, at: int) -> list[Segment]:
    """The TCP segment of the packet at ``at`` in the ring (none for an unreadable one)."""
    _, sec, nsec, snaplen, _, _, _, net = PACKET_HEADER.unpack_from(ring, at)
    packet = ring[at + net:at + net + snaplen]
    version = packet[0] >> 4 if packet else 0
    if version == 4 and len(packet) >= 20:
        header = (packet[0] & 0x0F) * 4
        total = int.from_bytes(packet[2:4], "big")
        src_ip, dst_ip = socket.inet_ntoa(packet[12:16]), socket.inet_ntoa(packet[16:20])
    elif version == 6 and len(packet) >= 40:
        header, total = 40, 40 + int.from_bytes(packet[4:6], "big")
        src_ip = str(ipaddress.IPv6Address(packet[8:24]))
        dst_ip = str(ipaddress.IPv6Address(packet[24:40]))
    else:
        return []
    tcp = packet[header:header + 20]
    if len(tcp) < 20:
        return []
    src_port, dst_port = struct.unpack_from("!HH", tcp)
    payload = header + (tcp[12] >> 4) * 4
    return [Segment(sec * 1000 + nsec // 1_000_000, (src_ip, src_port), (dst_ip, dst_port),
                    max(0, total - payload), packet[payload:], tcp[13])]


def _bind_all(fd: int) -> None:
    """Bind the packet socket to every interface and protocol (Python's bind() needs a name)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    address = struct.pack("=HHiHBB8s", socket.AF_PACKET, socket.htons(ETH_P_ALL), 0, 0, 0, 0,
                          b"")
    if libc.bind(fd, address, len(address)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
