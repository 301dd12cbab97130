"""Who closed a connection, and why: the story told by each ``closed`` event.

The kernel knows who closed first: the side that closes first passes through
FIN_WAIT to TIME_WAIT (and keeps the 4-tuple there for 60 s), the other side
through CLOSE_WAIT and LAST_ACK. kmon remembers the TCP states it saw each
socket in while it was open (``SocketLife``) and, once the socket has left the
process, looks its 4-tuple up among the kernel's closing sockets. The reason
follows from the side and how long the connection had been idle against the
client's, the brokers' and a middlebox's idle limits.

Where the kernel's TCP events run (kmon.engine.connection_lives), the close is timed
exactly: its side is the first FIN's (or the RST's), its idle time runs from its
last data (as the packet capture stamped it where the wire runs, the same in every
view; else as the polls saw it) to that first FIN, its lifetime from the ``connect()``.
Without them the close happened somewhere between the last poll that saw the
connection open and the one that saw it gone: a limit reached within that window
is the limit that closed it.

Where the wire source runs, it saw the first FIN or RST itself, and from which
side: that decides the side, a RST makes the reason ``reset`` (unless a
middlebox's idle timeout explains it), and a broker that closed right after a
SASL request failed the authentication (``auth_failed``). Without packets a
reset cannot be told from a passive close: a connection seen on the passive
closer's path (CLOSE_WAIT, LAST_ACK) is the broker's doing (``broker``), whether by
FIN or RST; one gone without a closing state seen is ``unknown`` (``closed_by``). Where the
wire runs but its capture still held the close back when the socket went (the
wait for it timed out), the side comes from the kernel and the reason is
``unknown``: a FIN, a RST or a failed login, unread.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from kmon.engine.connection_lives import KernelLife
from kmon.evidence.findings.silent_drop import unanswered
from kmon.model import CloseStory, Connection, WireClose
from kmon.sources.kafka_protocol import SASL_APIS
from kmon.tcp_state import TcpState
from kmon.units import format_duration

# idle for this share of a broker's or a middlebox's limit when closed: that limit's reaper
# did it
REAP_SHARE = 0.8
# the client's reaper reads idle from its own stamps, kmon from the kernel's (jiffies) and
# its polls' clock: this share of the limit is slack
REAP_SLACK_SHARE = 0.02
# a client's close of a connection idle this long, its own idle limit unknown: a reap or
# the application's close, which kmon cannot tell apart (an uninstrumented client)
IDLE_WHY_UNKNOWN_MS = 1000
# librdkafka lowers a client idle limit of twice this or more by a jitter of up to this much
# (client_reap_floor)
CLIENT_JITTER_MS = 2000
# a failed login's connection closes within this of its connect (the broker's failed-login
# delay, 100 ms by default, and a few round trips): one that lived longer was logged in
LOGIN_LIFETIME_MS = 3000
CLIENT_FIRST = frozenset({TcpState.FIN_WAIT1, TcpState.FIN_WAIT2, TcpState.CLOSING,
                          TcpState.TIME_WAIT})
BROKER_FIRST = frozenset({TcpState.CLOSE_WAIT, TcpState.LAST_ACK})
NOT_ESTABLISHED = frozenset({TcpState.SYN_SENT, TcpState.SYN_RECV})
SEEN_CLOSED = frozenset({TcpState.CLOSE})  # a socket whose connect failed, or was reset
READABLE = {
    "client_idle_reap": "client idle reap", "broker_idle_reap": "broker idle reap",
    "middlebox_idle_drop": "dropped by a middlebox after its idle timeout",
    "broker_closed": "the broker closed a busy connection", "auth_failed": "authentication failed",
    "client_closed": "the client closed it", "reset": "reset", "connect_failed":
    "never established", "per_ip_rejected": "refused by the broker at once (per-IP "
    "connection limit)", "silent_drop": "the broker stopped answering (silent drop)",
    "unknown": "reason unknown"}


@dataclass
class SocketLife:
    """What kmon remembers of one open connection until it closes."""

    first_seen_ms: int
    last_seen_ms: int
    last: Connection
    states: set[str] = field(default_factory=set)

    def seen(self, conn: Connection, ts_ms: int) -> None:
        """Fold in this poll's row."""
        self.last, self.last_seen_ms = conn, ts_ms
        self.states.add(conn.state)


