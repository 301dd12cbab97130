"""Node id <-> role rules, in one place.

The Java client numbers its connections: bootstrap addresses -1, -2, ...;
the group coordinator ``Integer.MAX_VALUE - brokerId`` (kafka-clients 4.x names
it ``+brokerId`` instead); brokers by their id.
librdkafka names them differently (``host:port/bootstrap``, ``host:port/<id>``,
the logical ``GroupCoordinator``/``TxnCoordinator``); both map here onto the
Java convention that kmon shows.
"""

from __future__ import annotations

from kmon.model import Role

MAX_INT = 2**31 - 1
JAVA_CLIENT_IDLE_MS = 540_000  # the Java client's connections.max.idle.ms default
BROKER_IDLE_MS = 600_000  # the broker's connections.max.idle.ms default
HANDSHAKE_REQUESTS = 2  # ApiVersions + Metadata (or FindCoordinator) on a new connection
MAX_BROKER_ID = 2**20
COORDINATOR_ID_FLOOR = MAX_INT - MAX_BROKER_ID
LOGICAL_COORDINATORS = ("GroupCoordinator", "TxnCoordinator")


def role_of_node_id(node_id: int) -> Role:
    """Role of a Java-convention node id."""
    if node_id < 0:
        return Role.BOOTSTRAP
    if node_id >= COORDINATOR_ID_FLOOR:
        return Role.COORDINATOR
    return Role.BROKER


def broker_of_node_id(node_id: int) -> int | None:
    """The real broker id behind a node id; None for bootstrap ids."""
    role = role_of_node_id(node_id)
    if role is Role.BOOTSTRAP:
        return None
    if role is Role.COORDINATOR:
        return MAX_INT - node_id
    return node_id


def java_node_id(text: str) -> int | None:
    """The node id of a Java client's connection id string, in kmon's convention.

    ``"-1"`` and ``"3"`` are themselves; ``"+3"``, kafka-clients 4.x's name for its group
    coordinator connection to broker 3 (``GroupCoordinatorNode``), is ``MAX_INT - 3`` as 3.x
    numbers it. None for anything else.
    """
    sign, digits = (text[0], text[1:]) if text[:1] in ("+", "-") else ("", text)
    if not digits.isascii() or not digits.isdigit() or len(digits) > 10:
        return None
    value = int(digits)
    if sign == "+":
        return MAX_INT - value if value <= MAX_BROKER_ID else None
    value = -value if sign == "-" else value
    return value if -MAX_INT - 1 <= value <= MAX_INT else None


def coordinator_node_id(broker_id: int) -> int:
    """The node id a Java client gives its coordinator connection to ``broker_id``."""
    if not 0 <= broker_id <= MAX_BROKER_ID:
        raise ValueError(f"broker id {broker_id} outside 0..{MAX_BROKER_ID}")
    return MAX_INT - broker_id


def bootstrap_node_id(position: int) -> int:
    """Node id of the bootstrap address at ``position`` (0-based) in bootstrap.servers."""
    return -(position + 1)


def is_logical_coordinator(broker_name: str) -> bool:
    """True for librdkafka's logical coordinator brokers."""
    return broker_name in LOGICAL_COORDINATORS
