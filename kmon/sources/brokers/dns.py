"""Broker host names to IP endpoints, looked up off the poll loop and cached with a bound."""

from __future__ import annotations

import functools
import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Iterable

from kmon.sources import bounded
from kmon.sources.kernel.sockets import MAX_PORT, Endpoint, normalize_ip, shared_endpoint

CACHE_SECONDS = 300.0
MAX_CACHED = 1024  # names' answers kept (a cluster has a few dozen brokers)
MAX_QUEUED = 64  # names waiting for a lookup
PARSED_KEPT = 16384  # parse_endpoint's answers (a host view of 5,000 connections asks
#   for each of their remotes every poll)
SETUP_WAIT_S = 5.0  # how long a command's setup waits for the names the user gave


def split_host_port(address: str) -> tuple[str, int] | None:
    """``host:port`` or ``[v6]:port`` (optionally with a ``/suffix``) into its parts."""
    address = address.strip().split("/", 1)[0]
    if "://" in address:
        address = address.split("://", 1)[1]
    host, sep, port = address.rpartition(":")
    # ASCII digits only ("²" is a digit int() refuses), a port TCP can have (a larger one
    # overflows getaddrinfo): the address may come from a watched process's command line
    if not sep or not port.isascii() or not port.isdigit() or int(port) > MAX_PORT:
        return None
    return host.strip("[]"), int(port)


@functools.lru_cache(maxsize=PARSED_KEPT)
def parse_endpoint(text: str) -> Endpoint | None:
    """An ``ip:port`` (or ``[v6]:port``) as kmon prints endpoints; None for anything else.
    Kept for the ``PARSED_KEPT`` last texts: each poll asks again for every connection."""
    parts = split_host_port(text)
    return Endpoint(normalize_ip(parts[0]), parts[1]) if parts else None


class Resolver:
    """Resolves ``host:port`` strings to the set of endpoints a socket may show, never making
    the caller wait for DNS.

    An address whose host is an IP literal is answered at once. A name is looked up by a
    thread of the resolver's own: until its answer is in, ``endpoints`` returns what is
    cached (nothing, the first time), so a poll never waits for a slow or hostile name
    server. At most ``MAX_QUEUED`` names wait for a lookup (more are asked again later) and
    at most ``MAX_CACHED`` answers are kept, the least recently used dropped first: a
    process, packet or broker that names thousands of hosts costs kmon a bounded table.
    """

    def __init__(self, max_cached: int = MAX_CACHED, max_queued: int = MAX_QUEUED) -> None:
        self.max_cached, self.max_queued = max_cached, max_queued
        # seconds the caller may still wait for names in all (a one-shot command's single
        # snapshot: ``kmon attach --once``); none for a dashboard's polls
        self.patience_s = 0.0
        self._cache: dict[tuple[str, int], tuple[float, frozenset[Endpoint]]] = {}
        self._queued: dict[tuple[str, int], None] = {}  # names waiting, oldest first
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._worker: threading.Thread | None = None

    def endpoints(self, address: str) -> frozenset[Endpoint]:
        """The endpoints ``address`` stands for, as far as kmon knows now."""
        parts, answer = _to_look_up(address)
        if parts is None:
            return answer
        with self._lock:
            cached = self._cache.get(parts)
            if cached is not None:
                bounded.put(self._cache, parts, cached, self.max_cached)  # the most recently used
            if cached is None or time.monotonic() - cached[0] >= CACHE_SECONDS:
                self._queue(parts)
            if cached is not None or self.patience_s <= 0:
                return cached[1] if cached else frozenset()
        started = time.monotonic()
        self.settle(self.patience_s)
        self.patience_s -= time.monotonic() - started
        with self._lock:
            cached = self._cache.get(parts)
            return cached[1] if cached else frozenset()

    def known(self, address: str) -> frozenset[Endpoint] | None:
        """The endpoints of ``address`` once kmon knows them (an IP literal, a name looked
        up, even to nothing), else None with its lookup asked for: for a caller that
        decides once what an address names, never waiting."""
        parts, answer = _parsed(address)
        if parts is None:
            return answer
        with self._lock:
            cached = self._cache.get(parts)
            if cached is None:
                self._queue(parts)
            return None if cached is None else cached[1]

    def look_up(self, addresses: Iterable[str], timeout_s: float = SETUP_WAIT_S
                ) -> frozenset[Endpoint]:
        """The endpoints of addresses the user gave, waiting up to ``timeout_s`` for their
        names: for a command's setup, never from a poll."""
        addresses = list(addresses)
        for address in addresses:
            self.endpoints(address)
        self.settle(timeout_s)
        return frozenset().union(*(self.endpoints(address) for address in addresses))

    def settle(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the names asked so far."""
        until = time.monotonic() + timeout_s
        with self._wake:
            while self._queued and (left := until - time.monotonic()) > 0:
                self._wake.wait(left)

    def _queue(self, parts: tuple[str, int]) -> None:
        """Ask the lookup thread for ``parts`` (lock held), starting it the first time."""
        if parts in self._queued or len(self._queued) >= self.max_queued:
            return
        self._queued[parts] = None
        if self._worker is None:
            self._worker = threading.Thread(target=self._look_up, daemon=True,
                                            name="kmon name lookups")
            self._worker.start()
        self._wake.notify_all()

    def _look_up(self) -> None:
        """The lookup thread: one name at a time, oldest first, for as long as kmon runs."""
        while True:
            with self._wake:
                while not self._queued:
                    self._wake.wait()
                parts = next(iter(self._queued))
            found = _getaddrinfo(*parts)
            with self._wake:
                bounded.put(self._cache, parts, (time.monotonic(), found), self.max_cached)
                del self._queued[parts]
                self._wake.notify_all()


@functools.lru_cache(maxsize=PARSED_KEPT)
def _to_look_up(address: str) -> tuple[tuple[str, int] | None, frozenset[Endpoint]]:
    """``_parsed(address)`` with the endpoints every socket to it shares, kept for the
    ``PARSED_KEPT`` last addresses: each process's poll asks for its cluster's."""
    return _parsed(address, shared_endpoint)


def _parsed(address: str, endpoint: Callable[[str, int], Endpoint] = Endpoint
            ) -> tuple[tuple[str, int] | None, frozenset[Endpoint]]:
    """The name ``address`` asks to look up (host, port), or None and its endpoints where it
    needs no lookup: none for what is no ``host:port``, its own for an IP literal host. Not
    kept: a broker's answer (``Resolver.known``) may list thousands no cache should hold."""
    parts = split_host_port(address)
    if parts is None:
        return None, frozenset()
    host, port = parts
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return parts, frozenset()  # a name
    return None, frozenset({endpoint(normalize_ip(host), port)})


def _getaddrinfo(host: str, port: int) -> frozenset[Endpoint]:
    """The endpoints the system's resolver gives for a name (none where it fails)."""
    try:
        return frozenset(shared_endpoint(normalize_ip(str(info[4][0])), port)
                         for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
    except (OSError, UnicodeError):
        return frozenset()