def closed_by(life: SocketLife, kernel_state: str | None,
              first_close: tuple[float, str] | None = None) -> str:
    """client, broker or unknown: from the kernel's TCP events where they saw the socket
    begin to close though they did not follow it from its connect (``first_close``: when,
    and whose FIN or RST), else the states seen while open, else the kernel's memory of the
    4-tuple (its closing state now).

    Only an event or a state on the socket's own path tells: FIN_WAIT/CLOSING/TIME_WAIT
    the client's close, CLOSE_WAIT/LAST_ACK the broker's. The 4-tuple gone from the kernel
    with neither seen is ``unknown``, never ``broker``: so leaves a broker's close that the
    client answered at once (librdkafka does within a millisecond), and so does a client
    that closes by a RST (SO_LINGER 0, or unread data in its receive queue at close()), one
    whose TIME_WAIT the kernel dropped (tcp_max_tw_buckets) or a new connect from the same
    port took over, or a socket whose 4-tuple kmon never had (``kernel_state`` None)."""
    if first_close is not None and first_close[0] >= life.first_seen_ms and (
            first_close[1] != "unknown"):  # of this socket, not of its 4-tuple's last user
        return first_close[1]
    if life.states & CLIENT_FIRST or kernel_state in CLIENT_FIRST:
        return "client"
    if life.states & BROKER_FIRST or kernel_state in BROKER_FIRST:
        return "broker"
    return "unknown"


def reason(side: str, idle_ms: int | None, limits: dict[str, int],
           established: bool, window_ms: int = 0) -> str:
    """Why it closed, given who closed it and how idle it was against each limit; the close
    fell up to ``window_ms`` after ``idle_ms`` was seen (the polls' gap; 0 when exact)."""
    if not established:
        return "connect_failed"

    def reaped_by(limit: str) -> bool:
        return (idle_ms is not None and limit in limits
                and idle_ms + window_ms >= (REAP_SHARE - REAP_SLACK_SHARE) * limits[limit])

    if side == "client":
        limit = limits.get("client")
        if idle_ms is None:
            return "client_closed"
        if limit is None:  # a reap or the application's close: the side is sure, why is not
            return "unknown" if idle_ms + window_ms >= IDLE_WHY_UNKNOWN_MS else "client_closed"
        return ("client_idle_reap" if idle_ms + window_ms >= client_reap_floor(limit)
                else "client_closed")
    if reaped_by("middlebox") and limits["middlebox"] < limits.get("broker", 1 << 62):
        return "middlebox_idle_drop"
    if side == "broker":
        return "broker_idle_reap" if reaped_by("broker") else "broker_closed"
    return "unknown"


def client_reap_floor(limit_ms: int) -> float:
    """The least idle, as kmon reads it, at which a client whose ``connections.max.idle.ms``
    is ``limit_ms`` reaps a connection: the limit less librdkafka's largest jitter where it
    applies, less kmon's slack.

    librdkafka's reaper, ``rd_kafka_broker_idle_check()`` in src/rdkafka_broker.c (as of
    5cd5e35, first released in v2.11.1, unchanged to 4c3b017 after v2.15.0, where the lines
    below are; the confluent-kafka 2.16.1 wheel bundles 2.16.0, whose reaps measured here
    fit it):

    * idle is ``rd_clock() - max(ts_send, ts_recv)`` (lines 4694-4706), the state's start
      where neither is set; ``ts_send`` is stamped after each send of a request (line 2875),
      ``ts_recv`` after each read that returned bytes (line 2106), both reset at a disconnect
      (rd_kafka_broker_fail, line 682): never before the wire carried the data, so its idle
      is never more than the wire's;
    * it closes once idle reaches the limit less ``rd_jitter(0, 2000)``, drawn once per broker
      handle (``rkb_c.connections_max_idle_ms``, -1 until then, line 5285) for a limit of
      4000 ms or more (``2 * max_jitter_ms``, lines 4708-4717);
    * it runs at the end of each ``rd_kafka_broker_serve()`` in state UP (line 4830), which
      serves for ``rd_kafka_max_block_ms`` (1000 ms, line 83) at a time.

    So its reap falls at a wire idle from the limit less 2 s (the limit itself under 4 s) to
    a second and a scheduling delay past its handle's lowered limit. Measured here, 66 reaps
    under a 5 s limit (two runs, 1 and 3 nodes): logged at 3,824-5,281 ms idle, the wire's
    idle at the FIN 0-23 ms past it. A
    client's close from that floor on is told its reap, under it never: librdkafka drops an
    idle connection otherwise only with its handle (a bootstrap one, within about a second
    of its metadata) or with the whole client. Java's reaper (its Selector) closes at the
    limit itself, within that window."""
    jitter = CLIENT_JITTER_MS if limit_ms >= 2 * CLIENT_JITTER_MS else 0
    return limit_ms - jitter - REAP_SLACK_SHARE * limit_ms


