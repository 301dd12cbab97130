"""Sessions of many local client processes found as they appear: a cluster's
(``ClusterSession``) and the host's (``HostSession``), see kmon.engine.facade."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable

from kmon.engine import host_churn
from kmon.engine.build import broker_endpoints, broker_ports, monitor, new_directory, processes
from kmon.engine.cluster_watch import ClusterView, ClusterWatcher
from kmon.engine.discovery import ClientDiscovery
from kmon.engine.host_view import KafkaProcesses, answered_clusters, cluster_labels
from kmon.engine.sessions import LiveSession, Recordable, check_open
from kmon.engine.targets import EngineSettings, ProcessTarget
from kmon.model import Event, Snapshot
from kmon.sources import bounded
from kmon.sources.brokers.admin import ClusterState
from kmon.sources.brokers.dns import parse_endpoint, split_host_port
from kmon.sources.kernel.socket_readers import open_socket_reader
from kmon.sources.kernel.sockets import Endpoint
from kmon.sources.packets.host_wire import HostWire

EARLY_FOR_S = 10.0  # a local group the cluster has not described: asked early this long
EARLY_EVERY_S = 1.0  # at most this often
MAX_GROUPS_SEEN = 1024  # local groups remembered with when they were first seen


class LocalClients(Recordable):
    """Many local client processes, found by ``find`` (see ClientDiscovery) and polled
    together, their wire read once for the host (one packet capture), and their recording;
    what the watch screen and the host view share. The kernel's TCP events, where kmon may
    read them, follow the brokers' ``ports`` and those the clients use; what the polls
    learn is ``directory``, knowing ``cluster`` from the start."""

    def __init__(self, settings: EngineSettings,
                 find: Callable[[Collection[Endpoint]], set[int]] | None,
                 ports: Iterable[int] = (), cluster: ClusterState | None = None) -> None:
        self.settings, self.interval_ms = settings, settings.interval_ms
        self.directory = new_directory(cluster)
        ports = frozenset(ports)
        self.monitor, self.kernel_notice = monitor(settings, [], ports)
        self.discovery = ClientDiscovery(
            open_socket_reader(settings.socket_reader), settings.sampler, self.directory,
            settings.discover_every_s, find,
            HostWire(ports) if settings.sampler.wire == "auto" else None)
        self._lock = threading.Lock()  # one poll at a time; close waits for it
        self._closed = False
        self._record_lock = threading.Lock()

    @property
    def host(self) -> str:
        """This host's name."""
        return self.monitor.host

    @property
    def pids(self) -> list[int]:
        """The processes watched now."""
        with self._lock:
            return list(self.monitor.samplers)

    @property
    def known_brokers(self) -> frozenset[Endpoint]:
        """The broker endpoints the watched processes named so far."""
        return frozenset(self.directory.learned)

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

    def attach(self, pid: int) -> LiveSession:
        """A session of one of the clients (its own sampler and socket reader), sharing what
        this session's polls learned."""
        return processes(ProcessTarget((pid,)), self.settings, self.directory)

    def close(self) -> None:
        """Stop any recording, every sampler (JMX helpers) and the search for clients:
        ``_close``."""
        self._close(self._lock, self._release)

    def _release(self) -> None:
        self.monitor.close()
        self.discovery.close()


class ClusterSession(LocalClients):
    """A cluster's metadata and groups, and every local client of it, for the watch screen.

    ``poll()`` (a worker thread) searches the host for new clients when due and
    takes one snapshot of every client; ``refresh_cluster()`` (another worker)
    refreshes the metadata when ``cluster_due()``.
    """

    def __init__(self, watcher: ClusterWatcher, settings: EngineSettings,
                 pids: Iterable[int] = ()) -> None:
        ports = {parts[1] for text in watcher.view.bootstrap.split(",")
                 if (parts := split_host_port(text.strip())) is not None}
        super().__init__(settings, None, ports)
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
        """Fetch the cluster's metadata and groups, and look up its brokers' names
        (blocking: call from a worker)."""
        with self._groups_lock:
            self._early_at = self.watcher.clock()
        view = self.watcher.refresh()
        self.directory.resolver.look_up(b.address for b in view.brokers)
        return view

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
            check_open(self._closed)
            view = self.watcher.view
            if view.brokers:  # its groups infer the coordinators of agentless clients
                self.directory.learn_cluster(
                    view.metadata, view.groups,
                    view.broker_idle_ms if self.settings.sampler.idle_from_cluster else None)
                self.discovery.update(self.monitor, broker_endpoints(
                    view.metadata, self.directory.resolver))
            polled = self.monitor.poll()
        self._see_groups(polled[0])
        return self.recorded(polled)


