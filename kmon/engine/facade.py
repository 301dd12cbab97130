"""The one door between the engine and the dashboard: sessions to poll, record and close.

The screens never build samplers, sockets or recorders themselves. They hold a
``ProcessSession`` (one process, live or replayed), a ``ClusterSession`` (a
cluster and its local clients) or a ``HostSession`` (every Kafka client on this
host) and call these methods from worker threads:
``poll()``, ``stop_recording()``, ``attach()``, ``refresh_cluster()``.
"""

from __future__ import annotations

import platform
import threading
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Protocol

from kmon.engine import host_churn
from kmon.engine.cluster_watch import (
    ClusterView,
    ClusterWatcher,
    GroupRow,
    broker_connection_counts,
    groups_coordinated,
    groups_view,
)
from kmon.engine.discovery import ClientDiscovery
from kmon.engine.heap import settle_heap
from kmon.engine.host_churn import HostTimeWaits
from kmon.engine.host_view import (
    UNKNOWN_CLUSTER,
    KafkaProcesses,
    answered_clusters,
    cluster_labels,
)
from kmon.engine.kernel_watch import open_kernel_watch
from kmon.engine.monitor import Monitor
from kmon.engine.sampler import ProcessSampler, SampleError, SamplerSettings
from kmon.model import ChurnThresholds, Event, Snapshot
from kmon.sources import bounded
from kmon.sources.brokers.dns import parse_endpoint, split_host_port
from kmon.sources.kernel.socket_readers import open_socket_reader
from kmon.sources.kernel.sockets import Endpoint
from kmon.sources.packets.host_wire import HostWire

__all__ = ["UNKNOWN_CLUSTER", "AttachFailed", "ClusterSession", "ClusterView", "GroupRow",
           "HostSession", "ProcessSession", "SessionClosed", "SnapshotSource",
           "broker_connection_counts", "groups_coordinated", "groups_view", "settle_heap"]

DISCOVER_EVERY_S = 5.0
EARLY_FOR_S = 10.0  # a local group the cluster has not described: asked early this long
EARLY_EVERY_S = 1.0  # at most this often
MAX_GROUPS_SEEN = 1024  # local groups remembered with when they were first seen


class SnapshotSource(Protocol):
    """Where refreshes come from: a live Monitor, or a recording replayed."""

    def poll(self) -> tuple[Snapshot, list[Event]]: ...


class AttachFailed(Exception):
    """A process the user asked to attach to cannot be watched (gone, no permission, …)."""


class SessionClosed(Exception):
    """A poll of a session already closed (its samplers are released)."""


def _check_open(closed: bool) -> None:
    if closed:
        raise SessionClosed("the session is closed")


class Recordable:
    """The recording the user may start and stop in a session (``kmon record``'s files).

    A session's ``poll()`` (a worker thread) hands each refresh to ``recorded()``, so
    Parquet flushes never run on the UI thread; ``stop_recording()`` compacts the parts
    and belongs in a worker too.
    """

    interval_ms: int
    _record_lock: threading.Lock  # the session's own: recording changes never wait for a poll
    _recorder = None

    def recorded(self, polled: tuple[Snapshot, list[Event]]) -> tuple[Snapshot, list[Event]]:
        """``polled``, added to the running recording, if any."""
        with self._record_lock:
            if self._recorder is not None:
                self._recorder.add(*polled)
        return polled

    def start_recording(self, root: Path) -> None:
        """Record every following refresh under ``root`` (as ``kmon record`` does).

        ``root`` is made and verified now (OSError saying why kmon will not write
        there); nothing is written in it before the next refresh.
        """
        from kmon.record.recorder import Recorder, new_session_id

        host = platform.node()
        with self._record_lock:
            if self._recorder is None:
                self._recorder = Recorder(root, host, new_session_id(host), self.interval_ms)

    def stop_recording(self) -> str:
        """Close the recording (compacting its parts: call from a worker); what it wrote."""
        with self._record_lock:
            recorder, self._recorder = self._recorder, None
            if recorder is None:
                return "not recording"
            summary = recorder.close()
        return (f"{sum(summary.rows.values())} rows in {len(summary.files)} files "
                f"under {recorder.root}")


class ProcessSession(Recordable):
    """One process's refreshes, and the recording the user may start and stop."""

    def __init__(self, source: SnapshotSource, interval_ms: int = 1000) -> None:
        self.source = source
        self.interval_ms = interval_ms
        self._poll_lock = threading.Lock()  # one poll at a time; close waits for it
        self._closed = False
        self._record_lock = threading.Lock()

    def poll(self) -> tuple[Snapshot, list[Event]]:
        """The next snapshot and its events (recorded when a recording runs)."""
        with self._poll_lock:
            _check_open(self._closed)
            polled = self.source.poll()
        return self.recorded(polled)

    @property
    def finished(self) -> bool:
        """True once the source has no more to show: a replay past its recording's end."""
        return bool(getattr(self.source, "finished", False))

    def close(self) -> None:
        """Stop any recording and release the source (JMX helpers, sockets), once the poll
        under way, if any, has finished; a later poll raises SessionClosed."""
        self.stop_recording()
        with self._poll_lock:
            if self._closed:
                return
            self._closed = True
            close = getattr(self.source, "close", None)
            if close is not None:
                close()


