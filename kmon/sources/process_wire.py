"""The wire of one process as the sampler gathers it: its packet tap (its own, or its part of
the host's one capture), opened at the first read; the request headers inside its TLS
writes (kmon.sources.tls), read only while one of its TLS sockets has not yet carried a
request that decides its role (and of its threads, those that write to such a socket:
``TlsTap.follow``); and kmon's own Metadata query to a broker the process talks Kafka to.

``read`` hands over what the tap saw since the last read (``WireReading``), with the brokers
of a query that has answered taught to the tap first. ``ask`` starts one query, on a thread
of its own (``BrokerQuery``), to the first of the peers the evidence could not name that
was not asked yet: a slow peer delays no poll, and its answer is in a later read.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass

from kmon.model import WireClose
from kmon.sources import kafka_protocol as kp
from kmon.sources.brokers.broker_query import BrokerQuery
from kmon.sources.kernel.kernel_events import KernelEventsUnavailable
from kmon.sources.kernel.sockets import Endpoint, TcpSocket
from kmon.sources.packets.host_wire import HostWire, SharedCapture
from kmon.sources.packets.kafka_wire import WireTap, WireView
from kmon.sources.tls.tls_tap import TlsTap, TlsUnavailable, TlsWrite

PROBE_S = 30.0  # the TLS source runs this long at most for sockets it cannot decide
DECIDING_APIS = kp.BROKER_APIS | kp.GROUP_APIS | kp.TXN_APIS  # a TLS socket's role is known
MAX_OPENED = 4096  # sockets the kernel saw the process open, kept until their close, at most
MAX_ASKED = 16  # peers kmon asks for the cluster's brokers, at most, per process
NO_CAPTURE = ("roles from the wire need CAP_NET_RAW (run kmon as root); they come from the "
              "other evidence")


@dataclass(frozen=True)
class WireReading:
    """What the wire of a process told at one poll: its view, or why it cannot be read."""

    view: WireView | None
    problem: str | None = None
    notices: tuple[str, ...] = ()  # the TLS source's: why it cannot run, what it missed


class ProcessWire:
    """The wire source of one process: its tap and kmon's own broker query."""

    def __init__(self, host: HostWire | None = None, tls_pid: int | None = None) -> None:
        self.host = host  # the host's one capture, else the process gets a tap of its own
        self.tls_pid = tls_pid  # the process whose TLS writes are read (None: not read)
        self.tls: TlsTap | None = None
        self.tls_problem: str | None = None
        self.tls_lost = 0  # writes the TLS source missed before it last closed
        # undecided TLS sockets -> since when the TLS source is wanted for them (monotonic)
        self.probing: dict[tuple[Endpoint, Endpoint], float] = {}
        self.given_up: set[tuple[Endpoint, Endpoint]] = set()  # TLS sockets probed PROBE_S
        self.linger_until = 0.0  # the source stays open until then (a login may have failed)
        # and until then while no socket is past its login (the client closed one unread)
        self.unread_until = 0.0
        # the wanted sockets' request segments at the last poll: which sent since
        self.requests: dict[tuple[Endpoint, Endpoint], int] = {}
        # sockets the kernel saw the process open (``opened``), until their close is read
        self.kernel_opened: dict[tuple[Endpoint, Endpoint], None] = {}
        self.shared: SharedCapture | None = None
        self.tap: WireTap | None = None
        self.problem: str | None = None
        self.asked: set[Endpoint] = set()  # peers kmon asked for the cluster's brokers
        self.query: BrokerQuery | None = None  # the one under way

    def read(self, sockets: list[TcpSocket], now_ms: int) -> WireReading:
        """What the tap saw since the last read (opening it at the first)."""
        if self.problem is not None:
            return WireReading(None, self.problem)
        try:
            if self.tap is None:
                self.shared = None if self.host is None else self.host.share()
                self.tap = WireTap(sockets, now_ms, self.shared)
            pairs = [(s.local, s.remote) for s in sockets]
            if self.tap.losing(pairs):  # its close read before the sockets change hands
                capture = self.tap.capture
                if isinstance(capture, SharedCapture):
                    capture.settle(time.time(), now_ms)
                else:
                    capture.settle(time.time())
            if self.shared is not None and pairs != self.tap.pairs:  # the last poll's: owned
                self.shared.own([((local.ip, local.port), (remote.ip, remote.port))
                                 for local, remote in pairs], now_ms)
            elif self.shared is not None:
                self.shared.host.expire(now_ms)
            answer = self._answer()
            if answer:
                self.tap.learn(answer, now_ms)
            view = self.tap.poll(sockets, now_ms, self._tls_writes(sockets))
            self._probe_while_undecided(view, sockets)
            return WireReading(view, notices=self._tls_notices(view))
        except PermissionError:
            self.problem = NO_CAPTURE
        except OSError as err:
            self.problem = (f"the wire cannot be read ({err.strerror or err}); roles come from "
                            "the other evidence")
        self.close()
        return WireReading(None, self.problem)

    def opened(self, sockets: Iterable[tuple[tuple[str, int], tuple[str, int]]]) -> None:
        """Sockets, as (local, remote) (ip, port), the kernel saw the process open: their
        remote ports are captured from now on (``WireTap.follow``), and a part of the host's
        capture takes their segments though no poll shows them (a capture of its own reads
        every segment of the ports it follows already)."""
        sockets = list(sockets)
        for local, remote in sockets:
            self.kernel_opened[Endpoint(*local), Endpoint(*remote)] = None
        while len(self.kernel_opened) > MAX_OPENED:
            del self.kernel_opened[next(iter(self.kernel_opened))]
        if self.tap is not None:
            self.tap.follow(remote[1] for _, remote in sockets)
        if self.shared is not None:
            self.shared.opened(sockets)

    def quiet(self) -> bool:
        """Whether a read now would hand over nothing new: the tap, part of the host's
        capture, has no segment waiting and nothing dropped since its last poll, no TLS source
        is open, no query has answered (or the wire cannot be read at all)."""
        if self.problem is not None:
            return True
        return (self.tap is not None and self.tls is None and (
            self.query is None or not self.query.done) and self.tap.quiet())

    def ask(self, peers: Iterable[Endpoint]) -> None:
        """Ask the first of ``peers`` not asked yet for the cluster's brokers, unless a query
        is under way or ``MAX_ASKED`` have been asked."""
        if self.query is not None or len(self.asked) >= MAX_ASKED:
            return
        peer = next((p for p in peers if p not in self.asked), None)
        if peer is not None:
            self.asked.add(peer)
            self.query = BrokerQuery(peer)

    def _tls_writes(self, sockets: list[TcpSocket]) -> list[TlsWrite]:
        """The process's TLS writes since the last read; none where the TLS source cannot run
        (the reason kept for ``_tls_notices``)."""
        if self.tls is None:
            return []
        try:
            return self.tls.read(sockets)
        except (TlsUnavailable, KernelEventsUnavailable, OSError) as err:
            self._tls_failed(err)
            return []

    def _probe_while_undecided(self, view: WireView, sockets: list[TcpSocket]) -> None:
        """The TLS source runs once a socket of the process has spoken TLS, while one of its
        sockets has carried no request that decides its role (a broker's, a coordinator's;
        one silent since kmon attached may be TLS too: its first record would be missed),
        for PROBE_S at most for each; a socket it gave up on keeps it open no more. A TLS
        socket whose close may end a failed login keeps it open PROBE_S more
        (``_login_may_have_failed``): a client whose logins fail opens a new socket every few
        hundred ms, each to be read from its first write (a source opened at a poll reads
        from then on). One closed with no request read keeps it open only while no socket of
        the process is past its login: a client at work on another socket that drops one
        (librdkafka its bootstrap connection, once it knows the cluster) is not failing its
        logins. Only the process's closes count: a poll showed the socket, the
        kernel saw the process open it, or its TLS writes went to it (the tap reads its ports,
        whoever talks on them: another client's failing logins are not this one's). Every
        probe's cost is the client's."""
        flows, now = view.flows, time.monotonic()
        for pair, close in view.closes.items():
            if self.kernel_opened.pop(pair, 0) is not None and pair in view.untied:
                continue  # maybe another process's
            doubt = _login_may_have_failed(close)
            if doubt == "failed":
                self.linger_until = now + PROBE_S
            elif doubt == "unread":
                self.unread_until = now + PROBE_S
        # a process none of whose flows speaks TLS (most) has no socket to decide: its
        # sockets and flows are looked through only where a TLS flow or a probe asks
        tls = any(f.tls for f in flows.values())
        decided = ({key for key, f in flows.items() if f.api_counts.keys() & DECIDING_APIS}
                   if tls or now < self.unread_until else set())
        pairs = {(s.local, s.remote) for s in sockets} if tls or self.given_up else set()
        undecided = pairs - decided if tls else set()
        lingering = now < self.linger_until or (now < self.unread_until and not decided)
        self.given_up &= pairs
        self.probing = {pair: self.probing.get(pair, now) for pair in undecided - self.given_up}
        self.given_up |= {pair for pair, since in self.probing.items() if now - since > PROBE_S}
        wanted = self.probing.keys() - self.given_up
        if self.tls is None:
            if wanted:
                self._open_tls()  # read from the next poll
        elif not wanted and not lingering:
            self.tls_lost += self.tls.lost
            self.tls.close()
            self.tls = None
        else:
            self._follow(flows, sockets, wanted, lingering)

    def _follow(self, flows: dict, sockets: list[TcpSocket],
                wanted: set[tuple[Endpoint, Endpoint]], lingering: bool) -> None:
        """The TLS source reads the threads that write to the wanted sockets (while a login may
        have failed, every thread but those whose writes all went to sockets not wanted) and
        hands on their writes only, told which of those the wire heard send, and which sent
        since the last poll."""
        inodes = {(s.local, s.remote): s.inode for s in sockets}
        counts = {pair: flows[pair].requests for pair in wanted if pair in flows}
        heard = {inodes[pair] for pair, count in counts.items() if count}
        spoke = {inodes[pair] for pair, count in counts.items()
                 if count != self.requests.get(pair, 0)}
        self.requests = counts
        if self.tls is None:
            return
        try:
            self.tls.follow({inodes[pair] for pair in wanted}, heard, spoke,
                            {inode for pair, inode in inodes.items() if pair not in wanted},
                            lingering)
        except KernelEventsUnavailable as err:  # an ioctl refused, as a read may be
            self._tls_failed(err)

    def _open_tls(self) -> None:
        if self.tls_pid is None or self.tls_problem is not None:
            return
        try:
            self.tls = TlsTap(self.tls_pid)
        except (TlsUnavailable, KernelEventsUnavailable, OSError) as err:
            self._tls_failed(err)

    def _tls_failed(self, err: Exception) -> None:
        self.tls_problem = str(err) or type(err).__name__
        if self.tls is not None:
            self.tls.close()
            self.tls = None

    def _tls_notices(self, view: WireView) -> tuple[str, ...]:
        """Why the headers inside TLS cannot be read, once a socket speaks TLS; what the TLS
        source missed."""
        if self.tls_problem is not None and any(f.tls for f in view.flows.values()):
            return (f"the Kafka headers inside TLS cannot be read ({self.tls_problem}); the "
                    "TLS sockets' roles come from the other evidence",)
        lost = self.tls_lost + (self.tls.lost if self.tls is not None else 0)
        if lost:
            return (f"the TLS source missed {lost:,} writes (kmon's ring was full)",)
        return ()

    def close(self) -> None:
        """Close the tap and the TLS source; idempotent."""
        if self.tls is not None:
            self.tls.close()
            self.tls = None
        if self.tap is not None:
            self.tap.close()
            self.tap = None
        elif self.shared is not None:
            self.shared.close()
        self.shared = None

    def _answer(self) -> dict[int, tuple[str, int]] | None:
        """The brokers the query under way named, once it has come."""
        query = self.query
        if query is None or not query.done:
            return None
        self.query = None
        return query.answer


def _login_may_have_failed(close: WireClose) -> str | None:
    """Whether a TLS socket's close may end a failed login: "failed" where the broker answered
    a SASL request with an error or the last request read was a SASL one; "unread" where no
    request was read, whichever side closed first (its login, or a connection it no longer
    needs: a client's TLS shutdown sends its close_notify, which the broker answers with its
    own and its FIN, first); else None."""
    if not close.tls:
        return None
    if close.auth_failed or close.last_api in kp.SASL_APIS:
        return "failed"
    return "unread" if close.last_api is None else None
