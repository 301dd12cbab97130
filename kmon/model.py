"""Plain data: what kmon knows about clients, their connections and changes.

No I/O here. Everything the dashboard, the recorder and the headless output
show is built from these records.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from functools import cached_property
from typing import Any, NamedTuple

from kmon.short_command import short_command
from kmon.tcp_state import TcpState


class Role(str, Enum):
    """What a connection is for, in the Java client's node-id convention."""

    BOOTSTRAP = "bootstrap"
    COORDINATOR = "coordinator"
    BROKER = "broker"
    UNKNOWN = "unknown"


ROLE_RANK = {Role.BOOTSTRAP: 0, Role.COORDINATOR: 1, Role.BROKER: 2, Role.UNKNOWN: 3}


@dataclass(frozen=True)
class Thresholds:
    """When an idle or closing connection deserves attention (the config file's [thresholds])."""

    idle_warning: float = 0.8  # fraction of the idle limit: bars turn yellow, near_reap fires
    close_wait_alert_ms: int = 5000  # CLOSE_WAIT longer than this is an alert
    # load balancers and NAT gateways drop idle flows (4-6 min in clouds); None: no middlebox
    middlebox_idle_ms: int | None = None


@dataclass(frozen=True)
class ChurnThresholds:
    """When connection churn becomes a ``churn`` event (the config file's [churn])."""

    opened_per_minute: float = 30.0  # client per message: openings a minute above this ...
    short_lived_ms: int = 5000  # ... most of them closed within this long
    clients_per_minute: float = 10.0  # ... or client instances made a minute (agent's count)
    reap_cycles: int = 2  # idle-reap cycle: one broker reaped and reopened this often
    storm_processes: int = 3  # reconnect storm: this many processes reconnecting to a broker
    storm_window_ms: int = 10_000  # ... within this long of each other
    fd_growth: int = 200  # fd leak: file descriptors gained over the window, never given back
    window_ms: int = 60_000  # rates are measured over this window


