"""The parts every session is built of, built once: samplers sharing a socket reader and a
capture, the monitor with its kernel watch (or its TIME_WAIT count and the notice saying
what is unseen), the directory that knows the named cluster (kmon.engine.facade.open_session
puts them together)."""

from __future__ import annotations

from collections.abc import Iterable

from kmon.engine.directory import Directory
from kmon.engine.host_churn import HostTimeWaits
from kmon.engine.kernel_watch import open_kernel_watch
from kmon.engine.monitor import Monitor
from kmon.engine.sampler import ProcessSampler, SampleError
from kmon.engine.sessions import AttachFailed, LiveSession
from kmon.engine.targets import EngineSettings, ProcessTarget
from kmon.sources.brokers.admin import ClusterMetadata, ClusterState
from kmon.sources.brokers.dns import SETUP_WAIT_S, Resolver
from kmon.sources.clients.spool import SpoolError
from kmon.sources.kernel.socket_readers import open_socket_reader
from kmon.sources.kernel.sockets import Endpoint
from kmon.sources.packets.host_wire import HostWire


def monitor(settings: EngineSettings, samplers: list[ProcessSampler],
            ports: Iterable[int] = ()) -> tuple[Monitor, str | None]:
    """A Monitor with the settings' thresholds, and the kernel's TCP events following the
    brokers' ``ports`` where kmon may read them; else the host's closes counted, and the
    notice saying what kmon cannot see without them."""
    kernel, notice = open_kernel_watch(ports) if settings.kernel_events else (None, None)
    return Monitor(samplers, settings.max_events, settings.near_reap_fraction, settings.churn,
                   kernel=kernel, host_closes=HostTimeWaits() if notice else None), notice


def new_directory(cluster: ClusterState | None) -> Directory:
    """A new session's directory, knowing the cluster the user named (its brokers' names
    looked up now, before the first poll)."""
    if cluster is None:
        return Directory()
    directory = Directory(cluster.metadata, cluster.groups)
    directory.resolver.look_up(addresses(cluster.metadata))
    return directory


def broker_ports(cluster: ClusterMetadata | None) -> set[int]:
    """The ports of the cluster's brokers, for the kernel's filter."""
    return {b.port for b in cluster.brokers} if cluster else set()


def addresses(cluster: ClusterMetadata) -> list[str]:
    """The addresses of the cluster's brokers and its bootstrap servers."""
    return [*(b.address for b in cluster.brokers),
            *(text.strip() for text in cluster.bootstrap.split(","))]


def broker_endpoints(cluster: ClusterMetadata, resolver: Resolver) -> frozenset[Endpoint]:
    """Every endpoint of the cluster's brokers and of its bootstrap addresses, as far as
    ``resolver`` knows them now."""
    return frozenset(endpoint for address in addresses(cluster)
                     for endpoint in resolver.endpoints(address))


def processes(target: ProcessTarget, settings: EngineSettings,
              directory: Directory | None = None) -> LiveSession:
    """Samplers of the target's processes (several share one capture of the host); AttachFailed
    naming the first that cannot be watched."""
    cluster = target.cluster
    directory = directory or new_directory(cluster)
    if settings.one_look:  # a single snapshot: worth waiting a little for the names it meets
        directory.resolver.patience_s = SETUP_WAIT_S
    pids = list(dict.fromkeys(target.pids))
    wire = HostWire() if settings.sampler.wire == "auto" and len(pids) > 1 else None
    samplers: list[ProcessSampler] = []
    try:
        reader = open_socket_reader(settings.socket_reader)
        for pid in pids:
            samplers.append(ProcessSampler(pid, reader, settings.sampler, target.client_log,
                                           wire, directory))
    except (SampleError, SpoolError, OSError) as err:
        for sampler in samplers:
            sampler.close()
        raise AttachFailed(str(err)) from err
    watch, notice = monitor(settings, samplers, broker_ports(cluster.metadata if cluster else None))
    if notice is not None:
        for sampler in samplers:
            sampler.standing_notices.append(notice)
    return LiveSession(watch, settings.interval_ms, notice)
