"""Cluster metadata through the Kafka AdminClient: brokers, the controller, consumer groups."""

from __future__ import annotations

import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from kmon.sources.brokers.broker_query import bootstrap_brokers
from kmon.sources.brokers.dns import Resolver
from kmon.sources.kafka_protocol import IDLE_LIMIT
from kmon.sources.kernel.sockets import Endpoint

if TYPE_CHECKING:
    from confluent_kafka import ConsumerGroupState, KafkaError
    from confluent_kafka.admin import AdminClient

GROUPS_UNSUPPORTED = "the cluster does not answer ListGroups/DescribeGroups"
ASK_STEP_S = 0.5  # the metadata asked in steps: a refused or failed login ends the wait
AUTHENTICATION, ALL_BROKERS_DOWN = -169, -187  # librdkafka's local error codes


class ClusterUnreachable(Exception):
    """The cluster did not answer a metadata request in time."""


@dataclass(frozen=True)
class BrokerInfo:
    """One broker from the cluster's metadata."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None  # None when unknown (the cluster would not describe itself)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ClusterMetadata:
    """The brokers of one cluster as its metadata names them."""

    bootstrap: str
    brokers: tuple[BrokerInfo, ...]
    # any live broker in KRaft (clients cannot reach the quorum): tells only that a real
    # cluster answered, never which node is the active controller
    controller_id: int | None
    broker_idle_ms: int | None = None  # connections.max.idle.ms, as a broker describes it
    cluster_id: str | None = None  # as the Metadata answer names it (Kafka 0.10.1 and later)

    def endpoints(self, resolver: Resolver) -> dict[Endpoint, int]:
        """Broker id of every endpoint a socket to this cluster may show."""
        return {endpoint: b.broker_id for b in self.brokers
                for endpoint in resolver.endpoints(b.address)}


@dataclass(frozen=True)
class GroupMember:
    """One member of a consumer group, as its coordinator describes it."""

    client_id: str
    host: str


@dataclass(frozen=True)
class GroupInfo:
    """One consumer group, as the cluster lists and describes it."""

    group_id: str
    state: str | None  # stable, empty, preparing_rebalancing, ...
    coordinator_id: int | None
    members: tuple[GroupMember, ...] | None  # None when the group could not be described


@dataclass(frozen=True)
class ClusterState:
    """One full refresh: metadata, and the consumer groups when the cluster lists them.

    ``groups`` is None when the cluster cannot list them (``groups_error`` says
    why); with ``groups`` set, a ``groups_error`` means some are missing.
    """

    metadata: ClusterMetadata
    groups: tuple[GroupInfo, ...] | None
    groups_error: str | None


def admin_client(bootstrap: str, extra_conf: dict[str, str] | None = None) -> AdminClient:
    """An AdminClient for ``bootstrap``; ClusterUnreachable for a configuration it refuses."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[KafkaError] = []  # what librdkafka reports while kmon waits (error_cb)
    # confluent-kafka's types leave out a function-valued setting such as error_cb
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "client.id": "kmon",
                            **(extra_conf or {}), "error_cb": errors.append}
    conf.setdefault("log_level", 0)  # failures are reported once, by the caller
    try:
        admin = AdminClient(conf)
    except (KafkaException, ValueError, TypeError) as err:
        reason = err.args[0].str() if isinstance(err, KafkaException) else err
        raise ClusterUnreachable(
            f"invalid client configuration for {bootstrap}: {reason}") from err
    # the errors and the protocol ride on the client, for every later call to read
    # (_list_brokers, _result, _bootstrap_only)
    admin.kmon_errors = errors  # type: ignore[attr-defined]
    admin.kmon_plaintext = (  # type: ignore[attr-defined]
        str(conf.get("security.protocol", "PLAINTEXT")).upper() == "PLAINTEXT")
    return admin