IDLE_REASONS = frozenset({"client_idle_reap", "broker_idle_reap", "middlebox_idle_drop"})
# what a connection whose peer had gone silent seems to close for: the client giving up on
# it, or the kernel's retries running out (a reset of its own, or a side kmon cannot tell)
DROP_HIDES = frozenset({"client_closed", "unknown", "reset"})


def drop_reason(conn: Connection, why: str) -> str:
    """``silent_drop`` for a connection last seen with its peer silent (the ``silent_drop``
    finding's test) that closed for one of DROP_HIDES; else ``why``."""
    stall = conn.tcp_stall
    if why in DROP_HIDES and stall is not None and unanswered(stall):
        return "silent_drop"
    return why


def wire_reason(wire: WireClose, kernel_reason: str,
                lived_ms: float | None = None) -> str:
    """The reason once the wire saw the close: a failed authentication (the broker answered a
    SASL request with an error, and whichever side closed first - librdkafka closes as soon as
    it reads the error - or the broker closed right after a SASL request), else a reset (unless
    the idle time already explains it). Where the answers went unheard the close is
    unsettled (``unknown``): inside TLS (the answers are never read), after a SASL request
    the broker did not close on, or after no request kmon read; in plaintext, where the
    client closed right after a SASL request whose answer the capture did not keep (once
    the brokers are known it keeps requests only). Either may be the client's reply to a
    failed login. Nor is a broker's close after no request the wire read a busy
    connection's (``broker_closed``): it came before the client's first request (a per-IP
    limit's close that beat the client's first bytes) or after requests sent before the
    capture saw the flow (a socket opened before kmon's first poll, whose login the broker
    may have just failed): unsettled too, whichever side the kernel saw close first (the
    client's FIN, sent as it read a failed login's error, may leave before it takes the
    broker's: the kernel times the client's socket closing first), as is the client's close
    after no request read of a flow the capture did not see open, if it lived
    (``lived_ms``, at least) less than ``LOGIN_LIFETIME_MS`` (librdkafka closes once it
    reads a failed login's error, its login sent before kmon looked; a connection that
    lived longer was past its login). A broker's idle reap still tells itself by the idle
    time."""
    if kernel_reason in IDLE_REASONS or kernel_reason == "connect_failed":
        return kernel_reason
    if not wire.heard:
        return "unknown"  # a FIN, a RST, a failed login: the capture had not handed it over
    if wire.auth_failed or (wire.first_by == "broker" and wire.last_api in SASL_APIS):
        return "auth_failed"
    if wire.tls and (wire.last_api is None or wire.last_api in SASL_APIS):
        return "unknown"
    if wire.first_by == "client" and wire.last_api in SASL_APIS and not wire.answers_heard:
        return "unknown"  # closed after its login request, the answer unheard: failed or not
    if (wire.first_by == "broker" and wire.last_api is None
            and kernel_reason in ("broker_closed", "client_closed")):
        return "unknown"  # the broker closed after no request the wire read (see above)
    if (wire.first_by == "client" and wire.last_api is None and not wire.from_start
            and (lived_ms is None or lived_ms < LOGIN_LIFETIME_MS)):
        return "unknown"  # a client's close after requests sent before the capture saw it
    if wire.reset:
        return "reset"
    return kernel_reason


def story(life: SocketLife, kernel_state: str | None, closed_ms: int,
          wire: WireClose | None = None, exact: KernelLife | None = None,
          first_close: tuple[float, str] | None = None) -> CloseStory:
    """The close of the connection ``life`` remembers; ``kernel_state`` is its 4-tuple's
    closing state now (None when the kernel no longer knows it); ``wire``, the first FIN or
    RST as the wire saw it; ``exact``, its life as the kernel's TCP events told it;
    ``first_close``, its first close step as they told it where they did not follow it."""
    if exact is not None and exact.closed_ms is not None:
        return exact_story(life, exact, wire)
    conn = life.last
    # a socket seen in CLOSE (a RST arrived, its fd still open) was not thereby established
    established = not life.states <= NOT_ESTABLISHED | SEEN_CLOSED
    if not established:
        side = "unknown"
    elif wire is not None and wire.heard:
        side = wire.first_by
    else:
        side = closed_by(life, kernel_state, first_close)
    timed = wire_idle_ms(wire)  # exact where the wire stamped it; else the last poll's age
    idle, window = ((conn.idle_ms, max(0, closed_ms - life.last_seen_ms)) if timed is None
                    else (timed, 0))
    why = reason(side, idle, conn.idle_limits, established, window)
    # opened before kmon saw it: it lived at least as long as it was idle
    lived = max(life.last_seen_ms - life.first_seen_ms, idle or 0)
    if wire is not None:
        why = wire_reason(wire, why, lived)
    if (wire is None or not wire.heard) and life.states <= SEEN_CLOSED:
        side = why = "unknown"  # refused, or reset, before any poll saw it open
    why = drop_reason(conn, why)
    return CloseStory(
        closed_by=side, reason=why, idle_before_ms=idle, lifetime_ms=lived,
        bytes_sent=conn.bytes_sent, bytes_received=conn.bytes_received,
        requests_sent=conn.requests_sent, requests_received=conn.requests_received)