def open_process(pid: int, settings: SamplerSettings, interval_ms: int = 1000,
                 kernel_events: bool = True) -> ProcessSession:
    """A session of one live process, with its own socket reader (and the kernel's TCP
    events where kmon may read them); AttachFailed if it can't."""
    try:
        sampler = ProcessSampler(pid, open_socket_reader(), settings)
    except (SampleError, OSError) as err:
        raise AttachFailed(str(err)) from err
    kernel, notice = open_kernel_watch() if kernel_events else (None, None)
    if notice is not None:
        sampler.standing_notices.append(notice)
    return ProcessSession(Monitor([sampler], kernel=kernel), interval_ms)


class LocalClients(Recordable):
    """Many local client processes, found by ``find`` (see ClientDiscovery) and polled
    together, their wire read once for the host (one packet capture), and their recording;
    what the watch screen and the host view share. The kernel's TCP events, where kmon may
    read them, follow the brokers' ``ports`` and those the clients use."""

    def __init__(self, settings: SamplerSettings,
                 find: Callable[[Collection[Endpoint]], set[int]] | None,
                 discover_every_s: float, interval_ms: int,
                 churn: ChurnThresholds | None, kernel_events: bool = True,
                 ports: Iterable[int] = ()) -> None:
        self.settings, self.interval_ms, self.kernel_events = settings, interval_ms, kernel_events
        kernel, self.kernel_notice = open_kernel_watch(ports) if kernel_events else (None, None)
        self.monitor = Monitor([], churn=churn, kernel=kernel, host_closes=HostTimeWaits()
                               if self.kernel_notice else None)
        self.discovery = ClientDiscovery(open_socket_reader(), settings, discover_every_s, find,
                                         HostWire() if settings.wire == "auto" else None)
        self._lock = threading.Lock()  # one poll at a time; close waits for it
        self._closed = False
        self._record_lock = threading.Lock()

    @property
    def notices(self) -> list[str]:
        """Problems finding or reading the local clients, and what kmon cannot see."""
        closed = self.monitor.host_closed_1m
        return self.discovery.notices + ([self.kernel_notice] if self.kernel_notice else []) + (
            [host_churn.in_words(closed)] if closed is not None else [])

    @property
    def kernel_lost(self) -> int:
        """The kernel's TCP events dropped since the session began (a ring buffer was full)."""
        kernel = self.monitor.kernel
        return 0 if kernel is None else kernel.lost

    def events_of(self, pid: int) -> list[Event]:
        """The remembered events of one watched process."""
        with self._lock:
            return [e for e in self.monitor.events if e.pid == pid]

    def attach(self, pid: int) -> ProcessSession:
        """A session of one of the clients (its own sampler and socket reader)."""
        return open_process(pid, self.settings, self.interval_ms, self.kernel_events)

    def close(self) -> None:
        """Stop every sampler (JMX helpers) and the search for clients, once the poll under
        way, if any, has finished, and any recording; a later poll raises SessionClosed."""
        self.stop_recording()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.monitor.close()
            self.discovery.close()


