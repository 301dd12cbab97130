"""Coordinator connections of clients kmon has no metrics for (kcat, Go and Node clients).

Two rules, each marking a socket to a known broker as the group coordinator
connection (node id ``2147483647 - broker``, evidence ``inferred``):

* ``describe_groups`` — the cluster describes a group whose coordinator is
  broker X and which has a member on one of the process's local addresses (and
  with one of its ``client.id``s, where its command line names them); the
  process's one socket to X that heartbeats is it. A member's host and client id
  can be another process's (every librdkafka client defaults to ``rdkafka``), so
  the process's own traffic must show the heartbeats: a process with no group has none.
* ``cadence`` — a consumer keeps a connection that carries only heartbeats
  (``heartbeat.interval.ms``, 3 s by default) beside fetch connections that
  long-poll (``fetch.wait.max.ms``, 500 ms): the one socket to a broker whose
  idle time climbs past a second and drops back with a few bytes, in a process
  whose other broker sockets never idle that long, is its coordinator connection.

The cadence rule reads a short history of each socket kept across polls.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, pairwise

from kmon.classify import coordinator_node_id
from kmon.evidence.claims import Claim, Evidence, Gathered, socket_key
from kmon.model import Role
from kmon.sources.brokers.admin import GroupInfo
from kmon.sources.kernel.sockets import TcpSocket, facts_of

HISTORY_LEN = 32  # readings kept per socket
CLIMB_MS = 1000  # a fetch connection's long-polls keep its idle below this
HEARTBEAT_MAX_MS = 6000  # a heartbeat-only connection is never idle longer than this
TINY_BYTES = 1024  # a heartbeat or an offset commit moves fewer bytes than this
MIN_CYCLES = 2  # heartbeat cycles seen before the cadence rule speaks
MIN_FETCH_READINGS = 3


@dataclass(frozen=True)
class Reading:
    """One socket at one poll."""

    ts_ms: int
    idle_ms: int
    bytes: int  # sent + received


@dataclass(frozen=True)
class Inference:
    """Why one socket is taken for a coordinator connection."""

    broker_id: int
    confidence: float
    rule: str  # "cadence", "describe_groups" or both joined by "+"


SocketReadings = dict[str, deque[Reading]]


def remember(history: SocketReadings, sockets: Iterable[TcpSocket], now_ms: int,
             still: Iterable[str] = ()) -> set[str]:
    """Add this poll's readings to ``history`` (by socket key) and forget closed sockets (but
    ``still``: sockets held whose readings would leave it as it is); the keys whose readings
    changed (added to, or forgotten).

    A reading idle past HEARTBEAT_MAX_MS rules its socket out of both rules for as long as
    it is among the last HISTORY_LEN, and every reading before it leaves them first: it is
    kept alone, so that a socket that never talks costs one reading, whatever the history's
    length, and every verdict is the one the whole history gives."""
    seen, changed = list(still), set()
    for sock in sockets:
        idle_ms, sent, received = sock.idle_ms, sock.bytes_sent, sock.bytes_received
        if idle_ms is None or sent is None or received is None:
            continue
        key = socket_key(sock)
        seen.append(key)
        readings = history.get(key)
        if readings is None:
            readings = history[key] = deque(maxlen=HISTORY_LEN)
        elif idle_ms > HEARTBEAT_MAX_MS:
            if len(readings) == 1 and readings[0].idle_ms > HEARTBEAT_MAX_MS:
                continue  # still silent: the one reading says all (it leaves no sooner)
            readings.clear()
        readings.append(Reading(now_ms, idle_ms, sent + received))
        changed.add(key)
    gone = history.keys() - seen
    for key in gone:
        del history[key]
    return changed | gone


def heartbeat_cycles(readings: Sequence[Reading]) -> int:
    """How many times the socket climbed past CLIMB_MS idle and was reset by a few bytes.

    0 for anything else: a socket ever idle past HEARTBEAT_MAX_MS, or one whose
    traffic mostly comes before its idle climbs (a fetch connection).
    """
    if any(r.idle_ms > HEARTBEAT_MAX_MS for r in readings):
        return 0
    cycles = quick = 0
    for before, after in pairwise(readings):
        moved = after.bytes - before.bytes
        if moved <= 0:
            continue
        if before.idle_ms < CLIMB_MS:
            quick += 1
        elif moved <= TINY_BYTES:
            cycles += 1
    return cycles if cycles > quick else 0


def is_fetching(readings: Sequence[Reading]) -> bool:
    """True for a socket that moves data and never idles as long as CLIMB_MS: long-polls."""
    return (len(readings) >= MIN_FETCH_READINGS and readings[-1].bytes > readings[0].bytes
            and all(r.idle_ms < CLIMB_MS for r in readings))


def cadence_confidence(cycles: int, beside_other: bool) -> float:
    """0.5 at MIN_CYCLES, 0.1 more per further cycle; at most 0.8 with a second socket to
    the same broker beside it, 0.7 without."""
    return round(min(0.8 if beside_other else 0.7, 0.5 + 0.1 * (cycles - MIN_CYCLES)), 2)


def by_cadence(readings: Mapping[str, Sequence[Reading]], broker_of: dict[str, int],
               brokers: Iterable[str] = ()) -> dict[str, Inference]:
    """Socket key -> coordinator inference by the shape of the sockets' traffic.

    ``broker_of`` names the broker of each candidate socket (key -> broker id);
    ``brokers`` are sockets known to be broker connections (never candidates).
    A broker gets a coordinator only when exactly one of its candidate sockets
    heartbeats and some other socket of the process fetches.
    """
    cycles = {k: heartbeat_cycles(readings.get(k, ())) for k in broker_of}
    fetching = {k for k in chain(broker_of, brokers) if is_fetching(readings.get(k, ()))}
    out = {}
    for broker in set(broker_of.values()):
        socks = [k for k, b in broker_of.items() if b == broker]
        beating = [k for k in socks if cycles[k] >= MIN_CYCLES]
        if len(beating) != 1 or not fetching - set(beating):
            continue
        (key,) = beating
        out[key] = Inference(broker, cadence_confidence(cycles[key], len(socks) > 1), "cadence")
    return out


def client_ids(args: Sequence[str]) -> set[str]:
    """The ``client.id`` values a command line sets (``-X client.id=x``, ``client.id=x``)."""
    prefix = "client.id="
    return {a.split(prefix, 1)[1] for a in args if a.startswith(prefix)
            or a.startswith(f"-X{prefix}")}


def by_groups(groups: Sequence[GroupInfo], local_ips: set[str], ids: set[str],
              broker_of: dict[str, int], cycles: dict[str, int]) -> dict[str, Inference]:
    """Socket key -> coordinator inference from the cluster's group descriptions.

    A group counts when one of its members sits on one of ``local_ips`` and,
    where ``ids`` is not empty, carries one of those client ids. The one socket to
    its coordinator that heartbeats (``cycles``) is chosen; without one, none is:
    the member may be another process with the same host and client id.
    Confidence: 0.8 with a client id match, 0.7 by host.
    """
    out = {}
    for group in groups:
        broker = group.coordinator_id
        members = [m for m in group.members or () if m.host.lstrip("/") in local_ips
                   and (not ids or m.client_id in ids)]
        if broker is None or not members:
            continue
        socks = [k for k, b in broker_of.items()
                 if b == broker and cycles.get(k, 0) >= MIN_CYCLES]
        if len(socks) == 1:
            out[socks[0]] = Inference(broker, 0.8 if ids else 0.7, "describe_groups")
    return out


def combine(first: dict[str, Inference], second: dict[str, Inference]) -> dict[str, Inference]:
    """Both rules' findings; where both name one socket, their rules joined and 0.1 more sure."""
    out = {**second, **first}
    for key in first.keys() & second.keys():
        a, b = first[key], second[key]
        if a.broker_id == b.broker_id:
            out[key] = Inference(a.broker_id, round(min(0.9, max(a.confidence, b.confidence)
                                                        + 0.1), 2), f"{a.rule}+{b.rule}")
    return out


