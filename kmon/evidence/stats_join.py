"""Pair sockets with the client's logical connections, and say how sure the pairing is.

The key is the remote endpoint. Where one process holds several sockets to
one endpoint (a producer, a consumer and its coordinator connection to the
same broker), the kernel's per-socket byte counters and idle times are
compared with the client's ``txbytes``/``rxbytes`` and ``txidle``/``rxidle``;
the best assignment wins and its margin over the next best becomes the
confidence. Nothing is guessed silently: every fact carries its evidence.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from kmon.evidence.logical import LogicalConnection
from kmon.model import Connection, Role
from kmon.sources.sockets import Endpoint, TcpSocket

BROKER_DEFAULT_IDLE_MS = 600_000
MAX_EXHAUSTIVE = 4  # larger groups of look-alike sockets are paired greedily
GREEDY_CONFIDENCE = 0.5  # a greedy pairing has no runner-up to measure its margin against
UNPAIRED = 10.0  # cost of leaving a socket or a logical connection without partner


@dataclass(frozen=True)
class JoinSettings:
    """What the join needs beyond the evidence itself."""

    now_ms: int
    broker_idle_ms: int = BROKER_DEFAULT_IDLE_MS


def relative_gap(a: int | None, b: int | None, floor: int) -> float:
    """How far apart two counters are, 0 (equal) to 1; 0 when either is unknown."""
    if a is None or b is None:
        return 0.0
    return abs(a - b) / (max(a, b) + floor)


def pairing_cost(sock: TcpSocket, logical: LogicalConnection, now_ms: int) -> float:
    """How badly ``sock`` fits ``logical``: 0 for counters and idle times that agree.

    Where the agent read this socket's kernel counters when the statistics
    arrived, those are compared (near-exact); otherwise today's counters are,
    allowing for traffic since the statistics were made.
    """
    client = logical.client
    at_stats = client.sockets_at_stats.get(sock.inode)
    if at_stats is not None:
        sent, received = at_stats.bytes_sent, at_stats.bytes_received
        last_sent, last_recv = at_stats.last_sent_ms, at_stats.last_recv_ms
        age = client.stats_lag_ms
    else:
        sent, received = sock.bytes_sent, sock.bytes_received
        last_sent, last_recv = sock.last_sent_ms, sock.last_recv_ms
        age = client.stats_age_ms(now_ms)
    cost = 0.0
    if logical.connects <= 1:  # the client's byte totals are this socket's own
        cost += (relative_gap(sent, logical.tx_bytes, 100)
                 + relative_gap(received, logical.rx_bytes, 100))
    elif (sent or 0) > logical.tx_bytes:  # totals span earlier connections: never less
        cost += 2.0
    for kernel, client_idle in ((last_sent, logical.tx_idle_ms), (last_recv, logical.rx_idle_ms)):
        if kernel is not None and client_idle is not None:
            cost += relative_gap(kernel, client_idle + age, 1000)
    return cost


def _assign(socks: Sequence[object], logicals: Sequence[object],
            costs: dict[tuple[int, int], float]) -> tuple[dict[int, int], float, float | None]:
    """Best socket->logical assignment, its cost, and the next best cost (None: no rival)."""
    def total(pairs: dict[int, int]) -> float:
        unpaired = len(socks) + len(logicals) - 2 * len(pairs)
        return sum(costs[p] for p in pairs.items()) + UNPAIRED * unpaired

    options: list[tuple[float, dict[int, int]]] = []
    if max(len(socks), len(logicals)) <= MAX_EXHAUSTIVE:
        slots = list(range(len(logicals))) + [None] * len(socks)
        seen = set()
        for perm in itertools.permutations(slots, len(socks)):
            if perm in seen:
                continue
            seen.add(perm)
            pairs = {i: j for i, j in enumerate(perm) if j is not None and (i, j) in costs}
            options.append((total(pairs), pairs))
    else:
        pairs: dict[int, int] = {}
        for (i, j), _ in sorted(costs.items(), key=lambda kv: kv[1]):
            if i not in pairs and j not in pairs.values():
                pairs[i] = j
        options.append((total(pairs), pairs))
    options.sort(key=lambda o: o[0])
    best_cost, best = options[0]
    rivals = [c for c, p in options[1:] if len(p) == len(best) and p != best]
    return best, best_cost, (rivals[0] if rivals else None)


def _confidence(group_size: int, pair_cost: float, margin: float) -> float:
    """1.0 for the only candidate that fits; 0.5 for a coin toss between look-alikes."""
    if group_size == 1:
        return 1.0 if pair_cost < 0.2 else 0.9
    if group_size > MAX_EXHAUSTIVE:
        return GREEDY_CONFIDENCE
    return round(min(0.99, 0.5 + margin / 2), 2)


def _limit(logical: LogicalConnection | None, settings: JoinSettings) -> tuple[int, str]:
    if logical is not None:
        client_limit = logical.client.config_ms("connections.max.idle.ms") or 0
        if 0 < client_limit <= settings.broker_idle_ms:
            return client_limit, "client config"
    return settings.broker_idle_ms, "broker default"


def _paired(sock: TcpSocket, logical: LogicalConnection, confidence: float,
            settings: JoinSettings, how: str) -> Connection:
    age = logical.client.stats_age_ms(settings.now_ms)
    idle, idle_source = sock.idle_ms, sock.source
    if idle is None:
        known = [t for t in (logical.tx_idle_ms, logical.rx_idle_ms) if t is not None]
        idle, idle_source = (min(known) + age, "stats") if known else (None, "unknown")
    limit, limit_source = _limit(logical, settings)
    return Connection(
        key=socket_key(sock), role=logical.role, node_id=logical.node_id,
        broker_id=logical.broker_id, client=logical.client.instance,
        local=str(sock.local), remote=str(sock.remote), state=sock.state,
        idle_ms=idle, idle_limit_ms=limit,
        bytes_sent=sock.bytes_sent if sock.bytes_sent is not None else logical.tx_bytes,
        bytes_received=(sock.bytes_received if sock.bytes_received is not None
                        else logical.rx_bytes),
        requests_sent=logical.requests_sent, requests_received=logical.responses_received,
        in_flight=logical.in_flight, rtt_ms=logical.rtt_ms, tcp_rtt_ms=sock.rtt_ms,
        broker_name=logical.broker_name, fd=sock.fd, inode=sock.inode or None,
        evidence={"role": "stats", "node_id": "stats", "idle": idle_source,
                  "bytes": sock.source if sock.bytes_sent is not None else "stats",
                  "state": sock.source, "idle_limit": limit_source, "pairing": how},
        confidence=confidence,
    )


def _unpaired(sock: TcpSocket, known_brokers: dict[Endpoint, int],
              settings: JoinSettings) -> Connection:
    broker_id = known_brokers.get(sock.remote)
    limit, limit_source = _limit(None, settings)
    role = Role.BROKER if broker_id is not None else Role.UNKNOWN
    return Connection(
        key=socket_key(sock), role=role, node_id=broker_id, broker_id=broker_id, client=None,
        local=str(sock.local), remote=str(sock.remote), state=sock.state,
        idle_ms=sock.idle_ms, idle_limit_ms=limit,
        bytes_sent=sock.bytes_sent, bytes_received=sock.bytes_received,
        tcp_rtt_ms=sock.rtt_ms, fd=sock.fd, inode=sock.inode or None,
        evidence={"role": "inferred" if broker_id is not None else "none",
                  "idle": sock.source if sock.idle_ms is not None else "unknown",
                  "bytes": sock.source if sock.bytes_sent is not None else "unknown",
                  "state": sock.source, "idle_limit": limit_source, "pairing": "none"},
        # a socket to a known broker may still be a coordinator connection
        confidence=0.6 if broker_id is not None else 0.0,
    )


def socket_key(sock: TcpSocket) -> str:
    """A socket's stable key within its process."""
    return f"sock:{sock.inode}" if sock.inode else f"sock:{sock.local}>{sock.remote}"


