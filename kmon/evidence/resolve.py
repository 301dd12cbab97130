"""One row per socket from every claim made about it.

The kernel's facts (state, idle time, bytes, rtt) make the row's base. The
best-ranked claim (``claims.SOURCE_RANK``: the client's own metrics, then
inference, then a known broker endpoint) names the role, node id, broker and
owning client and fills in what the client knows. A claim from the wire overrides
the role, node id and broker whatever the others say, but where it only guesses
(below 1.0) and an exact claim (``Claim.exact``: the client's own handle of the
socket, its broker thread's) names another: that claim decides. Where the two
disagree, a notice says so. Where the wire leaves a socket unsettled (role
unknown: it cannot tell a bootstrap from a broker connection), it overrides only a
known endpoint's claim: the client's own evidence (statistics, JMX, its log, its
broker threads) or an inference still names the role. A claim with no role is a
note (a TLS socket the wire cannot read): its evidence joins the row. Every claim
stays on the row (``Connection.claims``), so the detail pane can show why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from typing import Any

from kmon.evidence.claims import SOURCE_RANK, Claim, socket_key
from kmon.model import Connection, Role
from kmon.sources.kernel.sockets import TcpSocket

WIRE = "wire"


LIMIT_ORDER = ("client", "broker", "middlebox")  # on a tie, the first named reaps
LIMIT_EVIDENCE = {"broker": "broker default", "middlebox": "middlebox (config)"}
# a client's own limit keeps the evidence its claim gave (stats, jmx, config, ...)


def kernel_limits(broker_idle_ms: int,
                  middlebox_idle_ms: int | None) -> tuple[dict[str, int], str]:
    """The idle limits every socket has whatever its client (the brokers', a middlebox's),
    and which of them reaps first."""
    limits = {"broker": broker_idle_ms}
    if middlebox_idle_ms:
        limits["middlebox"] = middlebox_idle_ms
    return limits, least_limit(limits)


def socket_row(sock: TcpSocket, key: str, limits: dict[str, int], by: str) -> Connection:
    """What the kernel alone says of a socket: no role, the ``kernel_limits``. Its
    ``idle_limits`` and ``evidence`` are shared between rows (nothing changes a row's dicts in
    place)."""
    idle_ms, sent = sock.idle_ms, sock.bytes_sent
    return Connection(  # by position, Connection's field order: 2,000 rows a poll
        key, Role.UNKNOWN, None, None, None, sock.local.text, sock.remote.text, sock.state,
        idle_ms, limits[by], sent, sock.bytes_received, None, None, None, None, sock.rtt_ms,
        None, sock.fd, sock.inode or None,
        _kernel_evidence(sock.source, idle_ms is not None, sent is not None, by), 0.0, [],
        limits, by, sock.stall and sock.stall._asdict())


@cache
def _kernel_evidence(source: str, idle_known: bool, bytes_known: bool,
                     by: str) -> dict[str, str]:
    return {"role": "none", "idle": source if idle_known else "unknown",
            "bytes": source if bytes_known else "unknown", "state": source,
            "idle_limit": LIMIT_EVIDENCE[by], "pairing": "none"}


def least_limit(limits: Mapping[str, int]) -> str:
    """Which of ``limits`` reaps first (on a tie, the first in LIMIT_ORDER)."""
    return min(limits, key=lambda name: (limits[name], LIMIT_ORDER.index(name)))


def best(claims: Sequence[Claim]) -> Claim | None:
    """The claim that fills the row: highest-ranked source, then the surest."""
    ranked = [c for c in claims if c.source != WIRE and c.role is not None]
    if not ranked:
        return None
    return max(ranked, key=lambda c: (SOURCE_RANK.get(c.source, 0), c.confidence))


def with_limits(row: Connection, middlebox_idle_ms: int | None) -> Connection:
    """The row with its effective idle limit: the least of its limits, and which one it is."""
    limits = dict(row.idle_limits)
    if middlebox_idle_ms:
        limits["middlebox"] = middlebox_idle_ms
    if not limits:
        return row
    by = least_limit(limits)
    if (limits == row.idle_limits and by == row.idle_limit_by
            and row.idle_limit_ms == limits[by]):
        return row
    evidence = row.evidence if by == "client" else {**row.evidence,
                                                    "idle_limit": LIMIT_EVIDENCE[by]}
    return replace(row, idle_limits=limits, idle_limit_ms=limits[by], idle_limit_by=by,
                   evidence=evidence)


def resolve_one(base: Connection, claims: Sequence[Claim]) -> tuple[Connection, str | None]:
    """The row of one socket, and a notice where the wire contradicts the other evidence."""
    if not claims:
        return base, None
    changes, evidence, notice = decide(base.evidence, base.remote, base.fd, claims)
    return replace(base, evidence=evidence, claims=[c.summary for c in claims],
                   **changes), notice


def decide(kernel_evidence: Mapping[str, str], remote: str | None, fd: int | None,
           claims: Sequence[Claim]) -> tuple[dict[str, Any], dict[str, str], str | None]:
    """What ``claims`` make of the row of a socket (to ``remote``, under ``fd``) whose kernel
    evidence is ``kernel_evidence``: the fields they set, the row's evidence, and a notice
    where the wire contradicts the other evidence."""
    changes: dict[str, Any] = {}
    evidence = dict(kernel_evidence)
    chosen = best(claims)
    if chosen is not None:
        changes.update(role=chosen.role, node_id=chosen.node_id, broker_id=chosen.broker_id,
                       confidence=chosen.confidence, **chosen.facts)
        evidence.update(chosen.evidence)
    for note in (c for c in claims if c.role is None):
        evidence.update(note.evidence)
    notice = None
    wire = next((c for c in claims if c.source == WIRE and c.role is not None), None)
    if wire is not None and wire.role is Role.UNKNOWN and chosen is not None and (
            chosen.source != "endpoint"):  # the wire cannot tell; the client's evidence can
        evidence.update((k, v) for k, v in wire.evidence.items() if k != "role")
        wire = None
    own = _exact_against(claims, wire)
    if wire is not None and wire.role and own is not None and own.role:
        # the client's own handle of the socket outranks a guess
        notice = (f"{remote} (fd {fd}): the wire guessed {wire.role.value} "
                  f"{wire.node_id}, {own.source} says {own.role.value} {own.node_id}; "
                  f"the {own.source} decides")
        evidence.update((k, v) for k, v in wire.evidence.items() if k != "role")
        changes.update(role=own.role, node_id=own.node_id, broker_id=own.broker_id,
                       confidence=own.confidence)
        evidence.update(own.evidence)
        wire = None
    if wire is not None and wire.role is not None:  # (the search above: it has a role)
        if chosen is not None and chosen.role is not None and chosen.source != "endpoint" and (
                chosen.role, chosen.node_id) != (wire.role, wire.node_id):
            notice = (f"{remote} (fd {fd}): the wire says {wire.role.value} "
                      f"{wire.node_id}, {chosen.source} said {chosen.role.value} "
                      f"{chosen.node_id}; the wire decides")
        changes.update(role=wire.role, node_id=wire.node_id, confidence=wire.confidence,
                       **wire.facts)
        if wire.broker_id is not None:
            changes["broker_id"] = wire.broker_id
        evidence.update(wire.evidence)
    return changes, evidence, notice


def _exact_against(claims: Sequence[Claim], wire: Claim | None) -> Claim | None:
    """The exact claim (``Claim.exact``: the client's own handle of this socket) that names
    another role or node than ``wire``, where the wire only guesses (below 1.0): the
    client's word on its own socket is surer. Claims paired by endpoint or counters are not
    exact: they never outrank the wire (a re-bootstrap socket to broker 1's address is
    paired with broker 1's statistics)."""
    if wire is None or wire.role in (None, Role.UNKNOWN) or wire.confidence >= 1.0:
        return None
    return next((c for c in claims if c.exact and c.role not in (None, Role.UNKNOWN)
                 and (c.role, c.node_id) != (wire.role, wire.node_id)), None)


class RowResolver:
    """The rows of one process's sockets, poll after poll: what the claims make of a socket
    (``resolve_one``, ``with_limits``) is worked out again only when they say something else
    than at the last poll (their details aside: those only enter ``Connection.claims``), or
    its fd, its peer or the limits changed; where only their evidence moved (a request more
    in the wire's counts), only the row's evidence is (``decide``); the kernel's fields are
    each poll's own."""

    def __init__(self) -> None:
        self.made: dict[str, _Made] = {}  # socket key -> its claims' part, the last poll's

    def resolve(self, sockets: Sequence[TcpSocket], claims: Mapping[str, Sequence[Claim]],
                broker_idle_ms: int,
                middlebox_idle_ms: int | None = None) -> tuple[list[Connection], list[str]]:
        """Every socket's row (in socket order) and the notices their claims raise."""
        rows, notices, made, before = [], [], {}, self.made
        limits, by = kernel_limits(broker_idle_ms, middlebox_idle_ms)
        setting = (broker_idle_ms, middlebox_idle_ms)
        usual = _kernel_evidence("kernel", True, True, by)  # most sockets' kernel evidence
        for sock in sockets:
            key = socket_key(sock)
            said = claims.get(key)
            if not said:
                rows.append(socket_row(sock, key, limits, by))
                continue
            idle_ms, sent = sock.idle_ms, sock.bytes_sent
            evidence = (usual if idle_ms is not None and sent is not None
                        and sock.source == "kernel"
                        else _kernel_evidence(sock.source, idle_ms is not None,
                                              sent is not None, by))
            last = before.get(key)
            if last is not None and last.holds(said, sock, evidence, setting):
                was = last.row
                row = Connection(  # by position, Connection's field order, as socket_row
                    key, was.role, was.node_id, was.broker_id, was.client, sock.local.text,
                    sock.remote.text, sock.state, idle_ms, was.idle_limit_ms, sent,
                    sock.bytes_received, was.requests_sent, was.requests_received,
                    was.in_flight, was.rtt_ms, sock.rtt_ms, was.broker_name, sock.fd,
                    sock.inode or None, last.evidence, was.confidence,
                    last.summaries, was.idle_limits, was.idle_limit_by,
                    sock.stall and sock.stall._asdict())
            else:
                row, notice = resolve_one(socket_row(sock, key, limits, by), said)
                limited = with_limits(row, middlebox_idle_ms)
                last = _Made(list(said), evidence, setting, limited, notice,
                             limited.evidence is row.evidence)
                row = limited
            if last.lasting:
                made[key] = last
            rows.append(row)
            if last.notice:
                notices.append(last.notice)
        self.made = made
        return rows, notices


# the row's fields that are the kernel's: a claim with a fact for one is not remembered
_KERNEL_FIELDS = frozenset({"local", "remote", "state", "idle_ms", "bytes_sent",
                            "bytes_received", "tcp_rtt_ms", "fd", "inode"})


@dataclass(slots=True)
class _Made:
    """The row one socket's claims made at one poll, and the notice they raised; with what
    they were made from."""

    claims: list[Claim]
    kernel_evidence: dict[str, str]
    setting: tuple[int, int | None]  # the brokers' and a middlebox's idle limits
    row: Connection
    notice: str | None
    # the limits left the row's evidence as the claims made it: where only the claims'
    # evidence changes, the row's is theirs made again (``decide``), its fields the same
    evidence_free: bool = False
    lasting: bool = field(init=False)  # no claim has a fact in place of the kernel's
    summaries: list[dict[str, Any]] = field(init=False)  # the claims as rows keep them, shared
    evidence: dict[str, str] = field(init=False)  # the row's evidence, for the next poll's

    def __post_init__(self) -> None:
        self.lasting = not any(_KERNEL_FIELDS.intersection(c.facts) for c in self.claims)
        self.summaries = self.row.claims
        self.evidence = self.row.evidence

    def holds(self, claims: Sequence[Claim], sock: TcpSocket, kernel_evidence: dict[str, str],
              setting: tuple[int, int | None]) -> bool:
        """Whether these claims, of this socket, make the same row but the kernel's fields
        and, where only the claims' evidence changed, the row's evidence (then the claims are
        this poll's, their summaries and that evidence too)."""
        row = self.row
        if not (kernel_evidence is self.kernel_evidence and sock.fd == row.fd
                and sock.remote.text == row.remote and setting == self.setting
                and len(claims) == len(self.claims)):
            return False
        if claims == self.claims:  # the same claims (each the same one, or equal): the same row
            return True
        said_alike = True
        for now, was in zip(claims, self.claims, strict=True):
            if not _says_alike_but_evidence(now, was):
                return False
            said_alike = said_alike and (now.evidence is was.evidence
                                         or now.evidence == was.evidence)
        if not said_alike:
            if not self.evidence_free:
                return False
            self.evidence = _evidence_again(kernel_evidence, row, claims)
        self.claims, self.summaries = list(claims), [c.summary for c in claims]
        return True


def _evidence_again(kernel_evidence: dict[str, str], row: Connection,
                    claims: Sequence[Claim]) -> dict[str, str]:
    """The evidence ``claims`` give the row (``decide``'s), the rest of it as it was."""
    return decide(kernel_evidence, row.remote, row.fd, claims)[1]


def _says_alike_but_evidence(a: Claim, b: Claim) -> bool:
    """Whether two claims set the same fields of a row (their evidence and details aside)."""
    return a is b or (a.role is b.role and a.node_id == b.node_id
                      and a.broker_id == b.broker_id and a.confidence == b.confidence
                      and a.source == b.source and (a.facts is b.facts or a.facts == b.facts))
