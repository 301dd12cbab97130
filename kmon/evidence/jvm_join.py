"""Claims from a JVM's Java clients: their connections (node ids) paired with sockets.

A node may only take a socket to its own address (from the log or the
cluster's metadata), or any socket when its address is unknown. Several
candidates for one socket (bootstrap ``-1``, coordinator ``MAX_INT - id`` and
broker ``id`` to the same host) are told apart by the node's JMX byte totals
against the kernel's per-socket counters, by when its counters last moved
against the socket's idle time, by the log's last request or response on it
against the socket's last data (a DEBUG log), and by the log's open order
against the order in which the sockets appeared.
``kmon.evidence.stats_join.assign_pairs`` picks the pairing.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from kmon.classify import JAVA_CLIENT_IDLE_MS
from kmon.evidence.claims import Claim
from kmon.evidence.jvm_nodes import Activity, JvmNode
from kmon.evidence.stats_join import JoinSettings, assign_pairs, relative_gap
from kmon.model import Role
from kmon.sources.kernel.sockets import Endpoint, TcpSocket

SLACK_MS = 300  # reading times against kernel idle times
BYTES_REJECT = 1.2  # a socket that carried this much more than a node's totals is not it
# The reading is taken before the sockets are read: the one socket of a node that connected
# once has carried at least the node's totals. Fewer bytes is as good as impossible: fewer
# received by UNDER_BYTES costs as much as a wrong endpoint (the kernel counts every byte
# received); fewer sent weighs UNDER_WEIGHT times the relative gap (old kernels count bytes
# acked, which may trail what was sent).
UNDER_BYTES = 4
UNDER_WEIGHT = 10.0
ORDER_WEIGHT = 0.1  # per place between log open order and socket order (inodes: weak)
QUIET_MISMATCH = 0.5  # the socket carried data while the node's counters stood still
# The log's last line on a connection against the kernel's last data on a socket, (slack,
# scale) in ms: a gap of slack + scale costs as much as a wrong endpoint. Data older than the
# line may be the logger lagging behind the response it tells; data newer than it was never
# told, which the log (a line before each send, one after each response) does not allow.
LOG_LAG = (50, 250)
LOG_UNTOLD = (20, 100)
LOG_UNREAD_MS = 1000  # data this recent may be in log lines not written or read yet
_ROLE_PLACE = {Role.BOOTSTRAP: 0.0, Role.COORDINATOR: 0.5, Role.BROKER: 1.0, Role.UNKNOWN: 1.0}


def _bytes_cost(sock: TcpSocket, node: JvmNode) -> float | None:
    """Kernel counters against the node's totals; None when the socket carried far more."""
    over = under = 0.0
    for kernel, client, received in ((sock.bytes_sent, node.out_bytes, False),
                                     (sock.bytes_received, node.in_bytes, True)):
        if kernel is None or client is None:
            continue
        gap = relative_gap(kernel, client, 100)
        if kernel > client:  # the reading lags a little; a total never shrinks
            over += gap
        else:
            under += min(1.0, (client - kernel) / UNDER_BYTES) if received else (
                gap * UNDER_WEIGHT)
    if over > BYTES_REJECT:
        return None
    if node.connects is None:  # totals may span reconnects the log did not show
        return over + under / 2
    return over + (under if node.connects <= 1 else 0.0)


def _idle_cost(sock: TcpSocket, activity: Activity | None, now_ms: int) -> float:
    """The socket's last data against when the node's counters moved and stood still."""
    if sock.idle_ms is None or activity is None:
        return 0.0
    last_data = now_ms - sock.idle_ms
    cost = 0.0
    if activity.moved is not None and last_data < activity.moved[0] - SLACK_MS:
        cost += relative_gap(sock.idle_ms, now_ms - activity.moved[0], 1000)
    if activity.steady_from + SLACK_MS < last_data < activity.latest_ms - SLACK_MS:
        cost += QUIET_MISMATCH
    return cost


def _log_io_cost(sock: TcpSocket, node: JvmNode, now_ms: int) -> float:
    """The socket's last data against the log's last request or response on the node.

    Every request and response is a log line at DEBUG: data on the socket older than
    the node's last line, or newer with no line for it, is another connection's.
    """
    if sock.idle_ms is None or node.last_io_ms is None:
        return 0.0
    last_data = now_ms - sock.idle_ms
    if last_data < node.last_io_ms:
        gap, (slack, scale) = node.last_io_ms - last_data, LOG_LAG
    else:
        gap, (slack, scale) = min(last_data, now_ms - LOG_UNREAD_MS) - node.last_io_ms, LOG_UNTOLD
    return min(1.0, max(0, gap - slack) / scale)


