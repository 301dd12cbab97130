"""Broker host names to IP endpoints, cached so the poll loop does no DNS work."""

from __future__ import annotations

import ipaddress
import socket
import time

from kmon.sources.sockets import Endpoint

CACHE_SECONDS = 300.0


def normalize_ip(ip: str) -> str:
    """An IPv4-mapped IPv6 address as plain IPv4; other addresses unchanged."""
    try:
        addr = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return ip
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped:
        return str(addr.ipv4_mapped)
    return str(addr)


def split_host_port(address: str) -> tuple[str, int] | None:
    """``host:port`` or ``[v6]:port`` (optionally with a ``/suffix``) into its parts."""
    address = address.strip().split("/", 1)[0]
    if "://" in address:
        address = address.split("://", 1)[1]
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def parse_endpoint(text: str) -> Endpoint | None:
    """An ``ip:port`` (or ``[v6]:port``) as kmon prints endpoints; None for anything else."""
    parts = split_host_port(text)
    return Endpoint(normalize_ip(parts[0]), parts[1]) if parts else None


class Resolver:
    """Resolves ``host:port`` strings to the set of endpoints a socket may show."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, int], tuple[float, frozenset[Endpoint]]] = {}

    def endpoints(self, address: str) -> frozenset[Endpoint]:
        parts = split_host_port(address)
        if parts is None:
            return frozenset()
        now = time.monotonic()
        cached = self._cache.get(parts)
        if cached and now - cached[0] < CACHE_SECONDS:
            return cached[1]
        host, port = parts
        try:
            found = frozenset(
                Endpoint(normalize_ip(info[4][0]), port)
                for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            )
        except (OSError, UnicodeError):
            found = frozenset()
        self._cache[parts] = (now, found)
        return found