def _components(costs: dict[tuple[int, int], float]) -> list[tuple[list[int], list[int]]]:
    """Groups of sockets and logicals linked by candidate pairs (union-find over the pairs)."""
    parent: dict[tuple[str, int], tuple[str, int]] = {}

    def root(node: tuple[str, int]) -> tuple[str, int]:
        while parent.setdefault(node, node) != node:
            node = parent[node]
        return node

    for i, j in costs:
        parent[root(("s", i))] = root(("l", j))
    groups: dict[tuple[str, int], tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
    for kind, index in sorted(parent):
        groups[root((kind, index))][kind == "l"].append(index)
    return list(groups.values())


def _greedy_margins(costs: dict[tuple[int, int], float]) -> dict[int, tuple[int, float]]:
    """Cheapest pairs first; each pair's confidence is its margin over its next rival."""
    pairs: dict[int, int] = {}
    for (i, j), _ in sorted(costs.items(), key=lambda kv: kv[1]):
        if i not in pairs and j not in pairs.values():
            pairs[i] = j
    out = {}
    for i, j in pairs.items():
        rivals = [c for (a, b), c in costs.items() if (a == i) != (b == j)]
        cost = costs[(i, j)]
        out[i] = (j, _confidence(1, cost, 0.0) if not rivals
                  else round(min(0.99, max(0.5, 0.5 + (min(rivals) - cost) / 2)), 2))
    return out


def assign_pairs(costs: dict[tuple[int, int], float]) -> dict[int, tuple[int, float]]:
    """Socket index -> (logical index, confidence): the cheapest pairing by ``costs``.

    Only the pairs in ``costs`` may pair. Each connected group of candidates is
    paired exhaustively when small (as ``join_process`` does), else greedily
    with a confidence per pair from its margin over its rivals.
    """
    out: dict[int, tuple[int, float]] = {}
    for socks, lgs in _components(costs):
        if max(len(socks), len(lgs)) > MAX_EXHAUSTIVE:
            out.update(_greedy_margins({p: c for p, c in costs.items() if p[0] in socks}))
            continue
        local = {(a, b): costs[(i, j)] for a, i in enumerate(socks) for b, j in enumerate(lgs)
                 if (i, j) in costs}
        pairs, best, runner_up = _assign(socks, lgs, local)
        pair_cost = sum(local[p] for p in pairs.items())
        confidence = (_confidence(1, pair_cost, 0.0) if runner_up is None  # no other way fits
                      else _confidence(max(len(socks), len(lgs)), pair_cost, runner_up - best))
        out.update({socks[a]: (lgs[b], confidence) for a, b in pairs.items()})
    return out


def join_process(sockets: list[TcpSocket], logicals: list[LogicalConnection],
                 known_brokers: dict[Endpoint, int], settings: JoinSettings) -> list[Connection]:
    """Every socket of one process, paired with its logical connection where one fits.

    Logical connections with no socket are left out: the kernel is the
    authority on which connections exist, the client's statistics lag.
    """
    by_endpoint: dict[Endpoint, list[int]] = defaultdict(list)
    for j, logical in enumerate(logicals):
        for endpoint in logical.endpoints:
            by_endpoint[endpoint].append(j)
    # connected components: sockets sharing candidate logicals are paired together
    groups: dict[frozenset[int], list[int]] = defaultdict(list)
    for i, sock in enumerate(sockets):
        groups[frozenset(by_endpoint.get(sock.remote, ()))].append(i)
    result: dict[int, Connection] = {}
    for candidates, sock_ids in groups.items():
        logical_ids = sorted(candidates)
        if not logical_ids:
            continue
        socks = [sockets[i] for i in sock_ids]
        lgs = [logicals[j] for j in logical_ids]
        costs = {(a, b): pairing_cost(s, lg, settings.now_ms)
                 for a, s in enumerate(socks) for b, lg in enumerate(lgs)}
        pairs, best, runner_up = _assign(socks, lgs, costs)
        size = max(len(socks), len(lgs))
        pair_cost = sum(costs[p] for p in pairs.items())
        confidence = _confidence(size, pair_cost, (best if runner_up is None else runner_up) - best)
        how = "endpoint" if size == 1 else "bytes+idle"
        for a, b in pairs.items():
            result[sock_ids[a]] = _paired(socks[a], lgs[b], confidence, settings, how)
    return [result.get(i) or _unpaired(s, known_brokers, settings)
            for i, s in enumerate(sockets)]