class _OpenOrder:
    """How well a socket's place in the open order fits a node's.

    Sockets to one endpoint are placed by when kmon first saw them, then by
    inode (the kernel numbers sockets as they are made: weak evidence). Nodes
    the log saw open are placed by their log open time among the nodes at their
    address; other nodes by the Java client's own order: bootstrap first, then
    the coordinator, then brokers.
    """

    def __init__(self, sockets: list[TcpSocket], nodes: list[JvmNode],
                 first_seen: dict[int, int]) -> None:
        by_remote: dict[Endpoint, list[int]] = defaultdict(list)
        for i, sock in enumerate(sockets):
            by_remote[sock.remote].append(i)
        self.sock_place = {i: (place, len(group)) for group in by_remote.values()
                           for place, i in enumerate(sorted(group, key=lambda i: (
                               first_seen.get(sockets[i].inode, 0), sockets[i].inode)))}
        by_address: dict[frozenset[Endpoint], list[int]] = defaultdict(list)
        for j, node in enumerate(nodes):
            if node.endpoints and node.opened_ms is not None:
                by_address[node.endpoints].append(j)
        self.node_place = {j: place for group in by_address.values() for place, j in enumerate(
            sorted(group, key=lambda j: nodes[j].opened_ms or 0))}
        self.nodes = nodes

    def cost(self, i: int, j: int) -> float | None:
        """None when the order says nothing (a lone socket to its endpoint)."""
        place, count = self.sock_place[i]
        if count == 1:
            return None
        if j in self.node_place:
            return ORDER_WEIGHT * abs(self.node_place[j] - place)
        expected = _ROLE_PLACE[self.nodes[j].role]
        return ORDER_WEIGHT * abs(place / (count - 1) - expected)


def _evidence_used(sock: TcpSocket, node: JvmNode, ordered: bool) -> str:
    used = ["endpoint"] if node.endpoints else []
    if sock.bytes_sent is not None and node.out_bytes is not None:
        used.append("bytes")
    if sock.idle_ms is not None and node.activity is not None and node.activity.moved:
        used.append("idle")
    if sock.idle_ms is not None and node.last_io_ms is not None:
        used.append("log-io")
    if ordered:
        used.append("order")
    return "+".join(used) or "none"


def _claim(sock: TcpSocket, node: JvmNode, confidence: float, how: str,
           settings: JoinSettings) -> Claim:
    """What the Java client's metrics and log say of the socket paired with ``node``."""
    limit_from = ("java client default" if settings.broker_idle_ms >= JAVA_CLIENT_IDLE_MS
                  else "broker default")
    facts: dict[str, object] = {
        "client": node.client, "requests_sent": node.requests,
        "idle_limits": {"broker": settings.broker_idle_ms, "client": JAVA_CLIENT_IDLE_MS},
        "requests_received": node.responses, "rtt_ms": node.latency_ms,
        "broker_name": node.address or f"node-{node.node_id}"}
    idle_from = sock.source
    if sock.idle_ms is None:
        moved = node.activity.moved if node.activity else None
        facts["idle_ms"], idle_from = (settings.now_ms - moved[1], "jmx") if moved else (
            None, "unknown")
    if sock.bytes_sent is None:
        facts["bytes_sent"] = node.out_bytes
    if sock.bytes_received is None:
        facts["bytes_received"] = node.in_bytes
    return Claim(
        source=node.source, role=node.role, node_id=node.node_id, broker_id=node.broker_id,
        confidence=confidence, facts=facts,
        evidence={"role": node.source, "node_id": node.source, "address": node.address_from,
                  "idle": idle_from,
                  "bytes": sock.source if sock.bytes_sent is not None else node.source,
                  "state": sock.source, "idle_limit": limit_from, "pairing": how},
        detail=f"{node.client} node {node.node_id} ({how})")


def join_jvm(sockets: list[TcpSocket], nodes: list[JvmNode], settings: JoinSettings,
             first_seen: dict[int, int]) -> dict[int, Claim]:
    """Socket index -> the claim of the Java client's node paired with it, where one fits.

    ``first_seen`` maps socket inodes to when kmon first saw them.
    """
    order = _OpenOrder(sockets, nodes, first_seen)
    costs: dict[tuple[int, int], float] = {}
    ordered: set[tuple[int, int]] = set()
    for i, sock in enumerate(sockets):
        for j, node in enumerate(nodes):
            if node.endpoints is not None and sock.remote not in node.endpoints:
                continue
            cost = _bytes_cost(sock, node)
            if cost is None:
                continue
            cost += _idle_cost(sock, node.activity, settings.now_ms)
            cost += _log_io_cost(sock, node, settings.now_ms)
            placed = order.cost(i, j)
            if placed is not None:
                cost += placed
                ordered.add((i, j))
            costs[(i, j)] = cost
    pairs = assign_pairs(costs)
    per_socket = Counter(i for i, _ in costs)
    per_node = Counter(j for _, j in costs)
    claims = {}
    for i, (j, confidence) in pairs.items():
        alone = per_socket[i] == 1 and per_node[j] == 1
        how = "endpoint" if alone and nodes[j].endpoints else _evidence_used(
            sockets[i], nodes[j], (i, j) in ordered)
        claims[i] = _claim(sockets[i], nodes[j], confidence, how, settings)
    return claims