@dataclass
class ClientInstance:
    """One Kafka client inside a process (a librdkafka handle, a Java client)."""

    name: str
    client_id: str
    type: str  # producer, consumer, admin
    config: dict[str, str] = field(default_factory=dict)  # redacted summary
    stats_age_ms: int | None = None  # how old the metrics behind it are
    group_id: str | None = None  # consumer group, from the configuration
    group_state: str | None = None  # the client's own view of its membership (librdkafka cgrp)
    group_join_state: str | None = None
    group_assignment_size: int | None = None
    group_coordinator_id: int | None = None  # broker the client uses as its group coordinator

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Connection:
    """One connection of a client process: a socket, a client's logical link, or both."""

    key: str  # stable identity within the process across snapshots
    role: Role
    node_id: int | None  # Java convention: bootstrap -1,-2,..; coordinator MAX_INT - broker
    broker_id: int | None
    client: str | None  # ClientInstance.name that owns it
    local: str | None  # "ip:port"
    remote: str | None
    state: str  # a TcpState, or the client's own state when no socket is seen
    idle_ms: int | None = None
    idle_limit_ms: int | None = None
    bytes_sent: int | None = None
    bytes_received: int | None = None
    requests_sent: int | None = None
    requests_received: int | None = None
    in_flight: int | None = None
    rtt_ms: float | None = None  # request round trip (client metrics)
    tcp_rtt_ms: float | None = None  # smoothed TCP rtt (kernel)
    broker_name: str | None = None  # the client's own name for it, e.g. "host:9092/2"
    fd: int | None = None
    inode: int | None = None
    evidence: dict[str, str] = field(default_factory=dict)  # fact -> stats|kernel|inferred|...
    confidence: float = 1.0
    claims: list[dict[str, Any]] = field(default_factory=list)  # each source's Claim.summary
    # every idle limit that may close it (client, broker, middlebox); idle_limit_ms is the least
    idle_limits: dict[str, int] = field(default_factory=dict)
    idle_limit_by: str | None = None  # which of idle_limits will reap it first
    # the kernel's figures of its unanswered sending (kmon.sources.kernel.sockets.TcpStall), while
    # it retransmits or probes: None while everything sent is answered
    tcp_stall: dict[str, Any] | None = None

    @property
    def reap_in_ms(self) -> int | None:
        """Time left before the idle limit closes this connection."""
        if self.idle_ms is None or self.idle_limit_ms is None:
            return None
        return max(0, self.idle_limit_ms - self.idle_ms)

    def display_order(self) -> tuple[int, str, int, str, str]:
        """How kmon lists connections everywhere: by role, then client (connections no
        client claims last), node id, address."""
        return (ROLE_RANK[self.role], self.client or "~",
                self.node_id if self.node_id is not None else 1 << 32, self.remote or "",
                self.key)

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON-ready values (its dicts and lists shared, not copied: 2,000 rows
        a second must not cost a deep copy each)."""
        out = {name: getattr(self, name) for name in _CONNECTION_FIELDS}
        out["role"] = self.role.value
        out["reap_in_ms"] = self.reap_in_ms
        return out


_CONNECTION_FIELDS = tuple(f.name for f in fields(Connection))


class Opening(str, Enum):
    """What a process held when one of its sockets opened, from the kernel's connect and
    close times (kmon.engine.losses)."""

    HELD = "held"  # another connection, or it had just moved on from its bootstrap one
    FIRST = "first"  # nothing before it: the process's first connection as kmon saw it
    ALONE = "alone"  # none: the last one closed by the client (ended, or reaped idle)
    LOST = "lost"  # none: the last one lost (the broker closed it first)
    # none: the last one refused at its connect (a failed connect, or closed by the broker
    # at once: a per-IP limit): the refused connection's retry, or a re-bootstrap
    REFUSED = "refused"


@dataclass(frozen=True)
class WireClose:
    """How the wire saw a connection close: who sent the first FIN or RST, and after which
    request."""

    first_by: str  # client or broker
    reset: bool  # the first was a RST
    last_api: int | None  # the API key of the last request the client sent on it
    auth_failed: bool = False  # the broker answered a SASL request with an error
    tls: bool = False  # inside TLS: the requests are read from the client's TLS writes, when
    # kmon's TLS source runs; the answers, never
    answers_heard: bool = True  # every SASL request's answer was read (auth_failed can tell)
    # False: the socket went without its FIN or RST read (the capture's ring held it back
    # past the wait, or dropped it): how it closed went unread, and ``first_by`` is "unknown"
    heard: bool = True
    # when the capture took the flow's last segment with data before the close (UTC epoch
    # ms, the kernel's stamp: the same in every view): a request's start, or an answer while
    # kmon kept them; None when it took none
    last_data_ms: int | None = None
    # the capture followed the connection from its opening (False: it was open when the
    # capture started, and what it carried before then went unread)
    from_start: bool = True
    closed_ms: int | None = None  # when the capture took the first FIN or RST (UTC epoch ms)


@dataclass(frozen=True)
class ConnectionSummary:
    """What the process lists, cluster labels and port filters read of a process's
    connections, counted in one go."""

    count: int
    roles: Counter[Role]
    close_wait: int  # connections in CLOSE_WAIT
    max_idle_ms: int | None  # the longest idle age known
    min_idle_ms: int | None  # the shortest, None when one is unknown
    remotes: frozenset[str]  # the remote endpoints, as shown
    brokers: frozenset[str]  # those of the connections with a known role


def summarize(connections: list[Connection]) -> ConnectionSummary:
    """The summary of ``connections``."""
    idles = [c.idle_ms for c in connections if c.idle_ms is not None]
    roles = Counter(c.role for c in connections)
    remotes = frozenset(c.remote for c in connections if c.remote)
    brokers = remotes if not roles[Role.UNKNOWN] else frozenset(
        c.remote for c in connections if c.remote and c.role is not Role.UNKNOWN)
    return ConnectionSummary(
        len(connections), roles, sum(c.state == TcpState.CLOSE_WAIT for c in connections),
        max(idles, default=None),
        min(idles, default=None) if len(idles) == len(connections) else None, remotes, brokers)


@dataclass(frozen=True)
class Finding:
    """A diagnosis of a process's trouble (kmon.evidence.findings): what kmon saw, in words,
    the evidence behind it, and what to change."""

    reason: str  # fd_near_limit, duplicate_client_id, ...
    since_ms: int  # UTC epoch ms: first seen, held while it lasts
    detail: str  # what kmon saw, in words
    evidence: dict[str, object] = field(default_factory=dict)  # the figures behind it, as JSON
    fix: str = ""  # what to change, in words

    def words(self) -> str:
        """The finding in one line: its reason, what kmon saw, what to change
        (process-controlled text: for ``plain`` or ``one_line``)."""
        return f"{self.reason.replace('_', ' ')}: {self.detail} → {self.fix}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ProcessView:
    """A watched process and its connections at one instant."""

    pid: int
    name: str
    cmdline: str
    clients: list[ClientInstance] = field(default_factory=list)
    connections: list[Connection] = field(default_factory=list)  # in display_order()
    notices: list[str] = field(default_factory=list)  # problems worth showing in place
    clients_created: int | None = None  # client instances made so far (the agent counts)
    # connections opened and closed in the last minute, however short-lived (the kernel's
    # TCP events count them; None where they do not run)
    opened_1m: int | None = None
    closed_1m: int | None = None
    # how the sockets gone since the last poll closed, as the wire saw them, by (local, remote)
    wire_closes: dict[tuple[str, str], WireClose] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)  # newest first
    # the broker endpoints kmon knows for it ("ip:port" -> broker id): those its own Metadata
    # answers advertised, and those of the cluster kmon was given
    brokers: dict[str, int] = field(default_factory=dict)

    @property
    def short_command(self) -> str:
        """Its command in a word or two: the script, jar or main class it runs."""
        return short_command(self.cmdline, self.name)

    @cached_property
    def summary(self) -> ConnectionSummary:
        """Its connections summed up, once: a view's connections never change once made."""
        return summarize(self.connections)

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name, "cmdline": self.cmdline,
                "clients": [c.to_dict() for c in self.clients],
                "connections": [c.to_dict() for c in self.connections],
                "notices": list(self.notices), "clients_created": self.clients_created,
                "opened_1m": self.opened_1m, "closed_1m": self.closed_1m,
                "findings": [f.to_dict() for f in self.findings]}