class ClusterSession(LocalClients):
    """A cluster's metadata and groups, and every local client of it, for the watch screen.

    ``poll()`` (a worker thread) searches the host for new clients when due and
    takes one snapshot of every client; ``refresh_cluster()`` (another worker)
    refreshes the metadata when ``cluster_due()``.
    """

    def __init__(self, watcher: ClusterWatcher, settings: SamplerSettings, pids: list[int],
                 discover_every_s: float = DISCOVER_EVERY_S, interval_ms: int = 1000,
                 churn: ChurnThresholds | None = None,
                 kernel_events: bool = True) -> None:
        ports = {parts[1] for text in watcher.view.bootstrap.split(",")
                 if (parts := split_host_port(text.strip())) is not None}
        super().__init__(settings, None, discover_every_s, interval_ms, churn, kernel_events,
                         ports)
        self.watcher = watcher
        self._groups_lock = threading.Lock()
        self._groups_seen: dict[str, float] = {}  # local group -> when first seen (clock)
        self._undescribed = False  # a local group first seen lately is not described
        self._early_at = float("-inf")  # when the cluster was last asked
        for pid in pids:
            self.discovery.add(self.monitor, pid)

    @property
    def view(self) -> ClusterView:
        """The cluster as last fetched."""
        return self.watcher.view

    @property
    def next_retry_in_s(self) -> float | None:
        return self.watcher.next_retry_in_s

    def cluster_due(self) -> bool:
        """True when the cluster's metadata should be fetched again: when its refresh is
        due, and early (at most every ``EARLY_EVERY_S``) while a group the local clients
        are in, first seen in the last ``EARLY_FOR_S``, is not described yet (unless the
        cluster's last answer said it could not describe its groups)."""
        with self._groups_lock:
            early = (self._undescribed and self.watcher.view.groups_error is None
                     and self.watcher.clock() - self._early_at >= EARLY_EVERY_S)
        return self.watcher.due(early)

    def refresh_cluster(self) -> ClusterView:
        """Fetch the cluster's metadata and groups (blocking: call from a worker)."""
        with self._groups_lock:
            self._early_at = self.watcher.clock()
        return self.watcher.refresh()

    def _see_groups(self, snapshot: Snapshot) -> None:
        """Note the local clients' groups that the cluster has not described (its view's
        groups with members), and whether one was first seen in the last ``EARLY_FOR_S``."""
        described = {g.group_id for g in self.watcher.view.groups or ()
                     if g.members is not None}
        now = self.watcher.clock()
        with self._groups_lock:
            seen, lately = self._groups_seen, False
            for group_id in {c.group_id for view in snapshot.processes
                             for c in view.clients if c.group_id} - described:
                if group_id not in seen:
                    bounded.put(seen, group_id, now, MAX_GROUPS_SEEN)
                lately |= now - seen[group_id] < EARLY_FOR_S
            self._undescribed = lately

    def poll(self) -> tuple[Snapshot, list[Event]]:
        """Search for new clients when due, then one snapshot of every client."""
        with self._lock:
            _check_open(self._closed)
            view = self.watcher.view
            if view.brokers:  # its groups infer the coordinators of agentless clients
                self.settings.directory.learn_cluster(
                    view.metadata, view.groups,
                    view.broker_idle_ms if self.settings.idle_from_cluster else None)
                self.discovery.update(self.monitor,
                                      set(view.metadata.endpoints(self.settings.resolver)))
            polled = self.monitor.poll()
        self._see_groups(polled[0])
        return self.recorded(polled)


class HostSession(LocalClients):
    """Every Kafka client process on this host (kmon.engine.host_view), for the host view.

    ``poll()`` (a worker thread) searches the host when due, and at once when the
    clients name brokers not seen before; a process found serving brokers kmon
    confirmed itself is dropped. The brokers searched for are those the clients named
    and, when the command names a cluster (``-b``), that cluster's: a client with no
    library to map and no other client naming its brokers (kafka-python, KafkaJS, Go)
    is found by them, and the kernel's events follow their ports from the start (not
    only once a connect to one is seen: a host's flood of connects elsewhere can fill
    that ring).
    """

    def __init__(self, settings: SamplerSettings, discover_every_s: float = DISCOVER_EVERY_S,
                 interval_ms: int = 1000, churn: ChurnThresholds | None = None,
                 kernel_events: bool = True) -> None:
        self.search = KafkaProcesses()
        self.settings = settings
        super().__init__(settings, self.search, discover_every_s, interval_ms, churn,
                         kernel_events, {endpoint.port for endpoint in self._named_brokers()})
        self._brokers: frozenset[Endpoint] = frozenset()

    @property
    def host(self) -> str:
        """This host's name."""
        return self.monitor.host

    def poll(self) -> tuple[Snapshot, list[Event]]:
        """Search for new clients when due, then one snapshot of every client."""
        with self._lock:
            _check_open(self._closed)
            brokers = frozenset(self.settings.directory.learned) | self._named_brokers()
            if brokers != self._brokers:
                self._brokers = brokers
                self.discovery.next_search = 0.0
            self.search.confirmed = frozenset(self.settings.directory.confirmed.brokers)
            self.discovery.update(self.monitor, brokers)
            for pid in self.monitor.samplers.keys() & self.search.serving:
                self.monitor.remove(pid)
            polled = self.monitor.poll()
        return self.recorded(polled)

    def _named_brokers(self) -> frozenset[Endpoint]:
        """The endpoints of the named cluster's brokers (its Metadata, kmon's own query)."""
        cluster = self.settings.directory.cluster
        return frozenset(cluster.endpoints(self.settings.resolver)) if cluster else frozenset()

    def cluster_labels(self, snapshot: Snapshot) -> dict[int, str]:
        """Each process's cluster, from kmon's own confirmed queries where there are any
        (see kmon.engine.host_view.cluster_labels)."""
        return cluster_labels(snapshot, self.settings.directory.confirmed.clusters())

    def answered_clusters(self, snapshot: Snapshot) -> dict[int, str]:
        """The cluster of each process kmon's own queries have named (see
        kmon.engine.host_view.answered_clusters)."""
        return answered_clusters(snapshot, self.settings.directory.confirmed.clusters())

    def clusters_asked(self, snapshot: Snapshot) -> set[int]:
        """The processes whose brokers kmon's own queries are still asking (or have yet to
        ask) which cluster they serve."""
        directory = self.settings.directory
        return {view.pid for view in snapshot.processes if directory.confirmed.unanswered(
            directory.learned.keys() & {parse_endpoint(c.remote or "") for c in view.connections})}
