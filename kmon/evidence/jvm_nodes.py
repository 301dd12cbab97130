"""A JVM's Kafka clients and their connections as the clients count them (JMX and log).

Each node id of each client instance becomes a `JvmNode`: its counters from
JMX, when they last moved (node metrics outlive their socket, so a moving
counter is the sign of life, never the metric's presence), and what the
client's log says of its address and of when it opened and closed.
"""

from __future__ import annotations

from dataclasses import dataclass

from kmon.classify import broker_of_node_id, role_of_node_id
from kmon.evidence.java_log_nodes import ClientState, NodeState, NodeTable
from kmon.model import ClientInstance, Role
from kmon.sources.brokers.dns import Resolver
from kmon.sources.jvm.jmx import JmxReading, JvmClient
from kmon.sources.kernel.sockets import Endpoint, normalize_ip

COUNTERS = ("outgoing-byte-total", "incoming-byte-total", "request-total", "response-total")
_CLOSED = ("disconnected", "idle_closed")
CLOSE_LINGER_MS = 2000  # a socket may outlive its close line in the log by this much
NodeKey = tuple[str, str, int]  # a JVM client's type, its client.id, and the node id


@dataclass(frozen=True)
class Activity:
    """When a node's JMX counters last moved, as far as the readings tell.

    ``moved`` is the (earlier, later) pair of reading times between which they
    last moved, None when they have not moved since first seen; ``steady_from``
    is the reading time since which they have not moved, up to ``latest_ms``.
    """

    moved: tuple[int, int] | None
    steady_from: int
    latest_ms: int


class CounterHistory:
    """Remembers each node's counters across readings, to see which ones move."""

    def __init__(self) -> None:
        self._values: dict[NodeKey, tuple[float | None, ...]] = {}
        self._moved: dict[NodeKey, tuple[int, int]] = {}
        self._steady: dict[NodeKey, int] = {}
        self._last_ms: int | None = None

    def update(self, reading: JmxReading) -> None:
        """Fold in a reading (a reading seen before changes nothing)."""
        if reading.ts_ms == self._last_ms:
            return
        for client in reading.clients:
            for node_id, values in client.nodes.items():
                key = (client.type, client.client_id, node_id)
                now = tuple(values.get(name) for name in COUNTERS)
                before = self._values.get(key)
                if before is None:
                    self._steady[key] = reading.ts_ms
                elif before != now and self._last_ms is not None:
                    self._moved[key] = (self._last_ms, reading.ts_ms)
                    self._steady[key] = reading.ts_ms
                self._values[key] = now
        self._last_ms = reading.ts_ms

    def activity(self, client: JvmClient, node_id: int) -> Activity | None:
        key = (client.type, client.client_id, node_id)
        if key not in self._steady or self._last_ms is None:
            return None
        return Activity(self._moved.get(key), self._steady[key], self._last_ms)


@dataclass
class JvmNode:
    """One connection (node id) of one Java client instance, as the client counts it."""

    client: str  # ClientInstance.name
    node_id: int
    endpoints: frozenset[Endpoint] | None  # None: the address is unknown, any socket may be it
    address_from: str  # "log", "metadata" or "none"
    source: str = "jmx"  # where the node id comes from: "jmx", or "log" alone
    address: str | None = None  # host:port as the client names it
    out_bytes: int | None = None
    in_bytes: int | None = None
    requests: int | None = None
    responses: int | None = None
    latency_ms: float | None = None
    activity: Activity | None = None
    opened_ms: int | None = None  # from the log
    last_io_ms: int | None = None  # the log's last request or response on it (DEBUG)
    connects: int | None = None  # >1: the JMX totals span reconnects (log, or JMX counts)

    @property
    def role(self) -> Role:
        return role_of_node_id(self.node_id)

    @property
    def broker_id(self) -> int | None:
        return broker_of_node_id(self.node_id)


def _int(values: dict[str, float], name: str) -> int | None:
    value = values.get(name)
    return None if value is None else int(value)


def _instance_names(clients: list[tuple[str, str]]) -> list[str]:
    """A client id names its instance, with its type where several types share it."""
    ids = [cid for cid, _ in clients]
    return [cid if ids.count(cid) == 1 else f"{cid} ({ctype})" for cid, ctype in clients]


def _log_client(table: NodeTable, client_id: str, ctype: str,
                only: bool) -> ClientState | None:
    """The log's record of a JMX client (an anonymous log client belongs to a lone client)."""
    found = [c for c in table.clients() if c.client_id == client_id
             and c.client_type in (None, ctype)]
    if not found and only:
        found = [c for c in table.clients() if c.client_id is None]
    return found[0] if found else None


