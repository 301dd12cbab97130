"""A Java client's connections as its log tells them: log events folded into each client's
node table (state, times, counts, coordinators), and each node's role from its id."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from kmon.classify import role_of_node_id
from kmon.model import Role
from kmon.sources.jvm.java_log import ClientType, JavaLogEvent

NodeStatus = Literal["known", "connecting", "connected", "disconnected", "idle_closed"]
_OPEN: tuple[NodeStatus, ...] = ("known", "connecting", "connected")


@dataclass
class NodeState:
    """What the log says of one node id of one client."""

    node_id: int
    host: str | None = None
    port: int | None = None
    address: str | None = None  # resolved ip of the last connection attempt
    state: NodeStatus = "known"
    opened_ms: int | None = None  # last connection initiated (or first seen connected)
    connected_ms: int | None = None
    closed_ms: int | None = None
    idle_ms: int | None = None  # idle time the client reported at its last idle close
    detail: str | None = None  # why it last closed, when the log says
    connects: int = 0
    disconnects: int = 0
    metadata_request_ms: int | None = None
    last_io_ms: int | None = None  # the last request sent or response read on this connection

    @property
    def role(self) -> Role:
        """Bootstrap, coordinator or broker, from the node id."""
        return role_of_node_id(self.node_id)


@dataclass
class ClientState:
    """One client instance of the log (keyed by client type and client id)."""

    client_id: str | None
    client_type: ClientType | None
    group_id: str | None = None
    nodes: dict[int, NodeState] = field(default_factory=dict)
    coordinators: dict[str, int] = field(default_factory=dict)  # "group"/"transaction" -> node id


class NodeTable:
    """Folds log events into each client's current picture of its connections."""

    def __init__(self) -> None:
        self._clients: dict[tuple[str | None, str | None], ClientState] = {}

    def clients(self) -> list[ClientState]:
        """Every client seen, in order of first appearance."""
        return list(self._clients.values())

    def client(self, client_id: str | None,
               client_type: ClientType | None = None) -> ClientState | None:
        """The client with this id; ``client_type`` is needed when several types share it."""
        found = [c for (ctype, cid), c in self._clients.items()
                 if cid == client_id and client_type in (None, ctype)]
        if len(found) > 1:
            raise LookupError(f"client id {client_id!r} is used by several clients "
                              f"({', '.join(str(c.client_type) for c in found)}): "
                              "pass client_type")
        return found[0] if found else None

    def nodes(self, client_id: str | None,
              client_type: ClientType | None = None) -> dict[int, NodeState]:
        """The node table of a client; empty if the client is unknown."""
        found = self.client(client_id, client_type)
        return found.nodes if found else {}

    def apply(self, event: JavaLogEvent) -> None:
        """Fold one event in."""
        key = (event.client_type, event.client_id)
        client = self._clients.setdefault(key, ClientState(event.client_id, event.client_type))
        if event.group_id:
            client.group_id = event.group_id
        if event.node_id is None:
            return
        node = client.nodes.setdefault(event.node_id, NodeState(event.node_id))
        if event.host is not None:
            node.host, node.port = event.host, event.port
        if event.address is not None:
            node.address = event.address
        _TRANSITIONS[event.kind](client, node, event)


def _connecting(_: ClientState, node: NodeState, event: JavaLogEvent) -> None:
    node.state, node.opened_ms, node.connected_ms = "connecting", event.ts_ms, None
    node.closed_ms = node.idle_ms = node.last_io_ms = None
    node.detail = None
    node.connects += 1


def _connected(_: ClientState, node: NodeState, event: JavaLogEvent) -> None:
    if node.state != "connecting":  # its start was not in the log (before it, or at INFO)
        node.opened_ms, node.closed_ms, node.idle_ms, node.detail = event.ts_ms, None, None, None
        node.connects += 1
    node.state, node.connected_ms = "connected", event.ts_ms


def _closed(_: ClientState, node: NodeState, event: JavaLogEvent) -> None:
    idle = event.kind == "idle_close"
    if node.state in _OPEN:
        node.disconnects += 1
        node.state = "idle_closed" if idle else "disconnected"
        node.closed_ms, node.detail, node.idle_ms = event.ts_ms, event.detail, event.idle_ms
        return
    # The same close told again by another line (Selector then NetworkClient, or
    # "Node 1 disconnected." then the reason): keep the first time, add what is new.
    if idle:
        node.state = "idle_closed"
        node.idle_ms = event.idle_ms if event.idle_ms is not None else node.idle_ms
    if node.detail is None or idle:
        node.detail = event.detail


def _coordinator(client: ClientState, node: NodeState, event: JavaLogEvent) -> None:
    client.coordinators[event.coordinator_type or "group"] = node.node_id


def _coordinator_lost(client: ClientState, node: NodeState, _: JavaLogEvent) -> None:
    for ctype, node_id in list(client.coordinators.items()):
        if node_id == node.node_id:
            del client.coordinators[ctype]


def _metadata_request(_: ClientState, node: NodeState, event: JavaLogEvent) -> None:
    node.metadata_request_ms = event.ts_ms


def _io(_: ClientState, node: NodeState, event: JavaLogEvent) -> None:
    if event.ts_ms is not None and node.state in _OPEN:
        node.last_io_ms = max(node.last_io_ms or 0, event.ts_ms)


_TRANSITIONS: dict[str, Callable[[ClientState, NodeState, JavaLogEvent], None]] = {
    "connecting": _connecting,
    "connected": _connected,
    "disconnected": _closed,
    "connect_failed": _closed,
    "idle_close": _closed,
    "coordinator": _coordinator,
    "coordinator_lost": _coordinator_lost,
    "metadata_request": _metadata_request,
    "io": _io,
}
