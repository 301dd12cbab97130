"""What a process reached at a poll, kept from poll to poll for the findings that need a
past (``rebootstrap``, ``coordinator_flapping``): a new ``Mark`` only when it changed."""

from __future__ import annotations

from dataclasses import dataclass

from kmon.model import ProcessView, Role
from kmon.tcp_state import TcpState

HELD = frozenset({TcpState.ESTABLISHED, "UP"})  # a socket's state, or librdkafka's own
MARKS = 256  # changes kept per process (a reconnect is two)


@dataclass(frozen=True)
class Mark:
    """From ``ts_ms`` on (UTC epoch ms): the brokers a process held a connection to (their
    ids, or addresses where the id is unknown), the bootstrap servers it was connected or
    connecting to, and each group member's coordinator, ((client_id, group_id), broker)."""

    ts_ms: int
    brokers: frozenset[str]
    bootstraps: frozenset[str]
    coordinators: tuple[tuple[tuple[str, str], str], ...]

    def same(self, other: Mark) -> bool:
        return (self.brokers, self.bootstraps, self.coordinators) == (
            other.brokers, other.bootstraps, other.coordinators)


def mark(view: ProcessView, ts_ms: int) -> Mark:
    """``view``'s mark at ``ts_ms``."""
    brokers = frozenset(str(c.broker_id if c.broker_id is not None else c.remote)
                        for c in view.connections
                        if c.role in (Role.BROKER, Role.COORDINATOR) and c.state in HELD)
    bootstraps = frozenset(c.remote or c.broker_name or "?" for c in view.connections
                           if c.role is Role.BOOTSTRAP)
    return Mark(ts_ms, brokers, bootstraps, tuple(sorted(coordinators(view).items())))


def coordinators(view: ProcessView) -> dict[tuple[str, str], str]:
    """(client_id, group_id) -> the broker coordinating the group, for each group member:
    the client's own word, else its coordinator connection's broker."""
    by_client = {conn.client: conn.broker_id for conn in view.connections
                 if conn.role is Role.COORDINATOR and conn.broker_id is not None}
    out = {}
    for client in view.clients:
        broker = client.group_coordinator_id
        if broker is None:
            broker = by_client.get(client.name)
        if client.group_id and broker is not None:
            out[(client.client_id, client.group_id)] = str(broker)
    return out
