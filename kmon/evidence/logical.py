"""A client's own view of its connections, from its librdkafka statistics (and the
bootstrap servers it was given).

Each broker entry of the statistics that may hold a socket becomes a
`LogicalConnection` classified in the Java node-id convention.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kmon import classify
from kmon.model import ClientInstance, Role
from kmon.sources.brokers.dns import Resolver, split_host_port
from kmon.sources.clients.librdkafka_stats import ClientStats
from kmon.sources.kernel.sockets import Endpoint

MAX_BOOTSTRAP = 16  # entries of a process's bootstrap string kmon looks at

# librdkafka broker states in which a TCP socket exists.
SOCKET_STATES = frozenset({
    "CONNECT", "SSL_HANDSHAKE", "AUTH_LEGACY", "AUTH", "AUTH_HANDSHAKE", "AUTH_REQ",
    "APIVERSION_QUERY", "UP", "UPDATE", "REAUTH",
})


@dataclass
class LogicalConnection:
    """One connection as the client itself counts it."""

    client: ClientStats
    broker_name: str  # librdkafka's name: host:port/2, host:port/bootstrap, GroupCoordinator
    role: Role
    node_id: int | None
    broker_id: int | None
    address: str  # host:port
    endpoints: frozenset[Endpoint]
    tx_bytes: int
    rx_bytes: int
    requests_sent: int
    responses_received: int
    in_flight: int
    rtt_ms: float | None
    tx_idle_ms: int | None  # at the time the statistics were written
    rx_idle_ms: int | None
    connects: int


def _idle_ms(micros: int | None) -> int | None:
    return None if micros is None or micros < 0 else micros // 1000


def bootstrap_of(stats: Iterable[ClientStats | ClientInstance], cmdline_bootstrap: str) -> str:
    """The bootstrap servers a process gave: its clients' configuration, else its command
    line's."""
    return ",".join(c.config.get("bootstrap.servers", "") for c in stats) or cmdline_bootstrap


def bootstrap_entries(bootstrap: str) -> list[str]:
    """The ``host:port`` entries of a bootstrap string, its first ``MAX_BOOTSTRAP``."""
    return [entry.strip() for entry in bootstrap.split(",", MAX_BOOTSTRAP)[:MAX_BOOTSTRAP]
            if split_host_port(entry) is not None]


def bootstrap_position(address: str, bootstrap_servers: str) -> int | None:
    wanted = split_host_port(address)
    for position, entry in enumerate(s for s in bootstrap_servers.split(",") if s.strip()):
        if split_host_port(entry) == wanted:
            return position
    return None


def broker_ids_by_address(brokers: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Broker id of each learned broker, by its ``host:port`` nodename."""
    return {b["nodename"]: b["nodeid"] for b in brokers.values()
            if b.get("source") == "learned" and b.get("nodeid", -1) >= 0 and b.get("nodename")}


def classify_broker_entry(name: str, entry: dict[str, Any], learned: dict[str, int],
                          bootstrap_servers: str) -> tuple[Role, int | None, int | None]:
    """(role, Java node id, broker id) of one librdkafka statistics broker entry."""
    nodeid = entry.get("nodeid", -1)
    address = entry.get("nodename", "")
    if classify.is_logical_coordinator(name) or entry.get("source") == "logical":
        broker_id = nodeid if nodeid >= 0 else learned.get(address)
        if broker_id is None or broker_id > classify.MAX_BROKER_ID:  # no Java node id for it
            return Role.COORDINATOR, None, broker_id
        return Role.COORDINATOR, classify.coordinator_node_id(broker_id), broker_id
    if nodeid < 0 or name.endswith("/bootstrap"):
        position = bootstrap_position(address, bootstrap_servers)
        node_id = classify.bootstrap_node_id(position) if position is not None else -1
        return Role.BOOTSTRAP, node_id, None
    return Role.BROKER, nodeid, nodeid  # a learned broker, whatever its id


def logical_connections(client: ClientStats, resolver: Resolver) -> list[LogicalConnection]:
    """The connections of ``client`` that may hold a socket right now."""
    brokers = client.brokers
    learned = broker_ids_by_address(brokers)
    bootstrap_servers = client.config.get("bootstrap.servers", "")
    out = []
    for name, entry in brokers.items():
        if entry.get("state") not in SOCKET_STATES or not entry.get("nodename"):
            continue
        role, node_id, broker_id = classify_broker_entry(name, entry, learned, bootstrap_servers)
        rtt = entry["rtt_avg_us"]
        out.append(LogicalConnection(
            client=client, broker_name=name, role=role, node_id=node_id, broker_id=broker_id,
            address=entry["nodename"], endpoints=resolver.endpoints(entry["nodename"]),
            tx_bytes=entry["txbytes"], rx_bytes=entry["rxbytes"],
            requests_sent=entry["tx"], responses_received=entry["rx"],
            in_flight=entry["outbuf_cnt"] + entry["waitresp_cnt"],
            rtt_ms=rtt / 1000 if rtt > 0 else None,
            tx_idle_ms=_idle_ms(entry["txidle"]), rx_idle_ms=_idle_ms(entry["rxidle"]),
            connects=entry["connects"],
        ))
    return out


def learned_brokers(clients: list[ClientStats], resolver: Resolver) -> dict[Endpoint, int]:
    """Broker id of every endpoint the clients' statistics have learned."""
    known: dict[Endpoint, int] = {}
    for client in clients:
        for address, broker_id in broker_ids_by_address(client.brokers).items():
            for endpoint in resolver.endpoints(address):
                known[endpoint] = broker_id
    return known
