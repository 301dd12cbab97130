"""One place that turns a command's options and the config file into what the engine
builder takes (kmon.engine.facade.open_session): the cluster named, its target and the
frozen settings (attach, watch, ps, record, serve, demo)."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from typing import Any

from kmon.classify import BROKER_IDLE_MS
from kmon.cli.config import ClusterConfig, Config
from kmon.engine.facade import (
    ClusterState,
    ClusterTarget,
    EngineSettings,
    SamplerSettings,
    ask_cluster,
    exists,
)
from kmon.errors import UserError


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


def cluster_target(named: ClusterConfig, args: argparse.Namespace,
                   refresh_s: float = 30.0) -> ClusterTarget:
    """The named cluster as the engine takes it, with the command's wait for its answers."""
    return ClusterTarget(named.bootstrap, dict(named.properties), named.name,
                         timeout_s=args.cluster_timeout, refresh_s=refresh_s)


def require_processes(pids: Iterable[int]) -> None:
    """A UserError for the first PID with no process: said before any cluster is asked."""
    for pid in pids:
        if not exists(pid):
            raise UserError(f"no process with PID {pid}")


def configured_idle_ms(args: argparse.Namespace, named: ClusterConfig | None) -> int | None:
    """The brokers' idle limit the user set: ``--broker-idle``, else the config's
    ``broker_idle`` for the cluster; None leaves it to the cluster."""
    return getattr(args, "broker_idle_ms", None) or (named.broker_idle_ms if named else None)


def engine_settings(args: argparse.Namespace, config: Config, named: ClusterConfig | None = None,
                    cluster: ClusterState | None = None, require_kafka: bool = True,
                    not_kafka_hint: str = "pass --any-process",
                    **session: Any) -> EngineSettings:
    """Settings for a command's session: the idle limits, wire capture, the command's own
    hint for a process that shows no sign of Kafka, the config's thresholds, and the
    ``session``'s own fields (kmon.engine.targets.EngineSettings)."""
    configured = configured_idle_ms(args, named)
    idle_ms = configured or (cluster.metadata.broker_idle_ms if cluster else None) or (
        BROKER_IDLE_MS)
    sampler = SamplerSettings(broker_idle_ms=idle_ms, idle_from_cluster=configured is None,
                              require_kafka=require_kafka,
                              middlebox_idle_ms=config.thresholds.middlebox_idle_ms,
                              wire=getattr(args, "wire", "auto"),
                              tls=getattr(args, "tls", "auto") == "auto",
                              not_kafka_hint=not_kafka_hint)
    return EngineSettings(sampler, near_reap_fraction=config.thresholds.idle_warning,
                          churn=config.churn, **session)


def cluster_state(named: ClusterConfig, args: argparse.Namespace,
                  groups: bool = False) -> ClusterState:
    """The named cluster's metadata (with its groups when ``groups``); a UserError saying
    why it did not answer, and what to try next."""
    return ask_cluster(named.name, named.bootstrap, dict(named.properties), args.cluster_timeout,
                       groups)