class ConnectionLife(NamedTuple):
    """One connection the kernel's TCP events followed from its connect to its close (a
    tuple: hundreds are made a second)."""

    pid: int  # the process whose connect() opened it
    local: str | None
    remote: str | None
    opened_ms: int  # UTC epoch ms, exact
    closed_ms: int  # its first FIN or RST
    closed_by: str  # client, broker, unknown
    ending: str | None  # connect_failed, per_ip_rejected, or None for an ordinary close


@dataclass
class Snapshot:
    """Everything seen in one poll."""

    ts_ms: int  # UTC epoch ms
    host: str
    processes: list[ProcessView] = field(default_factory=list)
    # the host's connections to the brokers closed in the last minute by no watched process,
    # where the kernel's TCP events cannot run (kmon.engine.host_churn); None elsewhere
    host_closed_1m: int | None = None
    lives: list[ConnectionLife] = field(default_factory=list)  # ended since the last poll

    def to_dict(self) -> dict[str, Any]:
        return {"ts_ms": self.ts_ms, "host": self.host,
                "processes": [p.to_dict() for p in self.processes],
                "host_closed_1m": self.host_closed_1m}


class EventKind(str, Enum):
    """What changed between two snapshots."""

    OPENED = "opened"
    CLOSED = "closed"
    STATE_CHANGE = "state_change"
    CLOSE_WAIT = "close_wait"
    NEAR_REAP = "near_reap"
    ROLE_CHANGE = "role_change"
    PROCESS_EXIT = "process_exit"
    PROCESS_ERROR = "process_error"  # its evidence can no longer be read
    CHURN = "churn"  # a process opens connections in a pattern worth a look (see kmon.engine.churn)


@dataclass
class Event:
    """One change to one connection (or process)."""

    ts_ms: int
    kind: EventKind
    pid: int
    key: str | None
    role: Role | None = None
    node_id: int | None = None
    remote: str | None = None
    detail: str = ""
    client: str | None = None
    broker_id: int | None = None
    close: CloseStory | None = None  # closed events: who closed it and why
    churn: Churn | None = None  # churn events: the pattern and its rate

    def to_dict(self) -> dict[str, Any]:
        out = {"ts_ms": self.ts_ms, "kind": self.kind.value, "pid": self.pid, "key": self.key,
               "role": self.role.value if self.role else None, "node_id": self.node_id,
               "remote": self.remote, "detail": self.detail, "client": self.client,
               "broker_id": self.broker_id}
        if self.close is not None:
            out.update(asdict(self.close))
        if self.churn is not None:
            out.update(asdict(self.churn))
        return out


@dataclass(frozen=True)
class CloseStory:
    """Who closed a connection and why, with what it had carried (kmon.engine.closes)."""

    closed_by: str  # client, broker, unknown
    reason: str  # client_idle_reap, broker_idle_reap, middlebox_idle_drop, broker_closed, ...
    idle_before_ms: int | None  # idle for at least this long when last seen open
    lifetime_ms: int | None  # open for at least this long (since kmon first saw it)
    bytes_sent: int | None = None
    bytes_received: int | None = None
    requests_sent: int | None = None
    requests_received: int | None = None
    opened_ms: int | None = None  # exact, from the kernel's TCP events (UTC epoch ms)
    closed_ms: int | None = None  # when it began to close (first FIN or RST), exact likewise


@dataclass(frozen=True)
class Churn:
    """A connection pattern of one process (or, for a storm, of many) worth a look."""

    pattern: str  # client_per_message, idle_reap_cycle, reconnect_storm, fd_leak
    rate: float  # per minute: connections opened, cycles, processes, or fds gained
    window_s: int  # over how long the rate was measured
