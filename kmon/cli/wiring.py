"""One place that turns a command's options and the config file into the cluster it names,
the sampler settings and the monitor (attach, watch, ps, record, demo)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable

from kmon.classify import BROKER_IDLE_MS
from kmon.cli.config import ClusterConfig, Config
from kmon.engine.monitor import Monitor
from kmon.engine.sampler import ProcessSampler, SamplerSettings
from kmon.errors import UserError
from kmon.model import Snapshot
from kmon.sources.brokers.admin import ClusterMetadata, GroupInfo
from kmon.sources.kernel.sockets import Endpoint


def named_cluster(args: argparse.Namespace, config: Config) -> ClusterConfig | None:
    """The cluster ``-b`` (or a command's positional CLUSTER) names, its properties from the
    config, then ``-F``, then ``-X``; None when none is named."""
    positional = getattr(args, "cluster", None)
    name = args.bootstrap or positional
    if positional and args.bootstrap and positional != args.bootstrap:
        raise UserError(f"the cluster is named twice ({positional} and -b {args.bootstrap}); "
                        "give it once")
    if name is None:
        if args.properties or args.command_config:
            raise UserError("-X and -F are properties of a cluster: name it with -b NAME or "
                            "-b HOST:PORT")
        return None
    from kmon.cli.command_config import read_command_config

    extra = read_command_config(args.command_config) if args.command_config else {}
    return config.resolve_cluster(name, {**extra, **dict(args.properties)})


def require_processes(pids: Iterable[int]) -> None:
    """A UserError for the first PID with no process: said before any cluster is asked."""
    from kmon.sources.processes.process_info import exists

    for pid in pids:
        if not exists(pid):
            raise UserError(f"no process with PID {pid}")


def configured_idle_ms(args: argparse.Namespace, named: ClusterConfig | None) -> int | None:
    """The brokers' idle limit the user set: ``--broker-idle``, else the config's
    ``broker_idle`` for the cluster; None leaves it to the cluster."""
    return getattr(args, "broker_idle_ms", None) or (named.broker_idle_ms if named else None)


def sampler_settings(args: argparse.Namespace, config: Config, named: ClusterConfig | None = None,
                     metadata: ClusterMetadata | None = None,
                     groups: tuple[GroupInfo, ...] | None = None,
                     require_kafka: bool = True,
                     not_kafka_hint: str = "pass --any-process") -> SamplerSettings:
    """Settings for every sampler of a command: the idle limits, the cluster, wire capture,
    and the command's own hint for a process that shows no sign of Kafka."""
    configured = configured_idle_ms(args, named)
    idle_ms = configured or (metadata.broker_idle_ms if metadata else None) or BROKER_IDLE_MS
    return SamplerSettings(broker_idle_ms=idle_ms, idle_from_cluster=configured is None,
                           cluster=metadata, groups=groups,
                           require_kafka=require_kafka,
                           middlebox_idle_ms=config.thresholds.middlebox_idle_ms,
                           wire=getattr(args, "wire", "auto"),
                           tls=getattr(args, "tls", "auto") == "auto",
                           not_kafka_hint=not_kafka_hint)


def monitor(samplers: Iterable[ProcessSampler], config: Config, **kwargs) -> Monitor:
    """A Monitor with the config's idle warning and churn thresholds (close it after use)."""
    return Monitor(samplers, near_reap_fraction=config.thresholds.idle_warning,
                   churn=config.churn, **kwargs)


def broker_endpoints(cluster: ClusterMetadata, settings: SamplerSettings) -> frozenset[Endpoint]:
    """Every endpoint of the cluster's brokers and of its bootstrap addresses."""
    return settings.resolver.look_up([b.address for b in cluster.brokers]
                                     + cluster.bootstrap.split(","))


def clients_of(snapshot: Snapshot, brokers: frozenset[Endpoint]) -> set[int]:
    """The processes of ``snapshot`` with a connection to one of ``brokers`` (a named
    cluster's clients, for ``ps -b`` and ``serve -b``)."""
    from kmon.sources.brokers.dns import parse_endpoint

    return {view.pid for view in snapshot.processes
            if any(parse_endpoint(c.remote or "") in brokers for c in view.connections)}


def connected_in(events, brokers: frozenset[Endpoint]) -> set[int]:
    """The processes whose ``events`` (a poll's) tell a connection to one of ``brokers``
    (one that opened and closed between two polls has no row)."""
    from kmon.sources.brokers.dns import parse_endpoint

    return {event.pid for event in events
            if event.remote and parse_endpoint(event.remote) in brokers}


def cluster_state(named: ClusterConfig, timeout_s: float, groups: bool = False):
    """The named cluster's metadata (a ClusterState with its groups when ``groups``); a
    UserError saying why it did not answer, and what to try next."""
    from kmon.sources.brokers.admin import (
        ClusterUnreachable,
        admin_client,
        fetch_cluster,
        fetch_metadata,
    )
    from kmon.sources.brokers.reachability import why_unreachable

    try:
        if groups:
            return fetch_cluster(admin_client(named.bootstrap, named.properties),
                                 named.bootstrap, timeout_s)
        return fetch_metadata(named.bootstrap, named.properties, timeout_s)
    except ClusterUnreachable as err:
        if "did not answer" not in str(err):  # a configuration librdkafka refused
            raise UserError(str(err)) from err
        raise UserError(why_unreachable(named.name, named.bootstrap, named.properties,
                                        timeout_s, str(err))) from err