def refused_property(properties: dict[str, str]) -> tuple[str | None, bool] | None:
    """Whether librdkafka takes ``properties``: a client is made with them, no broker
    named, and dropped. None if it does; else the key it refused (None: no one key, the
    set) and whether it knows that key's name (then only the value is wrong). Its message
    is not given: it may quote what the properties hold."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    try:
        AdminClient({**properties, "log_level": 0})
    except (KafkaException, ValueError, TypeError) as err:
        said = err.args[0].str() if isinstance(err, KafkaException) else str(err)
        key = next((k for k in properties if f'"{k}"' in said), None)
        return key, key is not None and not said.startswith("No such configuration property")
    return None


def fetch_metadata(bootstrap: str, extra_conf: dict[str, str] | None = None,
                   timeout_s: float = 10.0) -> ClusterMetadata:
    """Ask the cluster at ``bootstrap`` for its brokers and their idle limit; ClusterUnreachable
    if it cannot."""
    admin = admin_client(bootstrap, extra_conf)
    return _with_idle_limit(admin, _list_brokers(admin, bootstrap, timeout_s), timeout_s)


def fetch_cluster(admin: AdminClient, bootstrap: str, timeout_s: float = 10.0) -> ClusterState:
    """Brokers (with racks where the cluster describes itself), controller and groups.

    ``admin`` comes from ``admin_client`` and may be reused across refreshes.
    Raises ClusterUnreachable only when the metadata itself cannot be had.
    """
    metadata = _with_racks(admin, _list_brokers(admin, bootstrap, timeout_s), timeout_s)
    metadata = _with_idle_limit(admin, metadata, timeout_s)
    groups, groups_error = _groups(admin, timeout_s)
    return ClusterState(metadata=metadata, groups=groups, groups_error=groups_error)


def _list_brokers(admin: AdminClient, bootstrap: str, timeout_s: float) -> ClusterMetadata:
    from confluent_kafka import KafkaException

    errors: list[KafkaError] = getattr(admin, "kmon_errors", [])
    errors.clear()  # what librdkafka reports from this question on
    started = time.monotonic()
    while True:
        left = timeout_s - (time.monotonic() - started)
        try:
            metadata = admin.list_topics(timeout=max(0.05, min(ASK_STEP_S, left)))
            break
        except KafkaException as err:
            admin.poll(0)  # serves error_cb
            failed = next((e for e in errors if e.code() == AUTHENTICATION), None)
            if failed is not None:
                raise ClusterUnreachable(
                    f"cluster {bootstrap} refused kmon's login: {failed.str()}; check "
                    "sasl.mechanism, sasl.username and sasl.password (-X or -F FILE)") from err
            down = any(e.code() == ALL_BROKERS_DOWN for e in errors)
            if down or left <= ASK_STEP_S:
                answered = _bootstrap_only(admin, bootstrap, left)
                if answered is not None:
                    return answered
                waited = time.monotonic() - started
                raise ClusterUnreachable(
                    f"cluster {bootstrap} did not answer within {waited:.1f}s "
                    f"({'every broker down' if down else err.args[0].str()})") from err
    # confluent-kafka types a broker's host as None, the value its C side replaces
    brokers = tuple(sorted((BrokerInfo(b.id, b.host, b.port)  # type: ignore[arg-type]
                            for b in metadata.brokers.values()),
                           key=lambda b: b.broker_id))
    controller = metadata.controller_id if metadata.controller_id >= 0 else None
    return ClusterMetadata(bootstrap=bootstrap, brokers=brokers, controller_id=controller,
                           cluster_id=getattr(metadata, "cluster_id", None) or None)


def _bootstrap_only(admin: AdminClient, bootstrap: str,
                    left_s: float) -> ClusterMetadata | None:
    """The cluster as its bootstrap answers kmon's own Metadata query (plaintext only), for a
    cluster whose bootstrap answers while the brokers it advertises cannot be reached (the
    client library waits for them: a forwarder or load balancer in front of brokers
    advertising addresses this host cannot reach); None where none answers."""
    if not getattr(admin, "kmon_plaintext", False):
        return None
    answer = bootstrap_brokers(bootstrap, max(left_s, ASK_STEP_S))
    if not answer:
        return None
    brokers = tuple(sorted((BrokerInfo(i, host, port) for i, (host, port) in answer.items()),
                           key=lambda b: b.broker_id))
    return ClusterMetadata(bootstrap=bootstrap, brokers=brokers, controller_id=None,
                           cluster_id=answer.cluster_id)


def _with_racks(admin: AdminClient, metadata: ClusterMetadata, timeout_s: float) -> ClusterMetadata:
    """``metadata`` with racks from DescribeCluster, or unchanged where it does not work.

    librdkafka sends DescribeCluster to the controller and waits for it; a
    controller id naming no broker (librdkafka's mock cluster says 0) would
    only time out, so it is not asked then.
    """
    from confluent_kafka import KafkaException

    if metadata.controller_id not in {b.broker_id for b in metadata.brokers}:
        return metadata
    try:
        described = _result(admin, admin.describe_cluster(request_timeout=timeout_s), timeout_s)
    except KafkaException:
        return metadata
    if described is None:
        return metadata
    brokers = tuple(sorted((BrokerInfo(n.id, n.host, n.port, n.rack or None)
                            for n in described.nodes), key=lambda b: b.broker_id))
    controller = described.controller.id if described.controller else metadata.controller_id
    return replace(metadata, brokers=brokers or metadata.brokers, controller_id=controller)


def _with_idle_limit(admin: AdminClient, metadata: ClusterMetadata,
                     timeout_s: float) -> ClusterMetadata:
    """``metadata`` with the brokers' ``connections.max.idle.ms`` as the first broker
    describes its configuration (DescribeConfigs), or unchanged where it will not (no
    permission; librdkafka's mock cluster, whose controller id names no broker)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource, ResourceType

    if metadata.controller_id not in {b.broker_id for b in metadata.brokers}:
        return metadata
    resource = ConfigResource(ResourceType.BROKER, str(metadata.brokers[0].broker_id))
    try:
        described = _result(admin, admin.describe_configs([resource],
                                                          request_timeout=timeout_s)[resource],
                            timeout_s)
        idle_ms = int(described[IDLE_LIMIT].value)
    except (KafkaException, KeyError, ValueError, TypeError):
        return metadata
    return replace(metadata, broker_idle_ms=idle_ms) if 0 < idle_ms < 1 << 63 else metadata


def _result(admin: AdminClient, future: Future, timeout_s: float):
    """``future``'s result, waited for in steps; None after ``timeout_s``, or at once when
    librdkafka has said every broker is down since the metadata was asked (the brokers the
    cluster advertises cannot be reached: none would answer); KafkaException as it raises."""
    errors: list[KafkaError] = getattr(admin, "kmon_errors", [])
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return future.result(timeout=ASK_STEP_S)
        except FutureTimeout:
            admin.poll(0)  # serves error_cb
            if (any(e.code() == ALL_BROKERS_DOWN for e in errors)
                    or time.monotonic() >= deadline):
                return None


def _groups(admin: AdminClient,
            timeout_s: float) -> tuple[tuple[GroupInfo, ...] | None, str | None]:
    from confluent_kafka import KafkaException

    try:
        listing = admin.list_consumer_groups(request_timeout=timeout_s).result()
    except KafkaException as err:
        return None, _group_error("ListGroups", err.args[0])
    errors = [_group_error("ListGroups", e) for e in listing.errors]
    if errors and not listing.valid:
        return None, errors[0]
    listed = sorted(listing.valid, key=lambda g: g.group_id)
    futures = (admin.describe_consumer_groups([g.group_id for g in listed],
                                             request_timeout=timeout_s) if listed else {})
    groups = []
    for group in listed:
        try:
            described = futures[group.group_id].result()
        except KafkaException as err:
            errors.append(_group_error("DescribeGroups", err.args[0]))
            groups.append(GroupInfo(group.group_id, _state_name(group.state), None, None))
            continue
        coordinator = described.coordinator.id if described.coordinator else None
        members = tuple(GroupMember(m.client_id, m.host.lstrip("/")) for m in described.members)
        groups.append(GroupInfo(group.group_id, _state_name(described.state), coordinator,
                                members))
    return tuple(groups), _summary(errors)


def _group_error(api: str, error: KafkaError) -> str:
    from confluent_kafka import KafkaError

    if error.code() == KafkaError._UNSUPPORTED_FEATURE:
        return GROUPS_UNSUPPORTED
    return f"{api} failed: {error.str()}"


def _summary(errors: list[str]) -> str | None:
    if not errors:
        return None
    more = len(errors) - 1
    return errors[0] + (f" (and {more} more)" if more else "")


def _state_name(state: ConsumerGroupState | None) -> str | None:
    return None if state is None else state.name.lower()
