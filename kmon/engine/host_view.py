"""Every Kafka client process on this host, and the cluster each one talks to.

A process is a Kafka client when it has a Kafka client library mapped
(librdkafka, kafka-clients: this finds agentless and instrumented clients of any
cluster) or holds a connection to a broker another client names (this finds
clients with no library to map: kafka-python, KafkaJS, Go). A process listening
on a broker endpoint kmon confirmed itself (a Metadata query to that endpoint
answered naming it) serves them (a broker, the embedded cluster) and is left
out, as is one whose listening socket another such process's connection (or its
own) reaches (a broker JVM carries the client classes: it is left out before any
client has named the brokers too), and kmon: what a client names cannot hide
another process. Clusters are told apart by kmon's own Metadata queries to the brokers
their clients use.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Collection, Mapping

from kmon.engine.sampler import bootstrap_argument
from kmon.evidence.logical import bootstrap_entries, bootstrap_of
from kmon.model import ProcessView, Snapshot
from kmon.sources.brokers.dns import parse_endpoint
from kmon.sources.kernel.host_sockets import HostClients, client_pids
from kmon.sources.kernel.sockdiag import SockDiagUnavailable
from kmon.sources.kernel.sockets import Endpoint
from kmon.sources.processes.process_info import LibraryScan

UNKNOWN_CLUSTER = "(brokers not known yet)"
MAX_CLUSTER_ID = 64  # longer is no Kafka cluster id (22 characters): the brokers name it


class KafkaProcesses:
    """The search of ``ClientDiscovery`` for the host view (see the module's docstring).

    The sources it asks: the sockets of the host (``HostClients``) and the processes with a
    Kafka library mapped (``LibraryScan``, which looks again every ``recheck_s`` at a
    process found without one); ``serving`` is the set of processes the last search found
    serving the brokers.
    """

    def __init__(self, recheck_s: float = 60.0) -> None:
        self.libraries = LibraryScan(recheck_s)
        self.sockets = HostClients()
        self.serving: set[int] = set()
        # the broker endpoints no client can forge (ConfirmedBrokers): who listens on one of
        # these serves the brokers; a listener on an endpoint a process merely named does not
        self.confirmed: frozenset[Endpoint] = frozenset()
        # the processes watched already: a search is not for their sockets (SocketOwners)
        self.watched: frozenset[int] = frozenset()

    def __call__(self, brokers: Collection[Endpoint]) -> set[int]:
        try:
            connected, self.serving = self.sockets.search(brokers, self.confirmed,
                                                          self.watched)
        except SockDiagUnavailable:  # psutil's scan: the clients, not who serves them
            connected, self.serving = client_pids(brokers, self.confirmed), set()
        mapped = self.libraries(skip=connected)
        self.serving |= self.sockets.serving(connected | mapped, settled=self.watched)
        return (connected | mapped) - self.serving - {os.getpid()}

    def connected(self, brokers: Collection[Endpoint]) -> dict[int, set[Endpoint]]:
        """The processes connected to ``brokers`` (PID -> those of them), for ``check``: the
        host's sockets to their ports alone (SockDiagUnavailable where the kernel refuses)."""
        return self.sockets.connected(brokers)

    def check(self, strangers: Mapping[int, Collection[Endpoint]],
              brokers: Collection[Endpoint]) -> set[int]:
        """Of the processes that just connected (PID -> the endpoints each connected to),
        the clients, as a search would find them, without listing the host: connected to a
        broker, or with a Kafka library mapped, and serving no one."""
        connected = {pid for pid, remotes in strangers.items()
                     if any(remote in brokers for remote in remotes)}
        candidates = connected | self.libraries.of(strangers.keys() - connected)
        serving = self.sockets.serving(candidates, self.confirmed)
        self.serving |= serving
        return candidates - serving - {os.getpid()}

    def close(self) -> None:
        """Release the netlink socket."""
        self.sockets.close()


def cluster_labels(snapshot: Snapshot,
                   clusters: Mapping[Endpoint, tuple[str | None, tuple[str, ...]]]
                   ) -> dict[int, str]:
    """Each process's cluster: as kmon's own query answered (``answered_clusters``); where
    none is confirmed, the process's own brokers alone, else the bootstrap servers it was
    given (sorted). What a process says of brokers (its spool, its wire, its command line)
    never joins it, or anyone else, to another process's cluster."""
    answered = answered_clusters(snapshot, clusters)
    labels = {}
    for view in snapshot.processes:
        own = sorted(view.summary.brokers) or sorted(_bootstrap(view))
        labels[view.pid] = answered.get(view.pid) or (_named(None, tuple(own)) if own
                                                      else UNKNOWN_CLUSTER)
    return labels


def answered_clusters(snapshot: Snapshot,
                      clusters: Mapping[Endpoint, tuple[str | None, tuple[str, ...]]]
                      ) -> dict[int, str]:
    """The cluster of each process that kmon's own Metadata query to a broker it is
    connected to named (``clusters``, from ``ConfirmedBrokers.clusters``): its cluster id,
    or where it sent none, its first broker and how many more (the same whichever broker
    was asked). A process no answer names yet is left out. A view's distinct remotes are
    looked up (``ProcessView.summary``, made once a poll), not each of its connections."""
    labels = {}
    for view in snapshot.processes:
        answered = {_named(*clusters[endpoint]) for remote in view.summary.remotes
                    if (endpoint := parse_endpoint(remote)) is not None
                    and endpoint in clusters}
        if answered:
            labels[view.pid] = min(answered)
    return labels


def _bootstrap(view: ProcessView) -> list[str]:
    """The bootstrap servers a process was given: its clients' configuration, else its
    command line's."""
    try:
        args = shlex.split(view.cmdline)
    except ValueError:  # not the quoting kmon's own describe() gives
        args = []
    return bootstrap_entries(bootstrap_of(view.clients, bootstrap_argument(args)))


def _named(cluster_id: str | None, brokers: tuple[str, ...]) -> str:
    """A cluster's label: its id, else its first broker and how many more."""
    if cluster_id and len(cluster_id) <= MAX_CLUSTER_ID:
        return cluster_id
    return f"{brokers[0]} +{len(brokers) - 1}" if len(brokers) > 1 else brokers[0]