def _endpoints(state: NodeState | None, resolver: Resolver) -> frozenset[Endpoint]:
    if state is None or state.host is None or state.port is None:
        return frozenset()
    found = set(resolver.endpoints(f"{state.host}:{state.port}"))
    if state.address:
        found.add(Endpoint(normalize_ip(state.address), state.port))
    return frozenset(found)


def log_brokers(table: NodeTable, resolver: Resolver) -> dict[Endpoint, int]:
    """Broker id of every endpoint the log names for a broker or coordinator node."""
    known: dict[Endpoint, int] = {}
    for client in table.clients():
        for state in client.nodes.values():
            broker = broker_of_node_id(state.node_id)
            if broker is not None:
                known.update(dict.fromkeys(_endpoints(state, resolver), broker))
    return known


def _closed_for_good(state: NodeState | None, activity: Activity | None, now_ms: int) -> bool:
    """The log saw it close a while ago, and its counters have not moved since.

    The client logs a close before its socket's descriptor is gone (NIO releases a
    channel registered with a selector at the next select): for a moment the socket
    is still there, and still the node's.
    """
    if state is None or state.state not in _CLOSED or state.closed_ms is None:
        return False
    if now_ms - state.closed_ms < CLOSE_LINGER_MS:
        return False
    return activity is None or activity.moved is None or activity.moved[1] <= state.closed_ms


def _node(name: str, node_id: int, values: dict[str, float], state: NodeState | None,
          activity: Activity | None, known: dict[Endpoint, int], resolver: Resolver,
          source: str) -> JvmNode:
    endpoints, address_from = _endpoints(state, resolver), "log"
    broker = broker_of_node_id(node_id)
    if not endpoints and broker is not None:
        endpoints, address_from = frozenset(e for e, b in known.items() if b == broker), "metadata"
    latency = values.get("request-latency-avg")
    return JvmNode(
        client=name, node_id=node_id, endpoints=endpoints or None, source=source,
        address_from=address_from if endpoints else "none",
        address=f"{state.host}:{state.port}" if state and state.host else None,
        out_bytes=_int(values, "outgoing-byte-total"), in_bytes=_int(values, "incoming-byte-total"),
        requests=_int(values, "request-total"), responses=_int(values, "response-total"),
        latency_ms=latency, activity=activity,
        opened_ms=state.opened_ms if state else None, connects=state.connects if state else None,
        last_io_ms=state.last_io_ms if state else None)


def jvm_clients(reading: JmxReading | None, table: NodeTable, history: CounterHistory,
                known: dict[Endpoint, int], resolver: Resolver,
                now_ms: int) -> tuple[list[ClientInstance], list[JvmNode]]:
    """The client instances of a JVM and their possibly open connections.

    From JMX when there is a reading (with the log's addresses and open times),
    else from the log alone. Nodes the log saw close, and whose counters have
    not moved since, are left out.
    """
    jmx = reading.clients if reading is not None else []
    entries: list[tuple[JvmClient | None, ClientState | None]] = [
        (c, _log_client(table, c.client_id, c.type, len(jmx) == 1)) for c in jmx]
    matched = [id(state) for _, state in entries if state is not None]
    logged_only = [s for s in table.clients() if id(s) not in matched]
    entries += [(None, s) for s in logged_only]
    pairs = [(c.client_id, c.type) for c in jmx] + [
        (s.client_id or "java client", s.client_type or "unknown") for s in logged_only]
    instances, nodes = [], []
    for name, (jmx_client, state), (client_id, ctype) in zip(_instance_names(pairs), entries,
                                                            pairs, strict=True):
        log_nodes = state.nodes if state else {}
        values = jmx_client.nodes if jmx_client else {
            n: {} for n, s in log_nodes.items() if s.state not in _CLOSED}
        # no more connections made than nodes: no node's totals span a reconnect
        once = bool(jmx_client and jmx_client.metrics.get("connection-creation-total", -1)
                    <= len(values))
        for node_id, node_values in values.items():
            activity = history.activity(jmx_client, node_id) if jmx_client else None
            if not _closed_for_good(log_nodes.get(node_id), activity, now_ms):
                node = _node(name, node_id, node_values, log_nodes.get(node_id), activity,
                             known, resolver, "jmx" if jmx_client else "log")
                if once:
                    node.connects = 1
                nodes.append(node)
        coordinator = next((broker_of_node_id(n) for n in values
                            if role_of_node_id(n) is Role.COORDINATOR), None)
        instances.append(ClientInstance(
            name=name, client_id=client_id, type=ctype,
            stats_age_ms=max(0, now_ms - reading.ts_ms) if jmx_client and reading else None,
            group_id=state.group_id if state else None, group_coordinator_id=coordinator))
    return instances, nodes
