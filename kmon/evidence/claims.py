"""Claims: what one kind of evidence says about one socket, and how producers hand them over.

Every producer of evidence (the client's statistics, JMX and the Java log,
known broker endpoints, traffic cadence, the wire) returns a ``Claim`` per
socket it can speak for: the role, node id and broker id it believes, how
sure it is, and the facts it knows beyond the kernel's (the owning client,
request counts, the client's own name for the connection). ``kmon.evidence.resolve``
turns the claims into one row per socket and keeps every claim on the row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from kmon.model import ClientInstance, Opening, Role, WireClose
from kmon.sources.brokers.dns import Resolver
from kmon.sources.clients.librdkafka_stats import ClientStats
from kmon.sources.jvm.jvm_reading import JvmReading
from kmon.sources.kernel.sockets import Endpoint, TcpSocket
from kmon.sources.process_wire import WireReading

# How much a claim's source is trusted for the whole row, highest first. The wire is
# the authority on roles alone (see resolve); the rest fill the row from the best one.
SOURCE_RANK = {"stats": 3, "jmx": 3, "log": 3, "thread": 2, "inferred": 2, "endpoint": 1}


@dataclass(frozen=True)
class Claim:
    """One source's belief about one socket.

    ``facts`` are ``Connection`` fields this source knows (``client``,
    ``requests_sent``, ``broker_name``, an idle time where the kernel gave
    none, …); ``evidence`` are the row's ``evidence`` entries it sets.
    """

    source: str  # stats, jmx, log, inferred, endpoint, wire
    role: Role | None  # None: a note about the socket (its evidence), no say on its role
    node_id: int | None
    broker_id: int | None
    confidence: float
    facts: Mapping[str, object] = field(default_factory=dict)
    evidence: Mapping[str, str] = field(default_factory=dict)
    detail: str = ""  # what decided, in a few words (pairing, rule, API keys)
    # tied to this very socket by the client's own handle of it (the fd its broker thread
    # polls), not paired with it by endpoint or counters: outranks the wire's guesses
    exact: bool = False

    @cached_property
    def summary(self) -> dict[str, Any]:
        """The claim as the row keeps it (JSON-ready), for the detail pane and recordings:
        made once, the rows of every poll that hold this claim share it (never changed)."""
        return {"source": self.source, "role": self.role.value if self.role else None,
                "node_id": self.node_id, "broker_id": self.broker_id,
                "confidence": self.confidence, "detail": self.detail}


@dataclass
class Gathered:
    """What the sources read of one process at one poll: the producers' common input."""

    now_ms: int
    sockets: list[TcpSocket]
    known: dict[Endpoint, int]  # broker id of every broker endpoint kmon knows
    resolver: Resolver
    broker_idle_ms: int
    stats: list[ClientStats] = field(default_factory=list)  # fresh librdkafka statistics
    wire: WireReading | None = None  # what the process's packet tap read, when it has one
    jvm: JvmReading | None = None  # a JVM's JMX reading and client log events, when a JVM
    # endpoints answering for brokers other than themselves, with the brokers they advertise
    # (kmon.sources.brokers.broker_query.ConfirmedBrokers.fronts)
    fronts: dict[Endpoint, tuple[tuple[int, str], ...]] = field(default_factory=dict)
    # of the sockets (local, remote) the kernel saw opened: what the process held when each
    # opened (after it lost every connection to its cluster, none, another), from the
    # kernel's connect and close times (None: this view cannot tell; kmon.engine.losses)
    openings: dict[tuple[Endpoint, Endpoint], Opening | None] = field(default_factory=dict)
    # socket inode -> the node whose librdkafka broker thread polls it
    # (kmon.sources.processes.rdk_threads)
    threads: dict[int, int] = field(default_factory=dict)


@dataclass
class Evidence:
    """What one producer found at one poll."""

    claims: dict[str, Claim] = field(default_factory=dict)  # socket key -> claim
    clients: list[ClientInstance] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    learned: dict[Endpoint, int] = field(default_factory=dict)  # broker endpoints it named
    hidden: set[str] = field(default_factory=set)  # keys of kmon's own sockets, never shown
    # how sockets gone since the last poll closed, by (local, remote) (the wire)
    closes: dict[tuple[Endpoint, Endpoint], WireClose] = field(default_factory=dict)
    ask: list[Endpoint] = field(default_factory=list)  # peers to ask for the brokers' ids


# One kind of evidence: (what the sources read, the claims of the producers before it)
# -> what it found. A new kind of evidence is one more producer in the sampler's list.
Producer = Callable[[Gathered, Mapping[str, Sequence[Claim]]], Evidence]


def socket_key(sock: TcpSocket) -> str:
    """A socket's stable key within its process."""
    return f"sock:{sock.inode}" if sock.inode else f"sock:{sock.local}>{sock.remote}"
