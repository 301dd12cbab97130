"""Cluster metadata through the Kafka AdminClient: brokers and the controller."""

from __future__ import annotations

from dataclasses import dataclass

from kmon.sources.resolve import Resolver
from kmon.sources.sockets import Endpoint


class ClusterUnreachable(Exception):
    """The cluster did not answer a metadata request in time."""


@dataclass(frozen=True)
class BrokerInfo:
    """One broker from the cluster's metadata."""

    broker_id: int
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ClusterMetadata:
    """The brokers of one cluster as its metadata names them."""

    bootstrap: str
    brokers: tuple[BrokerInfo, ...]
    controller_id: int | None

    def endpoints(self, resolver: Resolver) -> dict[Endpoint, int]:
        """Broker id of every endpoint a socket to this cluster may show."""
        return {endpoint: b.broker_id for b in self.brokers
                for endpoint in resolver.endpoints(b.address)}


def fetch_metadata(bootstrap: str, extra_conf: dict[str, str] | None = None,
                   timeout_s: float = 10.0) -> ClusterMetadata:
    """Ask the cluster at ``bootstrap`` for its brokers; ClusterUnreachable if it cannot."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    conf = {"bootstrap.servers": bootstrap, "client.id": "kmon", **(extra_conf or {})}
    conf.setdefault("log_level", 0)  # failures are reported once, below
    try:
        admin = AdminClient(conf)
    except (KafkaException, ValueError, TypeError) as err:
        raise ClusterUnreachable(f"invalid client configuration for {bootstrap}: {err}") from err
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as err:
        raise ClusterUnreachable(
            f"cluster {bootstrap} did not answer within {timeout_s:g}s ({err.args[0].str()})"
        ) from err
    brokers = tuple(sorted((BrokerInfo(b.id, b.host, b.port) for b in metadata.brokers.values()),
                           key=lambda b: b.broker_id))
    controller = metadata.controller_id if metadata.controller_id >= 0 else None
    return ClusterMetadata(bootstrap=bootstrap, brokers=brokers, controller_id=controller)