def wire_idle_ms(wire: WireClose | None) -> int | None:
    """How long a close the wire heard came after the connection's last data, by the
    capture's stamps (the same in every view, where a poll's idle age is its own and may
    predate that data); None where it took no data or did not hear the close."""
    if wire is None or not wire.heard or wire.last_data_ms is None or wire.closed_ms is None:
        return None
    return max(0, wire.closed_ms - wire.last_data_ms)


def exact_story(life: SocketLife, kernel: KernelLife,
                wire: WireClose | None = None) -> CloseStory:
    """The close of a connection a poll saw, whose first FIN or RST the kernel timed: idle
    from its last data to that moment (``last_data_ms``)."""
    conn = life.last
    timed = kernel_story(kernel, wire, conn.idle_limits, last_data_ms(life, wire))
    return replace(timed, reason=drop_reason(conn, timed.reason),
                   bytes_sent=conn.bytes_sent, bytes_received=conn.bytes_received,
                   requests_sent=conn.requests_sent, requests_received=conn.requests_received)


def kernel_story(kernel: KernelLife, wire: WireClose | None, limits: dict[str, int],
                 last_data: float | None) -> CloseStory:
    """The close the kernel timed, told from what every view has alike: its events, the
    wire's close (``wire``), the process's idle ``limits`` and when it last carried data
    (``last_data``; the capture's stamp for a connection no poll saw)."""
    closing = kernel.closed_ms or kernel.opened_ms
    lifetime = round(closing - kernel.opened_ms)
    # as the client counts it (librdkafka's idle stamps can predate the connection: its
    # reaper closes by them), and as told: never idle longer than it lived
    counted = None if last_data is None else max(0, round(closing - last_data))
    idle = None if counted is None else min(lifetime, counted)
    # a connect never established was closed by no one, whichever RST a view's events read
    side = "unknown" if kernel.never_established else kernel.closed_by
    why = kernel.ending or reason(side, counted, limits, True)
    if kernel.ending is None and kernel.reset is not None and why not in IDLE_REASONS:
        why = "reset"
    # a refusal or a failed connect is the kernel's, and so is a reset it saw; else a close
    # the wire did not hear is unsettled (what ended it went unread)
    if kernel.alone:
        why = "unknown"  # a reset at once no other refusal by its broker matched: unsettled
    elif wire is not None and kernel.ending is None and (wire.heard or kernel.reset is None):
        why = wire_reason(wire, why, lifetime)
    return CloseStory(closed_by=side, reason=why, idle_before_ms=idle, lifetime_ms=lifetime,
                      opened_ms=round(kernel.opened_ms), closed_ms=round(closing))


def last_data_ms(life: SocketLife, wire: WireClose | None) -> float | None:
    """When the connection last carried data: the packet capture's stamp of its last segment
    with data, the same in every view; else the last poll's time less its idle age (each
    view's own polls: the sockets are read a moment after the poll's time, so later views
    of one socket read it older)."""
    if wire is not None and wire.heard and wire.last_data_ms is not None:
        return wire.last_data_ms
    conn = life.last
    return None if conn.idle_ms is None else life.last_seen_ms - conn.idle_ms


REAPING_LIMIT = {"client_idle_reap": "client", "broker_idle_reap": "broker",
                 "middlebox_idle_drop": "middlebox"}


def in_words(close: CloseStory, limits: dict[str, int] | None = None) -> str:
    """The answer first: 'broker idle reap · closed by the broker after 10 m idle (limit
    10 m)'; ``limits`` (the connection's idle limits) name the limit of an idle reap."""
    who = {"client": "by the client", "broker": "by the broker"}.get(close.closed_by,
                                                                      "by either side")
    idle = ("" if close.idle_before_ms is None
            else f" after {format_duration(close.idle_before_ms)} idle")
    limit_ms = (limits or {}).get(REAPING_LIMIT.get(close.reason, ""))
    limit = f" (limit {format_duration(limit_ms)})" if limit_ms is not None and idle else ""
    told = f"closed {who}{idle}{limit}"
    if close.reason == "client_closed":  # the side is the whole answer
        return told
    return f"{READABLE.get(close.reason, close.reason)} · {told}"
