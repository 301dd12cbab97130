"""What polls learn and share across worker threads: brokers, the cluster, its groups, names.

The samplers of one session share one ``Directory`` (kept apart from their frozen
``SamplerSettings``); a process opened from a list shares its list's. The samplers of
several screens poll on different worker threads, and the cluster
is refreshed on another. Every read returns a copy or an immutable value taken
under the one lock, every write replaces or adds under it.
"""

from __future__ import annotations

import threading

from kmon.sources import bounded
from kmon.sources.brokers.admin import ClusterMetadata, GroupInfo
from kmon.sources.brokers.broker_query import ConfirmedBrokers
from kmon.sources.brokers.dns import Resolver
from kmon.sources.kernel.sockets import Endpoint

MAX_LEARNED = 1024  # broker endpoints remembered from what processes named, the latest kept


class Directory:
    """Brokers named by watched processes, the cluster's metadata, groups and idle limit, and
    the names looked up (``resolver``, its own lock and lookup thread)."""

    def __init__(self, cluster: ClusterMetadata | None = None,
                 groups: tuple[GroupInfo, ...] | None = None) -> None:
        self._lock = threading.Lock()
        self.resolver = resolver = Resolver()
        # broker endpoints any process of the session named (its statistics,
        # its wire): to find more clients of them, never to name another process's sockets
        self._learned: dict[Endpoint, int] = {}
        self._cluster, self._groups = cluster, groups
        self._broker_idle_ms: int | None = None  # the brokers' own limit, when they said it
        # broker endpoints kmon confirmed with its own query to each: these name the
        # sockets of every process (it has a lock of its own)
        self.confirmed = ConfirmedBrokers(resolver)

    def share(self, learned: dict[Endpoint, int]) -> None:
        """Add what one process named (a bounded table: the latest kept)."""
        with self._lock:
            bounded.put_all(self._learned, learned, MAX_LEARNED)

    @property
    def learned(self) -> dict[Endpoint, int]:
        """A copy of the brokers watched processes named."""
        with self._lock:
            return dict(self._learned)

    def learn_cluster(self, cluster: ClusterMetadata, groups: tuple[GroupInfo, ...] | None,
                      broker_idle_ms: int | None) -> None:
        """The cluster as last fetched (its idle limit only when it is to be used)."""
        with self._lock:
            self._cluster, self._groups = cluster, groups
            if broker_idle_ms:
                self._broker_idle_ms = broker_idle_ms

    @property
    def cluster(self) -> ClusterMetadata | None:
        with self._lock:
            return self._cluster

    @property
    def groups(self) -> tuple[GroupInfo, ...] | None:
        """Consumer groups as the cluster describes them, to infer coordinator connections."""
        with self._lock:
            return self._groups

    @property
    def broker_idle_ms(self) -> int | None:
        with self._lock:
            return self._broker_idle_ms

    def idle_limit_ms(self, configured: int) -> int:
        """The brokers' idle limit: as the cluster said it when learned, else ``configured``."""
        return self.broker_idle_ms or configured
