"""Claims from a librdkafka client's statistics: its logical connections paired with sockets.

The key is the remote endpoint. Where one process holds several sockets to
one endpoint (a producer, a consumer and its coordinator connection to the
same broker), the kernel's per-socket byte counters and idle times are
compared with the client's ``txbytes``/``rxbytes`` and ``txidle``/``rxidle``;
the best assignment wins and its margin over the next best becomes the
confidence. Nothing is guessed silently: every fact carries its evidence.
``assign_pairs`` is shared with the Java path (``kmon.evidence.jvm_join``).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kmon.classify import BROKER_IDLE_MS
from kmon.evidence.claims import Claim, Evidence, Gathered, socket_key
from kmon.evidence.logical import LogicalConnection, logical_connections
from kmon.sources.kernel.sockets import Endpoint, TcpSocket

MAX_EXHAUSTIVE = 4  # larger groups of look-alike sockets are paired greedily
GREEDY_CONFIDENCE = 0.5  # a greedy pairing has no runner-up to measure its margin against
UNPAIRED = 10.0  # cost of leaving a socket or a logical connection without partner


@dataclass(frozen=True)
class JoinSettings:
    """What the join needs beyond the evidence itself."""

    now_ms: int
    broker_idle_ms: int = BROKER_IDLE_MS


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


def _greedy(costs: dict[tuple[int, int], float]) -> dict[int, int]:
    """Cheapest pairs first, each socket and logical used once."""
    pairs: dict[int, int] = {}
    for (i, j), _ in sorted(costs.items(), key=lambda kv: kv[1]):
        if i not in pairs and j not in pairs.values():
            pairs[i] = j
    return pairs


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
        pairs = _greedy(costs)
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


def _claim(sock: TcpSocket, logical: LogicalConnection, confidence: float,
           settings: JoinSettings, how: str) -> Claim:
    """What the statistics say of the socket paired with ``logical``."""
    age = logical.client.stats_age_ms(settings.now_ms)
    facts: dict[str, object] = {
        "client": logical.client.instance, "requests_sent": logical.requests_sent,
        "requests_received": logical.responses_received, "in_flight": logical.in_flight,
        "rtt_ms": logical.rtt_ms, "broker_name": logical.broker_name}
    idle_source = sock.source
    if sock.idle_ms is None:
        known = [t for t in (logical.tx_idle_ms, logical.rx_idle_ms) if t is not None]
        facts["idle_ms"], idle_source = (min(known) + age, "stats") if known else (None, "unknown")
    if sock.bytes_sent is None:
        facts["bytes_sent"] = logical.tx_bytes
    if sock.bytes_received is None:
        facts["bytes_received"] = logical.rx_bytes
    client_limit = logical.client.config_ms("connections.max.idle.ms") or 0
    facts["idle_limits"] = {"broker": settings.broker_idle_ms,
                            **({"client": client_limit} if client_limit > 0 else {})}
    limit_source = ("client config" if 0 < client_limit <= settings.broker_idle_ms
                    else "broker default")
    return Claim(
        source="stats", role=logical.role, node_id=logical.node_id,
        broker_id=logical.broker_id, confidence=confidence, facts=facts,
        evidence={"role": "stats", "node_id": "stats", "idle": idle_source,
                  "bytes": sock.source if sock.bytes_sent is not None else "stats",
                  "state": sock.source, "idle_limit": limit_source, "pairing": how},
        detail=f"{logical.client.instance} {logical.broker_name} ({how})")



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
    """Cheapest pairs first; each pair's confidence is its margin over the cheapest change
    that breaks it: a rival pair taken, with the partners it displaces swapped or left alone."""
    pairs = _greedy(costs)
    owner = {j: i for i, j in pairs.items()}

    def cost(i: int | None, j: int | None) -> float:
        if i is None or j is None:  # one side left unpaired (both sides: counted twice)
            return UNPAIRED if i is not None or j is not None else 0.0
        return costs.get((i, j), 2 * UNPAIRED)

    out = {}
    for i, j in pairs.items():
        changes = []
        for (a, b), rival in costs.items():
            if a == i and b != j:  # socket i takes b; b's socket takes j or nothing
                k = owner.get(b)
                changes.append(rival + cost(k, j) - costs[(i, j)] - cost(k, b))
            elif b == j and a != i:  # socket a takes j; i takes a's logical or nothing
                m = pairs.get(a)
                changes.append(rival + cost(i, m) - costs[(i, j)] - cost(a, m))
        out[i] = (j, _confidence(1, costs[(i, j)], 0.0) if not changes
                  else round(min(0.99, max(0.5, 0.5 + min(changes) / 2)), 2))
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
                 settings: JoinSettings) -> dict[int, Claim]:
    """Socket index -> the claim of the logical connection paired with it, where one fits.

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
    result: dict[int, Claim] = {}
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
            result[sock_ids[a]] = _claim(socks[a], lgs[b], confidence, settings, how)
    return result


def stats_evidence(gathered: Gathered, earlier: Mapping[str, Sequence[Claim]]) -> Evidence:
    """Claims from the fresh statistics of every librdkafka client of the process."""
    logicals = [lc for c in gathered.stats for lc in logical_connections(c, gathered.resolver)]
    if not logicals:
        return Evidence()
    settings = JoinSettings(now_ms=gathered.now_ms, broker_idle_ms=gathered.broker_idle_ms)
    pairs = join_process(gathered.sockets, logicals, settings)
    return Evidence(claims={socket_key(gathered.sockets[i]): claim
                            for i, claim in pairs.items()})