class HostSession(LocalClients):
    """Every Kafka client process on this host (kmon.engine.host_view), for the host view.

    ``poll()`` (a worker thread) searches the host when due, and at once when the
    clients name brokers not seen before; a process found serving brokers kmon
    confirmed itself is dropped. With ``cluster``, the user asked for that cluster's
    clients (``of_cluster``): its brokers are searched for with those the clients named,
    and the kernel's events follow their ports from the start (not only once a connect to
    one is seen: a host's flood of connects elsewhere can fill that ring).
    """

    def __init__(self, settings: EngineSettings, cluster: ClusterState | None = None) -> None:
        self.search = KafkaProcesses()
        super().__init__(settings, self.search,
                         broker_ports(cluster.metadata if cluster else None), cluster)
        self._brokers: frozenset[Endpoint] = frozenset()
        self._named = None if cluster is None else broker_endpoints(
            cluster.metadata, self.directory.resolver)

    def poll(self) -> tuple[Snapshot, list[Event]]:
        """Search for new clients when due, then one snapshot of every client."""
        with self._lock:
            check_open(self._closed)
            # a named cluster's brokers too: a client with no library to map and no other
            # client naming its brokers (kafka-python, KafkaJS, Go) is found by them
            brokers = self.known_brokers | (self._named or frozenset())
            if brokers != self._brokers:
                self._brokers = brokers
                self.discovery.search_now()
            self.search.confirmed = frozenset(self.directory.confirmed.brokers)
            self.search.watched = frozenset(self.monitor.samplers)
            self.discovery.update(self.monitor, brokers)
            for pid in self.monitor.samplers.keys() & self.search.serving:
                self.monitor.remove(pid)
            polled = self.monitor.poll()
        return self.recorded(polled)

    def of_cluster(self, snapshot: Snapshot, events: Iterable[Event] = ()) -> set[int]:
        """The processes of ``snapshot`` the user asked for: every one, or those with a
        connection to the named cluster's brokers, and those whose ``events`` (a poll's)
        tell one (a connection that opened and closed between two polls has no row)."""
        named = self._named
        if named is None:
            return {view.pid for view in snapshot.processes}
        return {view.pid for view in snapshot.processes
                if any(parse_endpoint(remote) in named for remote in view.summary.remotes)} | {
                    event.pid for event in events
                    if event.remote and parse_endpoint(event.remote) in named}

    def cluster_labels(self, snapshot: Snapshot) -> dict[int, str]:
        """Each process's cluster, from kmon's own confirmed queries where there are any
        (see kmon.engine.host_view.cluster_labels)."""
        return cluster_labels(snapshot, self.directory.confirmed.clusters())

    def answered_clusters(self, snapshot: Snapshot) -> dict[int, str]:
        """The cluster of each process kmon's own queries have named (see
        kmon.engine.host_view.answered_clusters)."""
        return answered_clusters(snapshot, self.directory.confirmed.clusters())

    def clusters_asked(self, snapshot: Snapshot) -> set[int]:
        """The processes whose brokers kmon's own queries are still asking (or have yet to
        ask) which cluster they serve."""
        directory = self.directory
        return {view.pid for view in snapshot.processes if directory.confirmed.unanswered(
            directory.learned.keys() & {parse_endpoint(r) for r in view.summary.remotes})}