class CadenceEvidence:
    """The inference producer of one process: keeps its sockets' recent readings across polls.

    ``groups`` returns the cluster's group descriptions (or None); ``args`` is
    the process's command line (for its client ids).
    """

    def __init__(self, groups: Callable[[], Sequence[GroupInfo] | None],
                 args: Sequence[str]) -> None:
        self.history: SocketReadings = {}
        self.groups, self.args = groups, args
        # the sockets whose readings show MIN_CYCLES heartbeat cycles (both rules need one),
        # and those that fetch (the cadence rule needs one): each changes with its readings only
        self.beating: set[str] = set()
        self.fetching: set[str] = set()
        # the remembered sockets not down to their one reading idle past HEARTBEAT_MAX_MS
        # (``settled`` while there is none): each changes with its readings only
        self.unsettled: set[str] = set()
        # inode -> (``facts_of``, key) of the sockets down to their one reading idle past
        # HEARTBEAT_MAX_MS: while one's facts stay these and it stays idle past it, a new
        # reading leaves its history as it is, and it is not looked at again
        self.quiet: dict[int, tuple[tuple[object, ...], str]] = {}

    @property
    def settled(self) -> bool:
        """Whether every socket ``evidence`` remembers is down to its one reading idle past
        HEARTBEAT_MAX_MS: readings idle longer still, with the same bytes, leave the history
        as it is, and so the claims (kept as the readings change: no look at every socket)."""
        return not self.unsettled

    def evidence(self, gathered: Gathered, earlier: Mapping[str, Sequence[Claim]]) -> Evidence:
        """Coordinator claims among the sockets that only a known endpoint explains: the
        rules run only while a socket's readings show a heartbeat's cadence and another's a
        fetch, or the cluster describes groups (else neither can name one). A quiet socket
        whose facts are the last poll's is not looked at: its readings stay as they were."""
        history, known = self.history, gathered.known
        beating, fetching = self.beating, self.fetching
        candidates = [s for s in gathered.sockets if s.remote in known]
        quiet, kept, still, moving = self.quiet, {}, [], []
        for sock in candidates:
            was, idle_ms = quiet.get(sock.inode), sock.idle_ms
            if (was is not None and idle_ms is not None and idle_ms > HEARTBEAT_MAX_MS
                    and was[0] == facts_of(sock)):
                kept[sock.inode] = was
                still.append(was[1])
            else:
                moving.append(sock)
        for key in remember(history, moving, gathered.now_ms, still):
            readings = history.get(key, ())
            _mark(beating, key, heartbeat_cycles(readings) >= MIN_CYCLES)
            _mark(fetching, key, is_fetching(readings))
            held = history.get(key)
            _mark(self.unsettled, key, held is not None and not (
                len(held) == 1 and held[0].idle_ms > HEARTBEAT_MAX_MS))
        for sock in moving:
            key = socket_key(sock)
            held = history.get(key)
            if (sock.inode and held and len(held) == 1
                    and held[0].idle_ms > HEARTBEAT_MAX_MS):
                kept[sock.inode] = (facts_of(sock), key)
        self.quiet = kept
        if not beating or not fetching and not self.groups():
            return Evidence()
        return Evidence(claims=self.infer(earlier, {s.local.ip for s in gathered.sockets}))

    def infer(self, earlier: Mapping[str, Sequence[Claim]],
              local_ips: set[str]) -> dict[str, Claim]:
        """Socket key -> coordinator claim, from the readings remembered so far."""
        broker_of = {key: broker for key, claims in earlier.items()
                     if len(claims) == 1 and claims[0].source == "endpoint"
                     and (broker := claims[0].broker_id) is not None}
        brokers = [key for key, claims in earlier.items()  # named by librdkafka's threads
                   if any(c.source == "thread" for c in claims)]
        found = by_cadence(self.history, broker_of, brokers)
        groups = self.groups()
        if groups:
            cycles = {k: heartbeat_cycles(self.history.get(k, ())) for k in broker_of}
            found = combine(by_groups(groups, local_ips, client_ids(self.args), broker_of,
                                      cycles), found)
        return {key: _claim(inference) for key, inference in found.items()}


def _mark(keys: set[str], key: str, marked: bool) -> None:
    if marked:
        keys.add(key)
    else:
        keys.discard(key)


def _claim(inference: Inference) -> Claim:
    return Claim(source="inferred", role=Role.COORDINATOR,
                 node_id=coordinator_node_id(inference.broker_id),
                 broker_id=inference.broker_id, confidence=inference.confidence,
                 evidence={"role": "inferred", "node_id": "inferred",
                           "inference": inference.rule},
                 detail=f"{inference.rule}: coordinator on broker {inference.broker_id}")
